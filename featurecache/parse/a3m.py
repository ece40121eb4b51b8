"""a3m alignments (HHblits, MMseqs2/ColabFold, jackhmmer converted, Protenix, alphafold3-pytorch).

``parse_a3m(path)`` reads a file (gzip detected by its magic bytes, not its name) and returns one
:class:`~featurecache.types.ParsedMSA` per query block; ``_parse_a3m(text)`` is the pure core.

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
        if data[:2] == GZIP_MAGIC:
            data = gzip.decompress(data)
    except (OSError, EOFError, zlib.error) as exc:
        raise MSAError(f"cannot read {p}: {exc}", path=str(p), stage="msa") from exc
    return data.decode("utf-8", errors="replace")


def parse_a3m(path: str | os.PathLike[str]) -> list[ParsedMSA]:
    """Parse an a3m file (``.gz`` ok). One :class:`ParsedMSA` per query block; ``[]`` if empty."""
    text = read_msa_text(path)
    try:
        msas = _parse_a3m(text)
    except MSAError as exc:
        raise MSAError(str(exc), path=str(path), stage="msa") from exc
    return [ParsedMSA(m.headers, m.rows, m.fmt, path=str(path), block=m.block) for m in msas]


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
