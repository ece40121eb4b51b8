"""Review R40d s51 #3: no CLI output named the polymer chains left without an MSA from files (the
single-sequence MSA): the build said "polymer chains with an MSA from files 2 of 4", ``info``
counted single-sequence MSAs (sequences, not chains) and ``show`` printed no MSA information at all.
Now ``show`` prints each polymer chain's MSA depth and files and the entry's MSA coverage, and
``info`` counts those chains (``--json`` too) and ``info --no-msa`` names them.

A real store: 2q2k (two protein chains with OpenFold's real ``2q2k_A`` alignments; a DNA chain,
which has none) and 1psm (a protein chain deliberately given no alignment). Which chains lack an
MSA is worked out apart from featurecache: the chains (label and auth id, type, sequence) from the
mmCIF's own ``_entity_poly`` / ``_struct_asym`` / ``_pdbx_poly_seq_scheme`` categories, against the
query sequences of the alignment files."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import gemmi
import pytest

from featurecache.store.reader import open_store
from tests.conftest import MSAS, STRUCTURES, build_store, cli_in_process

ENTRIES = ("2q2k", "1psm")
_POLY_TYPES = {"polypeptide(L)": "protein", "polydeoxyribonucleotide": "dna", "polyribonucleotide": "rna"}


def _file_chains(cif: Path) -> list[dict[str, object]]:
    """The polymer chains of an mmCIF file, read from its categories: label id, auth id, type and
    the canonical one-letter sequence of its entity."""
    block = gemmi.cif.read(str(cif)).sole_block()
    entities = {
        e: (_POLY_TYPES[gemmi.cif.as_string(t)], "".join(gemmi.cif.as_string(seq).split()))
        for e, t, seq in block.find("_entity_poly.", ["entity_id", "type", "pdbx_seq_one_letter_code_can"])
    }
    auth = dict(tuple(r) for r in block.find("_pdbx_poly_seq_scheme.", ["asym_id", "pdb_strand_id"]))
    return [
        {
            "entry_id": cif.stem,
            "label_id": a,
            "auth_id": auth[a],
            "mol_type": entities[e][0],
            "seq": entities[e][1],
        }
        for a, e in block.find("_struct_asym.", ["id", "entity_id"])
        if e in entities
    ]


def _queries(msa_dir: Path) -> set[str]:
    """The query sequence (first row, gaps and insertions dropped) of every a3m / Stockholm file."""
    out = set()
    for f in msa_dir.rglob("*"):
        if f.suffix == ".a3m":
            lines = f.read_text().splitlines()
            first = next(i for i, x in enumerate(lines) if x.startswith(">"))
            rows = []
            for x in lines[first + 1 :]:
                if x.startswith(">"):
                    break
                rows.append(x.strip())
            out.add(re.sub(r"[^A-Z]", "", "".join(rows)))
        elif f.suffix == ".sto":
            lines = [x for x in f.read_text().splitlines() if x.strip() and not x.startswith(("#", "//"))]
            name = lines[0].split()[0]
            out.add(
                re.sub(r"[^A-Za-z]", "", "".join(x.split()[1] for x in lines if x.split()[0] == name)).upper()
            )
    return out


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, int]:
    root = tmp_path_factory.mktemp("r40d_msa")
    pdb, msa, out = root / "pdb", root / "msa", root / "store"
    pdb.mkdir()
    for e in ENTRIES:
        shutil.copy(STRUCTURES / f"{e}.cif", pdb)
    shutil.copytree(MSAS / "openfold" / "2q2k_A", msa / "2q2k_A")  # none for 1psm
    summary = build_store(out, pdb, workers=1, msa_dir=msa)
    assert summary.n_failed == 0
    return out, msa, summary.n_msa_chains


def _expected(msa: Path) -> tuple[list[dict[str, object]], list[dict[str, object]]]:
    """(every polymer chain, those whose sequence is no alignment file's query)."""
    chains = [c for e in ENTRIES for c in _file_chains(STRUCTURES / f"{e}.cif")]
    queries = _queries(msa)
    return chains, [c for c in chains if c["seq"] not in queries]


def _table_rows(text: str, title: str, n_cells: int) -> list[list[str]]:
    """The rows of the rich table printed under ``title`` (``n_cells`` cells a row)."""
    rows, inside = [], False
    for line in text.splitlines():
        if line.strip().startswith(title):
            inside = True
            continue
        if not inside:
            continue
        if line.startswith(("└", "+")) or (rows and not line.strip()):
            break
        cells = [c.strip() for c in re.split(r"[│┃|]", line)[1:-1]]
        if len(cells) == n_cells and cells[0] and cells[0] not in ("asym", "entry_id"):  # not the header
            rows.append(cells)
    return rows


def _meta(text: str) -> dict[str, str]:
    rows = {}
    for line in text.splitlines():
        cells = [c.strip() for c in line.split("│")[1:-1]]
        if len(cells) == 2 and cells[0]:
            rows[cells[0]] = cells[1]
    return rows


def test_show_prints_each_polymer_chains_msa_depth_and_files_and_the_coverage(
    store: tuple[Path, Path, int],
) -> None:
    out, msa, _ = store
    chains, missing = _expected(msa)
    assert {c["mol_type"] for c in missing} == {"protein", "dna"}  # the premise: both kinds lack one
    no_msa = {(c["entry_id"], c["label_id"]) for c in missing}
    n_files = len(list((msa / "2q2k_A").iterdir()))
    index = {(r["entry_id"], r["label_id"]): r for r in open_store(out).chains.to_pylist()}
    for entry in ENTRIES:
        r = cli_in_process("show", str(out), entry, env={"COLUMNS": "200"})
        assert r.returncode == 0, r.stderr
        mine = [c for c in chains if c["entry_id"] == entry]
        with_msa = [c for c in mine if (entry, c["label_id"]) not in no_msa]
        coverage = len(with_msa) / len(mine)
        assert _meta(r.stdout)["msa_coverage"] == (
            f"{coverage:.3g} ({len(with_msa)} of {len(mine)} polymer chains have an MSA from files)"
        ), r.stdout
        rows = _table_rows(r.stdout, "MSAs of the polymer chains", 7)
        shown = {(row[1], row[2]): row for row in rows}
        assert set(shown) == {(c["label_id"], c["auth_id"]) for c in mine}, r.stdout  # polymer chains only
        for c in mine:
            _, _, _, mol_type, length, depth, files = shown[(c["label_id"], c["auth_id"])]
            assert (mol_type, int(length)) == (c["mol_type"], len(str(c["seq"]))), r.stdout
            if (entry, c["label_id"]) in no_msa:
                assert (depth, files) == ("1", "0"), r.stdout  # the single-sequence MSA
            else:
                assert files == str(n_files), r.stdout  # every file of its alignment dir
                assert int(depth) > 1, r.stdout
            assert int(depth) == index[(entry, c["label_id"])]["msa_depth"], r.stdout


def test_info_names_exactly_the_chains_without_an_msa(store: tuple[Path, Path, int]) -> None:
    out, msa, n_msa_chains = store
    chains, missing = _expected(msa)
    want = sorted(
        (
            str(c["entry_id"]),
            str(c["label_id"]),
            str(c["auth_id"]),
            str(c["mol_type"]),
            str(len(str(c["seq"]))),
            "1",
        )
        for c in missing
    )
    # the build's "polymer chains with an MSA from files N of M" and info's listing add up
    assert n_msa_chains + len(missing) == len(chains)

    r = cli_in_process("info", str(out), "--no-msa", "--tsv")
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert lines[0].split("\t") == ["entry_id", "label_id", "auth_id", "mol_type", "length", "msa_depth"]
    assert sorted(tuple(x.split("\t")) for x in lines[1:]) == want, r.stdout

    r = cli_in_process("info", str(out), "--json", "--no-msa")
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    n_protein = sum(1 for c in missing if c["mol_type"] == "protein")
    n_dna = sum(1 for c in missing if c["mol_type"] == "dna")
    assert doc["chains_without_msa"] == {
        "polymer_chains": len(chains),
        "chains": len(missing),
        "by_mol_type": {"protein": n_protein, "rna": 0, "dna": n_dna},
        "entries": len({c["entry_id"] for c in missing}),
        "not_stored": 0,
    }, doc["chains_without_msa"]
    listed = sorted(tuple(str(v) for v in row.values()) for row in doc["no_msa_chains"])
    assert listed == want, doc["no_msa_chains"]
    r = cli_in_process("info", str(out), "--json")  # a plain --json keeps its keys (as --failures' are)
    assert r.returncode == 0, r.stderr
    assert not {"no_msa_chains", "chains_without_msa"} & set(json.loads(r.stdout)), r.stdout

    r = cli_in_process("info", str(out), env={"COLUMNS": "200"})
    assert r.returncode == 0, r.stderr
    assert _meta(r.stdout)["chains without an MSA"] == (
        f"{len(missing)} of {len(chains)} polymer chains (protein {n_protein}, DNA {n_dna}) in "
        f"{len({c['entry_id'] for c in missing})} entries (featurecache info STORE --no-msa lists them)"
    ), r.stdout

    r = cli_in_process("info", str(out), "--no-msa", env={"COLUMNS": "200"})
    assert r.returncode == 0, r.stderr
    rows = _table_rows(r.stdout, "polymer chains without an MSA from files", 6)
    assert sorted(tuple(row) for row in rows) == want, r.stdout

    r = cli_in_process("info", str(out), "--no-msa", "--tsv", "--failures")  # other columns: one listing
    assert r.returncode == 2 and "--no-msa --tsv in a command of its own" in r.stderr, r.stderr
