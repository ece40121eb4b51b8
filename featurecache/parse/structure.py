"""Read structure files into a ``gemmi.Structure`` — mmCIF, PDB, their ``.gz``, and BinaryCIF.

gemmi does the parsing. BinaryCIF (which gemmi 0.7.5 cannot read) is decoded column by column with
Biopython's BinaryCIF decoder and handed to gemmi as an mmCIF block, so every format continues down
the same path. ``read_structure(path)`` reads a file; ``_parse_structure(data, name)`` is the pure
core that tests feed bytes.
"""

from __future__ import annotations

import gzip
import re
from dataclasses import dataclass
from pathlib import Path

import gemmi

from featurecache.errors import EmptyStructureError, ParseError, UnsupportedFormatError

STRUCTURE_SUFFIXES = (".cif", ".mmcif", ".pdb", ".ent", ".bcif")


@dataclass(frozen=True)
class RawStructure:
    """A parsed file: the gemmi structure plus what gemmi does not keep."""

    structure: gemmi.Structure
    fmt: str  # "mmcif" | "pdb" | "bcif"
    release_date: str  # ISO date or ""


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


def read_structure(path: Path) -> RawStructure:
    return _parse_structure(read_bytes(path), Path(path).name)


def _decompress(data: bytes, name: str) -> bytes:
    if data[:2] == b"\x1f\x8b":
        try:
            return gzip.decompress(data)
        except (OSError, EOFError) as exc:
            raise ParseError(f"corrupt gzip stream: {exc}", stage="read") from exc
    return data


def _parse_structure(data: bytes, name: str) -> RawStructure:
    """Parse structure bytes (possibly gzipped). ``name`` only guides format detection."""
    raw = _decompress(data, name)
    if not raw.strip():
        raise EmptyStructureError("empty file", stage="parse")
    fmt = structure_format(name)
    head = raw[:4096].lstrip()
    if fmt == "bcif" or (head[:1] in (b"\x80", b"\x81", b"\x82", b"\x83", b"\xde", b"\xdf")):
        return _parse_bcif(raw)
    if head.startswith(b"data_") or (fmt == "mmcif" and not _looks_like_pdb(head)):
        return _parse_mmcif(raw)
    return _parse_pdb(raw)


def _looks_like_pdb(head: bytes) -> bool:
    return bool(re.match(rb"(HEADER|ATOM  |HETATM|REMARK|CRYST1|MODEL |COMPND|TITLE |EXPDTA|SEQRES)", head))


def _text(raw: bytes) -> str:
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        return raw.decode("latin-1")


def _parse_mmcif(raw: bytes) -> RawStructure:
    try:
        doc = gemmi.cif.read_string(_text(raw))
        block = doc.sole_block() if len(doc) == 1 else doc[0]
    except (RuntimeError, ValueError, IndexError) as exc:
        raise ParseError(f"mmCIF syntax error: {exc}", stage="parse") from exc
    return _structure_from_block(block, "mmcif")


def _structure_from_block(block: gemmi.cif.Block, fmt: str) -> RawStructure:
    if block.find_mmcif_category("_atom_site.").width() == 0:
        if (
            block.find_mmcif_category("_refln.").width()
            or block.find_mmcif_category("_diffrn_refln.").width()
        ):
            raise UnsupportedFormatError(
                "structure-factor (reflection) mmCIF: no _atom_site coordinates", stage="parse"
            )
        raise EmptyStructureError("mmCIF has no _atom_site category (no coordinates)", stage="parse")
    try:
        st = gemmi.make_structure_from_block(block)
    except (RuntimeError, ValueError, IndexError) as exc:
        raise ParseError(f"cannot build structure from mmCIF: {exc}", stage="parse") from exc
    return RawStructure(st, fmt, _mmcif_release_date(block))


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


def _parse_pdb(raw: bytes) -> RawStructure:
    text = _text(raw)
    if not re.search(r"^(ATOM  |HETATM)", text, flags=re.M):
        raise EmptyStructureError("PDB file has no ATOM/HETATM records (header only)", stage="parse")
    try:
        st = gemmi.read_pdb_string(text)
    except (RuntimeError, ValueError) as exc:
        if "charge" not in str(exc):
            raise ParseError(f"PDB parse error: {exc}", stage="parse") from exc
        # Old-style files put other data in columns 79-80; the charge is then unknown, not fatal.
        try:
            st = gemmi.read_pdb_string(_blank_charge_columns(text))
        except (RuntimeError, ValueError) as exc2:
            raise ParseError(f"PDB parse error: {exc2}", stage="parse") from exc2
        st.info["_featurecache.warning"] = f"ignored malformed charge columns 79-80 ({exc})"
    return RawStructure(st, "pdb", _pdb_release_date(text))


def _blank_charge_columns(text: str) -> str:
    out = []
    for line in text.splitlines():
        if line.startswith(("ATOM  ", "HETATM")) and len(line) > 78:
            line = line[:78] + "  " + line[80:]
        out.append(line)
    return "\n".join(out) + "\n"


def _parse_bcif(raw: bytes) -> RawStructure:
    """Decode BinaryCIF with Biopython's column decoders into an mmCIF block for gemmi."""
    try:
        import msgpack
        from Bio.PDB.binary_cif import _decode
    except ImportError as exc:  # pragma: no cover - biopython is a [build] dependency
        raise UnsupportedFormatError(
            "BinaryCIF needs biopython and msgpack installed", stage="parse"
        ) from exc
    try:
        # bytearray buffers: Biopython's decoders write into the arrays they make from them
        doc = msgpack.unpackb(raw, use_list=True, ext_hook=None, raw=False, strict_map_key=False)
        _writable_buffers(doc)
        data_block = doc["dataBlocks"][0]
    except (ValueError, KeyError, IndexError, TypeError, msgpack.exceptions.ExtraData) as exc:
        raise ParseError(f"not a BinaryCIF (msgpack) document: {exc}", stage="parse") from exc
    cif_doc = gemmi.cif.Document()
    block = cif_doc.add_new_block(str(data_block.get("header") or "bcif"))
    try:
        for category in data_block["categories"]:
            name = category["name"]
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
            block.set_mmcif_category(name, values, raw=True)
    except (KeyError, ValueError, TypeError, AssertionError) as exc:
        raise ParseError(f"cannot decode BinaryCIF column: {exc}", stage="parse") from exc
    return _structure_from_block(block, "bcif")


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
