"""The MSA stage's scan cache (STORE/cache/msa_scan.arrow): a no-op build reads no MSA file, a changed
file is read again, and MSAs built from cached scans are the MSAs of a build without a cache. The scan
itself (one read per file, a3m queries without rows) finds what parsing every file in full finds."""

from __future__ import annotations

import gzip
import hashlib
import os
import shutil
import time
import zlib
from pathlib import Path

import numpy as np
import pyarrow.compute as pc
import pytest

import featurecache
from benchmarks.msa_scan import full_parse_scan
from featurecache.build.msa_stage import (
    SCAN_CACHE_DIR,
    SCAN_CACHE_FILE,
    FileScan,
    _degap,
    scan_msa_files,
)
from featurecache.const import MolType
from featurecache.featurize.seqhash import sequence_hash
from featurecache.parse.sto import parse_sto
from featurecache.store.index import read_table
from tests.conftest import MSAS, STRUCTURES, build_store

#: MSA folders of the real corpus used here (a3m, Stockholm, hmmsearch template hits, gzip)
FOLDERS = ("openfold/1psm_A", "openfold/2q2k_A", "Protenix/mmcif_msa/3", "alphafold3-pytorch")
HOUR_NS = 3600 * 10**9


def _msa_dir(tmp: Path) -> Path:
    """A copy of FOLDERS whose files were last modified an hour ago (as real inputs are)."""
    out = tmp / "msa"
    for f in FOLDERS:
        shutil.copytree(MSAS / f, out / f)
    past = time.time_ns() - HOUR_NS
    for p in out.rglob("*"):
        if p.is_file():
            os.utime(p, ns=(past, past))
    return out


def _pdb_dir(tmp: Path, name: str, files: tuple[str, ...]) -> Path:
    d = tmp / name
    d.mkdir()
    for f in files:
        shutil.copy(STRUCTURES / f, d)
    return d


def _cache_rows(store: Path) -> dict[str, dict[str, object]]:
    table = read_table(store / SCAN_CACHE_DIR / SCAN_CACHE_FILE, memory_map=False)
    return {r["rel"]: r for r in table.to_pylist()}


def test_noop_build_reads_no_msa_file_and_a_touched_one_is_read(tmp_path: Path) -> None:
    msa = _msa_dir(tmp_path)
    pdb = _pdb_dir(tmp_path, "pdb", ("1psm.cif", "102m.cif"))
    store = tmp_path / "s"
    first = build_store(store, pdb, workers=1, msa_dir=msa)
    assert first.n_failed == 0
    files = sorted(p for p in msa.rglob("*") if p.is_file())
    rows = _cache_rows(store)
    assert sorted(rows) == sorted(p.relative_to(msa).as_posix() for p in files)
    for p in files:
        row = rows[p.relative_to(msa).as_posix()]
        assert (row["size"], row["mtime_ns"]) == (p.stat().st_size, p.stat().st_mtime_ns)
        assert f'"sha256": "{hashlib.sha256(p.read_bytes()).hexdigest()}"' in str(row["scan"])
    before = featurecache.open_store(store)
    key_1psm = next(
        r["msa_key"] for r in before.chains.to_pylist() if r["entry_id"] == "1psm" and r["msa_files"]
    )
    block = before.msa(key_1psm)

    # replace 1psm's a3m by a broken one of the same size and give it back its mtime: a build that
    # read it would fail on it (row 1 is one match column short); a no-op build does not read it
    a3m = msa / "openfold/1psm_A/bfd_uniclust_hits.a3m"
    st = a3m.stat()
    broken = b">query\nACDEFGHIK\n>hit\nACDEFGHI\n>pad\n"
    a3m.write_bytes(broken + b"A" * (st.st_size - len(broken) - 1) + b"\n")
    assert a3m.stat().st_size == st.st_size
    os.utime(a3m, ns=(st.st_atime_ns, st.st_mtime_ns))
    again = build_store(store, pdb, workers=1, msa_dir=msa)
    assert again.n_failed == 0
    assert again.stages["msa"]["MSAs written (from files / single sequence)"] == "0 / 0"
    after = featurecache.open_store(store)
    assert after.msa(key_1psm).residues.tobytes() == block.residues.tobytes()

    # the same file with a new mtime is read again: its failure is recorded
    os.utime(a3m, ns=(st.st_atime_ns, st.st_mtime_ns + 10**9))
    touched = build_store(store, pdb, workers=1, msa_dir=msa)
    assert touched.n_failed == 1
    fails = featurecache.open_store(store).failures.to_pylist()
    assert [(f["path"], f["stage"]) for f in fails] == [("openfold/1psm_A/bfd_uniclust_hits.a3m", "msa")]


def test_msas_from_cached_scans_equal_a_build_without_cache(tmp_path: Path) -> None:
    """A store extended with new structures joins them to MSA files scanned (and cached) before they
    existed: a3m matches come from the cached queries, Stockholm files (whose query rows depend on
    the store's chains) are read again. Every MSA equals the one of a single fresh build."""
    msa = _msa_dir(tmp_path)
    small = _pdb_dir(tmp_path, "pdb_small", ("1psm.cif", "102m.cif"))
    full = _pdb_dir(
        tmp_path, "pdb_full", ("1psm.cif", "102m.cif", "2q2k.cif", "8f9h.cif", "209d-assembly1.cif")
    )
    extended, fresh = tmp_path / "extended", tmp_path / "fresh"
    assert build_store(extended, small, workers=1, msa_dir=msa).n_failed == 0
    n_cached = len(_cache_rows(extended))
    assert build_store(extended, full, workers=1, msa_dir=msa).n_failed == 0
    assert len(_cache_rows(extended)) == n_cached
    assert build_store(fresh, full, workers=1, msa_dir=msa).n_failed == 0
    a, b = featurecache.open_store(extended), featurecache.open_store(fresh)
    content = [
        "key",
        "depth",
        "n_distinct",
        "n_input_rows",
        "n_files",
        "sources",
        "inputs_key",
        "content_hash",
    ]
    ta = a.msas.select(content).sort_by("key")
    tb = b.msas.select(content).sort_by("key")
    assert ta.equals(tb)
    # MSAs from files for chains of the structures added by the second build (2q2k: Stockholm files)
    added = {
        r["msa_key"] for r in b.chains.to_pylist() if r["entry_id"] in ("2q2k", "8f9h", "209d-assembly1")
    }
    from_files = tb.filter(pc.greater(tb.column("n_files"), 0)).column("key").to_pylist()
    assert len(added & set(from_files)) >= 2
    for key in tb.column("key").to_pylist():
        x, y = a.msa(key), b.msa(key)
        for name in ("residues", "deletions", "species", "source", "profile", "deletion_mean"):
            assert np.asarray(getattr(x, name)).tobytes() == np.asarray(getattr(y, name)).tobytes(), (
                key,
                name,
            )


@pytest.mark.parametrize("damage", [b"not arrow", b""])
def test_a_damaged_cache_is_only_a_slower_scan(tmp_path: Path, damage: bytes) -> None:
    msa = _msa_dir(tmp_path)
    pdb = _pdb_dir(tmp_path, "pdb", ("1psm.cif",))
    store = tmp_path / "s"
    assert build_store(store, pdb, workers=1, msa_dir=msa).n_failed == 0
    (store / SCAN_CACHE_DIR / SCAN_CACHE_FILE).write_bytes(damage)
    again = build_store(store, pdb, workers=1, msa_dir=msa)
    assert (
        again.n_failed == 0 and again.stages["msa"]["MSAs written (from files / single sequence)"] == "0 / 0"
    )
    assert len(_cache_rows(store)) == sum(1 for p in msa.rglob("*") if p.is_file())


# --- the scan: one read per file, a3m queries without rows ---------------------------------------


def _parsed_scan(msa_dir: Path, rel: str, wanted: set[str]) -> FileScan:
    """The reference: a file scanned by parsing it in full, as the build did before (sniff_file, then
    parse_a3m / parse_sto / parse_hhr / parse_m8, each reading the file again); the benchmark
    measures the scan against the same function."""
    (scan,) = full_parse_scan(str(msa_dir), [rel], wanted)
    return scan


def _malformed_msas(d: Path) -> list[str]:
    """MSA files the scan must report as the parser does: broken ones and odd layouts, made from real
    files of the corpus."""
    a3m = (MSAS / "openfold/1psm_A/bfd_uniclust_hits.a3m").read_bytes()
    sto = (MSAS / "openfold/1psm_A/uniref90_hits.sto").read_bytes()
    last = a3m.rstrip(b"\n").rsplit(b"\n", 1)
    first_row = next(line for line in sto.splitlines() if line.strip() and not line.startswith(b"#"))
    files = {
        "ragged_last_row.a3m": last[0] + b"\n" + last[1][:-1] + b"\n",  # one match column short
        "before_header.a3m": b"MKV\n" + a3m,
        "non_ascii_row.a3m": a3m.replace(b"\n>", "\nÇ\n>".encode(), 1),
        "latin1_header.a3m": a3m.replace(b"\n>", b"\n>M\xfcller ", 2),
        "crlf.a3m": a3m.replace(b"\n", b"\r\n"),
        "stars.a3m": a3m.replace(b"\n>", b"*\n>"),
        "comment_inside.a3m": a3m.replace(b"\n>", b"\n# c\n>", 3),
        "truncated.a3m.gz": gzip.compress(a3m, mtime=0)[:300],
        "bad_crc.a3m.gz": gzip.compress(a3m, mtime=0)[:-8] + b"\0\0\0\0" + gzip.compress(a3m, mtime=0)[-4:],
        "two_blocks_one_ragged.a3m": a3m + b"\x00>q\nMKV\n>h\nMK\n",
        "ragged.sto": sto.replace(first_row, first_row + b"-", 1),  # one column more
        "truncated.sto.gz": gzip.compress(sto, mtime=0)[:200],
    }
    for name, data in files.items():
        (d / name).write_bytes(data)
    return sorted(files)


def test_scan_finds_what_parsing_every_file_finds(tmp_path: Path) -> None:
    """Every real MSA file (a3m, gzip, NUL-separated, pseudo rows, Stockholm, template hits, hhr, the
    empty file) and malformed ones: the scan records equal those of a full parse, errors included."""
    real = sorted(p.relative_to(MSAS).as_posix() for p in MSAS.rglob("*") if p.is_file())
    queries = [a.query for rel in real for a in _parsed_scan(MSAS, rel, set()).alignments]
    wanted = {sequence_hash(q, MolType.PROTEIN) for q in queries}
    rows = [_degap(r) for r in parse_sto(MSAS / "openfold/1psm_A/uniref90_hits.sto")[0].aligned[3:6]]
    wanted |= {sequence_hash(r, MolType.PROTEIN) for r in rows}  # hits as Stockholm queries too
    scans = scan_msa_files(str(MSAS), real, wanted)
    assert scans == [_parsed_scan(MSAS, rel, wanted) for rel in real]
    assert sum(len(a.matches) for sc in scans for a in sc.alignments) > len(real) // 2
    assert any(a.query_row > 0 for sc in scans for a in sc.alignments)

    broken = _malformed_msas(tmp_path)
    scans = scan_msa_files(str(tmp_path), broken, wanted)
    assert scans == [_parsed_scan(tmp_path, rel, wanted) for rel in broken]
    failed = {sc.rel: sc.message for sc in scans if sc.error_class}
    assert set(failed) == set(broken) - {"latin1_header.a3m", "crlf.a3m", "stars.a3m", "comment_inside.a3m"}
    assert failed["ragged_last_row.a3m"].startswith("row ")
    # a failed a3m file keeps the queries that read of it: its failure names their chains
    (ragged,) = [sc for sc in scans if sc.rel == "ragged_last_row.a3m"]
    assert [a.query for a in ragged.alignments] == [
        a.query for a in _parsed_scan(MSAS, "openfold/1psm_A/bfd_uniclust_hits.a3m", wanted).alignments
    ]
    assert ragged.alignments[0].matches and ragged.n_alignments == 0
    assert failed["truncated.a3m.gz"].startswith(f"cannot read {tmp_path / 'truncated.a3m.gz'}: ")


def test_a_damaged_deflate_stream_is_a_failure_of_that_file(tmp_path: Path) -> None:
    """A gzip file whose compressed data is damaged: zlib raises its own error (not an OSError), which
    escaped the scan task and stopped the build; it is that file's failure, naming it."""
    data = bytearray(gzip.compress((MSAS / "openfold/1psm_A/bfd_uniclust_hits.a3m").read_bytes(), mtime=0))
    data[20:40] = bytes(b ^ 0xFF for b in data[20:40])
    (tmp_path / "damaged.a3m.gz").write_bytes(bytes(data))
    with pytest.raises(zlib.error):  # the premise: what reading the file raises
        gzip.decompress(bytes(data))
    (scan,) = scan_msa_files(str(tmp_path), ["damaged.a3m.gz"], set())
    assert scan.error_class == "MSAError" and scan.alignments == []
    assert scan.message.startswith(f"cannot read {tmp_path / 'damaged.a3m.gz'}: ")
    assert scan.sha256 == hashlib.sha256(bytes(data)).hexdigest()
