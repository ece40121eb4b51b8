"""Independent reading of CCD files for tests: split lines, no CIF library, no featurecache code."""

from __future__ import annotations

import shlex
from pathlib import Path

CCD_DIR = Path(__file__).resolve().parents[2] / ".." / "shared" / "data" / "ccd"
REAL_DIR = Path(__file__).resolve().parents[2] / ".." / "shared" / "data" / "real"


def _category(text: str, prefix: str) -> list[dict[str, str]]:
    """Rows of one category, whether written as a loop or as tag-value pairs."""
    lines = text.splitlines()
    rows: list[dict[str, str]] = []
    i = 0
    while i < len(lines):
        line = lines[i]
        if line.strip() == "loop_" and i + 1 < len(lines) and lines[i + 1].startswith(prefix):
            i += 1
            header = []
            while i < len(lines) and lines[i].startswith(prefix):
                header.append(lines[i].split()[0][len(prefix) :])
                i += 1
            while (
                i < len(lines) and lines[i].strip() and not lines[i].startswith(("#", "_", "loop_", "data_"))
            ):
                rows.append(dict(zip(header, shlex.split(lines[i], posix=True), strict=True)))
                i += 1
            return rows
        if line.startswith(prefix):
            pairs = {}
            while i < len(lines) and lines[i].startswith(prefix):
                tag, value = lines[i].split(None, 1)
                pairs[tag[len(prefix) :]] = shlex.split(value)[0]
                i += 1
            return [pairs]
        i += 1
    return rows


def atoms(code: str) -> list[dict[str, str]]:
    return _category((CCD_DIR / f"{code}.cif").read_text(), "_chem_comp_atom.")


def bonds(code: str) -> list[dict[str, str]]:
    return _category((CCD_DIR / f"{code}.cif").read_text(), "_chem_comp_bond.")


def heavy_atoms(code: str) -> list[tuple[str, str]]:
    """(name, element) of every non-hydrogen atom, file order (leaving atoms included)."""
    return [(r["atom_id"], r["type_symbol"]) for r in atoms(code) if r["type_symbol"] not in ("H", "D")]
