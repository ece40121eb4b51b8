"""Template-hit files (HHsearch/HHblits ``.hhr``, BLAST/MMseqs2 tabular ``.m8``, hmmsearch output
as a3m) and format sniffing.

These files list hits of a query against a template database; they are never MSAs. The build
recognises them (:func:`sniff_msa_format`; an a3m file by its name or its rows:
:func:`a3m_template_hits`; hmmsearch Stockholm: ``parse.sto``), skips them when assembling a
chain's MSA and keeps only the number of hits each holds (:func:`parse_hhr`, :func:`parse_m8`):
a file's count is in the MSA scan cache, the total in the build summary ("template-hit files
skipped: N (M hits)"). The hits themselves are stored nowhere.
"""

from __future__ import annotations

import os
import re
import zlib
from collections.abc import Iterator
from dataclasses import dataclass

from featurecache.errors import MSAError
from featurecache.parse.a3m import GZIP_MAGIC, PSEUDO_ROW_NAMES, read_msa_text

#: File-name suffixes (lower case, each also with ``.gz`` after it) that name an MSA-stage format,
#: and the format each names; the one list of them (:func:`msa_name_format`). The MSA stage reads
#: every file under ``--msa-dir`` and its content decides the format: :func:`sniff_msa_format`
#: falls back on these names only when the content does not decide. Elsewhere a name alone
#: decides: such a file under ``--pdb-dir`` and ``--msa-dir`` is the MSA stage's input, not a
#: failed structure input (``build.discover.msa_file_name``), and it shows that an ``--msa-dir``
#: holds MSAs (``store.prune``'s "not mounted?" guard).
MSA_NAME_SUFFIXES = (
    (".a3m", "a3m"), (".sto", "sto"), (".stockholm", "sto"), (".hhr", "hhr"), (".m8", "m8"),
)  # fmt: skip
#: the suffixes of :data:`MSA_NAME_SUFFIXES`
MSA_ONLY_SUFFIXES = tuple(ext for ext, _fmt in MSA_NAME_SUFFIXES)
#: names of files the MSA stage reads as alignments by their content only (an aligned FASTA is an
#: a3m): they name unaligned sequences as often (a ``queries.fasta`` beside the MSAs), so no such
#: name alone makes a file an MSA
SEQUENCE_FILE_SUFFIXES = (".fasta", ".fa", ".aln")


#: Row names of PDB seqres chains as hmmsearch writes them (``1psm_A/1-38``) or as the seqres
#: FASTA names them (``1psm_A``): the rows of a template search against PDB seqres.
PDB_HIT_NAME = re.compile(r"^[0-9][A-Za-z0-9]{3}_[A-Za-z0-9]+(/\d+-\d+)?$")
#: The description PDB seqres gives each chain (``mol:protein length:154  MYOGLOBIN``), which the
#: template searches of AlphaFold 3 and Protenix keep in each hit's header (Protenix's
#: ``HmmsearchA3MParser`` drops a row without ``mol:protein``); no MSA database writes it.
_SEQRES_DESCRIPTION = re.compile(r"(?:^|\s)mol:[a-z]+\s+length:\d+(?:\s|$)")
#: The stems of a3m files that tools write template searches to, lower case: Protenix's
#: ``hmmsearch.a3m`` (and its users' ``<name>_hmmsearch.a3m``), OpenFold's ``hmm_output`` (its
#: ``hmm_output.sto`` converted), AlphaFold 2's ``pdb_hits`` (``pdb_hits.hhr`` / ``.sto``, written as
#: ``pdb_hits.a3m`` by forks that convert it) and OpenFold's ``pdb70_hits``. No MSA search of these
#: tools writes such a name: their MSAs are ``<database>_hits`` of UniRef, MGnify, BFD, UniProt.
_TEMPLATE_HIT_STEM = re.compile(r"(?:^|[._-])hmmsearch|hmm_output|(?:^|[._-])pdb(?:70)?_hits$")
#: A header line of an a3m text (bytes): ``>`` first on its line (blanks, or a NUL that separates
#: ColabFold's blocks, before it)
_A3M_HEADER = re.compile(rb"^[ \t\x00]*>([^\r\n]*)", re.MULTILINE)


def _bare_name(name: str) -> str:
    """``name`` (a file name or path) in lower case without a last ``.gz``."""
    return name.lower().removesuffix(".gz")


def msa_name_format(name: str) -> str:
    """The MSA-stage format ``name`` (a file name or path) names by its last suffix, ``.gz`` aside,
    in any case (:data:`MSA_NAME_SUFFIXES`: ``1PSM_A.A3M.gz`` → ``"a3m"``), else ``""``
    (``notes.a3m.txt``, ``queries.fasta``)."""
    bare = _bare_name(name)
    for ext, fmt in MSA_NAME_SUFFIXES:
        if bare.endswith(ext):
            return fmt
    return ""


def sequence_file_name(name: str) -> bool:
    """Whether ``name``'s last suffix, ``.gz`` aside, in any case, is one of
    :data:`SEQUENCE_FILE_SUFFIXES`."""
    return _bare_name(name).endswith(SEQUENCE_FILE_SUFFIXES)


_HHR_HIT = re.compile(
    r"^\s*(?P<no>\d+)\s+(?P<name>\S+)(?P<desc>.*?)\s+(?P<prob>[\d.]+)\s+(?P<evalue>\S+)\s+(?P<pvalue>\S+)"
    r"\s+(?P<score>-?[\d.]+)\s+(?P<ss>-?[\d.]+)\s+(?P<cols>\d+)\s+(?P<qstart>\d+)-(?P<qend>\d+)\s+"
    r"(?P<tstart>\d+)-(?P<tend>\d+)\s*\((?P<tlen>\d+)\)\s*$"
)


@dataclass(frozen=True)
class TemplateHit:
    """One row of a template search: query residues ``query_start..query_end`` (1-based)."""

    name: str
    evalue: float
    score: float
    query_start: int
    query_end: int
    template_start: int
    template_end: int
    probability: float = float("nan")  # HHsearch only
    identity: float = float("nan")  # m8 only (fraction)


def sniff_msa_format(head: str, name: str = "") -> str:
    """Guess the format of an MSA-directory file from its first few KB of text and its name.

    Returns one of ``"a3m"``, ``"sto"``, ``"hhr"``, ``"m8"``, ``"empty"``, ``"unknown"``. Content
    decides; the name only breaks ties (an ``.m8`` file and an ``.a3m`` with no ``>`` yet look alike
    when empty).
    """
    text = head.lstrip("\ufeff")
    stripped = text.strip("\x00 \t\r\n")
    if not stripped:
        return "empty"
    first = stripped.splitlines()[0].strip()
    if first.startswith("# STOCKHOLM"):
        return "sto"
    if first.startswith("Query ") and ("Match_columns" in text or "No_of_seqs" in text):
        return "hhr"
    for line in stripped.splitlines():
        line = line.strip()
        if not line or line.startswith(("#", ";")):
            continue
        if line.startswith(">"):
            return "a3m"
        if _is_m8_line(line):
            return "m8"
        break
    return msa_name_format(name) or "unknown"


def template_hit_name(name: str) -> bool:
    """Whether ``name`` (a file name or path) is an a3m file name that template searches are
    written to (:data:`_TEMPLATE_HIT_STEM`, in any case, ``.gz`` aside): ``hmmsearch.a3m``,
    ``7pzb_A_hmmsearch.a3m``, ``hmm_output.a3m``, ``pdb_hits.a3m``; not ``bfd_uniclust_hits.a3m``."""
    bare = _bare_name(name).rpartition("/")[2]
    return bare.endswith(".a3m") and bool(_TEMPLATE_HIT_STEM.search(bare.removesuffix(".a3m")))


def template_hit_header(header: str) -> bool:
    """Whether an a3m row's header (without ``>``) is a PDB seqres chain's, as a template search
    against PDB seqres writes it: its name is a chain's (:data:`PDB_HIT_NAME`: ``1psm_A/1-38``), or
    it carries the seqres description ``mol:<type> length:<n>``."""
    name = header.split(maxsplit=1)[0] if header.strip() else ""
    return bool(PDB_HIT_NAME.match(name)) or bool(_SEQRES_DESCRIPTION.search(header))


def a3m_template_hits(raw: bytes, name: str = "") -> int | None:
    """The number of hits of an a3m file that is a template search's result (hmmsearch against PDB
    seqres, as AlphaFold 3 converts it and Protenix writes it to ``hmmsearch.a3m``), else None (an
    MSA). ``raw``: the file's text (decompressed bytes); ``name``: its name or path.

    Template hits are recognised by the name (:func:`template_hit_name`) or by the rows: every row
    after the first has a PDB seqres chain's header (:func:`template_hit_header`; the first is the
    query, or, where the file holds the hits alone, the best hit), and there is at least one. An
    MSA's rows are named after UniRef, UniProt, MGnify or BFD sequences, never so (its query may
    be named ``1abc_A``). HH-suite pseudo rows (``ss_pred``) count as neither. The hits: the rows
    after the first, and the first when its header is a chain's (a file of hits alone)."""
    named = template_hit_name(name)
    headers = _row_headers(raw)
    first = next(headers, None)
    if first is None:
        return 0 if named else None
    n = 0
    for header in headers:  # an MSA stops at its second row
        if not named and not template_hit_header(header):
            return None
        n += 1
    if not n and not named:
        return None
    return n + template_hit_header(first)


def _row_headers(raw: bytes) -> Iterator[str]:
    """The headers (without ``>``) of an a3m text's rows, HH-suite pseudo rows left out, lazily."""
    for m in _A3M_HEADER.finditer(raw):
        header = m.group(1).decode("utf-8", errors="replace")
        words = header.split(maxsplit=1)
        if not words or words[0] not in PSEUDO_ROW_NAMES:
            yield header


def sniff_file(path: str | os.PathLike[str], n_bytes: int = 4096) -> str:
    """:func:`sniff_msa_format` of a file (gzip-aware)."""
    with open(path, "rb") as fh:
        magic = fh.read(2)
    if magic == GZIP_MAGIC:
        import gzip

        try:
            with gzip.open(path, "rb") as gz:
                head = gz.read(n_bytes)
        except (OSError, EOFError, zlib.error) as exc:  # a damaged deflate stream raises zlib.error
            raise MSAError(f"cannot read {path}: {exc}", path=str(path), stage="msa") from exc
    else:
        with open(path, "rb") as fh:
            head = fh.read(n_bytes)
    return sniff_msa_format(head.decode("utf-8", errors="replace"), os.fspath(path))


def _is_m8_line(line: str) -> bool:
    fields = line.split("\t")
    if len(fields) < 12:
        return False
    try:
        float(fields[2])
        [int(f) for f in fields[3:10]]
        float(fields[10])
        float(fields[11])
    except ValueError:
        return False
    return True


def parse_hhr(path: str | os.PathLike[str]) -> list[TemplateHit]:
    """The hit table of an HHsearch/HHblits ``.hhr`` file (``[]`` when the table is empty)."""
    return _parse_hhr(read_msa_text(path))


def _parse_hhr(text: str) -> list[TemplateHit]:
    hits: list[TemplateHit] = []
    in_table = False
    for line in text.splitlines():
        if line.startswith(" No Hit"):
            in_table = True
            continue
        if not in_table:
            continue
        if not line.strip() or line.startswith("No "):
            break
        m = _HHR_HIT.match(line)
        if m is None:
            raise MSAError(f"unreadable hhr hit line: {line[:80]!r}")
        hits.append(
            TemplateHit(
                name=m["name"],
                evalue=float(m["evalue"]),
                score=float(m["score"]),
                query_start=int(m["qstart"]),
                query_end=int(m["qend"]),
                template_start=int(m["tstart"]),
                template_end=int(m["tend"]),
                probability=float(m["prob"]),
            )
        )
    return hits


def parse_m8(path: str | os.PathLike[str]) -> list[TemplateHit]:
    """Hits of a BLAST/MMseqs2 tabular (``-outfmt 6`` / ``.m8``) file."""
    return _parse_m8(read_msa_text(path))


def _parse_m8(text: str) -> list[TemplateHit]:
    hits: list[TemplateHit] = []
    for line in text.splitlines():
        if not line.strip() or line.startswith("#"):
            continue
        if not _is_m8_line(line):
            raise MSAError(f"not a tabular (m8) hit line: {line[:80]!r}")
        f = line.split("\t")
        ident = float(f[2])
        hits.append(
            TemplateHit(
                name=f[1],
                evalue=float(f[10]),
                score=float(f[11]),
                query_start=int(f[6]),
                query_end=int(f[7]),
                template_start=int(f[8]),
                template_end=int(f[9]),
                identity=ident / 100.0 if ident > 1.0 else ident,
            )
        )
    return hits
