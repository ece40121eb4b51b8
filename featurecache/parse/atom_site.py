"""``_atom_site`` values that gemmi reads without complaint, but wrong: checked on the file's text.

gemmi keeps an atom's formal charge in a signed char, so an mmCIF ``pdbx_formal_charge`` of
``300`` was stored as 44 (300 mod 256), silently. Such a value is refused here, before gemmi reads
the block, naming the atom, the text the file holds and its line (review R25a s43 #3). So is a
residue number (``label_seq_id``, ``auth_seq_id``) beyond a 32-bit integer, which gemmi wraps
(``-2147483649`` became 2147483647): the polymer lost those atoms to ligand chains of standard
residues (review R25a s43 #8).

Only the distinct values of a column are looked at (a few for charges), and the rows are walked
only to name the first bad one, so a sound file costs about a millisecond.
"""

from __future__ import annotations

import re
from collections.abc import Callable

import gemmi

from featurecache.errors import ParseError

__all__ = ["MAX_FORMAL_CHARGE", "check_atom_site_values", "formal_charge_problem", "seq_id_problem"]

#: The largest formal charge (either sign) an atom of a structure or a CCD definition may carry:
#: +9 is the highest oxidation state known (iridium in IrO4+), and a PDB file's two charge columns
#: (79-80: a digit and a sign) hold no more. Anything beyond is a damaged field.
MAX_FORMAL_CHARGE = 9

_INTEGER = re.compile(r"[+-]?\d+")
#: what gemmi's residue numbers hold (C int): beyond, it wraps
INT32_MIN, INT32_MAX = -(2**31), 2**31 - 1
#: CIF's "unknown" and "inapplicable"
_NULLS = frozenset(("?", "."))


def formal_charge_problem(text: str) -> str | None:
    """Why ``text`` (a charge field as written, unquoted) is no formal charge; None when it is one
    (``?`` and ``.`` are: no charge stated)."""
    if text in _NULLS:
        return None
    if not _INTEGER.fullmatch(text):
        return "is not an integer"
    if abs(int(text)) > MAX_FORMAL_CHARGE:
        return f"is outside -{MAX_FORMAL_CHARGE}..+{MAX_FORMAL_CHARGE}: no atom carries such a formal charge"
    return None


def seq_id_problem(text: str, *, integer: bool = True) -> str | None:
    """Why ``text`` (a residue number as written, unquoted) is none gemmi reads right; None when it
    is one (``?`` and ``.`` are: none stated). ``integer=False`` (``auth_seq_id``, where gemmi also
    takes an old-style insertion code, ``15A``) leaves what is not an integer to gemmi."""
    if text in _NULLS:
        return None
    if not _INTEGER.fullmatch(text):
        return "is not an integer" if integer else None
    if not INT32_MIN <= int(text) <= INT32_MAX:
        wrapped = (int(text) - INT32_MIN) % 2**32 + INT32_MIN
        return f"is beyond a 32-bit integer (gemmi would read it as {wrapped})"
    return None


def check_atom_site_values(block: gemmi.cif.Block, name: str, text: str | None = None) -> None:
    """Refuse an ``_atom_site`` value gemmi would read wrong (module doc), naming the file ``name``,
    the atom, the value as written and, for an mmCIF ``text`` whose rows are one per line, its
    line. Raises :class:`~featurecache.errors.ParseError` (stage ``parse``)."""
    _check_column(block, name, text, "pdbx_formal_charge", formal_charge_problem)
    _check_column(block, name, text, "label_seq_id", seq_id_problem)
    _check_column(block, name, text, "auth_seq_id", lambda v: seq_id_problem(v, integer=False))


def _check_column(
    block: gemmi.cif.Block, name: str, text: str | None, column: str, problem: Callable[[str], str | None]
) -> None:
    tag = f"_atom_site.{column}"
    bad = next((v for v in set(block.find_values(tag)) if problem(gemmi.cif.as_string(v) or v)), None)
    if bad is None:
        return
    written = gemmi.cif.as_string(bad) or bad
    raise ParseError(
        f"{name}: {column} {written!r} {_where(block, text, column, bad)} {problem(written)}", stage="parse"
    )


#: (column, its alternative) naming an atom, as gemmi picks them (auth_* where both are there)
_ATOM_NAMING = (("auth_atom_id", "label_atom_id"), ("auth_comp_id", "label_comp_id"),
                ("auth_seq_id", "label_seq_id"), ("auth_asym_id", "label_asym_id"))  # fmt: skip


def _where(block: gemmi.cif.Block, text: str | None, column: str, value: str) -> str:
    """``of atom CA of residue MET 1 in chain A (_atom_site id 5, line 812)`` for the first row of
    ``_atom_site`` whose ``column`` holds ``value`` (raw, as gemmi gives it)."""
    table = block.find_mmcif_category("_atom_site.")
    index = {t.removeprefix("_atom_site.").lower(): i for i, t in enumerate(table.tags)}
    k = index[column.lower()]
    for row_number, row in enumerate(table):
        if row[k] != value:
            continue

        def cell(*columns: str, row: gemmi.cif.Table.Row = row) -> str:
            for c in columns:
                if c in index and row[index[c]] not in _NULLS:
                    return gemmi.cif.as_string(row[index[c]])
            return "?"

        atom_id = cell("id")
        line = _row_line(text, block, row_number, [value, row[index["id"]]] if "id" in index else [value])
        at_line = f", line {line}" if line is not None else ""
        atom, res, seq, chain = (cell(*pair) for pair in _ATOM_NAMING)
        return f"of atom {atom} of residue {res} {seq} in chain {chain} (_atom_site id {atom_id}{at_line})"
    return ""


def _row_line(text: str | None, block: gemmi.cif.Block, row_number: int, values: list[str]) -> int | None:
    """The line (from 1) of row ``row_number`` (from 0) of the ``_atom_site`` loop of the mmCIF
    ``text``, when its rows are one per line and that line holds each of ``values`` (raw); else None."""
    if text is None or block.find_loop("_atom_site.id").get_loop() is None:
        return None
    header = re.search(r"^_atom_site\.", text, flags=re.M)
    if header is None:
        return None
    pos = header.start()
    while text.startswith("_atom_site.", pos):  # the loop's header: one tag a line
        pos = text.find("\n", pos) + 1
        if pos == 0:
            return None
    for _ in range(row_number):
        pos = text.find("\n", pos) + 1
        if pos == 0:
            return None
    end = text.find("\n", pos)
    tokens = text[pos : end if end >= 0 else None].split()
    if not all(v in tokens for v in values):
        return None
    return text.count("\n", 0, pos) + 1
