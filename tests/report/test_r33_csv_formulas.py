"""Review R33 #6: entries.csv and failures.csv copied file names that read as spreadsheet formulas
(``=HYPERLINK(...)``, ``+cmd``) as they were. A text cell from the inputs that starts with ``=``,
``+``, ``-``, ``@``, a tab or a carriage return now gets a leading ``'`` (OWASP); numbers are left as
they are."""

from __future__ import annotations

import csv
from pathlib import Path

from tests.report.conftest import FORMULA_ENTRY, FORMULA_FAILURES

STARTS = ("=", "+", "-", "@", "\t", "\r")


def _rows(path: Path) -> list[dict[str, str]]:
    with path.open(newline="") as fh:
        return list(csv.DictReader(fh))


def test_no_cell_of_the_csvs_reads_as_a_formula(r33_report: Path) -> None:
    for name in ("entries.csv", "failures.csv"):
        for row in _rows(r33_report / name):
            for column, cell in row.items():
                assert not cell.startswith(STARTS), (name, column, cell)


def test_formula_cells_are_prefixed_and_numbers_kept(r33_report: Path) -> None:
    entries = {r["id"]: r for r in _rows(r33_report / "entries.csv")}
    assert set(entries) == {"209d-assembly1", "2q2k", f"'{FORMULA_ENTRY}"}
    row = entries[f"'{FORMULA_ENTRY}"]
    assert int(row["tokens"]) > 0 and float(row["msa_coverage"]) == 0.0  # numbers stay numbers
    failures = {r["path"]: r for r in _rows(r33_report / "failures.csv")}
    assert set(failures) == {f"'{name}" for name in FORMULA_FAILURES}
    for name in FORMULA_FAILURES:
        row = failures[f"'{name}"]
        assert row["entry_id"] == f"'{name.removesuffix('.pdb')}"
        assert row["message"].startswith(f"'{name}: no ATOM/HETATM records")
        assert row["stage"] == "parse" and row["error_class"] == "EmptyStructureError"
