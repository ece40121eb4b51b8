"""``info`` groups failures by stage and error class, and lists failures and warnings in bounded
batches or as TSV (review R26a s44 #7).

At 198k entries ``featurecache info`` printed up to 100 failure rows (838 wrapped lines; the counts
people look for are in its first 30), and ``info --warnings`` rendered one rich table of all 43,750
warnings: 26.6 s, 601 MB, 350,935 lines.
"""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pyarrow as pa
import pytest

from featurecache.store import info as info_module
from featurecache.store.index import read_table, replace_table
from tests.conftest import cli_in_process

#: (stage, error class) -> failures made of it: 12 groups, the largest first
GROUPS = {("parse", f"Error{k:02d}"): 13 - k for k in range(12)}


@pytest.fixture
def store(sample_store: Path, tmp_path: Path) -> Path:
    """A copy of the sample store whose index holds the failures of :data:`GROUPS` and 25 warnings,
    one of them with a tab and a newline in its message."""
    out = tmp_path / "store"
    shutil.copytree(sample_store, out)
    failures = read_table(out / "index" / "failures.arrow")
    rows = [
        {"path": f"in/{error}_{i}.cif", "entry_id": f"{error}_{i}", "stage": stage, "error_class": error,
         "message": f"{error}_{i}.cif: broken in the {i}th way", "key": "", "part": "s-000000"}
        for (stage, error), n in GROUPS.items() for i in range(n)
    ]  # fmt: skip
    replace_table(out / "index" / "failures.arrow", pa.Table.from_pylist(rows, schema=failures.schema))
    warnings = read_table(out / "index" / "warnings.arrow")
    rows = [
        {"entry_id": f"w{i:03d}", "path": f"in/w{i:03d}.pdb", "stage": "parse",
         "message": "a\ttab and a\nnewline" if i == 7 else f"warning number {i}", "part": "s-000000"}
        for i in range(25)
    ]  # fmt: skip
    replace_table(out / "index" / "warnings.arrow", pa.Table.from_pylist(rows, schema=warnings.schema))
    return out


def _info(*args: str) -> str:
    run = cli_in_process("info", *args, env={"COLUMNS": "100"})
    assert run.returncode == 0, run.stderr
    return run.stdout


def test_info_shows_failures_grouped_by_stage_and_error_class(store: Path) -> None:
    out = _info(str(store))
    assert "failures (90) by stage and error class" in out
    grouped = out[out.index("failures (90) by stage and error class") :]
    shown = re.findall(r"│ parse\s+│ (Error\d\d)\s+│\s+(\d+) │ (Error\d\d)_0\.cif: broken", grouped)
    # the 10 largest groups, largest first, each with its count and its first failure as the example
    assert [(e, int(n), x) for e, n, x in shown] == [
        (f"Error{k:02d}", 13 - k, f"Error{k:02d}") for k in range(10)
    ]
    assert "2 more group(s)" in grouped and "featurecache info STORE --failures" in grouped
    assert "broken in the 1th way" not in out  # one example per group, no failure rows
    assert len(grouped.splitlines()) < 30


def test_failures_lists_every_failure(store: Path) -> None:
    out = _info(str(store), "--failures")
    assert len(set(re.findall(r"Error\d\d_\d+\.cif: broken", out))) == sum(GROUPS.values())
    assert "by stage and error class" not in out


def test_warnings_are_listed_in_batches_that_line_up(store: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(info_module, "LISTING_BATCH", 10)
    out = _info(str(store), "--warnings")
    listing = out[out.index("warnings (the entries are built)") :]
    assert out.count("warnings (the entries are built)") == 1 and listing.count("┃ entry_id") == 1
    rows = [line for line in listing.splitlines() if re.match(r"│ w\d\d\d ", line)]
    assert [r.split()[1] for r in rows] == [f"w{i:03d}" for i in range(25)]
    assert len({line.index("│", 2) for line in rows}) == 1  # one column width across the 3 batches


def test_tsv_streams_the_rows_asked_for(store: Path) -> None:
    lines = _info(str(store), "--tsv", "--warnings", "--failures").splitlines()
    assert lines[0] == "record\tentry_id\tpath\tstage\terror_class\tmessage"
    assert [line.split("\t")[0] for line in lines[1:]] == ["failure"] * 90 + ["warning"] * 25
    assert all(len(line.split("\t")) == 6 for line in lines)
    assert "warning\tw007\tin/w007.pdb\tparse\t\ta\\ttab and a\\nnewline" in lines
    assert "featurecache store" not in "\n".join(lines)  # no summary
    only_warnings = _info(str(store), "--tsv", "--warnings").splitlines()
    assert len(only_warnings) == 26 and only_warnings[1].startswith("warning\tw000\t")


@pytest.mark.parametrize("args", [("--tsv",), ("--tsv", "--json", "--warnings")])
def test_tsv_without_a_listing_or_with_json_is_a_usage_error(store: Path, args: tuple[str, ...]) -> None:
    run = cli_in_process("info", str(store), *args)
    assert run.returncode == 2 and "--tsv lists the rows of --failures and/or --warnings" in run.stderr
