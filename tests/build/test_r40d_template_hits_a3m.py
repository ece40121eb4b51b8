"""Template hits written as a3m are never an MSA (review R40d s51 #1): Protenix's MSA directory
(``mmcif_msa_template/<n>/``) holds ``pairing.a3m``, ``non_pairing.a3m`` and ``hmmsearch.a3m``, the
last its template search (hmmsearch against PDB seqres, converted by AlphaFold 3's
``convert_stockholm_to_a3m``). The build read ``hmmsearch.a3m`` as an alignment: it joined the chain
(its first row is the query, or the chain's own seqres as the best hit) and every template hit
became a stored MSA row (source "other"), while the summary said "template-hit files skipped 0".
Now such a file is skipped and counted there, as hhr, m8 and hmmsearch Stockholm files are.

Also (review R40d s51 #8): with ``--msa-dir`` = ``--pdb-dir`` (the Protenix tree, ``mmcif/`` beside
``mmcif_msa_template/``) the structure files were counted as "other" files of ``--msa-dir``.

The hit files are made here from OpenFold's real ``hmm_output.sto`` (hmmsearch against PDB
seqres) as AlphaFold 3 converts it (:func:`af3_hits_a3m`)."""

from __future__ import annotations

import os
import shutil
import time
from pathlib import Path

import pytest

import featurecache
from featurecache.store.index import read_table
from tests.conftest import MSAS, STRUCTURES, build_store, build_with_package, featurecache_at

#: the commit before the fix: it reads hmmsearch.a3m as an alignment (its scan cache says so)
BEFORE_FIX = "71de681975ebf249e55bf5ab5dd6343b7fa51806"


def af3_hits_a3m(sto: Path) -> str:
    """AlphaFold 3's ``parsers.convert_stockholm_to_a3m(remove_first_row_gaps=False)`` of an
    hmmsearch Stockholm file, as its template search hands it on and Protenix writes it to
    ``hmmsearch.a3m``: each row's pieces joined in the order names first appear, insert-state gaps
    (``.``) dropped, the header ``name`` + its ``#=GS ... DE`` description
    (``1psm_A/1-38 [subseq from] mol:protein length:38  SPAM-H1``)."""
    lines = sto.read_text().splitlines()
    seqs: dict[str, str] = {}
    desc: dict[str, str] = {}
    for line in lines:
        if line.startswith("#=GS"):
            cols = line.split(maxsplit=3)
            if len(cols) == 4 and cols[2] == "DE":
                desc[cols[1]] = cols[3].strip()
        elif line.strip() and not line.startswith(("#", "//")):
            name, aligned = line.split(maxsplit=1)
            seqs[name] = seqs.get(name, "") + aligned.strip()
    out = []
    for name, aligned in seqs.items():
        header = f"{name} {desc.get(name, '')}".rstrip()
        out.append(f">{header}\n{aligned.replace('.', '')}\n")
    return "".join(out)


def _n_rows(a3m: Path) -> int:
    return sum(1 for line in a3m.read_text().splitlines() if line.startswith(">"))


def _msa_of(store: Path) -> dict[str, object]:
    (row,) = featurecache.open_store(store).msas.to_pylist()
    return row


def _protenix_tree(tmp_path: Path) -> Path:
    """The Protenix tree of 1psm: ``mmcif/1psm.cif`` beside ``mmcif_msa_template/0/`` holding OpenFold's
    real BFD a3m of 1psm as ``non_pairing.a3m``, a query-only ``pairing.a3m`` and ``hmmsearch.a3m``
    (:func:`af3_hits_a3m` of 1psm's real ``hmm_output.sto``), last modified an hour ago."""
    root = tmp_path / "protenix"
    (root / "mmcif").mkdir(parents=True)
    shutil.copy(STRUCTURES / "1psm.cif", root / "mmcif")
    msa = root / "mmcif_msa_template" / "0"
    msa.mkdir(parents=True)
    bfd = MSAS / "openfold" / "1psm_A" / "bfd_uniclust_hits.a3m"
    shutil.copy(bfd, msa / "non_pairing.a3m")
    query = bfd.read_text().splitlines()[1]
    (msa / "pairing.a3m").write_text(f">query\n{query}\n")
    (msa / "hmmsearch.a3m").write_text(af3_hits_a3m(MSAS / "openfold" / "1psm_A" / "hmm_output.sto"))
    past = time.time_ns() - 3600 * 10**9  # the scan cache keeps only files not modified just now
    for p in root.rglob("*"):
        os.utime(p, ns=(past, past))
    return root


def test_protenix_hmmsearch_a3m_is_skipped_as_template_hits(tmp_path: Path) -> None:
    """The Protenix tree (``--pdb-dir`` = ``--msa-dir``): 1psm with OpenFold's real BFD a3m as
    ``non_pairing.a3m``, a query-only ``pairing.a3m`` and ``hmmsearch.a3m`` (its first row 1psm's own
    seqres chain, ``1psm_A/1-38``, so the file joined 1psm exactly). Before: "template-hit files
    skipped 0 (0 hits)", the stored MSA built from the 3 files with the 445 hits as rows (sources
    ``... hmmsearch.a3m``, source_dbs ``other``, n_input_rows 458 = 12 + 1 + 445, depth 56 of which 44
    hits), and "empty / other files 0 / 1" (mmcif/1psm.cif)."""
    root = _protenix_tree(tmp_path)
    msa = root / "mmcif_msa_template" / "0"
    hits = msa / "hmmsearch.a3m"
    assert hits.read_text().startswith(">1psm_A/1-38 [subseq from] mol:protein length:38  SPAM-H1\n")
    n_hits = _n_rows(hits)
    assert n_hits == 445

    res = build_store(tmp_path / "store", root, workers=1, msa_dir=root)
    msa_rows = res.stages["msa"]
    assert msa_rows["template-hit files skipped"] == f"1 ({n_hits} hits)"  # before: 0 (0 hits)
    assert msa_rows["empty / other files"] == "0 / 0"  # before: 0 / 1 (mmcif/1psm.cif)
    assert msa_rows["alignments found"] == 2  # before: 3
    assert msa_rows["polymer chains with an MSA from files"] == "1 of 1"
    row = _msa_of(tmp_path / "store")
    assert row["sources"] == ["mmcif_msa_template/0/non_pairing.a3m", "mmcif_msa_template/0/pairing.a3m"]
    assert "other" not in row["source_dbs"]  # before: the hits' rows under "other"
    assert row["n_input_rows"] == _n_rows(msa / "non_pairing.a3m") + 1  # 12 + 1 (before: + 445)


def test_template_hits_a3m_is_known_by_its_rows_whatever_its_name(tmp_path: Path) -> None:
    """A file of any name whose rows after the first (the query) are all PDB seqres chains is template
    hits: 4zey's real BFD a3m and ``4zey_A/templates.a3m`` (``>query`` then 4zey's 1432 hmmsearch
    hits). A real MSA beside it is still read. Before: the hits joined 4zey exactly (1834 input rows,
    depth 592 instead of 401)."""
    pdb = tmp_path / "pdb"
    pdb.mkdir()
    shutil.copy(STRUCTURES / "4zey.cif", pdb)
    msa = tmp_path / "msa" / "4zey_A"
    msa.mkdir(parents=True)
    bfd = MSAS / "openfold" / "4zey_A" / "bfd_uniclust_hits.a3m"
    shutil.copy(bfd, msa)
    query = bfd.read_text().splitlines()[1]
    hits = msa / "templates.a3m"
    hits.write_text(f">query\n{query}\n" + af3_hits_a3m(MSAS / "openfold" / "4zey_A" / "hmm_output.sto"))
    n_hits = _n_rows(hits) - 1
    assert n_hits == 1432

    res = build_store(tmp_path / "store", pdb, workers=1, msa_dir=msa.parent)
    assert res.stages["msa"]["template-hit files skipped"] == f"1 ({n_hits} hits)"  # before: 0 (0 hits)
    assert res.stages["msa"]["alignments joined (exact / by layout)"] == "1 / 0"  # before: 2 / 0
    row = _msa_of(tmp_path / "store")
    assert row["sources"] == ["4zey_A/bfd_uniclust_hits.a3m"]
    assert row["n_input_rows"] == _n_rows(bfd)
    assert row["depth"] == _n_rows(bfd)  # 401 (before: 592, the hits' distinct rows too)


def test_a_store_built_before_the_fix_loses_the_hits_rows(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A store built by the code before the fix (its MSA holds the 445 hits; its scan cache records
    hmmsearch.a3m as an alignment, the file unchanged since) is rebuilt without them: the scan cache's
    version changed, so the file is read again, and the MSA's inputs with it. The older scans are
    written again by this code's ScanCache under the scan-cache version of before ("6"), so that the
    cache differs from this code's in that version alone (a featurizer bump would invalidate it
    too): with "6" left unchanged, the cached scan was taken and the hits stayed."""
    from featurecache.build import msa_stage

    root = _protenix_tree(tmp_path)
    store = tmp_path / "store"
    done = build_with_package(featurecache_at(BEFORE_FIX, tmp_path / "old"), root, store, msa_dir=root)
    assert done.returncode == 0, done.stdout + done.stderr
    assert _msa_of(store)["n_input_rows"] == 458  # the premise: 12 + 1 + the 445 hits
    cache_file = store / msa_stage.SCAN_CACHE_DIR / msa_stage.SCAN_CACHE_FILE
    cache = msa_stage.ScanCache(store, str(root.resolve()), read_table(cache_file, memory_map=False))
    files = [(p.relative_to(root).as_posix(), p.stat().st_size, p.stat().st_mtime_ns)
             for p in sorted(root.rglob("*")) if p.is_file()]  # fmt: skip
    scans = [sc for rel, size, mtime in files if (sc := cache.get(rel, size, mtime, set())) is not None]
    assert {sc.rel: sc.fmt for sc in scans}["mmcif_msa_template/0/hmmsearch.a3m"] == "a3m"
    monkeypatch.setattr(msa_stage, "SCAN_CACHE_VERSION", "6")
    cache.save(files, scans, set(), time.time_ns())
    monkeypatch.undo()
    assert read_table(cache_file, memory_map=False).schema.metadata[b"version"].startswith(b"6/")

    res = build_store(store, root, workers=1, msa_dir=root)
    assert res.stages["msa"]["template-hit files skipped"] == "1 (445 hits)"
    assert res.stages["msa"]["MSAs written (from files / single sequence)"] == "1 / 0"
    row = _msa_of(store)
    assert "mmcif_msa_template/0/hmmsearch.a3m" not in row["sources"]
    assert row["n_input_rows"] == 13
