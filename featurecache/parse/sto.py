"""Stockholm alignments (jackhmmer, hmmsearch, Pfam).

``parse_sto(path)`` reads a file (gzip detected by magic bytes) into :class:`StockholmAlignment`
objects (a file may hold several, each ending with ``//``: one that does not is damaged, a file
cut short); ``_parse_sto(text)`` is the pure core.

* Sequences may be split over several blocks; the pieces are concatenated per name in the order
  the names first appear.
* ``#=GF`` (file), ``#=GS`` (per sequence: ``DE`` descriptions carry ``OX=``/``TaxID=``),
  ``#=GC`` (per column, e.g. ``RF``) and ``#=GR`` (per residue, e.g. ``PP``) annotations are kept
  apart from the sequences; ``#=GR`` lines never become rows.
* Insert columns (``.`` in a profile's consensus, or gaps in the query) become insertions when the
  alignment is rooted at a query (:meth:`StockholmAlignment.to_msa`).
* The query is found by its sequence, never by position: hmmsearch template-hit files start with a
  PDB hit, and a Pfam family has no query at all. :attr:`StockholmAlignment.is_template_hits` says
  when a file is a template search result (never an MSA for the chain).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

from featurecache.errors import MSAError
from featurecache.parse.a3m import (
    A3M_BYTES,
    A3M_CHARACTERS,
    decompress_msa,
    find_query,
    read_msa_text,
    to_a3m_rows,
)
from featurecache.parse.hits import PDB_HIT_NAME
from featurecache.types import ParsedMSA


@dataclass(frozen=True)
class StockholmAlignment:
    """One Stockholm alignment: ``names[i]`` aligned as ``aligned[i]`` (all rows the same width)."""

    names: tuple[str, ...]
    aligned: tuple[str, ...]
    descriptions: dict[str, str] = field(default_factory=dict)  # #=GS <name> DE <text>
    file_annotations: dict[str, str] = field(default_factory=dict)  # #=GF <tag> <text> (joined)
    column_annotations: dict[str, str] = field(default_factory=dict)  # #=GC <tag> <per column>
    path: str = ""
    block: int = 0

    @property
    def program(self) -> str:
        """The program named by ``#=GF AU`` (e.g. ``hmmsearch (HMMER 3.3.2)``), or ``""``."""
        return self.file_annotations.get("AU", "")

    @property
    def is_template_hits(self) -> bool:
        """A template search result rather than an MSA of a query.

        hmmsearch output (AlphaFold's ``hmm_output.sto`` against PDB seqres) is a profile's hits:
        its first row is a PDB chain, not the query. Also recognised when every row is named like a
        PDB seqres chain.
        """
        if self.program.lower().startswith("hmmsearch"):
            return True
        return bool(self.names) and all(PDB_HIT_NAME.match(n) for n in self.names)

    def header(self, i: int) -> str:
        name = self.names[i]
        desc = self.descriptions.get(name, "")
        return f"{name} {desc}".strip()

    def to_msa(self, query_index: int = 0) -> ParsedMSA:
        """The alignment in a3m form rooted at row ``query_index`` (moved to row 0)."""
        if not self.names:
            raise MSAError("empty Stockholm alignment", path=self.path, stage="msa")
        rows = to_a3m_rows(list(self.aligned), query_index)
        order = [query_index, *(i for i in range(len(rows)) if i != query_index)]
        return ParsedMSA(
            headers=tuple(self.header(i) for i in order),
            rows=tuple(rows[i] for i in order),
            fmt="sto",
            path=self.path,
            block=self.block,
        )

    def msa_for(self, sequence: str) -> ParsedMSA | None:
        """The alignment rooted at the first row whose residues equal ``sequence``, or ``None``.

        Template-hit files never qualify, even when one hit is the query's own PDB chain.
        """
        if self.is_template_hits or not self.names:
            return None
        # find_query works on any rows; gaps and case do not matter for the residue comparison
        probe = ParsedMSA(headers=self.names, rows=self.aligned, fmt="sto")
        i = find_query(probe, sequence)
        return None if i is None else self.to_msa(i)


def parse_sto(path: str | os.PathLike[str], data: bytes | None = None) -> list[StockholmAlignment]:
    """Parse a Stockholm file (``.gz`` ok) into its alignments (``[]`` for an empty file).

    ``data``: the file's bytes when the caller has read them already (the file is not read again).
    A damaged file raises :class:`MSAError` naming the line, the row and the alignment where it
    stops making sense; :func:`readable_alignments` gives what reads of it up to there.
    """
    text = _sto_text(path, data)
    try:
        alns = _parse_sto(text, name=Path(path).name)
    except MSAError as exc:
        raise MSAError(str(exc), path=str(path), stage="msa") from exc
    return [_with_path(a, path) for a in alns]


def readable_alignments(data: bytes, path: str | os.PathLike[str]) -> list[StockholmAlignment]:
    """The alignments of a Stockholm file that does not parse (:func:`parse_sto` raises), as far
    as they read: rows of different widths are kept as read (a row whose line was cut is as cut,
    a row split over blocks has the pieces read), and a line that is not ``<name> <aligned
    sequence>`` ends the file. What can name the chains a failed file was meant for (their
    sequences are rows of it); ``[]`` when nothing reads (a damaged gzip stream)."""
    try:
        text = _sto_text(path, data)
    except MSAError:
        return []
    return [_with_path(a, path) for a in _parse_sto(text, upto_damage=True)]


def _sto_text(path: str | os.PathLike[str], data: bytes | None) -> str:
    if data is None:
        return read_msa_text(path)
    return decompress_msa(data, path).decode("utf-8", errors="replace")


def _with_path(a: StockholmAlignment, path: str | os.PathLike[str]) -> StockholmAlignment:
    return StockholmAlignment(
        a.names, a.aligned, a.descriptions, a.file_annotations, a.column_annotations, str(path), a.block
    )


#: Stockholm's other gap characters, read as ``-``: Easel (the alignment library of HMMER and
#: Infernal) reads ``_`` as a gap and ``~`` as missing data, which Infernal writes where a truncated
#: hit has no residues (review R19 s41 #3: the alphabet check of R15 refused both)
_EASEL_GAPS = str.maketrans("_~", "--")


def _parse_sto(text: str, upto_damage: bool = False, name: str = "") -> list[StockholmAlignment]:
    """Parse Stockholm text into alignments, one per ``//``-terminated record. A damaged record
    raises :class:`MSAError` naming its line; ``upto_damage``: it ends the list instead, with the
    rows read before the damage (:func:`readable_alignments`).

    A last alignment that no ``//`` closes is damaged too: every writer closes each alignment, and
    jackhmmer's output cut at a row's end (a copy or download that stopped) would otherwise be read
    as a whole MSA of the rows before the cut, replacing the one an earlier build stored from the
    whole file (review R25a s43 #5). Its message names ``name`` (the file) and the rows read."""
    out: list[StockholmAlignment] = []
    state = _Record()
    lines = text.splitlines()
    lineno = 0
    for lineno, raw in enumerate(lines, 1):
        line = raw.rstrip()
        if not line.strip():
            continue
        if line.startswith("//"):
            if state.seen:
                out.append(state.finish(len(out), lineno, upto_damage))
            state = _Record()
            continue
        if line.startswith("#"):
            state.seen = True
            state.annotation(line)
            continue
        parts = line.split()
        if len(parts) != 2:
            if upto_damage:
                break
            last = max(k for k, text_line in enumerate(lines, 1) if text_line.strip())
            raise MSAError(_bad_line(lineno, line, parts, len(out), last))
        state.seen = True
        state.add(parts[0], parts[1], lineno)
    if state.seqs:  # no "//" closes the last alignment, or the damaged one's rows
        out.append(state.finish(len(out), lineno, upto_damage, terminated=False))
        if not upto_damage:  # rows all of one width (else finish said so): cut at a row's end
            raise MSAError(_unterminated(name, len(out) - 1, lineno, len(state.seqs)))
    return out


def _unterminated(name: str, block: int, end: int, n_rows: int) -> str:
    """Why a last alignment that no ``//`` closes is refused (:func:`_parse_sto`)."""
    where = f"{name}: " if name else ""
    return (f"{where}no '//' closes the alignment{_of_alignment(block)}: the file ends at line {end} after "
            f"{n_rows} sequence row{'s' if n_rows != 1 else ''}; a file cut short?")  # fmt: skip


def _of_alignment(block: int) -> str:
    """Which alignment of the file a message is about: only said past the first."""
    return f" (alignment {block + 1} of the file)" if block else ""


def _bad_line(lineno: int, line: str, parts: list[str], block: int, last: int) -> str:
    """Why a line of an alignment is neither an annotation nor ``<name> <aligned sequence>``."""
    if len(parts) == 1:
        why = "a name or a sequence alone"
    else:
        why = f"{len(parts)} fields (a name with a space in it, or lines run together?)"
    cut = "; the file's last line: a file cut short?" if lineno == last else ""
    return (f"line {lineno}{_of_alignment(block)}: expected '<name> <aligned sequence>', got {why}: "
            f"{line[:60]!r}{cut}")  # fmt: skip


class _Record:
    def __init__(self) -> None:
        self.seen = False
        self.seqs: dict[str, list[str]] = {}
        self.last_line: dict[str, int] = {}  # name -> the line its last piece was on
        self.lines: dict[str, list[int]] = {}  # name -> the line of each of its pieces
        self.desc: dict[str, str] = {}
        self.gf: dict[str, list[str]] = {}
        self.gc: dict[str, list[str]] = {}

    def add(self, name: str, piece: str, lineno: int) -> None:
        self.seqs.setdefault(name, []).append(piece)
        self.lines.setdefault(name, []).append(lineno)
        self.last_line[name] = lineno

    def annotation(self, line: str) -> None:
        fields = line.split(maxsplit=3)
        tag = fields[0]
        if tag == "#=GF" and len(fields) >= 3:
            self.gf.setdefault(fields[1], []).append(" ".join(fields[2:]))
        elif tag == "#=GS" and len(fields) >= 4 and fields[2] == "DE":
            self.desc[fields[1]] = fields[3]
        elif tag == "#=GC" and len(fields) >= 3:
            self.gc.setdefault(fields[1], []).append(fields[2])
        # "#=GR" (per-residue, e.g. posterior probabilities) and "# STOCKHOLM 1.0" carry nothing we use

    def finish(
        self, block: int, end: int, unchecked: bool = False, terminated: bool = True
    ) -> StockholmAlignment:
        """The alignment read; ``end``: the line of its ``//`` (or the file's last line, when
        ``terminated`` is false: no ``//`` closes it). ``unchecked``: rows of other widths are kept."""
        names = tuple(self.seqs)
        aligned = tuple("".join(p).translate(_EASEL_GAPS) for p in self.seqs.values())
        if aligned and not unchecked:
            self._check_widths(names, aligned, block, end, terminated)
            self._check_alphabet(names, aligned, block)
        return StockholmAlignment(
            names=names,
            aligned=aligned,
            descriptions=self.desc,
            file_annotations={k: " ".join(v) for k, v in self.gf.items()},
            column_annotations={k: "".join(v) for k, v in self.gc.items()},
            block=block,
        )

    def _check_alphabet(self, names: tuple[str, ...], aligned: tuple[str, ...], block: int) -> None:
        """Raise :class:`MSAError` for a character that is no residue letter, ``-`` or ``.`` (``_`` and
        ``~`` are read as ``-`` before: :data:`_EASEL_GAPS`), naming its sequence, line and column:
        such a character (a digit, ``*``) was stored as an unknown residue, in the profile too
        (review R15 s40 #1)."""
        if all(row.isascii() for row in aligned) and not "".join(aligned).encode("ascii").translate(
            None, A3M_BYTES
        ):
            return
        for k, row in enumerate(aligned):
            odd = [j for j, c in enumerate(row) if c not in A3M_CHARACTERS]
            if not odd:
                continue
            name, j = names[k], odd[0]
            pieces, piece = self.seqs[name], 0
            while j >= len(pieces[piece]):  # the piece, so the line, the character is on
                j -= len(pieces[piece])
                piece += 1
            lineno = self.lines[name][piece]
            kinds = "".join(dict.fromkeys(row[i] for i in odd))
            more = f"; {len(odd)} such characters in it: {kinds[:20]!r}" if len(odd) > 1 else ""
            raise MSAError(
                f"line {lineno}{_of_alignment(block)}: sequence {name!r} holds {row[odd[0]]!r} at column "
                f"{j + 1} of its aligned piece, not a residue letter or a gap ('-', '.', '_', '~'){more}"
            )

    def _check_widths(
        self, names: tuple[str, ...], aligned: tuple[str, ...], block: int, end: int, terminated: bool
    ) -> None:
        """Raise :class:`MSAError` for rows that are not as wide as the first, naming the first
        such row, its last line, both widths and how many rows differ."""
        width = len(aligned[0])
        ragged = [k for k, row in enumerate(aligned) if len(row) != width]
        if not ragged:
            return
        k = ragged[0]
        name, lineno = names[k], self.last_line[names[k]]
        why = f"; {len(ragged)} rows differ" if len(ragged) > 1 else ""
        if not terminated and all(len(aligned[j]) < width for j in ragged):
            why += f"; no '//' closes the alignment (the file ends at line {end}): a file cut short?"
        raise MSAError(
            f"line {lineno}{_of_alignment(block)}: sequence {name!r} has {len(aligned[k])} columns, the first "
            f"({names[0]!r}, line {self.last_line[names[0]]}) has {width}{why}"
        )
