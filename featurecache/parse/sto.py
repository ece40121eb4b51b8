"""Stockholm alignments (jackhmmer, hmmsearch, Pfam).

``parse_sto(path)`` reads a file (gzip detected by magic bytes) into :class:`StockholmAlignment`
objects (a file may hold several, each ending with ``//``); ``_parse_sto(text)`` is the pure core.

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
import re
from dataclasses import dataclass, field

from featurecache.errors import MSAError
from featurecache.parse.a3m import decompress_msa, find_query, read_msa_text, to_a3m_rows
from featurecache.types import ParsedMSA

#: Row names of PDB seqres entries as hmmsearch writes them (``1psm_A/1-38``).
_PDB_HIT_NAME = re.compile(r"^[0-9][A-Za-z0-9]{3}_[A-Za-z0-9]+(/\d+-\d+)?$")


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
        return bool(self.names) and all(_PDB_HIT_NAME.match(n) for n in self.names)

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
    """
    if data is None:
        text = read_msa_text(path)
    else:
        text = decompress_msa(data, path).decode("utf-8", errors="replace")
    try:
        alns = _parse_sto(text)
    except MSAError as exc:
        raise MSAError(str(exc), path=str(path), stage="msa") from exc
    return [
        StockholmAlignment(
            a.names, a.aligned, a.descriptions, a.file_annotations, a.column_annotations, str(path), a.block
        )
        for a in alns
    ]


def _parse_sto(text: str) -> list[StockholmAlignment]:
    """Parse Stockholm text into alignments, one per ``//``-terminated record."""
    out: list[StockholmAlignment] = []
    state = _Record()
    for lineno, raw in enumerate(text.splitlines(), 1):
        line = raw.rstrip()
        if not line.strip():
            continue
        if line.startswith("//"):
            if state.seen:
                out.append(state.finish(len(out)))
            state = _Record()
            continue
        if line.startswith("#"):
            state.seen = True
            state.annotation(line)
            continue
        parts = line.split()
        if len(parts) != 2:
            raise MSAError(f"line {lineno}: expected '<name> <aligned sequence>', got {line[:60]!r}")
        state.seen = True
        state.add(parts[0], parts[1])
    if state.seen and state.seqs:
        out.append(state.finish(len(out)))  # tolerate a missing final "//"
    return out


class _Record:
    def __init__(self) -> None:
        self.seen = False
        self.seqs: dict[str, list[str]] = {}
        self.desc: dict[str, str] = {}
        self.gf: dict[str, list[str]] = {}
        self.gc: dict[str, list[str]] = {}

    def add(self, name: str, piece: str) -> None:
        self.seqs.setdefault(name, []).append(piece)

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

    def finish(self, block: int) -> StockholmAlignment:
        names = tuple(self.seqs)
        aligned = tuple("".join(p) for p in self.seqs.values())
        if aligned:
            width = len(aligned[0])
            for name, row in zip(names, aligned, strict=True):
                if len(row) != width:
                    raise MSAError(f"sequence {name!r} has {len(row)} columns, the first has {width}")
        return StockholmAlignment(
            names=names,
            aligned=aligned,
            descriptions=self.desc,
            file_annotations={k: " ".join(v) for k, v in self.gf.items()},
            column_annotations={k: "".join(v) for k, v in self.gc.items()},
            block=block,
        )
