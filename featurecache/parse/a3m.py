"""a3m alignments (HHblits, MMseqs2/ColabFold, jackhmmer converted, Protenix, alphafold3-pytorch).

``parse_a3m(path)`` reads a file (gzip detected by its magic bytes, not its name) and returns one
:class:`~featurecache.types.ParsedMSA` per query block; ``_parse_a3m(text)`` is the pure core.
``scan_a3m(data, path)`` gives only each block's query — what ``parse_a3m`` would give, errors
included — without building the rows (the build's MSA scan).

What the format allows and what we do with it:

* ``>header`` lines start a row; sequence lines may wrap over several lines.
* Upper case letters and ``-`` are match columns (one per query residue), lower case letters are
  insertions relative to the query, ``.`` is an insert-state gap (a2m style; carries nothing).
* HH-suite pseudo rows (``ss_dssp``, ``ss_pred``, ``ss_conf``, ``sa_dssp``, ``Consensus``) are
  dropped; lines starting with ``#`` or ``;`` are comments (HH-suite ``#A3M#``, ColabFold's
  ``#len\tcard`` pairing line).
* Raw ColabFold-server output holds several queries separated by NUL bytes: each block is its own
  MSA (``block`` 0, 1, …); they are never merged. Headers there are tab-separated fields.
* A query with gaps in match columns, or with lower case letters, is re-rooted (:func:`reroot`) so
  that the columns are exactly the query's residues.
* An empty file (or one with only comments) yields no MSA.
"""

from __future__ import annotations

import gzip
import logging
import os
import string
import zlib
from pathlib import Path

import numpy as np

from featurecache.errors import MSAError
from featurecache.types import ParsedMSA

log = logging.getLogger(__name__)

#: HH-suite pseudo sequences that carry annotations, not residues.
PSEUDO_ROW_NAMES: frozenset[str] = frozenset(("ss_dssp", "ss_pred", "ss_conf", "sa_dssp", "Consensus"))
COMMENT_PREFIXES = ("#", ";")
GZIP_MAGIC = b"\x1f\x8b"
UTF8_BOM = b"\xef\xbb\xbf"

#: Deletes everything that is not a match column (insertions and insert gaps).
_MATCH_ONLY = str.maketrans("", "", string.ascii_lowercase + ".")
_DASH = ord("-")
_DOT = ord(".")


def read_msa_text(path: str | os.PathLike[str]) -> str:
    """The text of an MSA file, gunzipped when it starts with the gzip magic bytes.

    Bytes that are not UTF-8 are replaced (headers sometimes carry Latin-1 organism names); the
    residue alphabet is ASCII, so that never changes an alignment.
    """
    p = Path(path)
    try:
        data = p.read_bytes()
    except OSError as exc:
        raise MSAError(f"cannot read {p}: {exc}", path=str(p), stage="msa") from exc
    return decompress_msa(data, p).decode("utf-8", errors="replace")


def decompress_msa(data: bytes, path: str | os.PathLike[str]) -> bytes:
    """An MSA file's bytes, gunzipped when they start with the gzip magic bytes, without a leading
    UTF-8 byte-order mark (editors on Windows write one; structure files are read past it too).

    Raises :class:`MSAError` ``cannot read PATH: reason`` for a damaged gzip stream.
    """
    if data[:2] == GZIP_MAGIC:
        try:
            data = gzip.decompress(data)
        except (OSError, EOFError, zlib.error) as exc:
            p = Path(path)
            raise MSAError(f"cannot read {p}: {exc}", path=str(p), stage="msa") from exc
    return data.removeprefix(UTF8_BOM)


def parse_a3m(path: str | os.PathLike[str]) -> list[ParsedMSA]:
    """Parse an a3m file (``.gz`` ok). One :class:`ParsedMSA` per query block; ``[]`` if empty."""
    text = read_msa_text(path)
    try:
        msas = _parse_a3m(text)
    except MSAError as exc:
        raise MSAError(str(exc), path=str(path), stage="msa") from exc
    return [ParsedMSA(m.headers, m.rows, m.fmt, path=str(path), block=m.block) for m in msas]


def scan_a3m(data: bytes, path: str | os.PathLike[str]) -> list[tuple[int, str]]:
    """``(block, query sequence)`` of each alignment of the a3m file ``path`` whose bytes are ``data``.

    The same as ``[(m.block, m.query_sequence) for m in parse_a3m(path)]``, the same
    :class:`MSAError` included, but the rows are only counted, never built (:func:`_a3m_queries`).
    """
    raw = decompress_msa(data, path)
    try:
        return _a3m_queries(raw)
    except MSAError as exc:
        raise MSAError(str(exc), path=str(path), stage="msa") from exc


def _parse_a3m(text: str) -> list[ParsedMSA]:
    """Parse a3m text into one :class:`ParsedMSA` per NUL-separated query block."""
    out: list[ParsedMSA] = []
    for block_text in text.split("\x00"):
        msa = _parse_a3m_block(block_text, len(out))
        if msa is not None:
            out.append(msa)
    return out


def _parse_a3m_block(text: str, block: int) -> ParsedMSA | None:
    headers: list[str] = []
    chunks: list[list[str]] = []
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line.startswith(COMMENT_PREFIXES):
            continue
        if line.startswith(">"):
            headers.append(line[1:].strip())
            chunks.append([])
        elif not headers:
            raise MSAError(f"sequence data before the first '>' header: {line[:40]!r}")
        else:
            chunks[-1].append(line)
    rows: list[str] = []
    kept: list[str] = []
    for header, parts in zip(headers, chunks, strict=True):
        name = header.split(maxsplit=1)[0] if header else ""
        if name in PSEUDO_ROW_NAMES:
            continue
        kept.append(header)
        rows.append("".join(parts).replace(" ", "").rstrip("*"))
    if not rows:
        return None
    _check_rows(rows)
    msa = ParsedMSA(tuple(kept), tuple(rows), "a3m", block=block)
    if not _query_is_clean(rows[0]):
        msa = reroot(msa, 0)
    return msa


# --- queries without rows (the build's scan) ----------------------------------------------------

#: Deleted before counting match columns: insertions, insert gaps, blanks (line breaks are counted
#: apart, header lines are never counted).
_NOT_MATCH = string.ascii_lowercase.encode() + b". "
#: Deleted to read the query's residues from its record.
_NOT_RESIDUE = b"-. \n"
#: With any of these bytes a block may not be what a split at ``\n>`` says (other line breaks,
#: other whitespace ``str.strip`` removes, a ``*`` terminator): the parser reads it.
_ODD_BYTES = (b"\r", b"\x0b", b"\x0c", b"\x1c", b"\x1d", b"\x1e", b"\x1f", b"*")
#: First bytes of a line that may be a comment line or an indented header.
_COMMENT_OR_BLANK_BYTES = np.array([ord(c) for c in " \t#;"], dtype=np.uint8)
_PSEUDO_ROW_BYTES = frozenset(n.encode() for n in PSEUDO_ROW_NAMES)
#: First bytes of a pseudo row's header: its name's, or a blank before it.
_PSEUDO_FIRST_BYTES = np.array(
    sorted({n[0] for n in _PSEUDO_ROW_BYTES} | {ord(" "), ord("\t")}), dtype=np.uint8
)
_GT, _LF, _TAB = ord(">"), ord("\n"), ord("\t")


class _Unsure:
    """A block :func:`_block_query` does not answer (unusual layout or a parse error)."""


_UNSURE = _Unsure()


def _a3m_queries(raw: bytes) -> list[tuple[int, str]]:
    """``(block, query)`` as ``[(m.block, m.query_sequence) for m in _parse_a3m(text)]`` of the text of
    ``raw`` (decompressed bytes), with the same :class:`MSAError`.

    Blocks of ASCII bytes go through :func:`_block_query`, which counts every row's match columns
    (so a ragged row is found wherever it is) without building rows; the blocks it does not answer
    and non-ASCII blocks are parsed by :func:`_parse_a3m_block` itself.
    """
    blocks: list[bytes] | list[str]
    blocks = raw.split(b"\x00") if raw.isascii() else raw.decode("utf-8", errors="replace").split("\x00")
    out: list[tuple[int, str]] = []
    for block in blocks:
        if isinstance(block, str) and block.isascii():
            block = block.encode("ascii")
        query = _block_query(block) if isinstance(block, bytes) else _UNSURE
        if isinstance(query, _Unsure):
            text = block.decode("ascii") if isinstance(block, bytes) else block
            msa = _parse_a3m_block(text, len(out))
            query = None if msa is None else msa.query_sequence
        if query is not None:
            out.append((len(out), query))
    return out


def _block_query(block: bytes) -> str | _Unsure | None:
    """The query of one ASCII block as :func:`_parse_a3m_block` reads it, ``None`` when that finds
    no row, or :data:`_UNSURE`.

    The block is cut into records at each ``>`` (header line, then sequence lines). Answered only
    when that is the parser's reading — no byte of :data:`_ODD_BYTES`, no sequence before the first
    header, no comment line, indented header or ``>`` inside a line after it, no tab in a sequence
    line — so that a row is its record's sequence lines joined. A row's match columns are then its
    sequence bytes less insertions, ``.``, blanks and line breaks (what :func:`n_match` counts on
    the joined row), counted for every row at once on the whole block with numpy. A block where a
    row's count differs from the query's is left to the parser (its error names the row).
    """
    if any(b in block for b in _ODD_BYTES):
        return _UNSURE
    start = 0 if block.startswith(b">") else block.find(b"\n>") + 1
    if start == 0 and not block.startswith(b">"):
        return _UNSURE  # no header at the start of a line: the parser says what the block is
    for line in block[:start].split(b"\n"):
        line = line.strip()
        if line and not line.startswith((b"#", b";")):
            return _UNSURE
    body = block[start:]
    text = np.frombuffer(body, dtype=np.uint8)
    line_starts = np.flatnonzero(text[:-1] == _LF) + 1
    for i in line_starts[np.isin(text[line_starts], _COMMENT_OR_BLANK_BYTES)]:
        end = body.find(b"\n", i)
        if body[i : end if end >= 0 else len(body)].lstrip().startswith((b">", b"#", b";")):
            return _UNSURE  # a comment line or an indented header after the first header
    heads = np.flatnonzero(text == _GT)  # record k: heads[k] ('>') up to heads[k + 1]
    if (text[heads[1:] - 1] != _LF).any():
        return _UNSURE  # a '>' inside a line
    ends = np.append(heads[1:] - 1, len(body))  # the line break before the next header, or the end
    kept = np.ones(len(heads), dtype=bool)
    first = heads + 1 < len(body)
    for k in np.flatnonzero(first)[np.isin(text[heads[first] + 1], _PSEUDO_FIRST_BYTES)]:
        kept[k] = not _is_pseudo(body[heads[k] + 1 : ends[k]].partition(b"\n")[0])
    if not kept.any():
        return None
    # the same records less insertions, insert gaps and blanks ('>' and line breaks all stay)
    counted = np.frombuffer(body.translate(None, _NOT_MATCH), dtype=np.uint8)
    starts = np.flatnonzero(counted == _GT)
    stops = np.append(starts[1:], len(counted))
    breaks = np.flatnonzero(counted == _LF)
    first_break = np.searchsorted(breaks, starts)
    header_end = np.append(breaks, len(counted))[first_break]  # the header line's break, if any
    has_rows = header_end < stops
    n_breaks = np.searchsorted(breaks, stops) - first_break  # in the record, the header's included
    n_match = np.where(has_rows, stops - header_end - n_breaks, 0)
    if len(np.unique(n_match[kept])) > 1:
        return _UNSURE  # a ragged row: the parser's error names it
    if b"\t" in body:
        tabs = np.flatnonzero(counted == _TAB)
        record = np.searchsorted(starts, tabs, side="right") - 1
        if (tabs > header_end[record]).any():
            return _UNSURE  # a tab in a sequence line counts as a match column there
    k = int(np.argmax(kept))
    row = body[heads[k] + 1 : ends[k]].partition(b"\n")[2]
    return row.translate(None, _NOT_RESIDUE).upper().decode("ascii")


def _is_pseudo(header: bytes) -> bool:
    """An HH-suite pseudo row's header (without ``>``): its first word is in :data:`PSEUDO_ROW_NAMES`."""
    fields = header.split(None, 1)
    return bool(fields) and fields[0] in _PSEUDO_ROW_BYTES


def n_match(row: str) -> int:
    """Number of match columns of an a3m row: everything but lower case letters and ``.``."""
    return len(row.translate(_MATCH_ONLY))


def _check_rows(rows: list[str]) -> None:
    length = n_match(rows[0])
    for i, row in enumerate(rows):
        if not row.isascii():
            raise MSAError(f"row {i} has non-ASCII characters")
        n = n_match(row)
        if n != length:
            raise MSAError(f"row {i} has {n} match columns, the query has {length}")


def _query_is_clean(row: str) -> bool:
    """True when every character of the query row is a residue in a match column."""
    return row == "" or (row.isalpha() and row.isupper())


# --- re-rooting ---------------------------------------------------------------------------------


def expand(rows: tuple[str, ...] | list[str]) -> list[str]:
    """Expand a3m rows into a full alignment where every row has the same number of columns.

    The insertions between two match columns are left-justified in as many insert columns as the
    longest insertion there; shorter ones are padded with ``.``. Match columns keep their
    character, insert columns keep the (lower case) letters.
    """
    split = [_segments(r) for r in rows]
    n_slots = len(split[0][0])  # insertion slots: before match 0, …, after the last match
    widths = [max(len(s[0][j]) for s in split) for j in range(n_slots)]
    out: list[str] = []
    for inserts, matches in split:
        parts: list[str] = []
        for j in range(n_slots):
            parts.append(inserts[j].ljust(widths[j], "."))
            if j < len(matches):
                parts.append(matches[j])
        out.append("".join(parts))
    return out


def _segments(row: str) -> tuple[list[str], list[str]]:
    inserts: list[str] = [""]
    matches: list[str] = []
    buf: list[str] = []
    for c in row:
        if c.islower():
            buf.append(c)
        elif c != ".":
            inserts[-1] = "".join(buf)
            buf = []
            matches.append(c)
            inserts.append("")
    inserts[-1] = "".join(buf)
    return inserts, matches


def to_a3m_rows(aligned: list[str], query_index: int) -> list[str]:
    """Turn a full alignment (equal-length rows, gaps ``-``/``.``) into a3m rows rooted at a query.

    Columns where the query has a residue become match columns (upper case, or ``-`` for a gap);
    residues in the other columns become insertions (lower case); gaps there are dropped.
    """
    if not aligned:
        return []
    width = len(aligned[0])
    for i, r in enumerate(aligned):
        if len(r) != width:
            raise MSAError(f"aligned row {i} has {len(r)} columns, expected {width}")
    if width == 0:
        return ["" for _ in aligned]
    try:
        grid = np.frombuffer("".join(aligned).encode("ascii"), dtype=np.uint8).reshape(len(aligned), width)
    except UnicodeEncodeError as exc:
        raise MSAError(f"non-ASCII characters in an alignment: {exc}") from exc
    is_gap = (grid == _DASH) | (grid == _DOT)
    keep = ~is_gap[query_index]
    out = grid.copy()
    lower = (grid >= ord("a")) & (grid <= ord("z"))
    upper = (grid >= ord("A")) & (grid <= ord("Z"))
    matched = out[:, keep]
    matched[is_gap[:, keep]] = _DASH
    matched[lower[:, keep]] -= 32  # to upper case
    out[:, keep] = matched
    inserted = out[:, ~keep]
    inserted[upper[:, ~keep]] += 32  # to lower case
    inserted[is_gap[:, ~keep]] = 0  # dropped below
    out[:, ~keep] = inserted
    return [row.tobytes().replace(b"\x00", b"").decode("ascii") for row in out]


def reroot(msa: ParsedMSA, query_index: int) -> ParsedMSA:
    """The same alignment with row ``query_index`` as the query (moved to row 0).

    Columns become exactly the new query's residues (its insertions included), so the result can be
    encoded against that sequence.
    """
    rows = to_a3m_rows(expand(msa.rows), query_index)
    order = [query_index, *(i for i in range(len(rows)) if i != query_index)]
    return ParsedMSA(
        headers=tuple(msa.headers[i] for i in order),
        rows=tuple(rows[i] for i in order),
        fmt=msa.fmt,
        path=msa.path,
        block=msa.block,
    )


def find_query(msa: ParsedMSA, sequence: str) -> int | None:
    """Index of the first row whose residues (gaps removed, upper-cased) equal ``sequence``."""
    want = sequence.upper()
    for i, row in enumerate(msa.rows):
        if len(row) >= len(want) and row.replace("-", "").replace(".", "").upper() == want:
            return i
    return None
