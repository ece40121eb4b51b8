"""A parser fix reaches the files an older parser failed on (review R3 s24 #2): the MSA scan cache
(STORE/cache/msa_scan.arrow) keeps each file's scan, a failure too, under the scan-cache version
(``msa_stage.SCAN_CACHE_VERSION`` / ``MSA_STAGE_VERSION`` / ``FEATURIZER_VERSION``). d5b8ae6 made an
MSA file that starts with a UTF-8 byte-order mark readable but changed none of them, so a store
whose cache recorded that file's failure under the older parser kept it "still failing" and its
chain's MSA without the file, until the cache was deleted (README: "results never depend on it").

The old state is built for real: the store is written by the package of the commit before the fix
(git archive; the test skips without the git history), then extended by this code."""

from __future__ import annotations

import os
import shutil
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from featurecache.build.msa_stage import SCAN_CACHE_DIR, SCAN_CACHE_FILE
from featurecache.store.index import read_table, write_table
from tests.conftest import MSAS, STRUCTURES, build_store, build_with_package, featurecache_at

#: the parent of d5b8ae6 (MSA files with a BOM read as without it): its parser fails on such a file
BEFORE_BOM_FIX = "6a038f4a1a0af66baa9525dfa01c981405ffce28"
BOM = b"\xef\xbb\xbf"
HOUR_NS = 3600 * 10**9


def _inputs(tmp: Path, damage: Callable[[bytes], bytes] = lambda b: BOM + b) -> tuple[Path, Path]:
    """1psm (one protein chain) and its real openfold MSA folder, its a3m file changed by
    ``damage`` (default: given a BOM); files last modified an hour ago (the scan caches only files
    not modified within the last seconds)."""
    pdb = tmp / "pdb"
    pdb.mkdir()
    shutil.copy(STRUCTURES / "1psm.cif", pdb)
    msa = tmp / "msa" / "1psm_A"
    shutil.copytree(MSAS / "openfold" / "1psm_A", msa)
    a3m = msa / "bfd_uniclust_hits.a3m"
    a3m.write_bytes(damage(a3m.read_bytes()))
    past = time.time_ns() - HOUR_NS
    for p in msa.rglob("*"):
        os.utime(p, ns=(past, past))
    return pdb, msa.parent


def _msas(store: Path) -> list[dict[str, object]]:
    t = read_table(store / "index" / "msas.arrow", memory_map=False)
    return t.select(["depth", "n_input_rows", "n_files", "sources", "content_hash"]).to_pylist()


def test_a_file_the_older_parser_failed_on_is_read_again(tmp_path: Path) -> None:
    pdb, bom = _inputs(tmp_path)
    old = featurecache_at(BEFORE_BOM_FIX, tmp_path / "old")
    store = tmp_path / "store"
    done = build_with_package(old, pdb, store, msa_dir=bom)
    # the old state: the BOM file is a failure row, and the scan cache holds its failed scan
    assert done.returncode == 1, done.stdout + done.stderr
    failures = read_table(store / "index" / "failures.arrow", memory_map=False).to_pylist()
    assert [(f["path"], f["error_class"]) for f in failures] == [("1psm_A/bfd_uniclust_hits.a3m", "MSAError")]
    cache = read_table(store / SCAN_CACHE_DIR / SCAN_CACHE_FILE, memory_map=False)
    cached = {r["rel"]: r["scan"] for r in cache.to_pylist()}
    assert "before the first '>'" in cached["1psm_A/bfd_uniclust_hits.a3m"]
    assert _msas(store)[0]["n_files"] == 3  # the main alignment of the a3m file is missing

    summary = build_store(store, pdb, msa_dir=bom, workers=1)

    assert summary.n_failed == 0, summary.failures
    assert read_table(store / "index" / "failures.arrow", memory_map=False).num_rows == 0
    (msa,) = _msas(store)
    # the four alignment files merged (hmm_output.sto holds template hits), the BOM file among them:
    # the MSA test_msa_bom.py shows equal to that of the same files without the BOM
    assert msa["n_files"] == 4
    assert "1psm_A/bfd_uniclust_hits.a3m" in msa["sources"], msa["sources"]


def test_the_scan_cache_version_alone_invalidates_an_older_parsers_scans(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The bump itself (review RF2 s24 #5): since featurizer 0.6.0 the older package's cache differs
    from this code's in the featurizer part of its version too, so the test above passes with
    ``SCAN_CACHE_VERSION`` back at "1". Here the older parser's scans (the BOM file's failure among
    them) are written again by this code's own ScanCache under the scan-cache version "1" of the
    parser before d5b8ae6: the cache differs from this code's in that version only."""
    from featurecache.build import msa_stage
    from featurecache.const import FEATURIZER_VERSION

    pdb, bom = _inputs(tmp_path)
    store = tmp_path / "store"
    done = build_with_package(featurecache_at(BEFORE_BOM_FIX, tmp_path / "old"), pdb, store, msa_dir=bom)
    assert done.returncode == 1, done.stdout + done.stderr
    older = read_table(store / SCAN_CACHE_DIR / SCAN_CACHE_FILE, memory_map=False)
    d = str(bom.resolve())
    cache = msa_stage.ScanCache(store, d, older)  # the older parser's rows, as this code reads them
    files = [(str(p.relative_to(bom)), p.stat().st_size, p.stat().st_mtime_ns) for p in sorted(bom.rglob("*"))
             if p.is_file()]  # fmt: skip
    scans = [s for rel, size, mtime in files if (s := cache.get(rel, size, mtime, set())) is not None]
    failed = [s.rel for s in scans if s.error_class]
    assert failed == ["1psm_A/bfd_uniclust_hits.a3m"], [(s.rel, s.error_class) for s in scans]
    monkeypatch.setattr(msa_stage, "SCAN_CACHE_VERSION", "1")  # the version before the bump
    cache.save(files, scans, set(), time.time_ns())
    monkeypatch.undo()
    meta = read_table(store / SCAN_CACHE_DIR / SCAN_CACHE_FILE, memory_map=False).schema.metadata
    # the premise: the same stage and featurizer versions as this code's; only the scan version is older
    assert meta[b"version"].decode() == f"1/{msa_stage.MSA_STAGE_VERSION}/{FEATURIZER_VERSION}"

    summary = build_store(store, pdb, msa_dir=bom, workers=1)

    assert summary.n_failed == 0, summary.failures
    (msa,) = _msas(store)
    assert msa["n_files"] == 4
    assert "1psm_A/bfd_uniclust_hits.a3m" in msa["sources"], msa["sources"]


#: the commit before a header-only a3m file failed (review R1 s32 M5): its scan read one as an
#: alignment of an empty query (a near miss, exit 0), under scan-cache version "2"
BEFORE_NO_SEQUENCE_FIX = "5b399af29cf3fa38c1c5715c72ee81f76cf7833f"


def test_a_header_only_file_an_older_scan_read_as_an_alignment_fails_now(tmp_path: Path) -> None:
    """The bump to "3": the older scan of a header-only a3m file (an alignment whose query is empty)
    is in the cache under the same stage and featurizer versions; without the bump the next build
    took it from there and the file never failed."""
    from featurecache.build import msa_stage
    from featurecache.const import FEATURIZER_VERSION

    pdb, msas = _inputs(tmp_path, lambda b: b.splitlines()[0] + b"\n")  # the header line alone
    msa = msas / "1psm_A"
    store = tmp_path / "store"
    done = build_with_package(featurecache_at(BEFORE_NO_SEQUENCE_FIX, tmp_path / "old"), pdb, store,
                              msa_dir=msa.parent)  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    path = store / SCAN_CACHE_DIR / SCAN_CACHE_FILE
    cache = read_table(path, memory_map=False)
    version = cache.schema.metadata[b"version"].decode()
    assert version.split("/")[0] == "2", version
    # the premise: the same stage and featurizer versions as this code's (later bumps of those, e.g.
    # stage 6 / featurizer 0.8.0, would drop the cache anyway): only the scan version is older
    cache = cache.replace_schema_metadata(
        {
            **cache.schema.metadata,
            b"version": f"2/{msa_stage.MSA_STAGE_VERSION}/{FEATURIZER_VERSION}".encode(),
        }
    )
    path.unlink()
    write_table(path, cache)
    cached = {r["rel"]: r["scan"] for r in cache.to_pylist()}
    assert '"alignments": [[0, 0, "", []]]' in cached["1psm_A/bfd_uniclust_hits.a3m"]

    summary = build_store(store, pdb, msa_dir=msa.parent, workers=1)

    assert summary.n_failed == 1, summary.failures
    (fail,) = summary.failures
    assert fail["path"] == "1psm_A/bfd_uniclust_hits.a3m" and fail["message"].startswith("no sequence: ")
