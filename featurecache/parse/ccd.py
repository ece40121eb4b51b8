"""Chemical Component Dictionary (CCD) reader.

Reads wwPDB CCD definitions with gemmi's CIF reader from either

* one ``components.cif`` / ``components.cif.gz`` (many ``data_<CODE>`` blocks), or
* a directory of per-component files ``<CODE>.cif`` (or ``<CODE>.cif.gz``).

A whole ``components.cif`` is ~400 MB of text, so :class:`CCD` never parses it whole: it streams the
file once and parses only the blocks of the codes asked for (:meth:`CCD.load`); when a second pass
is needed (other codes asked for later), that pass keeps every block's text zlib-compressed, so
there is no third; for a directory, it opens one file per code on demand. Every definition is a frozen
:class:`ComponentDef`; :func:`_parse_component` is the pure parser behind all of them (tests feed
it strings).

:func:`check_ccd` is the cheap check a build makes first: it parses definitions only until it
has found a valid one, and refuses a path that yields none, or a ``components.cif.gz`` cut short
(an interrupted download: its first blocks are valid, the chem stage would find the cut later).
A read of the CCD that the OS refuses there is a :class:`CCDReadError`, not "no definitions found"
(the build stops with exit 3 and says to run it again: review R42b s52 #2).

What cannot be read is a :class:`~featurecache.errors.CCDError` (stage ``ccd``) naming the CCD file
and, for one broken definition, the component: never the bare ``EOFError`` of gzip or gemmi's
``string:29:0`` (which blamed the structure that asked for the code). A broken definition fails
whoever asks for that code (:meth:`CCD.load`), whether the CCD is one file or a directory; it is
never taken as "the CCD does not define it", which would build the residue from the file's atoms
with perceived bonds, silently unlike the build with a sound CCD. A read the OS refused (an
``OSError``: EIO, a stale NFS handle, a file gone) is a :class:`CCDReadError`: the fault of the
machine, not of the CCD's content, so :class:`CCD` never remembers it (the next lookup reads the
file again) and a build retries the entries it failed (review R42b s52 #2).

``ComponentDef.sha256`` is the sha256 of the block's text as read (the ``data_`` line up to the
next block), so a changed definition gives a changed hash and a rebuilt component.
"""

from __future__ import annotations

import errno
import gzip
import hashlib
import logging
import os
import re
import zlib
from collections import Counter
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

import gemmi
import numpy as np

from featurecache.errors import CCDError, InputError, ParseError
from featurecache.parse.atom_site import formal_charge_problem
from featurecache.parse.cif_loops import loop_error_hint

logger = logging.getLogger(__name__)

__all__ = [
    "AROMATIC_BOND_ORDER",
    "CCD",
    "CCDReadError",
    "ComponentDef",
    "check_ccd",
    "parse_component_file",
    "read_components",
]

#: ``order`` of a bond whose ``value_order`` is ``AROM``: aromatic, with no Kekulé order (such a
#: bond's aromatic flag is also set, whatever ``pdbx_aromatic_flag`` says)
AROMATIC_BOND_ORDER = 5
#: ``_chem_comp_bond.value_order`` → bond order (AF3/RDKit style; aromatic is a separate flag).
BOND_ORDERS: dict[str, int] = {
    "SING": 1,
    "DOUB": 2,
    "TRIP": 3,
    "QUAD": 4,
    "AROM": AROMATIC_BOND_ORDER,
    "DELO": 1,
    "PI": 1,
    "POLY": 1,
}


@dataclass(frozen=True)
class ComponentDef:
    """One CCD component definition.

    Per-atom fields are tuples/arrays of length ``n_atoms`` in CCD order (hydrogens included).
    ``ideal``/``model`` are float64 ``[n_atoms, 3]`` with NaN where the CCD gives ``?``.
    ``bonds`` are ``(i, j, order, aromatic, stereo)`` with ``i``/``j`` indices into the atoms,
    ``order`` in {1, 2, 3, 4, 5}: 4 only for ``QUAD``, 5 (:data:`AROMATIC_BOND_ORDER`) for
    ``AROM`` (a bond with no Kekulé order; its ``aromatic`` flag is set too). Aromaticity of
    Kekulé bonds is the separate flag.
    """

    code: str
    name: str
    type: str  # _chem_comp.type, e.g. "L-PEPTIDE LINKING", "NON-POLYMER"
    atom_names: tuple[str, ...]
    elements: tuple[str, ...]  # element symbols as written (upper case), e.g. "C", "FE"
    atomic_numbers: tuple[int, ...]
    charges: tuple[int, ...]
    leaving: tuple[bool, ...]  # pdbx_leaving_atom_flag
    aromatic: tuple[bool, ...]  # pdbx_aromatic_flag
    stereo: tuple[str, ...]  # pdbx_stereo_config: "R", "S" or "N"
    ideal: np.ndarray = field(repr=False)
    model: np.ndarray = field(repr=False)
    bonds: tuple[tuple[int, int, int, bool, str], ...]
    sha256: str

    @property
    def n_atoms(self) -> int:
        return len(self.atom_names)

    @property
    def heavy(self) -> np.ndarray:
        """bool ``[n_atoms]``: atom is not hydrogen / deuterium."""
        return np.array([z != 1 for z in self.atomic_numbers], dtype=bool)

    def index(self, name: str) -> int:
        """Index of an atom by name (KeyError if absent)."""
        try:
            return self.atom_names.index(name)
        except ValueError:
            raise KeyError(f"{self.code} has no atom {name!r}") from None


def _element_number(symbol: str) -> int:
    sym = symbol.strip()
    if not sym:
        return 0
    el = gemmi.Element(sym[0].upper() + sym[1:].lower())
    return int(el.atomic_number)


def _num(value: str) -> float:
    return float("nan") if value in ("?", ".") else float(value)


def _component_from_block(block: gemmi.cif.Block, text_sha: str) -> ComponentDef:
    code = block.name
    cc = block.find_values("_chem_comp.id")
    if len(cc):
        code = gemmi.cif.as_string(cc[0]) or code
    name = gemmi.cif.as_string(block.find_value("_chem_comp.name") or "")
    ctype = gemmi.cif.as_string(block.find_value("_chem_comp.type") or "")
    cols = [
        "atom_id",
        "type_symbol",
        "?charge",
        "?pdbx_leaving_atom_flag",
        "?pdbx_aromatic_flag",
        "?pdbx_stereo_config",
        "?pdbx_model_Cartn_x_ideal",
        "?pdbx_model_Cartn_y_ideal",
        "?pdbx_model_Cartn_z_ideal",
        "?model_Cartn_x",
        "?model_Cartn_y",
        "?model_Cartn_z",
    ]
    table = block.find("_chem_comp_atom.", cols)
    if len(table) == 0:
        raise _NoAtoms(f"CCD block {block.name}: no _chem_comp_atom rows", stage="ccd")
    has = [table.has_column(i) for i in range(len(cols))]

    def col(row: gemmi.cif.Table.Row, i: int, default: str = "?") -> str:
        return str(row[i]) if has[i] else default

    names: list[str] = []
    symbols: list[str] = []
    charges: list[int] = []
    leaving: list[bool] = []
    aromatic: list[bool] = []
    stereo: list[str] = []
    ideal = np.full((len(table), 3), np.nan)
    model = np.full((len(table), 3), np.nan)
    for k, row in enumerate(table):
        names.append(gemmi.cif.as_string(row[0]))
        symbols.append(gemmi.cif.as_string(row[1]).upper())
        ch = gemmi.cif.as_string(col(row, 2)) or col(row, 2)
        if why := formal_charge_problem(ch):  # the store keeps charges as int8: 300 would be 44
            raise ParseError(f"CCD {code}: atom {names[-1]} has charge {ch!r}, which {why}", stage="ccd")
        charges.append(int(ch) if ch not in ("?", ".") else 0)
        leaving.append(col(row, 3, "N").upper() == "Y")
        aromatic.append(col(row, 4, "N").upper() == "Y")
        stereo.append(gemmi.cif.as_string(col(row, 5, "N")).upper() or "N")
        ideal[k] = [_num(col(row, i)) for i in (6, 7, 8)]
        model[k] = [_num(col(row, i)) for i in (9, 10, 11)]

    # a name written twice would be two atoms of one name in every entry, the second on top of
    # the first, while the bonds below reach only the last (review R25a s43 #2)
    listed = Counter(names)
    if twice := [n for n, c in listed.items() if c > 1]:
        more = f" ({len(twice)} atoms listed more than once)" if len(twice) > 1 else ""
        raise ParseError(f"CCD {code}: atom {twice[0]} listed {listed[twice[0]]} times{more}", stage="ccd")
    index = {n: i for i, n in enumerate(names)}
    bonds: list[tuple[int, int, int, bool, str]] = []
    btable = block.find(
        "_chem_comp_bond.",
        ["atom_id_1", "atom_id_2", "value_order", "?pdbx_aromatic_flag", "?pdbx_stereo_config"],
    )
    for row in btable:
        a, b = gemmi.cif.as_string(row[0]), gemmi.cif.as_string(row[1])
        if a not in index or b not in index:
            raise ParseError(f"CCD {code}: bond {a}-{b} names an unknown atom", stage="ccd")
        order = BOND_ORDERS.get(gemmi.cif.as_string(row[2]).upper(), 1)
        arom = (btable.has_column(3) and str(row[3]).upper() == "Y") or order == AROMATIC_BOND_ORDER
        bstereo = gemmi.cif.as_string(row[4]).upper() if btable.has_column(4) else "N"
        bonds.append((index[a], index[b], order, arom, bstereo))

    ideal.setflags(write=False)
    model.setflags(write=False)
    return ComponentDef(
        code=code,
        name=name,
        type=ctype,
        atom_names=tuple(names),
        elements=tuple(symbols),
        atomic_numbers=tuple(_element_number(s) for s in symbols),
        charges=tuple(charges),
        leaving=tuple(leaving),
        aromatic=tuple(aromatic),
        stereo=tuple(stereo),
        ideal=ideal,
        model=model,
        bonds=tuple(bonds),
        sha256=text_sha,
    )


class _NoAtoms(ParseError):
    """A definition without ``_chem_comp_atom`` rows (``UNL``, ``UNX``: an unknown ligand or atom):
    nothing to lay out, so the CCD is taken not to define the code, not as a broken definition."""


#: gemmi's position prefix of a CIF syntax error in a string: ``string:29:0(1328): `` (line 29)
_GEMMI_STRING_POS = re.compile(r"^string:(\d+)(?::\d+)?(?:\(\d+\))?:\s*")


def _parse_component(text: str, first_line: int = 1) -> ComponentDef:
    """Parse one CCD block (``data_<CODE>`` …) from its text, which starts on the file's line
    ``first_line`` (a ``components.cif`` block's error names the file's line: review R15 s40 #7)."""
    try:
        doc = gemmi.cif.read_string(text)
    except (RuntimeError, ValueError) as exc:
        # "line N" of the file, not gemmi's "string:N" (a line of the block)
        reason = _GEMMI_STRING_POS.sub(lambda m: f"line {int(m.group(1)) + first_line - 1}: ", str(exc))
        hint = loop_error_hint(text, str(exc), first_line)  # gemmi names the loop's header, not the bad row
        raise ParseError(
            f"CCD block does not parse: {reason}" + (f"; {hint}" if hint else ""), stage="ccd"
        ) from exc
    if len(doc) != 1:
        raise ParseError(f"expected one CCD block, got {len(doc)}", stage="ccd")
    try:
        return _component_from_block(doc[0], _block_sha256(text))
    except ParseError:
        raise
    except ValueError as exc:  # a charge or coordinate that is no number
        raise ParseError(f"CCD block {doc[0].name}: {exc}", stage="ccd") from exc


def _block_sha256(text: str) -> str:
    """:attr:`ComponentDef.sha256`: the hash of the definition's text as read."""
    return hashlib.sha256(text.encode()).hexdigest()


def _read_text(path: Path) -> str:
    if path.suffix == ".gz":
        with gzip.open(path, "rt", encoding="utf-8", errors="replace") as fh:
            return fh.read()
    return path.read_text(encoding="utf-8", errors="replace")


#: what reading a CCD file raises when it cannot be read (gzip.BadGzipFile is an OSError)
_READ_ERRORS = (OSError, EOFError, zlib.error)


class CCDReadError(CCDError):
    """A CCD file the OS did not let this process read (``os_error``: an ``OSError`` such as EIO,
    ESTALE, EACCES or ENOENT; not a gzip stream that is no gzip or ends early, which is the file's
    content): the fault of the machine at that moment, not of the definition or of the structure
    that asked for it. :class:`CCD` does not remember it (the next lookup reads the file again),
    and a build records the entry's failure so that its next run retries it (``build.tasks``)."""

    def __init__(self, message: str, *, path: str, os_error: OSError, component: str | None = None) -> None:
        super().__init__(message, path=path, component=component)
        self.os_error = os_error


def os_reason(exc: OSError) -> str:
    """An OSError's reason in words, with its errno's name: ``Input/output error (EIO)``."""
    name = errno.errorcode.get(exc.errno or 0)
    text = exc.strerror or str(exc) or type(exc).__name__
    return f"{text} ({name})" if name else text


def _os_refused(exc: BaseException) -> bool:
    """Whether ``exc`` is a read the OS refused (:class:`CCDReadError`), not a sign of the content."""
    return isinstance(exc, OSError) and not isinstance(exc, gzip.BadGzipFile)


def _refused_path(exc: BaseException, default: Path) -> Path:
    """The file an OSError names (``open``'s and ``stat``'s do; a failed ``read`` names none), else
    ``default``: the file being read."""
    name = getattr(exc, "filename", None)
    return Path(os.fsdecode(name)) if isinstance(name, (str, bytes)) and name else default


def _read_failure(exc: BaseException) -> str:
    if isinstance(exc, EOFError):
        return "its gzip stream ends early: the file is cut short (an interrupted download?)"
    return f"{type(exc).__name__}: {exc}"


def _unreadable(path: Path, exc: BaseException, code: str | None = None) -> CCDError:
    """The error of the CCD file ``path`` that could not be read (``code``: the component whose
    file it is, in a CCD directory): a :class:`CCDReadError` when the OS refused the read."""
    what = f"the CCD file {path} (the definition of {code})" if code else f"the CCD {path}"
    if _os_refused(exc):
        assert isinstance(exc, OSError)
        return CCDReadError(
            f"cannot read {what}: {os_reason(exc)}", path=str(path), os_error=exc, component=code
        )
    return CCDError(f"cannot read {what}: {_read_failure(exc)}", path=str(path), component=code)


def _broken(file: Path, code: str, why: str, *, block: bool) -> CCDError:
    where = f"the definition of {code} (block data_{code})" if block else f"the definition of {code}"
    return CCDError(f"CCD {file}: {where} cannot be used: {why}; fix or replace it", path=str(file),
                    component=code)  # fmt: skip


#: False while a build's part task runs (``build.tasks.run_part``: :func:`quiet_definition_warnings`)
_WARN_DEFINITIONS: ContextVar[bool] = ContextVar("featurecache_ccd_definition_warnings", default=True)


@contextmanager
def quiet_definition_warnings() -> Iterator[None]:
    """Within it, :func:`_warn_unbonded` says nothing. A build's part tasks run in it: a worker
    process has no log handler, so Python printed the warning there as a bare line, and the build's
    driver gave the same warning again, formatted, when it read the definition to compute its
    conformer (the chem stage). The driver's is the one the build shows."""
    token = _WARN_DEFINITIONS.set(False)
    try:
        yield
    finally:
        _WARN_DEFINITIONS.reset(token)


def _warn_unbonded(comp: ComponentDef, file: Path) -> None:
    """Warn, naming the CCD file, when ``comp`` has several heavy atoms and no bond at all: a
    definition that lost its ``_chem_comp_bond`` loop reads as sound, but its atoms get no bonds and
    cannot be embedded (RDKit put HEM's 43 unbonded atoms on one point: review R25a s43 #1)."""
    n_heavy = int(comp.heavy.sum())
    if n_heavy > 1 and not comp.bonds and _WARN_DEFINITIONS.get():
        logger.warning(
            "CCD %s: %s defines %d heavy atoms and no bond (no _chem_comp_bond rows): its atoms get no "
            "bonds, and its reference conformer is the CCD's own coordinates (none if they are "
            "incomplete); check the definition",
            file, comp.code, n_heavy,
        )  # fmt: skip


def _component_file(p: Path) -> ComponentDef | None:
    """The definition in a single-component file; None for one without atoms (:class:`_NoAtoms`).
    Raises :class:`CCDError` naming the file when it cannot be read or parsed."""
    try:
        comp = _parse_component(_read_text(p))
    except _NoAtoms:
        return None
    except ParseError as exc:
        raise CCDError(f"CCD {p}: {exc}", path=str(p)) from exc
    except _READ_ERRORS as exc:
        if _os_refused(exc):
            raise _unreadable(p, exc) from exc
        raise CCDError(f"CCD {p}: cannot read it: {_read_failure(exc)}", path=str(p)) from exc
    _warn_unbonded(comp, p)
    return comp


def parse_component_file(path: str | os.PathLike[str]) -> ComponentDef:
    """Parse a single-component CIF file (``.cif`` or ``.cif.gz``). Raises
    :class:`~featurecache.errors.CCDError` (a ``ParseError``) naming the file when it cannot be
    read or parsed, or defines no atoms."""
    p = Path(path)
    comp = _component_file(p)
    if comp is None:
        raise CCDError(f"CCD {p}: no _chem_comp_atom rows", path=str(p))
    return comp


def _iter_blocks(lines: Iterable[str], wanted: set[str] | None) -> Iterator[tuple[str, str, int]]:
    """Yield ``(code, block_text, first_line)`` for each ``data_`` block (only codes in ``wanted`` if
    given); ``first_line``: the line of its ``data_`` line in ``lines`` (from 1)."""
    code: str | None = None
    buf: list[str] = []
    start = 0
    for number, line in enumerate(lines, 1):
        if line.startswith("data_"):
            if code is not None and (wanted is None or code in wanted):
                yield code, "".join(buf), start
            code, start = line[5:].strip(), number
            buf = [line]
        elif code is not None and (wanted is None or code in wanted):
            buf.append(line)
    if code is not None and (wanted is None or code in wanted):
        yield code, "".join(buf), start


def read_components(
    path: str | os.PathLike[str], codes: Iterable[str] | None = None
) -> dict[str, ComponentDef]:
    """Parse a multi-block CCD file (``components.cif[.gz]``), keeping only ``codes`` if given.

    One streaming pass; memory holds only the wanted blocks. A block that does not parse is left
    out with a warning (:meth:`CCD.load` fails the codes it defines instead); a file that cannot
    be read whole (a gzip stream cut short) raises :class:`~featurecache.errors.CCDError`.
    """
    found, broken = _scan_components(Path(path), None if codes is None else set(codes))
    for exc in broken.values():
        logger.warning("%s", exc)
    return found


def _scan_components(
    p: Path, wanted: set[str] | None, blocks: dict[str, tuple[int, bytes]] | None = None
) -> tuple[dict[str, ComponentDef], dict[str, CCDError]]:
    """The definitions of ``wanted`` (every block: None) in the CCD file ``p``, and a
    :class:`CCDError` per wanted code whose block does not parse. Blocks without atoms are in
    neither (the CCD does not define those codes). Raises :class:`CCDError` when ``p`` cannot be
    read to its end. ``blocks``: filled with every block's first line and text, zlib-compressed, by code (a later
    block of a code replaces an earlier one), so later codes need no further pass (:class:`CCD`)."""
    out: dict[str, ComponentDef] = {}
    broken: dict[str, CCDError] = {}
    try:
        for code, text, first_line in _file_blocks(p, wanted if blocks is None else None):
            if blocks is not None:
                blocks[code] = (first_line, zlib.compress(text.encode(), 1))
                if wanted is not None and code not in wanted:
                    continue
            _parse_into(out, broken, p, code, text, first_line)
    except CCDError:  # the file could not be read to its end
        if blocks is not None:
            blocks.clear()
        raise
    for code in broken:
        out.pop(code, None)  # a later, broken block of the code replaced a sound one
    return out, broken


def _file_blocks(p: Path, wanted: set[str] | None) -> Iterator[tuple[str, str, int]]:
    """:func:`_iter_blocks` of the CCD file ``p`` (gzipped or not); :class:`CCDError` naming ``p``
    when it cannot be read to its end."""
    opener = gzip.open if p.suffix == ".gz" else open
    try:
        with opener(p, "rt", encoding="utf-8", errors="replace") as fh:  # type: ignore[operator]
            yield from _iter_blocks(fh, wanted)
    except _READ_ERRORS as exc:
        raise _unreadable(p, exc) from exc


def _parse_into(
    out: dict[str, ComponentDef], broken: dict[str, CCDError], p: Path, code: str, text: str, first_line: int
) -> None:
    """Parse one block of the CCD file ``p`` (starting on its line ``first_line``) into ``out`` (or
    ``broken``); a block without atoms into neither."""
    try:
        out[code] = _parse_component(text, first_line)
    except _NoAtoms:
        return
    except ParseError as exc:
        broken[code] = _broken(p, code, str(exc), block=True)
    else:
        broken.pop(code, None)  # a later block of the code wins, as in ``out``
        _warn_unbonded(out[code], p)


#: How far :func:`check_ccd` looks before it calls a CCD empty: text of one file, files of a directory.
CHECK_MAX_CHARS = 64 << 20
CHECK_MAX_FILES = 256


def check_ccd(path: str | os.PathLike[str], *, enough: int = 1) -> int:
    """Check, cheaply and before a build, that ``path`` holds CCD definitions.

    ``path`` is a ``components.cif[.gz]`` or a directory of ``<CODE>.cif[.gz]`` files. Parses
    definitions (as :class:`CCD` would) until ``enough`` are valid and returns how many were (at
    most ``enough``): a real ``components.cif.gz`` costs the parse of its first block or two, not
    of 400 MB, and one decompression to its end (:func:`_check_gzip_whole`: one cut short raises
    :class:`~featurecache.errors.CCDError`, an InputError naming it).
    Raises :class:`~featurecache.errors.InputError` naming ``path`` when it does not exist or no
    valid definition turns up in the first :data:`CHECK_MAX_CHARS` characters of a file or
    :data:`CHECK_MAX_FILES` files of a directory (a garbage ``--ccd`` would otherwise be accepted
    and every non-standard component would silently fall back to perceived bonds); a
    :class:`CCDReadError` naming the file (or the directory) and the OS's reason when the OS
    refuses a read of it (EIO, a stale NFS handle): the machine's fault, not the CCD's content,
    which was called "no chemical component definitions found" (review R42b s52 #2).
    """
    p = Path(path)
    try:
        exists, is_dir = p.exists(), p.is_dir()
    except OSError as exc:  # a stat the OS refuses (EIO, ESTALE): not "no such file"
        raise _unreadable(p, exc) from exc
    if not exists:
        raise InputError(f"CCD {p}: no such file or directory", path=str(p), stage="ccd")
    if is_dir:
        found, why = _check_ccd_dir(p, enough)
    else:
        found, why = _check_ccd_file(p, enough)
    if not found:
        raise InputError(
            f"CCD {p}: no chemical component definitions found ({why})", path=str(p), stage="ccd"
        )
    if p.suffix == ".gz":
        _check_gzip_whole(p)
    return found


def _check_gzip_whole(p: Path) -> None:
    """Raise :class:`CCDError` unless the gzip file ``p`` decompresses to its end, its checksums
    and lengths included: a download cut short has sound first blocks, and would otherwise end
    the build in its chem stage. Decompression only, nothing is parsed: 1.6 s for a 405 MB CCD
    (78 MB of gzip) on a loaded 2-core machine, where the chem stage's one scan of it for its
    codes (:func:`read_components`) takes 8.7 s."""
    try:
        with gzip.open(p, "rb") as fh:
            while fh.read(1 << 20):
                pass
    except _READ_ERRORS as exc:
        raise _unreadable(p, exc) from exc


def _check_ccd_dir(p: Path, enough: int) -> tuple[int, str]:
    try:
        files = sorted(f for f in p.iterdir() if f.name.lower().endswith((".cif", ".cif.gz")) and f.is_file())
    except OSError as exc:  # the directory cannot be listed (EIO, ESTALE), or a file's stat failed
        raise _unreadable(_refused_path(exc, p), exc) from exc
    if not files:
        return 0, "the directory has no <CODE>.cif or <CODE>.cif.gz files"
    found, first_error = 0, ""
    for f in files[:CHECK_MAX_FILES]:
        stem = f.name[: -len(".cif.gz")] if f.name.lower().endswith(".gz") else f.name[: -len(".cif")]
        try:
            comp = parse_component_file(f)
        except CCDReadError:  # the OS refused the read: no sign of the file's content
            raise
        except ParseError as exc:  # CCDError: it names the file and what did not read
            first_error = first_error or f"{f.name}: {exc}"
            continue
        if comp.code.upper() != stem.upper():
            # CCD looks a code up by file name: this definition would never be found
            first_error = first_error or f"{f.name} defines {comp.code}, not {stem}"
            continue
        found += 1
        if found >= enough:
            break
    checked = min(len(files), CHECK_MAX_FILES)
    return found, f"{checked} of {len(files)} files checked; first problem: {first_error}"


def _bounded_lines(fh: IO[str], max_chars: int) -> Iterator[str]:
    """Lines of ``fh`` (each cut at 1 MiB, so a file without newlines is not read whole), up to
    ``max_chars`` characters in all."""
    total = 0
    while total < max_chars and (line := fh.readline(1 << 20)):
        total += len(line)
        yield line


def _check_ccd_file(p: Path, enough: int) -> tuple[int, str]:
    opener = gzip.open if p.suffix == ".gz" else open
    found, n_blocks, first_error = 0, 0, ""
    try:
        with opener(p, "rt", encoding="utf-8", errors="replace") as fh:  # type: ignore[operator]
            for code, text, first_line in _iter_blocks(_bounded_lines(fh, CHECK_MAX_CHARS), None):
                n_blocks += 1
                try:
                    comp = _parse_component(text, first_line)
                except ParseError as exc:
                    first_error = first_error or f"block data_{code}: {exc}"
                    continue
                if comp.code != code:
                    # a structure mmCIF also has _chem_comp_atom rows, but not _chem_comp.id = block name
                    first_error = first_error or f"block data_{code} defines {comp.code}, not {code}"
                    continue
                found += 1
                if found >= enough:
                    break
    except (OSError, EOFError, zlib.error) as exc:  # gzip.BadGzipFile is an OSError
        if _os_refused(exc):  # EIO, ESTALE: the machine's fault, not "no definitions found"
            raise _unreadable(p, exc) from exc
        if not found:
            return 0, f"cannot read it: {type(exc).__name__}: {exc}"
    if not n_blocks:
        return found, "no data_ blocks"
    return found, f"{n_blocks} data_ block(s) checked; first problem: {first_error}"


class CCD:
    """Mapping code → :class:`ComponentDef` over a CCD file or directory, loaded lazily.

    ``CCD(None)`` is an empty dictionary (every lookup misses). Parsed definitions are cached;
    :meth:`load` fetches many codes in one pass (one scan of a ``components.cif``).
    """

    def __init__(self, path: str | os.PathLike[str] | None) -> None:
        self.path = Path(path) if path is not None else None
        if self.path is not None and not self.path.exists():
            raise ParseError(f"CCD path does not exist: {self.path}", path=str(self.path), stage="ccd")
        self._cache: dict[str, ComponentDef | None] = {}
        #: code -> why its definition cannot be used; the whole file's error once it did not read
        self._broken: dict[str, CCDError] = {}
        self._unreadable: CCDError | None = None
        #: a ``components.cif``'s blocks by code, zlib-compressed, from its second pass: a build's
        #: worker asks for a few new codes per structure, and each pass over a 75 MB
        #: ``components.cif.gz`` costs 3-4 s (a pass per new code made a PDB-sized build take
        #: hours per worker); ~1/3 of the text in memory (130 MB for 400 MB of text)
        self._blocks: dict[str, tuple[int, bytes]] | None = None
        self._passes = 0

    @property
    def is_dir(self) -> bool:
        return self.path is not None and self.path.is_dir()

    def _file_for(self, code: str) -> Path | None:
        assert self.path is not None
        for name in (f"{code}.cif", f"{code}.cif.gz", f"{code.lower()}.cif", f"{code.lower()}.cif.gz"):
            f = self.path / name
            if f.is_file():
                return f
        return None

    def load(self, codes: Iterable[str]) -> dict[str, ComponentDef]:
        """Definitions of every code in ``codes`` that the CCD has (absent codes are left out).

        Raises :class:`~featurecache.errors.CCDError` (stage ``ccd``) when the CCD file cannot be
        read (every later call too, without reading it again), or when the definition of one of
        ``codes`` cannot be used, naming its file and code: each remembered for the life of this
        object. A read the OS refused is a :class:`CCDReadError`, remembered by nothing: a worker
        that met one EIO would otherwise fail every later entry, for good (review R42b s52 #2).
        """
        codes = [c for c in dict.fromkeys(codes) if c]
        if self._unreadable is not None:
            raise _again(self._unreadable)
        missing = [c for c in codes if c not in self._cache]
        if missing and self.path is not None:
            if self.is_dir:
                for c in missing:
                    try:
                        f = self._file_for(c)
                    except OSError as exc:  # a stat the OS refused (EIO): read again by the next lookup
                        raise _unreadable(_refused_path(exc, self.path), exc, c) from exc
                    try:
                        self._cache[c] = _component_file(f) if f is not None else None
                    except CCDReadError as exc:  # read again by the next lookup
                        assert f is not None
                        raise _unreadable(f, exc.os_error, c) from None
                    except CCDError as exc:
                        assert f is not None
                        self._cache[c] = None
                        self._broken[c] = _broken(f, c, str(exc).removeprefix(f"CCD {f}: "), block=False)
            elif self._blocks is None:
                # the first pass keeps only what it was asked for (a chem stage asks once for every
                # code it needs); a second pass keeps every block, so there is no third
                blocks: dict[str, tuple[int, bytes]] | None = {} if self._passes else None
                self._passes += 1
                try:
                    found, broken = _scan_components(self.path, set(missing), blocks)
                except CCDReadError:  # the next lookup reads the file again, as a first pass
                    self._passes -= 1
                    raise
                except CCDError as exc:
                    self._unreadable = exc
                    raise _again(exc) from None
                self._blocks = blocks
                self._broken.update(broken)
                for c in missing:
                    self._cache[c] = found.get(c)
            else:
                found, broken = {}, {}
                for c in missing:
                    if (block := self._blocks.get(c)) is not None:
                        first_line, text = block
                        _parse_into(found, broken, self.path, c, zlib.decompress(text).decode(), first_line)
                self._broken.update(broken)
                for c in missing:
                    self._cache[c] = found.get(c)
        for c in missing:
            self._cache.setdefault(c, None)
        for c in codes:
            if c in self._broken:
                raise _again(self._broken[c])
        return {c: d for c in codes if (d := self._cache.get(c)) is not None}

    def get(self, code: str) -> ComponentDef | None:
        return self.load([code]).get(code)

    def __contains__(self, code: object) -> bool:
        return isinstance(code, str) and self.get(code) is not None

    def __getitem__(self, code: str) -> ComponentDef:
        d = self.get(code)
        if d is None:
            raise KeyError(code)
        return d


def _again(exc: CCDError) -> CCDError:
    """A fresh copy of a remembered error, so each raise has a traceback of its own."""
    return CCDError(str(exc), path=exc.path, component=exc.component)


def definition_hashes(path: str | os.PathLike[str] | None, codes: Iterable[str]) -> dict[str, str]:
    """``code → ComponentDef.sha256`` of the definition a lookup of each of ``codes`` would get
    from the CCD at ``path`` (None: no CCD), without parsing it: the sha256 of the block's text as
    :class:`CCD` reads it (a ``components.cif``'s last block of the code, or the code's file in a
    directory), else the packaged standard residue's; "" for a code neither defines. A block with
    no ``_chem_comp_atom`` text defines nothing (``UNL``), as :class:`CCD` reads it. What a build
    compares with the hashes its entries recorded (``build.ccd_keys``): a hash that differs means
    the definition changed (a block that no longer parses too: its entries are rebuilt and fail);
    an equal hash, the same text and so the same definition. One streaming pass over a file, no
    parse: a build checks every code its store's entries used, each build.

    A file whose read the OS refuses (EIO, a stale NFS handle) raises :class:`CCDReadError` naming
    it and the OS's reason (the build stops, exit 3: review R42b s52 #2; it was a traceback), never
    a hash: one read that failed says nothing of the definition. A directory's ``<CODE>.cif.gz``
    that is no gzip or is cut short gets :data:`UNREADABLE_DEFINITION`, which no definition hashes
    to: its entries are rebuilt, and fail naming the file, as for a block that no longer parses
    (its ``EOFError`` ended the build with click's bare "Aborted.", exit 1)."""
    from featurecache.chem.standard import standard_component

    wanted = set(c for c in codes if c)
    found: dict[str, str] = {}
    if path is not None:
        p = Path(path)
        try:
            is_dir = p.is_dir()
        except OSError as exc:
            raise _unreadable(p, exc) from exc
        if is_dir:
            reader = CCD(p)
            for code in sorted(wanted):
                f: Path | None = None
                try:
                    f = reader._file_for(code)
                    if f is not None:
                        found[code] = _text_hash(_read_text(f))
                except _READ_ERRORS as exc:
                    if _os_refused(exc):
                        raise _unreadable(_refused_path(exc, f or p), exc, code) from exc
                    found[code] = UNREADABLE_DEFINITION  # the file's content: rebuilt, and fails
        else:
            for code, text, _first in _file_blocks(p, wanted):
                found[code] = _text_hash(text)  # a later block of the code wins, as in CCD.load
    out = {}
    for code in sorted(wanted):
        sha = found.get(code, "")
        if not sha and (std := standard_component(code)) is not None:
            sha = std.sha256
        out[code] = sha
    return out


#: :func:`definition_hashes`' hash of a CCD directory's file whose content cannot be read (a
#: ``.cif.gz`` cut short, or no gzip): equal to no definition's sha256 (hex) nor to "" (undefined)
UNREADABLE_DEFINITION = "unreadable"


def _text_hash(text: str) -> str:
    """:attr:`ComponentDef.sha256` of a definition's text; "" for text without atoms (``_NoAtoms``)."""
    return _block_sha256(text) if "_chem_comp_atom." in text else ""
