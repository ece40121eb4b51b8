"""Where ``featurecache report`` writes: a report that cannot be written is one line naming the
directory (exit 3), and a wrong store or training log leaves no output directory behind."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from typer.testing import CliRunner

from featurecache.cli import app
from featurecache.errors import StoreError
from featurecache.report import write_report


def _report(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(app, ["report", *args])
    return result.exit_code, result.output


def test_an_unwritable_plot_is_a_store_error(sample_store: Path, tmp_path: Path) -> None:
    out = tmp_path / "r"
    (out / "tokens_per_entry.png").mkdir(parents=True)  # the first plot's file cannot be written
    code, output = _report(str(sample_store), "--out", str(out))
    assert code == 3, output
    assert output.startswith(f"error: cannot write the report to {out}: ") and "Traceback" not in output
    assert len(output.strip().splitlines()) == 1, output
    with pytest.raises(StoreError, match="cannot write the report"):
        write_report(sample_store, out)


def test_an_output_path_that_is_a_file(sample_store: Path, tmp_path: Path) -> None:
    out = tmp_path / "r"
    out.write_text("not a directory")
    code, output = _report(str(sample_store), "--out", str(out))
    assert code == 3 and output.startswith(f"error: cannot write the report to {out}: "), output


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes into a read-only directory")
def test_a_read_only_output_directory(sample_store: Path, tmp_path: Path) -> None:
    out = tmp_path / "ro"
    out.mkdir(mode=0o555)
    try:
        code, output = _report(str(sample_store), "--out", str(out))
    finally:
        out.chmod(0o755)
    assert code == 3 and output.startswith(f"error: cannot write the report to {out}: "), output


def test_no_output_directory_without_a_store(sample_store: Path, tmp_path: Path) -> None:
    out = tmp_path / "r"
    code, output = _report(str(tmp_path / "nonexistent"), "--out", str(out))
    assert code == 3 and output.startswith("error: "), output
    assert not out.exists()
    code, output = _report(
        str(sample_store), "--out", str(out), "--train-log", str(tmp_path / "missing.json")
    )
    assert code == 2, output
    assert not out.exists()
