"""a3m alignments (HHblits, MMseqs2/ColabFold, jackhmmer converted, Protenix, alphafold3-pytorch).

``parse_a3m(path)`` reads a file (gzip detected by its magic bytes, not its name) and returns one
:class:`~featurecache.types.ParsedMSA` per query block; ``_parse_a3m(text)`` is the pure core.
``scan_a3m(data, path)`` gives only each block's query — what ``parse_a3m`` would give, errors
included — without building the rows (the build's MSA scan).

What the format allows and what we do with it:

* ``>header`` lines start a row; sequence lines may wrap over several lines; blanks (spaces,
  tabs) inside a sequence line are dropped.
* Upper case letters and ``-`` are match columns (one per query residue), lower case letters are
  insertions relative to the query, ``.`` is an insert-state gap (a2m style; carries nothing).
  A row whose match columns are not the query's is an :class:`MSAError` that names the row (its
  number, the query being row 0, its header and the header's line) and why: a character outside
  that alphabet (its line and column), ``.`` written for a gap in a match column, a query in
  lower case (insertions only), a row with no sequence line.
* A record with a header and no sequence line at all in the whole block (``>query`` alone: a
  truncated download) is an :class:`MSAError` ("no sequence"), not an alignment of nothing.
* HH-suite pseudo rows (``ss_dssp``, ``ss_pred``, ``ss_conf``, ``sa_dssp``, ``Consensus``) are
  dropped; lines starting with ``#`` or ``;`` are comments (HH-suite ``#A3M#``, ColabFold's
  ``#len\tcard`` line of a monomer or homo-oligomer), but for ColabFold's complex header below.
* ``colabfold_batch`` / ``colabfold_search`` write a heteromer's MSA as one a3m
  (``colabfold.batch.msa_to_str``) whose first line, ``#L1,L2,…\tc1,c2,…``, gives the unique
  chains' lengths and copy numbers (blanks for the tab, as an editor or a copy-paste leaves it, read
  the same: ``#118,113 1,1``); every row then spans all chains' columns (each unique chain
  once): the paired block (its first row ``>101\t102…``, the queries concatenated; then one row
  per pair of hits), then one block per chain (its ``>10k`` query, then its unpaired hits), padded
  with gaps outside that chain's columns. Such a block (a first non-blank line with more than one
  length) gives one alignment per chain (:func:`_split_complex`), numbered like NUL-separated
  blocks: a chain's rows are every row's slice of its columns that holds a residue, in file order
  (no row-order pairing: the store pairs by species); lower case letters go with the match column
  they follow (those right after a chain's last column with that chain). A paired row's header is
  cut into equal tab-separated parts, one per chain. A header that is not whole numbers, lists a
  copy number for another count of chains, or whose lengths do not add up to the rows' match
  columns is an :class:`MSAError` naming its line.
* Raw ColabFold-server output holds several queries separated by NUL bytes: each block is its own
  MSA (``block`` 0, 1, …); they are never merged. Headers there are tab-separated fields. The NUL
  comes between records, at the start of a line; one inside a line (a damaged file: bytes zeroed,
  a download padded with zeros) is an :class:`MSAError` naming its line and column.
* A query with gaps in match columns, or with lower case letters, is re-rooted (:func:`reroot`) so
  that the columns are exactly the query's residues.
* An empty file (or one with only comments) yields no MSA.
"""

from __future__ import annotations

import functools
import gzip
import itertools
import logging
import os
import re
import string
import zlib
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from featurecache.const import MSA_GAP_LETTERS
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
#: Blanks inside a sequence line: dropped (spaces and tabs alike).
_BLANKS = str.maketrans("", "", " \t")
#: What an a3m row may hold: residue letters (upper case: match columns; lower case: insertions),
#: ``-`` (a gap in a match column) and ``.`` (an insert-state gap).
A3M_CHARACTERS = frozenset(string.ascii_letters + MSA_GAP_LETTERS)
#: The same as bytes, deleted to find a character outside them (one C pass over every row).
A3M_BYTES = (string.ascii_letters + MSA_GAP_LETTERS).encode("ascii")
#: The line breaks of ``str.splitlines`` (how the parser cuts lines, and numbers them in messages).
_LINE_BREAKS = "\n\r\x0b\x0c\x1c\x1d\x1e\x85\u2028\u2029"
#: A NUL after a character that does not end a line (or another NUL): a NUL inside a line.
_NUL_IN_LINE = re.compile(f"[^{_LINE_BREAKS}\x00]\x00")
_NUL_IN_LINE_BYTES = re.compile(b"[^\n\r\x0b\x0c\x1c\x1d\x1e\x00]\x00")  # a superset: then the text decides
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
    _check_nuls(text)
    out: list[ParsedMSA] = []
    blocks = text.split("\x00")
    line = 1
    for k, block_text in enumerate(blocks):
        out += _parse_a3m_block(block_text, len(out), line)
        if k + 1 < len(blocks):
            line += _n_lines(block_text)
    return out


def _check_nuls(text: str) -> None:
    """Raise :class:`MSAError` for a NUL inside a line (ColabFold puts one between records only)."""
    found = _NUL_IN_LINE.search(text) if "\x00" in text else None
    if found is None:
        return
    at = found.start() + 1
    before = text[:at].splitlines()  # the NUL's own line is the last: the character before it ends no line
    line, column = len(before), len(before[-1]) + 1
    raise MSAError(
        f"a NUL byte inside line {line} (column {column}): a damaged file (bytes zeroed, a download padded "
        "with zeros?); a NUL may only separate the alignments of several queries (ColabFold), between records"
    )


def _n_lines(text: str | bytes) -> int:
    """Lines of one NUL-separated block that is not the last: it ends with a line break (or is
    empty), so the next block starts on the line after its last (as ``str.splitlines`` counts)."""
    if isinstance(text, bytes) and not any(b in text for b in _ODD_BYTES):
        # the scan's fast path: "\n" is the only line break (memchr, no decode and split)
        return text.count(b"\n") + (1 if text and not text.endswith(b"\n") else 0)
    return len((text.decode("ascii") if isinstance(text, bytes) else text).splitlines())


def _parse_a3m_block(text: str, block: int, first_line: int = 1) -> list[ParsedMSA]:
    """The alignments of one NUL-separated block of a3m text, numbered from ``block``: none (no
    row), one, or one per chain of a ColabFold complex (:func:`_split_complex`); ``first_line``: the
    file's line the block starts on (messages)."""
    complex_header = _complex_header(text, first_line)
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
        rows.append("".join(parts).translate(_BLANKS).rstrip("*"))
    if not rows:
        return []
    if not any(rows):
        raise MSAError(_no_sequence(kept, block))
    bad = _first_bad_row(rows)
    if bad is not None:
        raise MSAError(_bad_row(text, first_line, block, kept, rows, bad))
    if complex_header is not None:
        return _split_complex(complex_header, text, first_line, kept, rows, block)
    return [_rooted(ParsedMSA(tuple(kept), tuple(rows), "a3m", block=block))]


def _rooted(msa: ParsedMSA) -> ParsedMSA:
    """``msa``, re-rooted (:func:`reroot`) when its query has gaps or lower case letters."""
    return msa if _query_is_clean(msa.rows[0]) else reroot(msa, 0)


# --- ColabFold's complex a3m (colabfold.batch.msa_to_str) ----------------------------------------


@dataclass(frozen=True)
class _ComplexHeader:
    """ColabFold's first line of a complex's a3m, ``#L1,L2,…\\tc1,c2,…``, as read."""

    line: int  # the file's line
    text: str  # stripped
    lengths: tuple[int, ...]  # of the unique chains, in column order


#: The end of a line as ``str.splitlines`` cuts lines (``\r\n`` is one).
_LINE_END = re.compile(f"\r\n|[{_LINE_BREAKS}]")
#: A whole number in a ColabFold header field (blanks around it allowed, as ``int()`` does).
_WHOLE_NUMBER = re.compile(r"[ ]*[0-9]+[ ]*")
#: A ColabFold complex header whose tab became blanks (``#118,113 1,1``: an editor, a copy-paste):
#: the lengths (two or more, joined by commas), a run of blanks, the copy numbers. Only numbers, so
#: no other comment reads as one.
_SPACED_HEADER = re.compile(
    r"[ ]*(?P<lengths>[0-9]+(?:[ ]*,[ ]*[0-9]+)+)[ \t]+(?P<copies>[0-9]+(?:[ ]*,[ ]*[0-9]+)*)[ ]*"
)
#: A block that starts with a comment line holding a blank and a comma: maybe a complex header (the
#: scan leaves such a block to the parser, which decides).
_MAYBE_COMPLEX = re.compile(rb"[ \t\n\r\x0b\x0c]*#[^\n\r\x0b\x0c\x1c\x1d\x1e]*")


def _leading_line(text: str) -> tuple[int, str]:
    """``(k, line)``: the block's first non-blank line, stripped, and its index among the block's
    lines (``str.splitlines``); ``(-1, "")`` when every line is blank. Reads no further."""
    pos, k = 0, 0
    while pos < len(text):
        end = _LINE_END.search(text, pos)
        line = text[pos : end.start() if end else len(text)].strip()
        if line:
            return k, line
        if end is None:
            break
        pos, k = end.end(), k + 1
    return -1, ""


def _complex_header(text: str, first_line: int) -> _ComplexHeader | None:
    """ColabFold's complex header when it is the block's first non-blank line: ``#``, lengths,
    a tab, copy numbers (``colabfold.batch.msa_to_str``; two tab-separated fields, as ColabFold's
    ``unserialize_msa`` reads it; or, where the tab became a run of blanks, :data:`_SPACED_HEADER`,
    review R41a s51 #3), with more than one length. None for any other block, a monomer's or
    homo-oligomer's single length included (a comment, as before). Raises
    :class:`MSAError` for such a header that does not read: a length or copy number that is not a
    whole number of at least 1, or a number of copy numbers other than of lengths."""
    k, line = _leading_line(text)
    if not line.startswith("#"):
        return None
    fields = line[1:].split("\t")
    if len(fields) != 2:
        spaced = _SPACED_HEADER.fullmatch(line[1:])
        if spaced is None:
            return None
        fields = [spaced["lengths"], spaced["copies"]]
    if "," not in fields[0]:
        return None
    number = first_line + k
    lengths, copies = fields[0].split(","), fields[1].split(",")
    why = ""
    for what, values in (("chain length", lengths), ("copy number", copies)):
        odd = next((v for v in values if not _WHOLE_NUMBER.fullmatch(v) or int(v) < 1), None)
        if odd is not None:
            why = f"{odd!r} is not a {what} (a whole number, at least 1)"
            break
    if not why and len(copies) != len(lengths):
        why = f"{len(lengths)} chain lengths but {len(copies)} copy number{'s' if len(copies) != 1 else ''}"
    if why:
        raise MSAError(
            f"line {number}, {line!r}, is ColabFold's header of a complex's MSA (the unique chains' "
            f"lengths, a tab or blanks, their copy numbers: '#118,113\\t1,1'), but {why}: the file cannot be "
            "split into its chains' alignments"
        )
    return _ComplexHeader(number, line, tuple(int(v) for v in lengths))


#: Deletes everything but residues in match columns (rows hold only :data:`A3M_CHARACTERS`).
_NOT_RESIDUE_TEXT = str.maketrans("", "", string.ascii_lowercase + MSA_GAP_LETTERS)


@functools.lru_cache(maxsize=256)
def _columns_and_insertions(n: int) -> re.Pattern[str]:
    """Matches ``n`` match columns of an a3m row, each with the insertions before it, and the
    insertions after the last: its end is where column ``n`` (from 0) starts."""
    return re.compile(f"(?:[a-z.]*[^a-z.]){{{n}}}[a-z.]*")


def _cuts(row: str, starts: tuple[int, ...], width: int) -> list[int]:
    """Where in ``row`` (``width`` match columns) each chain's span begins: chain 0 at 0, chain
    ``k`` at its first match column ``starts[k]`` (the insertions before it follow the previous
    chain's last column), then ``len(row)``."""
    if len(row) == width:  # no insertion: a column is a character
        return [0, *starts[1:], len(row)]
    cuts = [0]
    for start in starts[1:]:
        found = _columns_and_insertions(start).match(row)
        cuts.append(found.end() if found else len(row))
    return [*cuts, len(row)]


def _header_parts(header: str, n: int) -> list[str] | None:
    """A paired row's header cut into ``n`` equal runs of tab-separated fields, one per chain
    (``colabfold.batch.pair_sequences`` joins the chains' headers with a tab); None when its
    fields do not divide so."""
    fields = header.split("\t")
    if len(fields) % n:
        return None
    size = len(fields) // n
    return ["\t".join(fields[k * size : (k + 1) * size]) for k in range(n)]


def _split_complex(
    head: _ComplexHeader, text: str, first_line: int, headers: list[str], rows: list[str], block: int
) -> list[ParsedMSA]:
    """One alignment per chain of a ColabFold complex block (module docstring), numbered from
    ``block`` in column order; a chain no row holds a residue of gets none. ``rows``: the block's
    rows, all of one width (checked). Raises :class:`MSAError` when the header's lengths do not add
    up to that width."""
    width = n_match(rows[0])
    if sum(head.lengths) != width:
        records = _record_lines(text, first_line)
        lengths = "+".join(map(str, head.lengths))
        raise MSAError(
            f"line {head.line}, {head.text!r}, is ColabFold's header of a complex's MSA: chains of "
            f"{lengths} = {sum(head.lengths)} residues, but the query (row 0, header line {records[0][0]} "
            f"'>{_name(headers[0])}') and every row have {width} match columns: the header does not "
            "describe this alignment, which cannot be split into its chains' alignments"
        )
    n = len(head.lengths)
    starts = tuple(sum(head.lengths[:k]) for k in range(n))
    chain_headers: list[list[str]] = [[] for _ in range(n)]
    chain_rows: list[list[str]] = [[] for _ in range(n)]
    for header, row in zip(headers, rows, strict=True):
        cuts = _cuts(row, starts, width)
        pieces = [row[cuts[k] : cuts[k + 1]] for k in range(n)]
        held = [k for k, piece in enumerate(pieces) if piece.translate(_NOT_RESIDUE_TEXT)]
        parts = _header_parts(header, n) if len(held) > 1 else None
        for k in held:
            chain_headers[k].append(parts[k] if parts else header)
            chain_rows[k].append(pieces[k])
    out: list[ParsedMSA] = []
    for k in range(n):
        if chain_rows[k]:
            msa = ParsedMSA(tuple(chain_headers[k]), tuple(chain_rows[k]), "a3m", block=block + len(out))
            out.append(_rooted(msa))
    return out


# --- queries without rows (the build's scan) ----------------------------------------------------

#: Deleted before counting match columns: insertions, insert gaps, blanks (line breaks are counted
#: apart, header lines are never counted).
_NOT_MATCH = string.ascii_lowercase.encode() + b". \t"
#: Deleted to read the query's residues from its record.
_NOT_RESIDUE = b"-. \t\n"
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
_GT, _LF = ord(">"), ord("\n")
#: Bytes a sequence line may hold (:data:`A3M_CHARACTERS`, blanks, its line break).
_SEQUENCE_BYTES = A3M_BYTES + b" \t\n"


class _Unsure:
    """A block :func:`_block_query` does not answer (unusual layout or a parse error)."""


_UNSURE = _Unsure()


def readable_queries(data: bytes, path: str | os.PathLike[str]) -> list[str]:
    """The queries of an a3m file that does not parse (a row cut short, a bad character), as far as
    they read: of each NUL-separated block, the first record that is no pseudo row, as
    ``ParsedMSA.query_sequence`` gives it (letters upper-cased, gaps dropped), where that record
    holds only :data:`A3M_CHARACTERS` and blanks; of a ColabFold complex block whose header reads
    (:func:`_complex_header`), that record's slice of each chain's columns. What the build names
    the chains a failed file was meant for by; ``[]`` when none reads (a damaged gzip stream,
    sequence before any header)."""
    try:
        text = decompress_msa(data, path).decode("utf-8", errors="replace")
    except MSAError:
        return []
    out: list[str] = []
    for block in text.split("\x00"):
        parts: list[str] | None = None  # the query record's sequence lines, once its header is read
        headed = False
        for raw in block.splitlines():
            line = raw.strip()
            if not line or line.startswith(COMMENT_PREFIXES):
                continue
            if line.startswith(">"):
                if parts is not None:
                    break
                headed = True
                header = line[1:].strip()
                if (header.split(maxsplit=1)[0] if header else "") not in PSEUDO_ROW_NAMES:
                    parts = []
            elif parts is not None:
                parts.append(line)
            elif not headed:
                break  # sequence before the first header: no query reads
        row = "".join(parts or []).translate(_BLANKS).rstrip("*")
        if not A3M_CHARACTERS.issuperset(row):
            continue
        pieces = [row]
        try:
            head = _complex_header(block, 1)
        except MSAError:
            head = None
        if head is not None and n_match(row) == sum(head.lengths):  # each chain's slice of it
            cuts = _cuts(row, tuple(sum(head.lengths[:k]) for k in range(len(head.lengths))), n_match(row))
            pieces = [row[a:b] for a, b in itertools.pairwise(cuts)]
        for piece in pieces:
            query = piece.replace("-", "").replace(".", "").upper()
            if query:
                out.append(query)
    return out


def _a3m_queries(raw: bytes) -> list[tuple[int, str]]:
    """``(block, query)`` as ``[(m.block, m.query_sequence) for m in _parse_a3m(text)]`` of the text of
    ``raw`` (decompressed bytes), with the same :class:`MSAError`.

    Blocks of ASCII bytes go through :func:`_block_query`, which counts every row's match columns
    (so a ragged row is found wherever it is) without building rows; the blocks it does not answer
    and non-ASCII blocks are parsed by :func:`_parse_a3m_block` itself.
    """
    if b"\x00" in raw and _NUL_IN_LINE_BYTES.search(raw):
        _check_nuls(raw.decode("utf-8", errors="replace"))
    blocks: list[bytes] | list[str]
    blocks = raw.split(b"\x00") if raw.isascii() else raw.decode("utf-8", errors="replace").split("\x00")
    out: list[tuple[int, str]] = []
    line = 1  # the file's line the block starts on (the parser's messages name lines)
    for k in range(len(blocks)):
        block: bytes | str = blocks[k]
        if isinstance(block, str) and block.isascii():
            block = block.encode("ascii")
        query = _block_query(block) if isinstance(block, bytes) and not _maybe_complex(block) else _UNSURE
        if isinstance(query, _Unsure):
            text = block.decode("ascii") if isinstance(block, bytes) else block
            out += [(m.block, m.query_sequence) for m in _parse_a3m_block(text, len(out), line)]
        elif query is not None:
            out.append((len(out), query))
        if k + 1 < len(blocks):
            line += _n_lines(block)
    return out


def _maybe_complex(block: bytes) -> bool:
    """Whether an ASCII block's first non-blank line is a comment holding a blank (tab or space)
    and a comma: maybe ColabFold's complex header (:func:`_complex_header` decides), so the parser
    reads it."""
    found = _MAYBE_COMPLEX.match(block)
    if found is None:
        return False
    comment = found.group().lstrip(b" \t\n\r\x0b\x0c")
    return b"," in comment and (b"\t" in comment or b" " in comment)


def _block_query(block: bytes) -> str | _Unsure | None:
    """The query of one ASCII block as :func:`_parse_a3m_block` reads it, ``None`` when that finds
    no row, or :data:`_UNSURE`.

    The block is cut into records at each ``>`` (header line, then sequence lines). Answered only
    when that is the parser's reading — no byte of :data:`_ODD_BYTES`, no sequence before the first
    header, no comment line, indented header or ``>`` inside a line after it — so that a row is its
    record's sequence lines joined. A row's match columns are then its sequence bytes less
    insertions, ``.``, blanks and line breaks (what :func:`n_match` counts on the joined row, its
    blanks dropped), counted for every row at once on the whole block with numpy. A block where a
    row's count differs from the query's, or where the query has none (no sequence, or lower case
    only), is left to the parser (its error names the row, or it re-roots the query).
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
    breaks_all = np.flatnonzero(text == _LF)
    header_break = np.append(breaks_all, len(body))[np.searchsorted(breaks_all, heads)].tolist()
    rows_bytes = b"".join(body[header_break[k] : ends[k]] for k in np.flatnonzero(kept).tolist())
    if rows_bytes.translate(None, _SEQUENCE_BYTES):
        return _UNSURE  # a character outside the alphabet in a row: the parser's error names it
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
    k = int(np.argmax(kept))
    if n_match[k] == 0:
        return _UNSURE  # no sequence (an error), or a lower case query (re-rooted): the parser's
    row = body[heads[k] + 1 : ends[k]].partition(b"\n")[2]
    return row.translate(None, _NOT_RESIDUE).upper().decode("ascii")


def _is_pseudo(header: bytes) -> bool:
    """An HH-suite pseudo row's header (without ``>``): its first word is in :data:`PSEUDO_ROW_NAMES`."""
    fields = header.split(None, 1)
    return bool(fields) and fields[0] in _PSEUDO_ROW_BYTES


def n_match(row: str) -> int:
    """Number of match columns of an a3m row: everything but lower case letters and ``.``."""
    return len(row.translate(_MATCH_ONLY))


def _first_bad_row(rows: list[str]) -> int | None:
    """The first row (0: the query) that is not ASCII, whose match columns are not the query's, or
    that holds a character outside :data:`A3M_CHARACTERS`; 0 also for a query with no sequence line
    (its hits then hold insertions only). A row of the right width with a ``~`` (a GCG gap) or a
    digit was stored before with those positions as unknown residues, profile included (review R15
    s40 #1)."""
    if not rows[0]:
        return 0
    length = n_match(rows[0])
    for i, row in enumerate(rows):
        if not row.isascii() or n_match(row) != length:
            return i
    if "".join(rows).encode("ascii").translate(None, A3M_BYTES):
        return next(i for i, row in enumerate(rows) if row.encode("ascii").translate(None, A3M_BYTES))
    return None


def _no_sequence(headers: list[str], block: int) -> str:
    """Why a block whose records have headers and no sequence line at all is no alignment."""
    shown = ", ".join(f"'>{_name(h)}'" for h in headers[:3]) + (", …" if len(headers) > 3 else "")
    where = f"block {block} of the file" if block else "the file"
    n = len(headers)
    return (f"no sequence: {where} holds {n} header line{'s' if n != 1 else ''} ({shown}) and no sequence "
            "line (a truncated download, or a search cut short?)")  # fmt: skip


def _bad_row(text: str, first_line: int, block: int, headers: list[str], rows: list[str], i: int) -> str:
    """Why row ``i`` of a block (``text``, starting on the file's line ``first_line``) does not fit
    the query: the row by number (the query is row 0), header and line, then the cause: a character
    outside :data:`A3M_CHARACTERS` in the row or in the query (its line and column), a query with no
    match column (lower case only, or no sequence line), a row with no sequence line, ``.`` where a
    match column needs ``-``."""
    length, row = n_match(rows[0]), rows[i]
    n = n_match(row)
    records = _record_lines(text, first_line)
    of_block = f" of block {block}" if block else ""
    query = f"the query (row 0{of_block}, header line {records[0][0]} '>{_name(headers[0])}')"
    name = query if i == 0 else (
        f"row {i}{of_block} (the query is row 0; header line {records[i][0]} '>{_name(headers[i])}')")  # fmt: skip
    counts = f"has {n} match columns, the query has {length}"
    for k in dict.fromkeys((i, 0)):  # the row's own characters first, then the query's
        odd = [j for j, c in enumerate(rows[k]) if c not in A3M_CHARACTERS]
        if not odd:
            continue
        line, column = _position(records[k][1], odd[0])
        kinds = "".join(dict.fromkeys(rows[k][j] for j in odd))
        what = (f"{rows[k][odd[0]]!r} at line {line}, column {column} is not an a3m character (a residue letter, "
                f"'-' or '.')" + (f"; {len(odd)} such characters: {kinds[:20]!r}" if len(odd) > 1 else ""))  # fmt: skip
        if i == 0:
            return f"{query}: {what}"
        counted = f" {counts}" if n != length else ""  # else a non-ASCII character: the counts agree
        return f"{name}{counted}: {what if k == i else f'in {query}, {what}'}"
    if not rows[0]:
        return f"{query} has no sequence line" + (f", while row {i} has {n} match columns" if i else "")
    if length == 0:
        return (f"{query} is all lower case: lower case letters are insertions, so it has no match column, "
                f"while row {i} has {n}; a3m writes the query's residues in upper case")  # fmt: skip
    if not row:
        return f"{name} has no sequence line (0 match columns, the query has {length}): a file cut short?"
    dots = row.count(".")
    if dots and n < length:
        return (f"{name} {counts}: its {dots} '.' are insert-state gaps (a2m), not match columns; a gap in a "
                "match column is '-'")  # fmt: skip
    last = i == len(rows) - 1 and n < length
    return (f"{name} {counts} (match columns: upper case letters and '-'; lower case letters and '.' are "
            f"insertions): {'the last row, cut short: a truncated file?' if last else 'a ragged row'}")  # fmt: skip


def _name(header: str) -> str:
    """A row's name in a message: its header's first word (an accession; ColabFold headers go on in
    tab-separated numbers)."""
    return header.split(maxsplit=1)[0][:40] if header.strip() else ""


def _record_lines(text: str, first_line: int) -> list[tuple[int, list[tuple[int, str]]]]:
    """Each kept record of a block as the parser reads it: the file's line of its header, and its
    sequence lines (file line, text as written). Only for a message: the parser keeps no lines."""
    records: list[tuple[int, list[tuple[int, str]]]] = []
    current: list[tuple[int, str]] | None = None
    for k, raw in enumerate(text.splitlines()):
        line = raw.strip()
        if not line or line.startswith(COMMENT_PREFIXES):
            continue
        if line.startswith(">"):
            header = line[1:].strip()
            name = header.split(maxsplit=1)[0] if header else ""
            current = None if name in PSEUDO_ROW_NAMES else []
            if current is not None:
                records.append((first_line + k, current))
        elif current is not None:
            current.append((first_line + k, raw))
    return records


def _position(lines: list[tuple[int, str]], index: int) -> tuple[int, int]:
    """The file's line and column (from 1) of character ``index`` of the row these sequence lines
    make (blanks dropped, as the parser joins them)."""
    k = 0
    for number, raw in lines:
        lead = len(raw) - len(raw.lstrip())
        for col, c in enumerate(raw.strip()):
            if c in " \t":
                continue
            if k == index:
                return number, lead + col + 1
            k += 1
    return lines[-1][0] if lines else 0, 0


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
