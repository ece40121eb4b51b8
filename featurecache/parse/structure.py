"""Read structure files into a ``gemmi.Structure`` — mmCIF, PDB, their ``.gz``, and BinaryCIF.

gemmi does the parsing. BinaryCIF (which gemmi 0.7.5 cannot read) is decoded column by column with
Biopython's BinaryCIF decoder and handed to gemmi as an mmCIF block, so every format continues down
the same path. ``read_structure(path)`` reads a file; ``_parse_structure(data, name)`` is the pure
core that tests feed bytes.
"""

from __future__ import annotations

import gzip
import logging
import math
import re
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING

import gemmi
import numpy as np

from featurecache.const import ATOM_NAME_CHARS, RES_NAME_CHARS
from featurecache.errors import EmptyStructureError, InputError, ParseError, UnsupportedFormatError
from featurecache.parse.a3m import UTF8_BOM
from featurecache.parse.atom_site import (
    check_atom_site_values,
    cut_short,
    mark_stated_zero_charges_mmcif,
    mark_stated_zero_charges_pdb,
    mmcif_not_finite,
    pdb_atom_lines,
    pdb_not_finite,
    repair_not_finite,
)
from featurecache.parse.cif_loops import loop_error_hint
from featurecache.parse.elements import resolve_unknown_elements
from featurecache.text import first_named

if TYPE_CHECKING:
    from featurecache.tokenize.af3 import ComponentAtoms

log = logging.getLogger(__name__)

STRUCTURE_SUFFIXES = (".cif", ".mmcif", ".pdb", ".ent", ".bcif")


@dataclass(frozen=True)
class RawStructure:
    """A parsed file: the gemmi structure plus what gemmi does not keep."""

    structure: gemmi.Structure
    fmt: str  # "mmcif" | "pdb" | "bcif"
    release_date: str  # ISO date or ""
    resolution: float = math.nan  # Å; NaN when the file states none (NMR, predictions)
    warnings: tuple[str, ...] = ()  # problems worth recording that did not stop parsing


def structure_format(name: str) -> str | None:
    """Format implied by a file name (``.gz`` ignored); None when not a structure file."""
    base = name[:-3] if name.endswith(".gz") else name
    suffix = Path(base).suffix.lower()
    return {".cif": "mmcif", ".mmcif": "mmcif", ".pdb": "pdb", ".ent": "pdb", ".bcif": "bcif"}.get(suffix)


def entry_stem(name: str) -> str:
    """File name without ``.gz`` and the structure suffix: ``7a4d-assembly1.cif.gz`` → ``7a4d-assembly1``."""
    base = name[:-3] if name.endswith(".gz") else name
    p = Path(base)
    return p.stem if p.suffix.lower() in STRUCTURE_SUFFIXES else p.name


def read_bytes(path: Path) -> bytes:
    """The file's bytes (what the entry key hashes)."""
    return Path(path).read_bytes()


def read_structure(path: Path, *, component_atoms: ComponentAtoms | None = None) -> RawStructure:
    return _parse_structure(read_bytes(path), Path(path).name, component_atoms=component_atoms)


def _decompress(data: bytes) -> bytes:
    if data[:2] == b"\x1f\x8b":
        try:
            return gzip.decompress(data)
        except (OSError, EOFError) as exc:
            raise ParseError(f"corrupt gzip stream: {exc}", stage="read") from exc
    return data


def _parse_structure(
    data: bytes, name: str, *, component_atoms: ComponentAtoms | None = None
) -> RawStructure:
    """Parse structure bytes (possibly gzipped). ``name`` guides format detection and names the file
    in error messages. ``component_atoms`` (the CCD, as the tokenizer reads it) gives the elements
    of atoms the file states none for (:func:`~featurecache.parse.elements.resolve_unknown_elements`);
    standard residues need none."""
    # a UTF-8 byte-order mark (Windows editors write one): gemmi's CIF reader does not skip it
    raw = _decompress(data).removeprefix(UTF8_BOM)
    if not raw.strip():
        raise EmptyStructureError(_empty(data, raw, name), stage="parse")
    fmt = structure_format(name)
    if (refusal := _not_structure(raw, name, fmt)) is not None:
        raise UnsupportedFormatError(refusal, stage="parse")
    if fmt == "bcif":
        structure = _parse_bcif(raw, name)
    elif _is_binary(raw):
        structure = _parse_binary(raw, name, fmt)
    else:
        try:
            if (head := raw[:4096].lstrip()).startswith(b"data_") or (
                fmt == "mmcif" and not _looks_like_pdb(head)
            ):
                structure = _parse_mmcif(raw, name)
            else:
                structure = _parse_pdb(raw, name)
        except InputError as exc:
            if b"\n" not in raw and b"\r" in raw:  # gemmi reads it as one line: "no _atom_site", "no ATOM"
                raise ParseError(
                    f"{name}: its lines end in a carriage return alone (classic Mac OS line endings), so it "
                    "reads as one line; convert them to line feeds (e.g. `tr '\\r' '\\n'`)",
                    stage="parse",
                ) from exc
            raise
    resolved = resolve_unknown_elements(structure.structure, name, component_atoms)
    if resolved:
        return replace(structure, warnings=(*structure.warnings, resolved))
    return structure


def _empty(data: bytes, raw: bytes, name: str) -> str:
    """Why a file with no text (``raw``: its bytes decompressed) is refused, with its size."""
    if not data:
        return f"{name}: empty file (0 bytes)"
    if data[:2] == b"\x1f\x8b":
        holds = f"{len(raw)} bytes of white space" if raw else "nothing"
        return f"{name}: empty file (a gzip stream of {len(data)} bytes that decompresses to {holds})"
    return f"{name}: empty file ({len(data)} bytes of white space, no text)"


#: Text that plainly is no structure: (pattern on its first bytes, stripped and lower-cased; what
#: it is; what that means). A web server's error or sign-in page saved under the structure's name
#: is the common case (a download that did not check its status); gemmi's reason for it ("expected
#: block header (data_)"; under a PDB name "no ATOM/HETATM records") says nothing of that.
_OTHER_CONTENT = (
    (re.compile(rb"(<!--.*?-->\s*)*<(!doctype\s+html|html[\s>]|head[\s>]|body[\s>])", re.S), "an HTML page",
     "a web page saved in place of the file (a download that got an error or sign-in page?)"),
    (re.compile(rb"<\?xml[^>]*>\s*(<!--.*?-->\s*)*<pdbx:datablock", re.S),
     "PDBML (PDBx/mmCIF written as XML)", "the build reads mmCIF, PDB and BinaryCIF: convert it to mmCIF"),
    (re.compile(rb"<\?xml"), "an XML document", ""),
    (re.compile(rb"version https://git-lfs\.github\.com/spec/"), "a Git LFS pointer",
     "the file's content was never fetched (git lfs pull)"),
    (re.compile(rb"[{\[]\s*[\"{\[\]}]"), "JSON text", ""),
)  # fmt: skip
#: Bytes of the head :func:`_not_structure` reads.
_HEAD_BYTES = 4096
_TITLE = re.compile(rb"<title[^>]*>(.*?)</title", re.S | re.I)


def _not_structure(raw: bytes, name: str, fmt: str | None) -> str | None:
    """The refusal of a file that plainly holds no structure (:data:`_OTHER_CONTENT`), naming the
    file, what it holds (an HTML page's title too) and how it starts; None for anything else."""
    head = raw[:_HEAD_BYTES].lstrip()
    if head[:1].lower() not in (b"<", b"{", b"[", b"v"):
        return None  # every pattern starts with one of these; no structure file does
    lower = head.lower()
    found = next((row for row in _OTHER_CONTENT if row[0].match(lower)), None)
    if found is None:
        return None
    _pattern, what, meaning = found
    kind = {"mmcif": "an mmCIF", "pdb": "a PDB", "bcif": "a BinaryCIF"}.get(fmt or "", "a structure")
    first_line = _text(head.split(b"\n", 1)[0]).strip()
    seen = [f"it starts {first_line[:60]!r}"]
    if (title := _TITLE.search(head)) is not None and (words := " ".join(_text(title.group(1)).split())):
        seen.append(f"title {words[:80]!r}")
    return f"{name}: {what}, not {kind} file ({', '.join(seen)})" + (f": {meaning}" if meaning else "")


def _parse_binary(raw: bytes, name: str, fmt: str | None) -> RawStructure:
    """Binary bytes under a text name: BinaryCIF if they decode as such, else a clear refusal."""
    kind = {"pdb": "PDB", "mmcif": "mmCIF"}.get(fmt or "", "structure")
    refusal = (
        f"{name}: binary content (control bytes in the first {min(len(raw), _SNIFF_BYTES)} bytes), "
        f"not a text {kind} file"
    )
    if raw[:1] in _MSGPACK_MAP_MARKERS:
        try:
            return _parse_bcif(raw, name)  # BinaryCIF under a text name
        except ParseError as exc:
            raise ParseError(f"{refusal}, nor valid BinaryCIF", stage="parse") from exc
    raise ParseError(refusal, stage="parse")


#: First bytes of a MessagePack map (fixmap, map16, map32): how a BinaryCIF file starts.
_MSGPACK_MAP_MARKERS = (b"\x80", b"\x81", b"\x82", b"\x83", b"\xde", b"\xdf")
_SNIFF_BYTES = 8192
#: Bytes no PDB/mmCIF text holds: C0 controls other than tab, LF, VT, FF, CR; and DEL.
_CONTROL_BYTES = bytes(b for b in range(32) if b not in (9, 10, 11, 12, 13)) + b"\x7f"


def _is_binary(raw: bytes) -> bool:
    """True for bytes that are not text: a NUL, or over 1% control bytes in the first 8 KiB.

    Latin-1 and UTF-8 text have no control bytes, so the threshold only forgives a stray one.
    """
    sample = raw[:_SNIFF_BYTES]
    if b"\x00" in sample:
        return True
    n_control = len(sample) - len(sample.translate(None, _CONTROL_BYTES))
    return n_control * 100 > len(sample)


#: (x, y, z) as the file wrote an atom's coordinates, or None where that cannot be found
_WrittenCoordinates = Callable[[gemmi.Atom], "tuple[str, str, str] | None"]


def _check_finite(st: gemmi.Structure, name: str, written: _WrittenCoordinates | None = None) -> None:
    """Reject NaN/inf coordinates here, naming the atom, rather than deep in featurization.

    gemmi reads an mmCIF coordinate that is ``?``, ``.`` or not a number as NaN; ``written`` gives
    the fields as the file has them, so that the message says which it was.
    """
    for model in st:
        # One C++ pass: a NaN or inf coordinate anywhere makes the (mass × occupancy)-weighted
        # centre non-finite (0 × inf is NaN too); only then look for the atom in Python.
        centre = model.calculate_center_of_mass()
        if math.isfinite(centre.x) and math.isfinite(centre.y) and math.isfinite(centre.z):
            continue
        for chain in model:
            for res in chain:
                for atom in res:
                    p = atom.pos
                    if not (math.isfinite(p.x) and math.isfinite(p.y) and math.isfinite(p.z)):
                        altloc = f" altloc {atom.altloc}" if atom.altloc != "\0" else ""
                        fields = written(atom) if written is not None else None
                        raise ParseError(
                            f"{name}: {_bad_coordinates(p, fields)} for atom {atom.name}"
                            f"{altloc} of residue {res.name} {res.seqid} in chain {chain.name}"
                            f" (model {model.num})",
                            stage="parse",
                        )


def _bad_coordinates(pos: gemmi.Position, fields: tuple[str, str, str] | None) -> str:
    """What is wrong with a non-finite position: from the fields as written where known (gemmi
    reads an mmCIF ``inf`` or ``1e400`` as NaN: the file's text, not gemmi's value, is what a
    user can find in it)."""
    if fields is not None:
        shown = ", ".join(repr(f) for f in fields)
        if any(f in ("?", ".") for f in fields):
            return f"missing coordinates ({shown}: '?' or '.' in the file)"
        if not all(_is_number(f) for f in fields):
            return f"non-numeric coordinates ({shown} in the file)"
        return f"non-finite coordinates ({shown} in the file)"
    return f"non-finite coordinates ({pos.x}, {pos.y}, {pos.z})"


def _is_number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


def _mmcif_coordinates(block: gemmi.cif.Block) -> _WrittenCoordinates:
    """:data:`_WrittenCoordinates` of an mmCIF block: the ``_atom_site`` row whose ``id`` is the
    atom's serial number (read only when a coordinate is bad)."""

    def written(atom: gemmi.Atom) -> tuple[str, str, str] | None:
        table = block.find("_atom_site.", ["id", "Cartn_x", "Cartn_y", "Cartn_z"])
        serial = str(atom.serial)
        for row in table:
            if row[0] == serial:
                x, y, z = (row[k] if row[k] in ("?", ".") else gemmi.cif.as_string(row[k]) for k in (1, 2, 3))
                return (x, y, z)
        return None

    return written


def _pdb_coordinates(text: str) -> _WrittenCoordinates:
    """:data:`_WrittenCoordinates` of a PDB file: columns 31-54 of the ATOM/HETATM line whose serial
    (columns 7-11) is the atom's (read only when a coordinate is bad)."""

    def written(atom: gemmi.Atom) -> tuple[str, str, str] | None:
        for line in text.splitlines():
            if line.startswith(("ATOM  ", "HETATM")) and line[6:11].strip() == str(atom.serial):
                x, y, z = (line[a:b].strip() for a, b in ((30, 38), (38, 46), (46, 54)))
                return (x, y, z)
        return None

    return written


def _looks_like_pdb(head: bytes) -> bool:
    return bool(re.match(rb"(HEADER|ATOM  |HETATM|REMARK|CRYST1|MODEL |COMPND|TITLE |EXPDTA|SEQRES)", head))


def _text(raw: bytes) -> str:
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        return raw.decode("latin-1")


def _parse_mmcif(raw: bytes, name: str) -> RawStructure:
    text = _text(raw)
    try:
        doc = gemmi.cif.read_string(text)
        block = doc.sole_block() if len(doc) == 1 else doc[0]
    except (RuntimeError, ValueError, IndexError) as exc:
        message = _gemmi_error("mmCIF syntax error", exc, name)
        # gemmi names a loop's header, not the bad row, and says nothing of a non-ASCII character
        hints = [h for h in (loop_error_hint(text, str(exc)), _non_ascii_hint(text)) if h]
        raise ParseError("; ".join([message, *hints]), stage="parse") from exc
    structure = _structure_from_block(block, "mmcif", name, text)
    warnings = [cut_short(text, "mmcif", name, _n_atoms(structure.structure))]
    if len(doc) > 1:
        warnings.append(_other_blocks([doc[k].name for k in range(len(doc))], name))
    return replace(structure, warnings=(*structure.warnings, *(w for w in warnings if w)))


def _n_atoms(st: gemmi.Structure) -> int:
    return sum(model.count_atom_sites() for model in st)


def _non_ascii_hint(text: str) -> str | None:
    """Where the first non-ASCII character of a CIF text that gemmi could not read stands outside a
    quoted value, a text field and a comment: CIF 1.1 is ASCII, gemmi reads UTF-8 only inside
    quotes, and its reason names the loop's header ("Wrong number of values in loop") or says only
    "parse error" (review R15 s40 #3). None when there is none such: a quoted ``'(Müller)'`` reads,
    and naming it sent the reader away from the row that did not (review R19 s41 #4)."""
    if text.isascii():
        return None
    in_field = False
    for lineno, line in enumerate(text.splitlines(keepends=True), start=1):
        if line.startswith(";"):  # a text field opens or closes
            in_field = not in_field
        elif not in_field and not line.isascii():
            for token in _CIF_TOKEN.finditer(line):
                word = token.group()
                if word.startswith("#"):
                    break
                if word[0] in "'\"" or word.isascii():
                    continue
                column = token.start() + next(i for i, c in enumerate(word) if ord(c) > 127)
                char = line[column]
                return (f"the file holds a non-ASCII character at line {lineno}, column {column + 1} ({char!r}, "
                        f"U+{ord(char):04X}): an unquoted mmCIF value must be ASCII (quote the value or replace "
                        "the character)")  # fmt: skip
    return None


#: a CIF token of one line: a quoted value (its quote closes before a blank or the line's end), a
#: comment, or a bare word
_CIF_TOKEN = re.compile(r"""'.*?'(?=\s|$)|".*?"(?=\s|$)|#.*|\S+""")


def _other_blocks(blocks: list[str], name: str) -> str:
    """The warning for a file of several data blocks (their names, ``blocks``; mmCIF or BinaryCIF):
    the first is read, the others not (files concatenated; restraint dictionaries a refinement
    program appended)."""
    others = [f"data_{b}" for b in blocks[1:]]
    return (f"{name}: {len(blocks)} data blocks: read the first, data_{blocks[0]}; {len(others)} other "
            f"block{'s' if len(others) > 1 else ''} ignored ({_named(others, ', ')})")  # fmt: skip


def _gemmi_error(what: str, exc: BaseException, name: str) -> str:
    """``what`` and gemmi's reason, naming the file (gemmi calls in-memory input ``string``)."""
    reason = str(exc)
    if reason.startswith("string:"):  # "string:LINE:COL(OFFSET): reason"
        return f"{what} at {name}:{reason[len('string:') :]}"
    return f"{name}: {what}: {reason}"


def _structure_from_block(
    block: gemmi.cif.Block, fmt: str, name: str, text: str | None = None
) -> RawStructure:
    """The structure of an mmCIF ``block`` (read from ``text``, which only names lines in refusals)."""
    # gemmi raises RuntimeError for malformed tags anywhere it looks (e.g. ``_atom_site_x`` inside
    # the ``_atom_site.`` loop), not only while building the structure.
    try:
        if block.find_mmcif_category("_atom_site.").width() == 0:
            if (
                block.find_mmcif_category("_refln.").width()
                or block.find_mmcif_category("_diffrn_refln.").width()
            ):
                raise UnsupportedFormatError(
                    "structure-factor (reflection) mmCIF: no _atom_site coordinates", stage="parse"
                )
            raise EmptyStructureError("mmCIF has no _atom_site category (no coordinates)", stage="parse")
        _check_atom_site_columns(block, name)
        check_atom_site_values(block, name, text)
        st = gemmi.make_structure_from_block(block)
        mark_stated_zero_charges_mmcif(block, st)  # gemmi reads '?' as 0 too: which zeros are stated
        _check_name_widths(block, st, name)
        # before the coordinates' check: a NaN occupancy makes its weighted centre NaN too
        warnings = repair_not_finite(st, name, mmcif_not_finite(block))
        _check_finite(st, name, _mmcif_coordinates(block))
        _retype_connections(block, st)
        warnings += _add_unlabelled_connections(block, st)
        release_date = _mmcif_release_date(block)
        resolution = _resolution(st)
        if math.isnan(resolution):
            resolution = _mmcif_resolution(block)
    except InputError:
        raise
    except (RuntimeError, ValueError, IndexError) as exc:
        raise ParseError(_gemmi_error(f"cannot read the {fmt} data block", exc, name), stage="parse") from exc
    return RawStructure(st, fmt, release_date, resolution, tuple(warnings))


#: ``_atom_site`` columns without which gemmi 0.7.5 reads no atom at all (an empty structure, which
#: the tokenizer would report as "no models").
_REQUIRED_ATOM_SITE = ("id", "label_asym_id", "Cartn_x", "Cartn_y", "Cartn_z")
#: ... and pairs of which it needs one (it takes the auth_* column where both are there).
_EITHER_ATOM_SITE = (
    ("auth_atom_id", "label_atom_id"),
    ("auth_comp_id", "label_comp_id"),
    ("auth_seq_id", "label_seq_id"),
)
#: Columns gemmi needs too whose absence has one reading, filled in: no alternative locations; no
#: element stated (then :func:`~featurecache.parse.elements.resolve_unknown_elements` decides).
_FILLED_ATOM_SITE = {"label_alt_id": ".", "type_symbol": "?"}


def _check_atom_site_columns(block: gemmi.cif.Block, name: str) -> None:
    """Fill the :data:`_FILLED_ATOM_SITE` columns ``_atom_site`` lacks; refuse it, naming them, when
    it lacks others gemmi needs.

    A file with only auth_* columns (no ``label_asym_id``) is refused rather than read with its
    chains as subchains: the label subchains say which residues are one polymer and which are
    ligands, and entities and tokens follow them.
    """
    table = block.find_mmcif_category("_atom_site.")
    tags = [t.lower() for t in table.tags]
    present = {t.removeprefix("_atom_site.") for t in tags}
    missing = [c for c in _REQUIRED_ATOM_SITE if c.lower() not in present]
    missing += [" or ".join(p) for p in _EITHER_ATOM_SITE if not any(c.lower() in present for c in p)]
    if missing:
        why = (
            "; label_asym_id gives the subchains (which residues are one polymer chain, which are "
            "ligands) that entities and tokens follow, and auth_asym_id does not"
            if "label_asym_id" in missing
            else ""
        )
        raise ParseError(
            f"{name}: _atom_site has no {', '.join(missing)} column: no atom can be read without it{why}",
            stage="parse",
        )
    for column, value in _FILLED_ATOM_SITE.items():
        if column.lower() in present:
            continue
        loop = block.find_loop(table.tags[0]).get_loop()
        if loop is not None:
            loop.add_columns([f"_atom_site.{column}"], value)
        else:  # a one-atom file written as tag-value pairs
            block.set_pair(f"_atom_site.{column}", value)


#: The store's widths (``types.Atom.name``, ``types.Token.res_name``): CCD atom names and codes fit.
#: Names listed in a refusal or a warning; the rest counted.
_MAX_NAMED = 5


def _named(items: list[str], sep: str) -> str:
    """The first :data:`_MAX_NAMED` of ``items`` joined by ``sep``, and how many more there are."""
    return first_named(items, _MAX_NAMED, sep)


def _check_name_widths(block: gemmi.cif.Block, st: gemmi.Structure, name: str) -> None:
    """Refuse residue or atom names longer than the store holds, naming them: cut to fit they would
    be other names (``SULFATE1`` → ``SULFA``), and two atoms of a residue could end with one.

    A PDB file cannot hold such names (fixed columns). An mmCIF's are screened first: the model's
    residue names (gemmi's list) and the distinct values of the atom-name column gemmi reads
    (3 ms for 1ffk's 64,281 atoms); the first model is walked only when one is too long.
    """
    if len(st) == 0:
        return
    tags = {t.lower() for t in block.find_mmcif_category("_atom_site.").tags}
    atom_tag = "_atom_site.auth_atom_id" if "_atom_site.auth_atom_id" in tags else "_atom_site.label_atom_id"
    if all(len(n) <= RES_NAME_CHARS for n in st[0].get_all_residue_names()) and all(
        len(gemmi.cif.as_string(v)) <= ATOM_NAME_CHARS for v in set(block.find_values(atom_tag))
    ):
        return
    problems: list[str] = []
    for chain in st[0]:
        for res in chain:
            where = f"residue {res.name} {res.seqid} in chain {chain.name}"
            if len(res.name) > RES_NAME_CHARS:
                problems.append(where)
            if long_atoms := sorted({a.name for a in res if len(a.name) > ATOM_NAME_CHARS}):
                problems.append(
                    f"atom{'s' if len(long_atoms) > 1 else ''} {', '.join(long_atoms)} of {where}"
                )
    if not problems:
        return
    raise ParseError(
        f"{name}: names longer than the store holds (residue names {RES_NAME_CHARS} characters, atom "
        f"names {ATOM_NAME_CHARS}, as CCD codes and atom names are): {_named(problems, '; ')}."
        " Cut to fit they would be other names, and atoms of one residue could share one: rename them",
        stage="parse",
    )


# ------------------------------------------------------------------------------------- struct_conn
#: ``_struct_conn.conn_type_id`` (lower-cased) → the gemmi type we give the connection; anything else
#: is ``Unknown``. The PDBx dictionary (``_struct_conn_type.id``) has three covalent subtypes that
#: gemmi 0.7.5 reads as ``Unknown``: ``covale_base``, ``covale_phosphate`` and ``covale_sugar``
#: (a covalent modification of a nucleotide's base, phosphate or sugar). They are covalent bonds
#: and are read as ``Covale``, so token bonds treat them exactly as ``covale`` rows.
_CONN_TYPES = {
    "covale": gemmi.ConnectionType.Covale,
    "covale_base": gemmi.ConnectionType.Covale,
    "covale_phosphate": gemmi.ConnectionType.Covale,
    "covale_sugar": gemmi.ConnectionType.Covale,
    "disulf": gemmi.ConnectionType.Disulf,
    "hydrog": gemmi.ConnectionType.Hydrog,
    "metalc": gemmi.ConnectionType.MetalC,
}
#: Unresolvable ``_struct_conn`` rows named one warning each, up to this many; the rest counted.
MAX_CONN_WARNINGS = 10

_ConnKey = tuple[str, int | None, str, str, str]  # chain, seq num, icode, residue, atom


def _retype_connections(block: gemmi.cif.Block, st: gemmi.Structure) -> None:
    """Give the connections gemmi read as ``Unknown`` their type from :data:`_CONN_TYPES`.

    gemmi reads every ``_struct_conn`` row or none, in row order, naming each connection by the
    row's ``id``; a connection is re-typed only when its name is the ``id`` of the row at its position.
    """
    if not any(c.type == gemmi.ConnectionType.Unknown for c in st.connections):
        return
    ids = block.find_values("_struct_conn.id")
    types = block.find_values("_struct_conn.conn_type_id")
    if len(types) != len(ids):
        return
    for row, conn in enumerate(st.connections):
        if row >= len(ids) or conn.type != gemmi.ConnectionType.Unknown:
            continue
        if conn.name != gemmi.cif.as_string(ids[row]):
            continue
        conn.type = _CONN_TYPES.get(gemmi.cif.as_string(types[row]).lower(), gemmi.ConnectionType.Unknown)


def _add_unlabelled_connections(block: gemmi.cif.Block, st: gemmi.Structure) -> list[str]:
    """Add the ``_struct_conn`` rows gemmi skipped to ``st.connections``; warnings for the rest.

    gemmi reads ``_struct_conn`` only when the loop has ``id``, ``ptnrN_label_comp_id``,
    ``ptnrN_label_atom_id``, ``ptnrN_auth_asym_id`` and ``ptnrN_auth_seq_id``; rewritten files
    (e.g. assembly files) that carry only auth columns lose every bond silently. When the block
    has more rows than gemmi read, every row is read here (:func:`_conn_partner` says how a partner
    is found); type, symmetry and distance as gemmi reads them. Rows gemmi already has are not
    added twice. A row whose partner is not an atom of the first model is left out with a warning.
    """
    n_rows = len(block.find_mmcif_category("_struct_conn."))
    if n_rows == 0 or len(st.connections) >= n_rows or len(st) == 0:
        return []  # the usual case: gemmi read every row (or there are none)
    try:
        table = block.get_mmcif_category("_struct_conn.")
    except (RuntimeError, ValueError) as exc:
        return [f"_struct_conn: {n_rows - len(st.connections)} rows not read ({exc})"]
    known = {_conn_key(c) for c in st.connections}
    residues = _ResidueIndex(st[0])
    added = 0
    problems: list[str] = []
    for row in range(n_rows):
        p1, p2 = (_conn_partner(table, row, k, residues) for k in (1, 2))
        if isinstance(p1, str) or isinstance(p2, str):
            problems.append(f"_struct_conn row {row + 1}: {p1 if isinstance(p1, str) else p2}")
            continue
        conn = gemmi.Connection()
        conn.name = _cell(table, "id", row) or f"struct_conn{row + 1}"
        conn_type = (_cell(table, "conn_type_id", row) or "").lower()
        conn.type = _CONN_TYPES.get(conn_type, gemmi.ConnectionType.Unknown)
        conn.partner1, conn.partner2 = p1, p2
        sym1, sym2 = _cell(table, "ptnr1_symmetry", row), _cell(table, "ptnr2_symmetry", row)
        if sym1 is not None and sym2 is not None:
            conn.asu = gemmi.Asu.Same if sym1 == sym2 else gemmi.Asu.Different
        distance = _positive_float(_cell(table, "pdbx_dist_value", row) or "")
        if not math.isnan(distance):
            conn.reported_distance = distance
        key = _conn_key(conn)
        if key not in known:
            known.add(key)
            st.connections.append(conn)
            added += 1
    if added:
        log.debug("%s: read %d _struct_conn rows gemmi skipped", st.name, added)
    warnings = problems[:MAX_CONN_WARNINGS]
    if len(problems) > MAX_CONN_WARNINGS:
        warnings.append(f"_struct_conn: {len(problems) - MAX_CONN_WARNINGS} more rows not resolved to atoms")
    return warnings


def _cell(table: dict[str, list[object]], tag: str, row: int) -> str | None:
    """One value of a category read by ``get_mmcif_category``; None for ``?``, ``.`` or no column."""
    values = table.get(tag)
    value = values[row] if values is not None and row < len(values) else None
    return value if isinstance(value, str) and value else None


class _ResidueIndex:
    """(subchain, label_seq) → (chain name, auth SeqId) of a model, built on first use."""

    def __init__(self, model: gemmi.Model) -> None:
        self.model = model
        self._by_label: dict[tuple[str, int], tuple[str, gemmi.SeqId]] | None = None

    def by_label(self, subchain: str, label_seq: int) -> tuple[str, gemmi.SeqId] | None:
        if self._by_label is None:
            self._by_label = {
                (res.subchain, res.label_seq): (ch.name, res.seqid)
                for ch in self.model
                for res in ch
                if res.label_seq is not None
            }
        return self._by_label.get((subchain, label_seq))


def _conn_partner(
    table: dict[str, list[object]], row: int, k: int, residues: _ResidueIndex
) -> gemmi.AtomAddress | str:
    """Partner ``k`` (1 or 2) of one ``_struct_conn`` row as gemmi addresses it, or why not.

    Chain ``ptnrK_auth_asym_id`` and residue number ``ptnrK_auth_seq_id`` (+ insertion code
    ``pdbx_ptnrK_PDB_ins_code``) — else the residue at ``ptnrK_label_asym_id`` /
    ``ptnrK_label_seq_id``; residue ``ptnrK_auth_comp_id`` else ``ptnrK_label_comp_id``; atom
    ``ptnrK_auth_atom_id`` else ``ptnrK_label_atom_id``; altloc ``pdbx_ptnrK_label_alt_id``.
    """

    def cell(tag: str) -> str | None:
        return _cell(table, tag.format(k=k), row)

    chain_name = cell("ptnr{k}_auth_asym_id")
    seqid = _seqid(cell("ptnr{k}_auth_seq_id"), cell("pdbx_ptnr{k}_PDB_ins_code") or " ")
    label_asym, label_seq = cell("ptnr{k}_label_asym_id"), cell("ptnr{k}_label_seq_id")
    if (chain_name is None or seqid is None) and label_asym and label_seq and label_seq.isdigit():
        found = residues.by_label(label_asym, int(label_seq))
        if found is not None:
            chain_name = chain_name or found[0]
            seqid = seqid or found[1]
    res_name = cell("ptnr{k}_auth_comp_id") or cell("ptnr{k}_label_comp_id")
    atom_name = cell("ptnr{k}_auth_atom_id") or cell("ptnr{k}_label_atom_id")
    if chain_name is None or seqid is None or res_name is None or atom_name is None:
        return f"partner {k} has no chain, residue number, residue name or atom name"
    altloc = (cell("pdbx_ptnr{k}_label_alt_id") or "\0")[:1]
    address = gemmi.AtomAddress(chain_name, seqid, res_name, atom_name, altloc)
    # an unstated altloc matches an atom of any conformer (gemmi's '*')
    lookup = gemmi.AtomAddress(chain_name, seqid, res_name, atom_name, "*" if altloc == "\0" else altloc)
    if residues.model.find_cra(lookup).atom is None:
        return f"partner {k} {address} is not an atom of the structure"
    return address


def _seqid(text: str | None, icode: str) -> gemmi.SeqId | None:
    """Residue number (``"15"``, or old-style ``"15A"`` with the insertion code) or None."""
    if text is None:
        return None
    m = re.fullmatch(r"(-?\d+)([A-Za-z]?)", text.strip())
    if m is None:
        return None
    return gemmi.SeqId(int(m.group(1)), (m.group(2) or icode)[:1])


def _conn_key(conn: gemmi.Connection) -> frozenset[_ConnKey]:
    return frozenset(
        (
            str(p.chain_name),
            p.res_id.seqid.num,
            p.res_id.seqid.icode.strip(),
            str(p.res_id.name),
            str(p.atom_name),
        )
        for p in (conn.partner1, conn.partner2)
    )


def _resolution(st: gemmi.Structure) -> float:
    """gemmi's resolution; NaN where it has none."""
    return float(st.resolution) if st.resolution and st.resolution > 0 else math.nan


#: Where an mmCIF states the resolution, in the order AlphaFold's and gemmi's readers use:
#: refinement high limit (X-ray, neutron, EM deposited as _refine), EM reconstruction, data.
MMCIF_RESOLUTION_TAGS = (
    "_refine.ls_d_res_high",
    "_em_3d_reconstruction.resolution",
    "_reflns.d_resolution_high",
)


def _mmcif_resolution(block: gemmi.cif.Block) -> float:
    """First positive value of :data:`MMCIF_RESOLUTION_TAGS` (gemmi reads ``_refine`` only when
    it also has ``pdbx_refine_id``); NaN when none is stated."""
    for tag in MMCIF_RESOLUTION_TAGS:
        for value in block.find_values(tag):
            res = _positive_float(gemmi.cif.as_string(value))
            if not math.isnan(res):
                return res
    return math.nan


def _positive_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        return math.nan
    return value if math.isfinite(value) and value > 0 else math.nan


_PDB_RESOLUTION = (
    re.compile(r"^REMARK   2 RESOLUTION\.\s+([0-9.]+)\s+ANGSTROM", re.M),
    re.compile(r"^REMARK   3   RESOLUTION RANGE HIGH \(ANGSTROMS\)\s*:\s*([0-9.]+)", re.M),
)


def _pdb_resolution(text: str) -> float:
    """REMARK 2 RESOLUTION, else REMARK 3's refinement high limit; NaN when neither is a number."""
    for pattern in _PDB_RESOLUTION:
        m = pattern.search(text)
        if m and not math.isnan(res := _positive_float(m.group(1))):
            return res
    return math.nan


def _mmcif_release_date(block: gemmi.cif.Block) -> str:
    dates = [d for d in block.find_values("_pdbx_audit_revision_history.revision_date") if _is_date(d)]
    if dates:
        return min(dates)
    for tag in ("_pdbx_database_status.recvd_initial_deposition_date", "_database_PDB_rev.date_original"):
        value = block.find_value(tag)
        if value and _is_date(value):
            return value
    return ""


def _is_date(s: str) -> bool:
    return bool(re.fullmatch(r"\d{4}-\d{2}-\d{2}", s or ""))


_MONTHS = {
    m: i
    for i, m in enumerate(
        ("JAN", "FEB", "MAR", "APR", "MAY", "JUN", "JUL", "AUG", "SEP", "OCT", "NOV", "DEC"), 1
    )
}


def _pdb_release_date(text: str) -> str:
    """First release date from REVDAT records (``REVDAT   1   15-JUL-98 ...``)."""
    best = ""
    for m in re.finditer(r"^REVDAT\s+\d+\s+(\d{2})-([A-Z]{3})-(\d{2})", text, flags=re.M):
        day, mon, yy = m.groups()
        if mon not in _MONTHS:
            continue
        year = int(yy) + (1900 if int(yy) >= 60 else 2000)
        iso = f"{year:04d}-{_MONTHS[mon]:02d}-{int(day):02d}"
        best = iso if not best or iso < best else best
    return best


def _parse_pdb(raw: bytes, name: str) -> RawStructure:
    text = _text(raw)
    if not re.search(r"^(ATOM  |HETATM)", text, flags=re.M):
        # what the file holds instead: a header cut short, or no PDB file at all (an a3m named .pdb)
        lines = text.splitlines()
        first = next((line.strip() for line in lines if line.strip()), "")
        raise EmptyStructureError(
            f"{name}: no ATOM/HETATM records ({len(lines)} lines; first line: {first[:60]!r})", stage="parse"
        )
    atom_lines = pdb_atom_lines(raw)
    try:
        st = gemmi.read_pdb_string(text)
    except (RuntimeError, ValueError) as exc:
        if "charge" not in str(exc):
            raise ParseError(_gemmi_error("PDB parse error", exc, name), stage="parse") from exc
        # Old-style files put other data in columns 79-80; the charge is then unknown, not fatal.
        try:
            st = gemmi.read_pdb_string(_blank_charge_columns(text))
        except (RuntimeError, ValueError) as exc2:
            raise ParseError(_gemmi_error("PDB parse error", exc2, name), stage="parse") from exc2
        st.info["_featurecache.warning"] = f"ignored malformed charge columns 79-80 ({exc})"
    else:  # (read blank, the columns state no charge)
        mark_stated_zero_charges_pdb(raw, atom_lines, st)  # gemmi reads blank columns as 0 too
    # gemmi names a structure read from a string "string"; the id a PDB file states is HEADER's
    # id code (in _entry.id when present), and a file without one states none.
    st.name = st.info["_entry.id"] if "_entry.id" in st.info else ""  # noqa: SIM401 - InfoMap has no .get
    _check_pdb_coordinates(raw, name, atom_lines[0])
    warnings = repair_not_finite(st, name, pdb_not_finite(raw, atom_lines))
    _check_finite(st, name, _pdb_coordinates(text))
    if cut := cut_short(text, "pdb", name, _n_atoms(st)):
        warnings.append(cut)
    resolution = _resolution(st)
    if math.isnan(resolution):
        resolution = _pdb_resolution(text)
    return RawStructure(st, "pdb", _pdb_release_date(text), resolution, tuple(warnings))


#: Last column (0-based) of each coordinate field of an ATOM/HETATM line: x 31-38, y 39-46, z 47-54.
_PDB_FIELD_ENDS = (37, 45, 53)
_DIGITS = frozenset(b"0123456789")


def _check_pdb_coordinates(raw: bytes, name: str, atom_starts: np.ndarray) -> None:
    """Refuse a PDB file with an ATOM/HETATM coordinate field that holds no digit, naming the line:
    gemmi reads ``********`` (a writer's overflow), blanks or ``?`` as 0.0, a wrong position marked
    present. ``nan`` / ``inf`` read as numbers and are left to :func:`_check_finite`.

    A right-aligned number ends in a digit: numpy looks at the last byte of each field of every
    atom line (1.8 ms for 1ffk's 64,281 atoms, where gemmi takes 14 ms), and only the lines it flags
    are looked at in Python.
    """
    buf = np.frombuffer(raw, np.uint8)
    # the atom lines (``atom_starts``: atom_site.pdb_atom_lines) with a whole coordinate section
    # after their start (gemmi refuses shorter atom lines)
    atoms = atom_starts[atom_starts + _PDB_FIELD_ENDS[-1] < buf.size]
    flagged = np.zeros(atoms.size, np.bool_)
    for end in _PDB_FIELD_ENDS:
        c = buf[atoms + end]
        flagged |= (c < ord("0")) | (c > ord("9"))
    for start in atoms[flagged].tolist():
        end = raw.find(b"\n", start)
        line = raw[start : end if end >= 0 else None].rstrip(b"\r")
        fields = [line[k - 7 : k + 1] for k in _PDB_FIELD_ENDS]
        if all(_DIGITS.intersection(f) or _is_number(f.decode("latin-1")) for f in fields):
            continue  # a number gemmi reads (left-aligned), or nan / inf
        if any(f.strip() and not f.strip().strip(b"*") for f in fields):
            why = (
                "a number too wide for its 8 columns, which the writer printed as '********'; "
                "write the structure as mmCIF, which has no column limits"
            )
        else:
            why = "not a number (gemmi would read it as 0.0)"
        text = line.decode("latin-1")
        line_no = raw.count(b"\n", 0, start) + 1
        shown = ", ".join(repr(f.decode("latin-1")) for f in fields)
        raise ParseError(
            f"{name} line {line_no}: coordinates ({shown}; columns 31-54) of atom "
            f"{text[12:16].strip()} of residue {text[17:20].strip()} {text[22:27].strip()} in chain "
            f"{text[21:22]}: {why}",
            stage="parse",
        )


def _blank_charge_columns(text: str) -> str:
    out = []
    for line in text.splitlines():
        if line.startswith(("ATOM  ", "HETATM")) and len(line) > 78:
            line = line[:78] + "  " + line[80:]
        out.append(line)
    return "\n".join(out) + "\n"


def _parse_bcif(raw: bytes, name: str) -> RawStructure:
    """Decode BinaryCIF with Biopython's column decoders into an mmCIF block for gemmi."""
    try:
        import msgpack
        from Bio.PDB.binary_cif import _decode
    except ImportError as exc:  # pragma: no cover - biopython is a [build] dependency
        raise UnsupportedFormatError(
            "BinaryCIF needs biopython and msgpack installed", stage="parse"
        ) from exc
    try:
        doc = msgpack.unpackb(raw, use_list=True, raw=False, strict_map_key=False)
    except (ValueError, TypeError, msgpack.UnpackException) as exc:
        raise ParseError(
            f"{name}: not a valid BinaryCIF file (MessagePack does not decode: {exc})", stage="parse"
        ) from exc
    blocks = doc.get("dataBlocks") if isinstance(doc, dict) else None
    if not (isinstance(blocks, list) and blocks and isinstance(blocks[0], dict)):
        raise ParseError(
            f"{name}: not a valid BinaryCIF file (MessagePack without a 'dataBlocks' list of maps)",
            stage="parse",
        )
    data_block = blocks[0]
    header = str(data_block.get("header") or "bcif")
    # bytearray buffers: Biopython's decoders write into the arrays they make from them
    _writable_buffers(data_block)
    cif_doc = gemmi.cif.Document()
    block = cif_doc.add_new_block(header)
    try:
        for category in data_block["categories"]:
            cat_name = category["name"]
            values: dict[str, list[object]] = {}
            for column in category["columns"]:
                decoded = list(_decode(column))
                mask = _decode({"data": column["mask"]}) if column.get("mask") else None
                if mask is not None:
                    # BinaryCIF masks: 0 = value present, 1 = '.', 2 = '?'
                    decoded = [
                        v if m == 0 else (False if m == 1 else None)
                        for v, m in zip(decoded, mask, strict=True)
                    ]
                values[column["name"]] = [_bcif_value(v) for v in decoded]
            block.set_mmcif_category(cat_name, values, raw=True)
    except (KeyError, ValueError, TypeError, AttributeError, IndexError, AssertionError, RuntimeError) as exc:
        raise ParseError(
            f"{name}: not a valid BinaryCIF file (cannot decode a column: {type(exc).__name__}: {exc})",
            stage="parse",
        ) from exc
    structure = _structure_from_block(block, "bcif", name)
    if len(blocks) > 1:
        names = [header, *(str(b.get("header") or "?") if isinstance(b, dict) else "?" for b in blocks[1:])]
        return replace(structure, warnings=(*structure.warnings, _other_blocks(names, name)))
    return structure


def _writable_buffers(node: object) -> None:
    if isinstance(node, dict):
        for k, v in node.items():
            if isinstance(v, bytes):
                node[k] = bytearray(v)
            else:
                _writable_buffers(v)
    elif isinstance(node, list):
        for item in node:
            _writable_buffers(item)


def _bcif_value(v: object) -> str:
    """One decoded value as raw CIF text ('?' unknown, '.' inapplicable, strings quoted if needed)."""
    if v is None:
        return "?"
    if v is False:
        return "."
    if hasattr(v, "item"):
        v = v.item()
    if isinstance(v, float):
        return repr(round(v, 6)) if v == v else "?"
    if isinstance(v, int):
        return str(v)
    return gemmi.cif.quote(str(v))
