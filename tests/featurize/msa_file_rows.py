"""The rows of a real MSA file as the tests read it themselves (Biopython for Stockholm, plain text
for A3M), independent of featurecache's parsers: shared by the MSA species and pairing-row tests."""

from __future__ import annotations

import gzip
import io
import re
from pathlib import Path

from Bio import AlignIO


def _text(path: Path) -> str:
    raw = path.read_bytes()
    return (gzip.decompress(raw) if raw[:2] == b"\x1f\x8b" else raw).decode()


def _rows(path: Path) -> list[tuple[str, str]]:
    """(header, match-column string) of every row of the file, the query first."""
    if ".sto" in path.name:
        aln = AlignIO.read(io.StringIO(_text(path)), "stockholm")
        query = str(aln[0].seq)
        return [
            (f"{rec.id} {rec.description}", "".join(c.upper() for q, c in zip(query, str(rec.seq), strict=True)
                                                    if q not in "-."))
            for rec in aln
        ]  # fmt: skip
    out: list[tuple[str, str]] = []
    for line in _text(path).splitlines():
        if line.startswith(">"):
            out.append((line[1:], ""))
        elif out and not line.startswith("#"):
            out[-1] = (out[-1][0], out[-1][1] + re.sub(r"[a-z.]", "", line.strip()))
    return out
