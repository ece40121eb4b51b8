"""The build's result (its summary table and, when inputs failed, the failures table) is on
stdout, as README says of every command: ``featurecache build ... > summary.txt`` keeps it; log
lines, progress and warnings stay on stderr (before: both tables went to stderr and the file was
empty)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

from tests.clusters import scheduler_args
from tests.conftest import REPO, SAMPLES, STRUCTURES


def test_the_summary_and_failures_tables_go_to_stdout(tmp_path: Path) -> None:
    pdb = tmp_path / "pdb"
    pdb.mkdir()
    shutil.copy(SAMPLES / "structures" / "102m.cif", pdb)  # builds
    shutil.copy(STRUCTURES / "1bna-errors.cif", pdb)  # fails to parse (SOURCES.tsv: a malformed loop)
    store = tmp_path / "s"
    args = ["build", "--pdb-dir", str(pdb), "--out", str(store), "--workers", "1", "--no-progress"]
    summary, log = tmp_path / "summary.txt", tmp_path / "log.txt"
    with summary.open("w") as out, log.open("w") as err:  # `featurecache build ... > summary.txt 2> log.txt`
        proc = subprocess.run([sys.executable, "-m", "featurecache.cli", *args], stdout=out, stderr=err, cwd=REPO,
                              env={**os.environ, "COLUMNS": "250"}, timeout=300)  # fmt: skip
    stdout, stderr = summary.read_text(), log.read_text()
    assert proc.returncode == 1, stderr[-3000:]  # one input failed
    assert "Traceback" not in stderr, stderr[-3000:]
    # the summary table: its title names the store; its rows count the one built and the one failed
    table = {
        line.strip("│ ").split("│")[0].strip(): line.strip("│ ").split("│")[-1].strip()
        for line in stdout.splitlines()
        if line.startswith("│") and line.count("│") == 3
    }
    assert f"featurecache build → {store}" in stdout, stdout
    assert table.get("input files") == "2" and table.get("entries built") == "1", (table, stdout)
    assert table.get("failed") == "1" and table.get("failed at parse") == "1", (table, stdout)
    # the failures table: the file, its stage and its error
    assert "failures (this run)" in stdout, stdout
    (row,) = [line for line in stdout.splitlines() if "1bna-errors.cif" in line]
    assert "parse" in row and "ParseError" in row, row
    # none of it on stderr, which keeps the log lines (the stages' progress without a bar)
    results = (
        "featurecache build →",
        "entries built",
        "failures (this run)",
        "1bna-errors.cif",
        "ParseError",
    )
    for result in results:
        assert result not in stderr, (result, stderr)
    assert "structures 2/2" in stderr and "structures 2/2" not in stdout, (stdout, stderr)


def test_redirected_output_keeps_each_failed_path_on_one_line(tmp_path: Path) -> None:
    """``featurecache build ... > summary.txt`` with no COLUMNS (a script, a batch job): rich took
    80 columns when stdout was not a terminal, the failures table folded a long path over several
    lines, and ``grep PATH summary.txt`` found nothing. The path here is 100 characters."""
    pdb = tmp_path / "pdb"
    deep = (
        pdb / "from_the_2024_reprocessing_run" / "malformed_inputs_kept_for_the_parser_tests" / "batch_0001"
    )
    deep.mkdir(parents=True)
    shutil.copy(STRUCTURES / "1bna-errors.cif", deep)  # fails to parse (SOURCES.tsv: a malformed loop)
    rel = str((deep / "1bna-errors.cif").relative_to(pdb))
    assert len(rel) == 100
    # on the session's 1-worker cluster: only stdout is checked here, which the driver alone writes
    args = ["build", "--pdb-dir", str(pdb), "--out", str(tmp_path / "s"), *scheduler_args(1), "--no-progress"]
    env = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "LINES")}
    summary = tmp_path / "summary.txt"
    with summary.open("w") as out:
        proc = subprocess.run([sys.executable, "-m", "featurecache.cli", *args], stdout=out, stderr=subprocess.PIPE,
                              cwd=REPO, env=env, text=True, timeout=300)  # fmt: skip
    stdout = summary.read_text()
    assert proc.returncode == 1, proc.stderr[-3000:]
    assert "failures (this run)" in stdout, stdout
    rows = [line for line in stdout.splitlines() if rel in line]  # what `grep PATH summary.txt` finds
    assert len(rows) == 1 and "ParseError" in rows[0], stdout
