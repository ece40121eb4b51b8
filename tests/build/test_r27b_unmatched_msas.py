"""Alignments under ``--msa-dir`` that match no chain are named (review R27b s45 #1): before, the
MSA stage counted them ("alignments unmatched 1") and named none, in the log, in
``index/warnings.arrow`` or in ``info --warnings``, so a user whose files are misnamed or of other
proteins could not tell which. Now one warning line names the first few (query length and first
residues, then how many more), and the store records the same line as one warning with no entry
(stage ``msa``), which a later build replaces when the unmatched files change, and drops once
there are none. Real files, real builds (LocalCluster)."""

from __future__ import annotations

import json
import logging
import shutil
from pathlib import Path

import pyarrow.ipc as ipc
import pytest

from featurecache.build.msa_stage import MSAStageResult
from featurecache.build.summary import warnings_line
from featurecache.store.prune import prune_store
from tests.conftest import SAMPLES, build_store, cli_in_process

OPENFOLD = SAMPLES / "msas" / "openfold"
UNMATCHED_NAMED = 10  # msa_stage.UNMATCHED_NAMED (spelt out: this test ran on the code before it)
LINE = "matched no polymer chain's sequence"


def _msa_parts(store: Path) -> list[str]:
    return sorted(p.name for p in (store / "parts").iterdir() if p.name.startswith("m-"))


def _msa_warnings(store: Path) -> list[dict[str, str]]:
    with ipc.open_file(store / "index" / "warnings.arrow") as f:
        rows = f.read_all().to_pylist()
    return [r for r in rows if r["stage"] == "msa"]


def _lines(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING and LINE in r.getMessage()]


def test_unmatched_alignments_are_named_and_recorded(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    pdb = tmp_path / "pdb"
    pdb.mkdir()
    shutil.copy(SAMPLES / "structures" / "2q2k.cif", pdb / "2q2k.cif")
    msa = tmp_path / "msa"
    (msa / "random").mkdir(parents=True)
    # 2q2k A's alignment: joins by sequence
    shutil.copy(OPENFOLD / "2q2k_A" / "bfd_uniclust_hits.a3m", msa / "random" / "foo.a3m")
    # 1psm A's alignment: matches no chain of a store of 2q2k alone; copies under more names than are named
    n = UNMATCHED_NAMED + 2
    for k in range(n):
        shutil.copy(OPENFOLD / "1psm_A" / "bfd_uniclust_hits.a3m", msa / "random" / f"bar{k:02d}.a3m")
    store = tmp_path / "store"

    with caplog.at_level(logging.WARNING):
        summary = build_store(store, pdb, msa_dir=msa, workers=1)
    assert summary.stages["msa"]["alignments unmatched (near misses)"] == f"{n} (0)"
    (line,) = _lines(caplog)
    assert f"{n} alignments {LINE} and are not used" in line, line
    assert "random/bar00.a3m (" in line and f"random/bar{UNMATCHED_NAMED - 1:02d}.a3m (" in line, line
    assert f"bar{UNMATCHED_NAMED:02d}" not in line and line.endswith("; and 2 more"), line
    assert "residues, " in line and "…)" in line and "foo.a3m" not in line, line
    (row,) = _msa_warnings(store)
    assert row["entry_id"] is None and row["message"] == line and row["path"] == str(msa.resolve()), row
    # the summary counts it among this run's warnings (no entry: "in 0 entries")
    assert summary.warnings_by_stage.get("msa") == 1 and summary.n_warning_entries == 0, (
        summary.warnings_by_stage
    )
    assert warnings_line(summary).startswith("1 about --msa-dir's files (msa 1); not failures"), (
        warnings_line(summary)
    )

    run = cli_in_process("info", str(store), "--json", "--warnings")
    assert run.returncode == 0, run.stderr
    listed = [w for w in json.loads(run.stdout)["warnings"] if w["stage"] == "msa"]
    assert listed == [{"entry_id": None, "stage": "msa", "message": line, "path": str(msa.resolve())}], listed

    # the same files again: named again, nothing written (the record is the same)
    parts = _msa_parts(store)
    caplog.clear()
    with caplog.at_level(logging.WARNING):
        summary = build_store(store, pdb, msa_dir=msa, workers=1)
    assert len(_lines(caplog)) == 1 and _msa_parts(store) == parts
    assert [r["message"] for r in _msa_warnings(store)] == [line]
    assert not summary.warnings_by_stage, summary.warnings_by_stage  # none new

    # one unmatched file left: the record is replaced
    for k in range(1, n):
        (msa / "random" / f"bar{k:02d}.a3m").unlink()
    caplog.clear()
    with caplog.at_level(logging.WARNING):
        build_store(store, pdb, msa_dir=msa, workers=1)
    (line,) = _lines(caplog)
    assert f"1 alignment {LINE} and is not used: random/bar00.a3m (" in line, line
    assert [r["message"] for r in _msa_warnings(store)] == [line]

    # none left: no line, and the store's warning goes (a part records that)
    (msa / "random" / "bar00.a3m").unlink()
    caplog.clear()
    with caplog.at_level(logging.WARNING):
        build_store(store, pdb, msa_dir=msa, workers=1)
    assert _lines(caplog) == [] and _msa_warnings(store) == []

    # the records' parts are pruned without changing the index; the warning does not come back
    prune_store(store)
    assert _msa_warnings(store) == []
    caplog.clear()
    with caplog.at_level(logging.WARNING):
        build_store(store, pdb, msa_dir=msa, workers=1)
    assert _lines(caplog) == [] and _msa_warnings(store) == []


def test_a_hundred_thousand_unmatched_files_are_one_bounded_line() -> None:
    from featurecache.build.msa_stage import unmatched_line

    result = MSAStageResult()
    result.counts["unmatched"] = 100_000
    result.unmatched = [
        {"file": f"d/{k:06d}.a3m", "query_length": 300, "query": "M" * 60} for k in range(100_000)
    ]
    line = unmatched_line(result, Path("/msas"))
    assert line is not None and "\n" not in line and len(line) < 1000, len(line or "")
    assert "d/000000.a3m (300 residues, MMMMMMMMMM…)" in line and line.endswith("; and 99990 more"), line
