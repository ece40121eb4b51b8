"""MSA files a build cannot use: what their failure rows say, and empty files.

A file that cannot be read (a row with one match column too few, binary garbage) is a failure row
(stage ``msa``). Its message said "the chains it was meant for get single-sequence MSAs", but a
chain with other good files keeps an MSA from them (the reviewer's openfold/1psm_A: one bad file of
four, depth 38 from the others, coverage 1.0): it now says the file was left out and what each
chain it was meant for gets. An empty file (0 bytes: a truncated download) was only counted in the
summary ("empty / other files"); one whose path the layout names for an entry of the store is now a
failure row too, and logged, naming the file (exit status 1, as for every failed input file: the
README's "some inputs failed"); an empty file that names no entry is logged only. Neither fails the
entries nor their other MSAs.

Real builds (1 worker) of the repo's sample 1psm and 2q2k structures with their real OpenFold MSAs."""

from __future__ import annotations

import logging
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

import featurecache
from featurecache.const import MolType
from tests.clusters import scheduler_args
from tests.conftest import REPO, SAMPLES, build_store

OPENFOLD = SAMPLES / "msas" / "openfold"
TEMPLATE_HITS = "hmm_output.sto"  # hmmsearch template hits: never an MSA (README)


def _pdb(tmp_path: Path) -> Path:
    pdb = tmp_path / "pdb"
    pdb.mkdir()
    for name in ("1psm.cif", "2q2k.cif"):
        shutil.copy(SAMPLES / "structures" / name, pdb)
    return pdb


def _one_column_short(source: Path) -> str:
    """``source`` (a3m) with its first hit row one match column short (the query has one more)."""
    lines = source.read_text().splitlines()
    row = lines[3]
    last = max(k for k, c in enumerate(row) if c.isupper() or c == "-")
    lines[3] = row[:last] + row[last + 1 :]
    return "\n".join(lines) + "\n"


def _chain(store: Any, entry: str, auth_id: str = "A") -> dict[str, Any]:
    """The polymer chain ``auth_id`` of ``entry`` (a ligand of that auth chain is a chain row too)."""
    rows = store.chains.to_pylist()
    (row,) = [
        r
        for r in rows
        if (r["entry_id"], r["auth_id"]) == (entry, auth_id) and r["mol_type"] != MolType.LIGAND
    ]
    return row


def test_a_bad_file_says_it_is_left_out_and_what_the_chain_gets(tmp_path: Path) -> None:
    pdb = _pdb(tmp_path)
    msa = tmp_path / "msa"
    shutil.copytree(OPENFOLD / "1psm_A", msa / "1psm_A")
    bad = "1psm_A/bfd_uniclust_hits.a3m"
    (msa / bad).write_text(_one_column_short(OPENFOLD / bad))
    # 1psm's other alignments: every file of its folder but the template hits and the bad one
    others = sorted(f"1psm_A/{p.name}" for p in (msa / "1psm_A").iterdir() if p.name != TEMPLATE_HITS)
    others.remove(bad)
    assert len(others) == 3
    (msa / "2q2k_A").mkdir()
    garbage = "2q2k_A/bfd_uniclust_hits.a3m"  # 2q2k's only file
    (msa / garbage).write_bytes(bytes(range(256)) * 16)

    summary = build_store(tmp_path / "s", pdb, workers=1, msa_dir=msa)
    assert summary.n_failed == 2 and summary.failed_by_stage == {"msa": 2}
    store = featurecache.open_store(tmp_path / "s")
    fails = {f["path"]: f for f in store.failures.to_pylist()}
    assert set(fails) == {bad, garbage}

    kept = fails[bad]
    assert kept["entry_id"] == "1psm" and "37 match columns" in kept["message"]
    # before: "...; the chains it was meant for get single-sequence MSAs"
    assert "single-sequence" not in kept["message"]
    assert "the file is left out: chain 1psm/A gets an MSA from 3 other files" in kept["message"]
    chain = _chain(store, "1psm")
    assert chain["msa_files"] == 3  # one alignment in each other file
    (row,) = [m for m in store.msas.to_pylist() if m["key"] == chain["msa_key"]]
    assert sorted(row["sources"]) == others
    entries = {e["id"]: e for e in store.entries.to_pylist()}
    assert entries["1psm"]["msa_coverage"] == 1.0

    alone = fails[garbage]
    assert alone["entry_id"] == "2q2k"
    # the folder 2q2k_A names chain A: 2q2k's auth A (protein) and its label A (auth F, DNA); an
    # unreadable file cannot say which, and the author id is the one alignment layouts name chains by:
    # the DNA chain is not named as losing a protein MSA file
    assert alone["message"].endswith("the file is left out: chain 2q2k/A gets a single-sequence MSA")
    assert _chain(store, "2q2k", "A")["msa_files"] == _chain(store, "2q2k", "F")["msa_files"] == 0
    assert entries["2q2k"]["msa_coverage"] == 0.0


def test_an_empty_file_the_layout_names_is_a_failure_row_and_a_warning(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    pdb = _pdb(tmp_path)
    msa = tmp_path / "msa"
    for entry in ("1psm_A", "2q2k_A"):
        (msa / entry).mkdir(parents=True)
        shutil.copy(OPENFOLD / entry / "bfd_uniclust_hits.a3m", msa / entry)
    empty_1psm = "1psm_A/uniref90_hits.sto"  # 1psm keeps its a3m's rows
    empty_2q2k = "2q2k_A/mgnify_hits.sto"
    stray = "elsewhere/empty.a3m"  # names no entry: logged, not a failure
    for rel in (empty_1psm, empty_2q2k, stray):
        (msa / rel).parent.mkdir(parents=True, exist_ok=True)
        (msa / rel).write_bytes(b"")

    with caplog.at_level(logging.WARNING, logger="featurecache.build.msa_stage"):
        summary = build_store(tmp_path / "s", pdb, workers=1, msa_dir=msa)
    warned = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    for rel in (empty_1psm, empty_2q2k, stray):
        assert any(rel in w and "empty" in w for w in warned), (rel, warned)
    # before: no failure (and exit status 0); only "empty / other files 3 / 0" in the summary
    assert summary.n_failed == 2 and summary.failed_by_stage == {"msa": 2}
    assert summary.stages["msa"]["empty / other files"] == "3 / 0"
    store = featurecache.open_store(tmp_path / "s")
    fails = {f["path"]: f for f in store.failures.to_pylist()}
    assert set(fails) == {empty_1psm, empty_2q2k}
    for rel, entry in ((empty_1psm, "1psm"), (empty_2q2k, "2q2k")):
        f = fails[rel]
        assert (f["stage"], f["entry_id"]) == ("msa", entry)
        assert f["message"].startswith("empty file (0 bytes)")
        assert f"chain {entry}/A gets an MSA from 1 other file" in f["message"]
    # the good entries and their MSAs are untouched
    entries = {e["id"]: e for e in store.entries.to_pylist()}
    assert set(entries) == {"1psm", "2q2k"}
    assert entries["1psm"]["msa_coverage"] == 1.0
    assert _chain(store, "1psm")["msa_files"] == _chain(store, "2q2k")["msa_files"] == 1  # the a3m each
    assert sorted(s for m in store.msas.to_pylist() for s in m["sources"]) == [
        "1psm_A/bfd_uniclust_hits.a3m",
        "2q2k_A/bfd_uniclust_hits.a3m",
    ]

    # unchanged: still failing (not listed again); a new empty file with the same (no) bytes is a
    # failure of its own (before, its key, that of the empty content, passed for one listed already)
    third = "1psm_A/mgnify_hits.sto"
    (msa / third).write_bytes(b"")
    again = build_store(tmp_path / "s", pdb, workers=1, msa_dir=msa)
    assert (again.n_failed, again.n_failed_earlier) == (1, 2)
    assert again.failures[0]["path"] == third
    assert {f["path"] for f in featurecache.open_store(tmp_path / "s").failures.to_pylist()} == {
        empty_1psm,
        empty_2q2k,
        third,
    }


def test_the_cli_exits_1_and_names_the_empty_file(tmp_path: Path) -> None:
    """The exit status: 1, as for every input file that failed (README, "Exit status of build")."""
    pdb = tmp_path / "pdb"
    pdb.mkdir()
    shutil.copy(SAMPLES / "structures" / "1psm.cif", pdb)
    msa = tmp_path / "msa"
    (msa / "1psm_A").mkdir(parents=True)
    shutil.copy(OPENFOLD / "1psm_A" / "bfd_uniclust_hits.a3m", msa / "1psm_A")
    (msa / "1psm_A" / "uniref90_hits.sto").write_bytes(b"")
    # on the session's 1-worker cluster: the warning is the driver's (the MSA stage's failure rows)
    args = ["build", "--pdb-dir", str(pdb), "--msa-dir", str(msa), "--out", str(tmp_path / "s"),
            *scheduler_args(1), "--no-progress"]  # fmt: skip
    proc = subprocess.run([sys.executable, "-m", "featurecache.cli", *args], capture_output=True, text=True,
                          cwd=REPO, env={**os.environ, "COLUMNS": "250"}, timeout=300)  # fmt: skip
    assert proc.returncode == 1, proc.stderr
    assert "1psm_A/uniref90_hits.sto: empty file (0 bytes)" in proc.stderr


# --- review R1 s32: a header-only file (M5), a broken file outside an entry-named path (M6) -------

PROTENIX_3 = (
    SAMPLES / "msas" / "Protenix" / "mmcif_msa" / "3"
)  # 102m's Protenix MSA: {pairing,non_pairing}.a3m


def test_a_header_only_file_fails_as_an_empty_one_does(tmp_path: Path) -> None:
    """A truncated download that kept only the query's header line. Before: an "MSA near miss"
    warning ("one sequence contains the other (0 vs 47 residues)"), no failure row, exit status 0;
    a 0-byte file at that path was a failure row already (the test above)."""
    pdb = _pdb(tmp_path)
    msa = tmp_path / "msa"
    shutil.copytree(OPENFOLD / "1psm_A", msa / "1psm_A")
    (msa / "2q2k_A").mkdir()
    header = (OPENFOLD / "2q2k_A" / "bfd_uniclust_hits.a3m").read_text().splitlines()[0]
    cut = "2q2k_A/bfd_uniclust_hits.a3m"  # 2q2k's only file, cut after its first line
    (msa / cut).write_text(header + "\n")

    summary = build_store(tmp_path / "s", pdb, workers=1, msa_dir=msa)
    assert summary.n_failed == 1 and summary.failed_by_stage == {"msa": 1}  # exit status 1
    store = featurecache.open_store(tmp_path / "s")
    (fail,) = store.failures.to_pylist()
    assert (fail["path"], fail["entry_id"], fail["stage"]) == (cut, "2q2k", "msa")
    assert fail["message"].startswith(
        f"no sequence: the file holds 1 header line ('{header}') and no sequence line"
    )
    assert fail["message"].endswith("the file is left out: chain 2q2k/A gets a single-sequence MSA")
    assert _chain(store, "2q2k")["msa_files"] == 0
    assert _chain(store, "1psm")["msa_files"] == 4


def test_a_broken_file_of_no_entry_named_path_names_the_chains_of_its_query(tmp_path: Path) -> None:
    """Protenix's ``<n>/non_pairing.a3m`` names no entry; cut short, it was a failure row with an
    empty ``entry_id`` and "the file is left out", while 102m's MSA silently lost its rows (838 ->
    763 here). Its query row still reads: the row names 102m, the chain and what it gets."""
    pdb = tmp_path / "pdb"
    pdb.mkdir()
    for name in ("102m.cif", "1psm.cif"):
        shutil.copy(SAMPLES / "structures" / name, pdb)
    msa = tmp_path / "msa"
    shutil.copytree(PROTENIX_3, msa / "3")
    shutil.copytree(OPENFOLD / "1psm_A", msa / "1psm_A")
    good = build_store(tmp_path / "good", pdb, workers=1, msa_dir=msa)
    assert good.n_failed == 0
    full = _chain(featurecache.open_store(tmp_path / "good"), "102m")
    raw = (msa / "3" / "non_pairing.a3m").read_bytes()
    (msa / "3" / "non_pairing.a3m").write_bytes(raw[: len(raw) // 2 + 7])  # cut inside a row

    summary = build_store(tmp_path / "s", pdb, workers=1, msa_dir=msa)
    assert summary.n_failed == 1 and summary.failed_by_stage == {"msa": 1}
    store = featurecache.open_store(tmp_path / "s")
    (fail,) = store.failures.to_pylist()
    assert (fail["path"], fail["entry_id"], fail["stage"]) == ("3/non_pairing.a3m", "102m", "msa")
    assert "the last row, cut short: a truncated file?" in fail["message"]
    assert fail["message"].endswith(
        "the file is left out: chain 102m/A gets an MSA from 1 other file (3/pairing.a3m)"
    )
    chain = _chain(store, "102m")
    assert chain["msa_files"] == 1 and chain["msa_depth"] < full["msa_depth"]

    # a query of no chain of the store: the row says so, with no entry
    (msa / "3" / "non_pairing.a3m").write_bytes(
        raw.replace(b"MVLSEGEWQLV", b"MKKSEGEWQLV", 1)[: len(raw) // 2 + 7]
    )
    again = build_store(tmp_path / "s", pdb, workers=1, msa_dir=msa)
    assert again.n_failed == 1
    (fail,) = [f for f in featurecache.open_store(tmp_path / "s").failures.to_pylist()]
    assert fail["entry_id"] == ""
    assert fail["message"].endswith(
        "the file is left out (no polymer chain of the store has its query, 154 residues)"
    )


def test_a_fifo_and_a_broken_link_under_msa_dir_are_named_not_opened(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A named pipe and a broken symbolic link among the MSA files (E1 s34: skipped without a word;
    a FIFO opened would block the build): each is a failure row of stage ``msa`` naming it and why
    it is not read (review R38a s50 #2: they were a log line only, as under ``--pdb-dir`` they are
    failures), and the good files of their folder still make 1psm's MSA."""
    pdb = _pdb(tmp_path)
    msa = tmp_path / "msa"
    (msa / "1psm_A").mkdir(parents=True)
    shutil.copy(OPENFOLD / "1psm_A" / "bfd_uniclust_hits.a3m", msa / "1psm_A")
    os.mkfifo(msa / "1psm_A" / "uniref90_hits.a3m")
    (msa / "1psm_A" / "mgnify_hits.a3m").symlink_to(tmp_path / "gone" / "mgnify_hits.a3m")

    summary = build_store(tmp_path / "s", pdb, workers=1, msa_dir=msa)
    rows = {f["path"]: f for f in featurecache.open_store(tmp_path / "s").failures.to_pylist()}
    assert set(rows) == {"1psm_A/uniref90_hits.a3m", "1psm_A/mgnify_hits.a3m"}
    assert {f["stage"] for f in rows.values()} == {"msa"}
    assert (
        "not a regular file: 1psm_A/uniref90_hits.a3m is a named pipe (FIFO); not opened"
        in (rows["1psm_A/uniref90_hits.a3m"]["message"])
    )
    assert (
        f"broken symbolic link: 1psm_A/mgnify_hits.a3m -> {tmp_path / 'gone' / 'mgnify_hits.a3m'}"
        in rows["1psm_A/mgnify_hits.a3m"]["message"]
    )
    assert summary.failed_by_stage.get("msa") == 2, summary.failed_by_stage
    assert _chain(featurecache.open_store(tmp_path / "s"), "1psm")["msa_depth"] > 1
