"""The build's summary tells of the warnings its parts recorded (index/warnings.arrow): how many, in
how many entries, by stage, a few of them named (entry, stage, message) and where every one is. Before,
only ``featurecache info`` counted them: a build over a file with a dropped duplicate atom or an
ignored second data block printed nothing about it. Warnings are not failures: the exit status stays
0. A second build over the same files (every entry up to date) wrote no part and names none again.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from io import StringIO
from pathlib import Path

import pyarrow as pa
from rich.console import Console

from tests.clusters import scheduler_args
from tests.conftest import REPO, STRUCTURES


def _build(pdb: Path, store: Path) -> tuple[int, str, str]:
    """``featurecache build`` on the session's one-worker cluster (tests/clusters.py: the summary is
    the subject, not the cluster's start), stdout not a terminal (each table row one line)."""
    args = ["build", "--pdb-dir", str(pdb), "--out", str(store), *scheduler_args(1), "--no-progress"]
    env = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "LINES")}
    proc = subprocess.run([sys.executable, "-m", "featurecache.cli", *args], capture_output=True, text=True,
                          cwd=REPO, env=env, timeout=300)  # fmt: skip
    return proc.returncode, proc.stdout, proc.stderr


def _summary_rows(stdout: str) -> dict[str, str]:
    return {
        line.strip("│ ").split("│")[0].strip(): line.strip("│ ").split("│")[-1].strip()
        for line in stdout.splitlines()
        if line.startswith("│") and line.count("│") == 3
    }


def test_the_summary_names_this_runs_warnings_once(tmp_path: Path) -> None:
    pdb = tmp_path / "pdb"
    pdb.mkdir()
    # SOURCES.tsv: altlocs of ARG 27 with CZ at two positions (the second is dropped, with a warning)
    (pdb / "disordered.pdb").write_bytes((STRUCTURES / "disordered.pdb").read_bytes())
    # an mmCIF of two data blocks: read from the first, with a warning naming the one ignored
    two = (STRUCTURES / "102m.cif").read_bytes() + b"\n" + (STRUCTURES / "5y2e.cif").read_bytes()
    (pdb / "two_blocks.cif").write_bytes(two)
    store = tmp_path / "store"

    status, stdout, stderr = _build(pdb, store)
    assert status == 0, stderr[-3000:]  # warnings are not failures
    rows = _summary_rows(stdout)
    assert rows.get("entries built") == "2" and rows.get("failed") == "0", stdout
    line = rows.get("warnings (this run)", "")
    assert line.startswith("2 in 2 entries (parse 1, tokenize 1)"), stdout
    assert f"all of the store's: featurecache info {store} --warnings" in line, line
    assert "warnings (this run): 2 of 2" in stdout, stdout
    (dropped,) = [r for r in stdout.splitlines() if r.startswith("│ disordered ")]
    assert "two atoms named CZ" in dropped and "the other is dropped" in dropped, dropped
    (ignored,) = [r for r in stdout.splitlines() if r.startswith("│ two_blocks ")]
    assert "2 data blocks: read the first" in ignored, ignored
    assert "warnings (this run)" not in stderr, stderr  # the result is on stdout (README)
    _info_lists_the_warnings(store)

    status, stdout, stderr = _build(pdb, store)
    assert status == 0, stderr[-3000:]
    rows = _summary_rows(stdout)
    assert rows.get("skipped (up to date)") == "2" and rows.get("entries built") == "0", stdout
    assert "warnings" not in stdout, stdout  # the store still has both (featurecache info counts them)


def _info(*args: str) -> str:
    env = {**os.environ, "COLUMNS": "400"}  # one line per table row
    proc = subprocess.run([sys.executable, "-m", "featurecache.cli", "info", *args], capture_output=True,
                          text=True, cwd=REPO, env=env, timeout=120)  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc.stdout


def _info_lists_the_warnings(store: Path) -> None:
    """``featurecache info STORE`` counts the warnings by stage and says how to list them;
    ``--warnings`` lists each (entry, stage, whole message, file), also as JSON."""
    rows = _summary_rows(_info(str(store)))
    assert rows.get("warnings") == "2"
    assert rows.get("warnings by stage", "").endswith("(featurecache info STORE --warnings lists them)"), rows
    listed = _info(str(store), "--warnings")
    assert "warnings (the entries are built)" in listed, listed
    (dropped,) = [r for r in listed.splitlines() if r.startswith("│ disordered ")]
    assert "two atoms named CZ" in dropped and dropped.rstrip(" │").endswith("disordered.pdb"), dropped
    (ignored,) = [r for r in listed.splitlines() if r.startswith("│ two_blocks ")]
    assert "1 other block ignored (data_5Y2E)" in ignored, ignored
    doc = json.loads(_info(str(store), "--json", "--warnings"))
    assert sorted(w["entry_id"] for w in doc["warnings"]) == ["disordered", "two_blocks"]
    assert all(set(w) == {"entry_id", "stage", "message", "path"} for w in doc["warnings"])
    plain = json.loads(_info(str(store), "--json"))
    assert "warnings" not in plain  # listed only when asked
    assert plain["warnings_by_stage"] == {"parse": 1, "tokenize": 1}


def test_a_few_warnings_are_named_each_stage_first_and_messages_cut() -> None:
    """Of many warnings the summary names :data:`SHOWN_WARNINGS`: every stage's first, then one per
    entry; a long message is cut at a word; rows of parts that were there before the build are not
    counted."""
    from featurecache.build.run import SHOWN_WARNINGS, BuildSummary, _new_warnings
    from featurecache.build.summary import WARNING_CHARS, render_summary

    long = "residue " + "ARG 27 " * 60 + "end"
    rows = [{"entry_id": f"e{i // 4}", "path": f"e{i // 4}.cif", "stage": "tokenize",
             "message": f"m{i} {long}", "part": "s-000001"} for i in range(12)]  # fmt: skip
    rows += [
        {"entry_id": "e9", "path": "e9.cif", "stage": "chem", "message": "no conformer", "part": "c-000002"}
    ]
    rows += [{"entry_id": "old", "path": "old.cif", "stage": "tokenize", "message": "x", "part": "s-000000"}]
    summary = BuildSummary(store="/s")
    _new_warnings(summary, pa.Table.from_pylist(rows), {"s-000000", "c-000000"})
    assert summary.warnings_by_stage == {"chem": 1, "tokenize": 12} and summary.n_warning_entries == 4
    shown = [(r["entry_id"], r["stage"]) for r in summary.warning_examples]
    assert len(shown) == SHOWN_WARNINGS == 5, shown
    # chem's one and tokenize's first, then e1's and e2's first, then e0's second; shown in entry order
    assert shown == [("e0", "tokenize"), ("e0", "tokenize"), ("e1", "tokenize"), ("e2", "tokenize"),
                     ("e9", "chem")], shown  # fmt: skip
    out = StringIO()
    render_summary(summary, Console(file=out, width=100_000))
    text = out.getvalue()
    assert "13 in 4 entries (chem 1, tokenize 12)" in text and "warnings (this run): 5 of 13" in text, text
    message = next(line for line in text.splitlines() if "│ e0 " in line).split("│")[3].strip()
    assert message.endswith(" …") and len(message) <= WARNING_CHARS + 2 and "old" not in text, message
