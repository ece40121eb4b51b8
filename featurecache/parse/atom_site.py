"""``_atom_site`` values that gemmi reads without complaint, but wrong: checked on the file's text.

gemmi keeps an atom's formal charge in a signed char, so an mmCIF ``pdbx_formal_charge`` of
``300`` was stored as 44 (300 mod 256), silently. Such a value is refused here, before gemmi reads
the block, naming the atom, the text the file holds and its line (review R25a s43 #3). So is a
residue number (``label_seq_id``, ``auth_seq_id``) beyond a 32-bit integer, which gemmi wraps
(``-2147483649`` became 2147483647): the polymer lost those atoms to ligand chains of standard
residues (review R25a s43 #8).

An occupancy or B-factor that is not a finite number (``nan``, ``inf``, ``1e400``; gemmi reads an
mmCIF ``abc`` as NaN too) was stored as NaN, and the altloc choice compared NaNs. Such a value is
no reason to refuse the atoms, whose coordinates are sound (they are the training data; the
per-step path reads neither array): it is stored as :data:`OCCUPANCY_IF_NOT_FINITE` /
:data:`B_FACTOR_IF_NOT_FINITE`, with a parse warning naming the file, the first atom and the
values as written (review R25a s43 #9).

A file cut at a line's end reads as a whole one: 209d cut after its 200th atom row was stored
with 2 of its 3 chains, 7DDO.pdb with 1 of 7, no warning. Every writer of mmCIF that featurecache
has met either closes every category with ``#`` (wwPDB, gemmi's PDBx style, Biopython) or writes
no ``#`` at all (gemmi's plain style), and a PDB file ends with ``END`` (or ``ENDMDL``, ``MASTER``,
``CONECT``): a file whose last line is a row of its ``_atom_site`` loop, which no ``#`` closes
while one closed the category before it, or whose last line is an ATOM / HETATM / ANISOU record,
gets a parse warning ("cut short?"; :func:`cut_short`), and is stored as read (review R25a s43 #4).
So does a PDB file cut inside a line (a last line ``ATO``, ``HETA``, ``A`` or ``TER  12`` with no
newline after it, no END-like record), which read as whole too (review R26a s44 #1).

Only the distinct values of a column are looked at (a few for charges), and the rows are walked
only to name the first bad one, so a sound file costs about a millisecond.

gemmi reads a formal charge the file does not state (mmCIF / BinaryCIF ``pdbx_formal_charge`` ``?``
or ``.``, or no such column, as every wwPDB file writes; PDB columns 79-80 without a digit) as 0, the
same as a stated 0. ``types.Atom.charge`` is the file's where it states a charge for the residue,
else the definition's (decided per residue by the tokenizer, ``tokenize.af3``: review R41a s51 #1),
so the tokenizer must tell the two apart (review R40a s51 #1): an atom gemmi read as non-zero
stated its charge; one read as 0 stated it only where :func:`mark_stated_zero_charges_mmcif` /
:func:`mark_stated_zero_charges_pdb` set :data:`STATED_ZERO_CHARGE` in its ``gemmi.Atom.flag``
(a file whose every charge is unknown, the usual one, costs one look at the column's distinct values
or a numpy pass over the PDB lines). The flag is set per atom: where only some rows state a charge
and some of those state 0, the first model's ``_atom_site`` rows (ATOM / HETATM lines) are paired
with gemmi's atoms in order, else by ``id`` (PDB columns 7-11) where those are unique integers
(1A8O.pdb's are not), each pair checked by atom name and position. Where neither pairs every atom,
it is per file: the atoms read as 0 are taken as stating none (the stated zeros among them too; a
residue with a non-zero charge stated still has the file's charges, its other atoms 0).
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable

import gemmi
import numpy as np

from featurecache.errors import ParseError

__all__ = [
    "B_FACTOR_IF_NOT_FINITE",
    "MAX_FORMAL_CHARGE",
    "OCCUPANCY_IF_NOT_FINITE",
    "STATED_ZERO_CHARGE",
    "check_atom_site_values",
    "cut_short",
    "formal_charge_problem",
    "mark_stated_zero_charges_mmcif",
    "mark_stated_zero_charges_pdb",
    "mmcif_not_finite",
    "pdb_atom_lines",
    "pdb_not_finite",
    "repair_not_finite",
    "seq_id_problem",
]

#: The largest formal charge (either sign) an atom of a structure or a CCD definition may carry:
#: +9 is the highest oxidation state known (iridium in IrO4+), and a PDB file's two charge columns
#: (79-80: a digit and a sign) hold no more. Anything beyond is a damaged field.
MAX_FORMAL_CHARGE = 9

_INTEGER = re.compile(r"[+-]?\d+")
#: what gemmi's residue numbers hold (C int): beyond, it wraps
INT32_MIN, INT32_MAX = -(2**31), 2**31 - 1
#: the occupancy of an atom whose occupancy field is not a finite number: what gemmi gives an
#: occupancy the file leaves unstated (``?``)
OCCUPANCY_IF_NOT_FINITE = 1.0
#: the B-factor of an atom whose B-factor field is not a finite number: what the store gives an
#: atom without one (an atom the file does not have)
B_FACTOR_IF_NOT_FINITE = 0.0
#: gemmi keeps both as float32: a larger number is inf
_FLOAT32_MAX = float(np.finfo(np.float32).max)
#: a field of only these characters and at most this long is a finite float32 (or ``?`` / ``.``)
_NOT_PLAIN = re.compile(r"[^0-9.+\- ?]")
_PLAIN_DIGITS = 38
#: the mmCIF columns and PDB columns (0-based, end excluded) of the two values
_OCCUPANCY, _B_FACTOR = "occupancy", "B_iso_or_equiv"
_PDB_COLUMNS = {_OCCUPANCY: (54, 60), _B_FACTOR: (60, 66)}
#: bytes of a PDB occupancy / B-factor field that is a plain number (anything else is looked at)
_PLAIN_NUMBER = np.zeros(256, np.bool_)
_PLAIN_NUMBER[list(b"0123456789.+- \r")] = True
#: CIF's "unknown" and "inapplicable"
_NULLS = frozenset(("?", "."))
#: ``gemmi.Atom.flag`` (a character gemmi sets to ``"\0"`` and never uses) of an atom whose file states
#: its formal charge as 0; an atom read as 0 without it states none (the tokenizer gives it 0 where
#: another atom of its residue states a charge, else its residue definition's: module doc). Set on
#: the first model's atoms only, the ones the tokenizer reads.
STATED_ZERO_CHARGE = "0"


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


def _not_finite(text: str) -> bool:
    """Whether gemmi reads the field ``text`` (unquoted) as no finite float32; ``?`` / ``.`` read."""
    if text in _NULLS or not text:
        return False
    try:
        return not abs(float(text)) <= _FLOAT32_MAX
    except ValueError:
        return True


def mmcif_not_finite(block: gemmi.cif.Block) -> dict[str, list[str]]:
    """The distinct occupancy / B-factor fields of ``_atom_site`` that are no finite number, as
    written, by column (only columns that have one)."""
    out: dict[str, list[str]] = {}
    for column in (_OCCUPANCY, _B_FACTOR):
        values = set(block.find_values(f"_atom_site.{column}"))
        if not values or (max(map(len, values)) <= _PLAIN_DIGITS and not _NOT_PLAIN.search(" ".join(values))):
            continue  # plain numbers below float32's limit: one regex pass, not a float() per value
        if bad := sorted(v for v in {gemmi.cif.as_string(v) or v for v in values} if _not_finite(v)):
            out[column] = bad
    return out


def pdb_atom_lines(raw: bytes) -> tuple[np.ndarray, np.ndarray]:
    """Where a PDB file's ATOM / HETATM lines start and end (offsets into ``raw``, int64 ``[n]``
    each; an end is the line's newline, or the file's end). Found by numpy in one pass over the
    bytes, for every check of the file's atom columns (coordinates, occupancy, B-factor)."""
    buf = np.frombuffer(raw, np.uint8)
    newlines = np.flatnonzero(buf == ord("\n"))
    starts = np.concatenate((np.zeros(1, np.int64), newlines + 1))
    ends = np.append(newlines, buf.size)
    atom = _starts_with(buf, starts, ends, b"ATOM") | _starts_with(buf, starts, ends, b"HETATM")
    return starts[atom], ends[atom]


def _starts_with(buf: np.ndarray, starts: np.ndarray, ends: np.ndarray, word: bytes) -> np.ndarray:
    """Which of the lines ``starts`` / ``ends`` (int64 ``[n]``) of ``buf`` (uint8) begin ``word``: bool ``[n]``."""
    hit = ends - starts >= len(word)
    for k, byte in enumerate(word):
        hit[hit] = buf[starts[hit] + k] == byte
    return hit


def pdb_not_finite(raw: bytes, lines: tuple[np.ndarray, np.ndarray]) -> dict[str, list[str]]:
    """:func:`mmcif_not_finite` of a PDB file's ATOM/HETATM ``lines`` (:func:`pdb_atom_lines`;
    occupancy columns 55-60, B-factor 61-66): numpy flags the lines whose fields hold anything but
    a plain number's bytes, and only those are read in Python."""
    buf = np.frombuffer(raw, np.uint8)
    first, last = _PDB_COLUMNS[_OCCUPANCY][0], _PDB_COLUMNS[_B_FACTOR][1]
    starts, ends = lines
    keep = ends - starts > first
    starts, ends = starts[keep], ends[keep]
    flagged = np.zeros(starts.size, np.bool_)
    for col in range(first, last):
        inside = starts + col < ends
        flagged |= inside & ~_PLAIN_NUMBER[buf[np.minimum(starts + col, buf.size - 1)]]
    out: dict[str, set[str]] = {}
    for start, end in zip(starts[flagged].tolist(), ends[flagged].tolist(), strict=True):
        line = raw[start:end].decode("latin-1")
        for column, (a, b) in _PDB_COLUMNS.items():
            if _not_finite(field := line[a:b].strip()):
                out.setdefault(column, set()).add(field)
    return {column: sorted(values) for column, values in out.items()}


def repair_not_finite(st: gemmi.Structure, name: str, written: dict[str, list[str]]) -> list[str]:
    """Store :data:`OCCUPANCY_IF_NOT_FINITE` / :data:`B_FACTOR_IF_NOT_FINITE` for every atom of
    ``st`` whose occupancy / B-factor gemmi read as no finite number, when ``written`` (the fields
    :func:`mmcif_not_finite` / :func:`pdb_not_finite` found) has any; one warning per value."""
    if not written:
        return []
    count = {_OCCUPANCY: 0, _B_FACTOR: 0}
    first: dict[str, str] = {}
    for model in st:
        for chain in model:
            for res in chain:
                for atom in res:
                    for column, value in ((_OCCUPANCY, atom.occ), (_B_FACTOR, atom.b_iso)):
                        if math.isfinite(value):
                            continue
                        if column == _OCCUPANCY:
                            atom.occ = OCCUPANCY_IF_NOT_FINITE
                        else:
                            atom.b_iso = B_FACTOR_IF_NOT_FINITE
                        count[column] += 1
                        first.setdefault(column, f"atom {atom.name} of residue {res.name} {res.seqid} in chain "
                                                 f"{chain.name}")  # fmt: skip
    warnings = []
    for column, what, stored in ((_OCCUPANCY, "occupancy", OCCUPANCY_IF_NOT_FINITE),
                                 (_B_FACTOR, "B-factor", B_FACTOR_IF_NOT_FINITE)):  # fmt: skip
        if count[column]:
            shown = ", ".join(repr(v) for v in written.get(column, [])[:3])
            warnings.append(
                f"{name}: {what} not a finite number for {count[column]} atom(s) ({shown} in the file; first: "
                f"{first[column]}): stored as {stored}"
            )
    return warnings


#: PDB records a file cut inside its coordinates ends with
_PDB_ATOM_RECORDS = ("ATOM", "HETATM", "ANISOU")
#: PDB records that end a file (the last line of every PDB writer featurecache has met)
_PDB_LAST_RECORDS = ("END", "ENDMDL", "MASTER", "CONECT")


def cut_short(text: str, fmt: str, name: str, n_atoms: int) -> str | None:
    """The warning for a structure ``text`` (``fmt`` ``"mmcif"`` or ``"pdb"``, of ``n_atoms``
    atoms) that ends where no writer ends a file: inside its ``_atom_site`` loop (no ``#`` or
    category after its last row); for a PDB file, on an atom record, or inside a line with no
    newline after it that is no ``END`` / ``ENDMDL`` / ``MASTER`` / ``CONECT`` record. None
    otherwise."""
    body = text.rstrip()
    last_start = body.rfind("\n") + 1
    last = body[last_start:]
    if fmt == "pdb":
        line = body.count("\n", 0, last_start) + 1
        if record := next((r for r in _PDB_ATOM_RECORDS if last.startswith(r)), None):
            return (f"{name}: no END record, and its last line (line {line}) is an {record} record: cut short? "
                    f"{n_atoms} atoms read")  # fmt: skip
        # A cut inside a line leaves no newline after it. Cut inside a record name ('ATO', 'HETA',
        # 'A'), the atoms after it are lost unseen; inside a TER record ('TE', 'TER   123'), the
        # chains after it. Every writer ends its file with an END-like record, so a text with no
        # newline after any other last line was cut (review R26a s44 #1).
        partial = text[max(text.rfind("\n"), text.rfind("\r")) + 1 :]
        if partial.strip() and partial[:6].rstrip() not in _PDB_LAST_RECORDS:
            return (f"{name}: no END record, and it ends inside its last line (line {line}, {partial[:12]!r}, no "
                    f"newline): cut short? {n_atoms} atoms read")  # fmt: skip
        return None
    if last.startswith(("#", "_", "loop_", "data_")):
        return None
    tag = body.rfind("\n_") + 1  # the last tag: the header of the loop the last line is a row of
    if not body.startswith("_atom_site.", tag) or re.search(r"^(?:#|loop_|data_|save_)", body[tag:], re.M):
        return None
    # only a writer that closes its categories with '#' (wwPDB, gemmi's PDBx style, Biopython) is
    # known to have closed this one too: gemmi's plain style writes no '#' at all
    loop = body.rfind("\nloop_", 0, tag)
    before = body[:loop].rstrip()
    if loop < 0 or not before[before.rfind("\n") + 1 :].startswith("#"):
        return None
    return (f"{name}: the file ends inside its _atom_site loop (its last line is an atom row, with no '#' or "
            f"category after it): cut short? {n_atoms} atoms read")  # fmt: skip


# ----------------------------------------------------------------------------- stated zero charges
#: (serial, atom name, x, y, z) as one ``_atom_site`` row / ATOM line of the first model writes the
#: atom, and whether it states the charge 0: what :func:`_match` pairs with gemmi's atoms
_Row = tuple[str, str, float, float, float, bool]
#: Å: a row and an atom this far apart (on an axis) or more are not one
_SAME_POSITION = 1e-3
#: the first line after a PDB file's first model: ENDMDL, or END (gemmi reads nothing after it)
_PDB_MODEL_END = re.compile(rb"^(?:ENDMDL|END *\r?$)", re.M)


def mark_stated_zero_charges_mmcif(block: gemmi.cif.Block, st: gemmi.Structure) -> None:
    """Flag (:data:`STATED_ZERO_CHARGE`) the atoms of the first model of ``st`` (made from the
    mmCIF / BinaryCIF ``block``) whose ``_atom_site.pdbx_formal_charge`` states 0 (module doc)."""
    charges = block.find_values("_atom_site.pdbx_formal_charge")
    if len(st) == 0 or not any(_is_zero(v) for v in set(charges)):
        return  # no column, or no row states 0: gemmi's charges say it all
    written = list(charges)
    zero = [_is_zero(v) for v in written]
    if not any(v in _NULLS for v in written):  # every row states its charge
        _mark(st[0], None)
        return
    table = block.find_mmcif_category("_atom_site.")
    index = {t.removeprefix("_atom_site.").lower(): i for i, t in enumerate(table.tags)}
    name = index["auth_atom_id"] if "auth_atom_id" in index else index["label_atom_id"]  # as gemmi picks it
    model = index.get("pdbx_pdb_model_num")
    serial, xyz = index["id"], [index[f"cartn_{c}"] for c in "xyz"]  # gemmi read the block: they are there
    rows: list[_Row] = []
    first = None
    for k, row in enumerate(table):
        if model is not None:  # gemmi's first model is the first row's
            first = row[model] if first is None else first
            if row[model] != first:
                continue
        x, y, z = (_coordinate(gemmi.cif.as_string(row[c])) for c in xyz)
        rows.append((gemmi.cif.as_string(row[serial]), gemmi.cif.as_string(row[name]), x, y, z, zero[k]))
    _mark(st[0], rows)


def mark_stated_zero_charges_pdb(
    raw: bytes, lines: tuple[np.ndarray, np.ndarray], st: gemmi.Structure
) -> None:
    """Flag (:data:`STATED_ZERO_CHARGE`) the atoms of the first model of ``st`` (read from the PDB
    file ``raw``, its ATOM / HETATM ``lines``: :func:`pdb_atom_lines`) whose columns 79-80 state 0
    (a digit, 0: ``0``, ``0+``; module doc). numpy finds the lines with a digit there."""
    if len(st) == 0:
        return
    starts, ends = lines
    end = _PDB_MODEL_END.search(raw)
    first_model = starts < (end.start() if end is not None else len(raw))
    starts, ends = starts[first_model], ends[first_model]
    buf = np.frombuffer(raw, np.uint8)
    digit = np.zeros(starts.size, np.bool_)
    for col in (78, 79):
        inside = starts + col < ends
        c = buf[np.minimum(starts + col, buf.size - 1)]
        digit |= inside & (c >= ord("0")) & (c <= ord("9"))
    if not digit.any():
        return  # no line states a charge
    text = [
        raw[a:b].decode("latin-1").rstrip("\r") for a, b in zip(starts.tolist(), ends.tolist(), strict=True)
    ]
    zero = [
        bool(d) and not any(c in "123456789" for c in line[78:80])
        for d, line in zip(digit, text, strict=True)
    ]
    if not any(zero):
        return  # the stated charges are not 0: gemmi's say it all
    if digit.all():  # every line states its charge
        _mark(st[0], None)
        return
    rows: list[_Row] = []
    for line, stated_zero in zip(text, zero, strict=True):
        x, y, z = (_coordinate(line[a:b]) for a, b in ((30, 38), (38, 46), (46, 54)))
        rows.append((line[6:11].strip(), line[12:16].strip(), x, y, z, stated_zero))
    _mark(st[0], rows)


def _is_zero(value: str) -> bool:
    """Whether the mmCIF ``value`` (raw) states the formal charge 0 (``0``, ``+0``)."""
    text = gemmi.cif.as_string(value) or value
    return _INTEGER.fullmatch(text) is not None and int(text) == 0


def _coordinate(text: str) -> float:
    """A coordinate as written; NaN where it is none (then its row matches no atom)."""
    try:
        return float(text)
    except ValueError:
        return math.nan


def _mark(model: gemmi.Model, rows: list[_Row] | None) -> None:
    """Set :data:`STATED_ZERO_CHARGE` on the atoms of ``model`` that state the charge 0: each atom
    read as 0 when ``rows`` is None (every row states its charge); else the atoms of the rows that
    say so (:func:`_match`); none where the rows cannot be matched to the atoms (per file: a charge
    read as 0 is taken as stated by none)."""
    atoms = [a for chain in model for res in chain for a in res]
    if rows is None:
        for a in atoms:
            if a.charge == 0:
                a.flag = STATED_ZERO_CHARGE
        return
    matched = _match(atoms, rows)
    if matched is None:
        return
    for a, r in zip(atoms, matched, strict=True):
        if r[5]:
            a.flag = STATED_ZERO_CHARGE


def _match(atoms: list[gemmi.Atom], rows: list[_Row]) -> list[_Row] | None:
    """The row of each atom: in order (gemmi keeps a file's order, unless a residue's rows are apart:
    it adds a row to the residue it continues), else by serial (``_atom_site.id``, PDB columns 7-11)
    where the rows' serials are unique integers; each pair with the same atom name and position.
    None where neither pairs every atom."""

    def same(a: gemmi.Atom, r: _Row) -> bool:
        return (
            a.name == r[1]
            and abs(a.pos.x - r[2]) < _SAME_POSITION
            and abs(a.pos.y - r[3]) < _SAME_POSITION
            and abs(a.pos.z - r[4]) < _SAME_POSITION
        )

    if len(rows) != len(atoms):
        return None
    if all(same(a, r) for a, r in zip(atoms, rows, strict=True)):
        return rows
    by_serial = {int(r[0]): r for r in rows if _INTEGER.fullmatch(r[0])}
    if len(by_serial) != len(rows):
        return None
    paired: list[_Row] = []
    for a in atoms:
        r = by_serial.get(a.serial)
        if r is None or not same(a, r):
            return None
        paired.append(r)
    return paired
