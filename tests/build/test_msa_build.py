"""MSAs in real builds: chains ↔ MSA keys over the real corpus, depths against independent counts,
multi-query and template-hit files, bad MSA files, block reads, determinism across worker counts."""

from __future__ import annotations

import gzip
import io
import re
import shutil
from pathlib import Path

import numpy as np
import pyarrow.compute as pc
import pytest
import zarr
from Bio import AlignIO

import featurecache
from featurecache.const import GAP, PROTEIN_ONE_LETTER, PROTEIN_RESIDUES, UNK_PROTEIN, MolType
from featurecache.errors import InvalidRequest, NotFound
from featurecache.featurize.seqhash import sequence_hash
from featurecache.store.index import complete_parts
from featurecache.store.verify import verify_store
from tests.conftest import MSAS, STRUCTURES, build_store

DEPTH_CAP = 16384

# --- the README's "Which MSAs belong to which structures" table, written out --------------------------

OPENFOLD_IDS = ("1psm", "2crb", "2q2k", "3u8v", "3zee", "4i6p", "4zey", "5kc1")


def _files(folder: str) -> list[str]:
    """MSA files of a folder of the corpus, template-hit files (hmm_output.sto, *.hhr) excluded."""
    d = MSAS / folder
    return sorted(
        p.relative_to(MSAS).as_posix()
        for p in d.iterdir()
        if p.is_file() and not p.name.startswith("hmm_output") and not p.name.endswith(".hhr")
    )


def _af3pt(entry: str, chain: str) -> list[str]:
    return [
        p.relative_to(MSAS).as_posix() for p in MSAS.glob(f"alphafold3-pytorch/{entry}{chain}_protein.a3m*")
    ]


#: entry id -> (auth chain ids or None for every protein chain, the MSA files)
README_TABLE: dict[str, list[tuple[tuple[str, ...] | None, list[str]]]] = {
    "7a4d-assembly1": [((c,), _af3pt("7a4d-assembly1", c)) for c in "ABCDEF"],
    "721p-assembly1": [((c,), _af3pt("721p-assembly1", c)) for c in "AB"],
    "209d-assembly1": [(("C",), _af3pt("209d-assembly1", "C"))],
    **{e: [(None, _files(f"openfold/{e}_A"))] for e in OPENFOLD_IDS},
    "6KWC_1_model_1_ptm_relaxed": [(None, _files("openfold/6KWC_1"))],
    "7pzb": [(("A", "B"), _files("Protenix/7pzb/msa/1"))],
    "5zyh": [(None, _files("Protenix/mmcif_msa/0"))],
    "1k1a": [(None, [*_files("Protenix/mmcif_msa/1"), "Protenix/mmcif_msa_initial/1.a3m.gz"])],
    "7zzx": [(None, _files("Protenix/mmcif_msa/2"))],
    "102m": [(None, _files("Protenix/mmcif_msa/3"))],
    "8f9h": [(None, _files("Protenix/mmcif_msa/3"))],
}


# --- independent reading of the MSA files -----------------------------------------------------------


def _text(path: Path) -> str:
    raw = path.read_bytes()
    return (gzip.decompress(raw) if raw[:2] == b"\x1f\x8b" else raw).decode()


def _a3m_rows(text: str) -> list[str]:
    rows: list[str] = []
    names: list[str] = []
    for line in text.splitlines():
        if line.startswith(">"):
            names.append(line[1:].split()[0] if line[1:].split() else "")
            rows.append("")
        elif rows and line.strip() and not line.startswith(("#", ";")):
            rows[-1] += line.strip()
    return [r for n, r in zip(names, rows, strict=True) if not n.startswith("ss_")]


def _match_strings(rel: str) -> list[str]:
    """Match-column strings of every row of a file, query first (a3m by lines, sto by Biopython)."""
    path = MSAS / rel
    if ".sto" in path.name:
        aln = AlignIO.read(io.StringIO(_text(path)), "stockholm")
        keep = [i for i, c in enumerate(str(aln[0].seq)) if c != "-"]
        return ["".join(str(r.seq)[i] for i in keep).upper() for r in aln]
    return [re.sub(r"[a-z.]", "", r) for r in _a3m_rows(_text(path))]


def _headers(rel: str) -> list[str]:
    """Header of every row of a file, in :func:`_match_strings`' order."""
    path = MSAS / rel
    if ".sto" in path.name:
        aln = AlignIO.read(io.StringIO(_text(path)), "stockholm")
        return [f"{r.id} {r.description}" for r in aln]
    heads = [line[1:] for line in _text(path).splitlines() if line.startswith(">")]
    return [h for h in heads if not (h.split()[0] if h.split() else "").startswith("ss_")]


def _species(header: str) -> str:
    """A header's species, read here ('' for none): ``OX=`` or ``<acc>_<taxid>/`` taxon, else a
    UniProt entry name's mnemonic."""
    m = re.search(r"\bOX=(\d+)", header) or re.match(r"(?:UniRef100_)?[A-Z0-9]+(?:-\d+)?_(\d+)/", header)
    if m:
        return "taxon " + m.group(1) if int(m.group(1)) else ""
    m = re.match(r"(?:sp|tr)\|[^|]+\|[A-Z0-9]+_([A-Z0-9]{1,5})\b", header)
    return "mnemonic " + m.group(1) if m else ""


def _expected_depth(sequence: str, files: list[str]) -> int:
    distinct = {sequence}
    organisms: dict[str, set[str]] = {}  # sequence -> species of its pairing-file copies
    for rel in files:
        rows = _match_strings(rel)
        # the file's query (and copies of it) stand for the chain's sequence, which may differ from
        # it at unknown residues (209d chain C: "TXPGV…" for "TVPGV…")
        distinct.update(r for r in rows[1:] if r != rows[0])
        name = Path(rel).name.removesuffix(".gz")
        if name.startswith("uniprot_hits") or name.startswith("pairing."):
            for h, r in zip(_headers(rel)[1:], rows[1:], strict=True):
                if _species(h):
                    organisms.setdefault(sequence if r == rows[0] else r, set()).add(_species(h))
    # one row per sequence and species of the pairing files (E11): a sequence's first species is
    # its row's, each further one a row of its own; the query's row has none
    further = sum(len(sp) - (r != sequence) for r, sp in organisms.items())
    return min(DEPTH_CAP, len(distinct) + further)


def _letters(residues: np.ndarray) -> list[str]:
    table = {i: c for i, c in enumerate(PROTEIN_ONE_LETTER)} | {UNK_PROTEIN: "X", GAP: "-"}
    return ["".join(table[int(v)] for v in row) for row in residues]


# --- the real corpus ---------------------------------------------------------------------------------


def test_readme_table_chains_carry_the_right_msa(corpus_store: Path) -> None:
    store = featurecache.open_store(corpus_store)
    chains = store.chains.to_pylist()
    msas = {r["key"]: r for r in store.msas.to_pylist()}
    expected_files: dict[str, set[str]] = {}
    sequence_of: dict[str, str] = {}
    n_chains = 0
    for entry, groups in README_TABLE.items():
        rows = [r for r in chains if r["entry_id"] == entry and r["mol_type"] == MolType.PROTEIN]
        assert rows, f"{entry} has no protein chains in the store"
        for auth_ids, files in groups:
            assert files, entry
            chosen = [r for r in rows if auth_ids is None or r["auth_id"] in auth_ids]
            assert len(chosen) == (len(rows) if auth_ids is None else len(auth_ids)), entry
            for r in chosen:
                n_chains += 1
                assert r["msa_key"] == r["sequence_hash"] == sequence_hash(r["sequence"], r["mol_type"])
                expected_files.setdefault(r["msa_key"], set()).update(files)
                sequence_of[r["msa_key"]] = r["sequence"]
    assert n_chains >= 30
    for key, wanted in expected_files.items():
        row = msas[key]
        assert set(row["sources"]) == wanted, key
        assert row["n_files"] == len(wanted)
        assert row["depth"] == _expected_depth(sequence_of[key], sorted(wanted)), (key, sorted(wanted))
        block = store.msa(key, rows=[0])
        assert _letters(block.residues)[0] == "".join(
            c if c in PROTEIN_ONE_LETTER else "X" for c in sequence_of[key]
        )
    by_entry = {r["id"]: r for r in store.entries.to_pylist()}
    for entry in README_TABLE:
        assert by_entry[entry]["n_msa_chains"] >= 1
    assert by_entry["7a4d-assembly1"]["msa_coverage"] == 1.0


def test_template_hit_files_are_not_used(corpus_store: Path) -> None:
    store = featurecache.open_store(corpus_store)
    sources = [s for row in store.msas.column("sources").to_pylist() for s in row]
    assert sources
    assert not [s for s in sources if "hmm_output" in s or s.endswith(".hhr")]
    # had 1psm's hit-first hmm_output.sto been merged, the depth would differ (its rows are PDB hits)
    key = next(r["msa_key"] for r in store.chains.to_pylist() if r["entry_id"] == "1psm" and r["msa_key"])
    files = _files("openfold/1psm_A")
    seq = _match_strings(files[0])[0]
    aln = AlignIO.read(io.StringIO(_text(MSAS / "openfold/1psm_A/hmm_output.sto")), "stockholm")
    hits = {str(r.seq).replace("-", "").upper() for r in aln}
    depth = store.msas.filter(pc.equal(store.msas.column("key"), key)).column("depth")[0].as_py()
    assert depth == _expected_depth(seq, files)
    assert not hits <= {seq} | {s for f in files for s in _match_strings(f)}


def test_chains_without_msa_get_single_sequence(corpus_store: Path) -> None:
    store = featurecache.open_store(corpus_store)
    msas = {r["key"]: r for r in store.msas.to_pylist()}
    polymer = [r for r in store.chains.to_pylist() if r["mol_type"] != MolType.LIGAND]
    for r in polymer:
        assert r["msa_key"] == r["sequence_hash"]
        assert r["msa_depth"] == msas[r["msa_key"]]["depth"]
    single = [r for r in polymer if r["msa_files"] == 0]
    assert single and all(r["msa_depth"] == 1 for r in single)
    # 209d-assembly1's DNA chains have no MSA file; its peptide chain C does
    d209 = {r["auth_id"]: r for r in polymer if r["entry_id"] == "209d-assembly1"}
    assert d209["A"]["msa_files"] == 0 and d209["C"]["msa_files"] == 1
    entry = next(e for e in store.entries.to_pylist() if e["id"] == "209d-assembly1")
    assert entry["msa_coverage"] == pytest.approx(1 / 3)
    # ligand chains carry no MSA key
    assert all(r["msa_key"] == "" for r in store.chains.to_pylist() if r["mol_type"] == MolType.LIGAND)


def test_block_reads_match_the_file(corpus_store: Path) -> None:
    """Rows/columns of a stored MSA decode to the a3m file's distinct rows, deletions included."""
    store = featurecache.open_store(corpus_store)
    key = next(
        r["msa_key"]
        for r in store.chains.to_pylist()
        if r["entry_id"] == "7a4d-assembly1" and r["auth_id"] == "A"
    )
    raw = _a3m_rows(_text(MSAS / "alphafold3-pytorch/7a4d-assembly1A_protein.a3m.gz"))
    first: dict[str, str] = {}
    for r in raw:
        first.setdefault(re.sub(r"[a-z.]", "", r), r)
    ordered = list(first.values())
    depth, length = len(ordered), len(re.sub(r"[a-z.]", "", ordered[0]))
    rng = np.random.default_rng(7)
    rows = np.sort(rng.choice(depth, 300, replace=False))
    cols = np.sort(rng.choice(length, 40, replace=False))
    block = store.msa(key, rows=rows, cols=cols)
    assert block.depth == depth and block.length == length
    assert block.residues.shape == (300, 40) and block.deletions.dtype == np.int16
    std = set(PROTEIN_ONE_LETTER)
    for out_row, i in enumerate(rows):
        a3m = ordered[i]
        matches = re.sub(r"[a-z.]", "", a3m)
        want = "".join(matches[j] if matches[j] in std or matches[j] == "-" else "X" for j in cols)
        assert _letters(block.residues[out_row : out_row + 1])[0] == want
        runs = re.findall(r"([a-z.]*)([A-Z\-])", a3m)
        dels = [len(ins.replace(".", "")) for ins, _ in runs]
        assert block.deletions[out_row].tolist() == [dels[j] for j in cols]
    # whole MSA vs block, unsorted and repeated indices, slices
    full = store.msa(key)
    assert full.residues.shape == (depth, length)
    odd = store.msa(key, rows=[5, 0, 5, depth - 1], cols=slice(10, 20))
    assert np.array_equal(odd.residues, full.residues[[5, 0, 5, depth - 1], 10:20])
    assert np.array_equal(odd.deletions, full.deletions[[5, 0, 5, depth - 1], 10:20])
    assert np.array_equal(odd.profile, full.profile[10:20]) and odd.profile.shape == (10, 32)
    assert full.profile.sum(axis=1) == pytest.approx(np.ones(length), abs=1e-5)
    with pytest.raises(InvalidRequest):
        store.msa(key, rows=[depth])
    with pytest.raises(NotFound):
        store.msa("0" * 20)


# --- small builds --------------------------------------------------------------------------------------


def _hemoglobin_cif(path: Path) -> list[str]:
    """A two-chain toy mmCIF whose entity sequences are the two queries of the NUL-separated file."""
    from featurecache.parse.a3m import parse_a3m

    three = dict(zip(PROTEIN_ONE_LETTER, PROTEIN_RESIDUES, strict=True))
    seqs = [m.query_sequence for m in parse_a3m(MSAS / "openfold-3/hemoglobin/uniref.a3m.gz")]
    lines = ["data_HBTOY", "_entry.id HBTOY", "loop_", "_entity.id", "_entity.type", "1 polymer", "2 polymer"]
    lines += ["loop_", "_entity_poly.entity_id", "_entity_poly.type", "_entity_poly.nstd_monomer"]
    lines += ["1 'polypeptide(L)' no", "2 'polypeptide(L)' no", "loop_", "_entity_poly_seq.entity_id"]
    lines += ["_entity_poly_seq.num", "_entity_poly_seq.mon_id", "_entity_poly_seq.hetero"]
    for e, s in enumerate(seqs, 1):
        lines += [f"{e} {i} {three[c]} n" for i, c in enumerate(s, 1)]
    lines += ["loop_", "_struct_asym.id", "_struct_asym.entity_id", "A 1", "B 2", "loop_"]
    fields = ("group_PDB", "id", "type_symbol", "label_atom_id", "label_alt_id", "label_comp_id", "label_asym_id",
              "label_entity_id", "label_seq_id", "pdbx_PDB_ins_code", "Cartn_x", "Cartn_y", "Cartn_z",
              "occupancy", "B_iso_or_equiv", "auth_seq_id", "auth_asym_id", "pdbx_PDB_model_num")  # fmt: skip
    lines += [f"_atom_site.{f}" for f in fields]
    n = 1
    for e, (chain, s) in enumerate(zip("AB", seqs, strict=True), 1):
        for i in (1, 2):
            for j, atom in enumerate(("N", "CA", "C", "O")):
                x = 10 * e + 3.8 * i
                lines.append(f"ATOM {n} {atom[0]} {atom} . {three[s[i - 1]]} {chain} {e} {i} ? {x:.3f} "
                             f"{1.2 * j:.3f} 0.000 1.00 20.00 {i} {chain} 1")  # fmt: skip
                n += 1
    path.write_text("\n".join(lines) + "\n")
    return seqs


def test_nul_separated_file_gives_two_msas(tmp_path: Path) -> None:
    pdb, msa = tmp_path / "pdb", tmp_path / "msa"
    pdb.mkdir()
    (msa / "colabfold").mkdir(parents=True)
    seqs = _hemoglobin_cif(pdb / "hbtoy.cif")
    shutil.copy(MSAS / "openfold-3/hemoglobin/uniref.a3m.gz", msa / "colabfold")
    summary = build_store(tmp_path / "s", pdb, workers=1, msa_dir=msa)
    assert summary.n_failed == 0
    store = featurecache.open_store(tmp_path / "s")
    chains = {r["auth_id"]: r for r in store.chains.to_pylist()}
    blocks = _text(MSAS / "openfold-3/hemoglobin/uniref.a3m.gz").split("\x00")
    for chain, seq, block in zip("AB", seqs, blocks, strict=False):
        row = chains[chain]
        assert row["msa_key"] == sequence_hash(seq, MolType.PROTEIN)
        rows = [re.sub(r"[a-z.]", "", r) for r in _a3m_rows(block)]
        assert rows[0] == seq
        assert row["msa_depth"] == len(set(rows))
    assert chains["A"]["msa_key"] != chains["B"]["msa_key"]
    sources = store.msas.column("sources").to_pylist()
    assert sorted(s for row in sources for s in row) == [
        "colabfold/uniref.a3m.gz#0",
        "colabfold/uniref.a3m.gz#1",
    ]


def test_bad_msa_is_a_failure_and_near_misses_are_reported(tmp_path: Path) -> None:
    pdb, msa = tmp_path / "pdb", tmp_path / "msa"
    pdb.mkdir()
    shutil.copy(STRUCTURES / "1psm.cif", pdb)
    shutil.copy(STRUCTURES / "3zee.cif", pdb)
    # 1psm: an unreadable file in its OpenFold folder, nothing else
    (msa / "1psm_A").mkdir(parents=True)
    (msa / "1psm_A" / "bfd_uniclust_hits.a3m.gz").write_bytes(gzip.compress(b">query\nEAYKK\n")[:15])
    # 3zee: its real MSA, plus a file whose query differs at one residue (not an unknown one)
    (msa / "3zee_A").mkdir()
    shutil.copy(MSAS / "openfold/3zee_A/bfd_uniclust_hits.a3m", msa / "3zee_A")
    query = _match_strings("openfold/3zee_A/bfd_uniclust_hits.a3m")[0]
    mutated = query[:10] + ("A" if query[10] != "A" else "G") + query[11:]
    (msa / "3zee_A" / "mutant.a3m").write_text(f">query\n{mutated}\n>hit\n{mutated}\n")
    summary = build_store(tmp_path / "s", pdb, workers=1, msa_dir=msa)
    assert summary.n_failed == 1 and summary.failed_by_stage.get("msa") == 1
    store = featurecache.open_store(tmp_path / "s")
    fails = store.failures.to_pylist()
    assert len(fails) == 1
    f = fails[0]
    assert (f["path"], f["stage"], f["entry_id"]) == ("1psm_A/bfd_uniclust_hits.a3m.gz", "msa", "1psm")
    assert f["error_class"] == "MSAError" and "single-sequence" in f["message"]
    entries = {e["id"]: e for e in store.entries.to_pylist()}
    assert set(entries) == {"1psm", "3zee"}  # the entry is still built ...
    assert entries["1psm"]["msa_coverage"] == 0.0  # ... with single-sequence MSAs, and says so
    assert entries["3zee"]["msa_coverage"] == 1.0
    chain = next(r for r in store.chains.to_pylist() if r["entry_id"] == "1psm" and r["mol_type"] == 0)
    assert (chain["msa_depth"], chain["msa_files"]) == (1, 0)
    z = next(r for r in store.msas.to_pylist() if r["sources"])
    assert z["sources"] == ["3zee_A/bfd_uniclust_hits.a3m"]
    assert z["depth"] == _expected_depth(query, ["openfold/3zee_A/bfd_uniclust_hits.a3m"])
    msa_stage = summary.stages["msa"]
    assert msa_stage["MSA files failed"] == 1
    assert msa_stage["alignments unmatched (near misses)"] == "1 (1)"
    # a re-run records nothing new: the failure is known, the MSAs are up to date
    again = build_store(tmp_path / "s", pdb, workers=1, msa_dir=msa)
    assert again.n_failed == 0
    assert again.stages["msa"]["MSAs written (from files / single sequence)"] == "0 / 0"
    assert len(featurecache.open_store(tmp_path / "s").failures) == 1
    assert verify_store(tmp_path / "s") == []
    # the file is fixed: the MSA is rebuilt from it and the failure goes away
    (msa / "1psm_A" / "bfd_uniclust_hits.a3m.gz").write_bytes(
        gzip.compress((MSAS / "openfold/1psm_A/bfd_uniclust_hits.a3m").read_bytes())
    )
    fixed = build_store(tmp_path / "s", pdb, workers=1, msa_dir=msa)
    assert fixed.n_failed == 0
    store = featurecache.open_store(tmp_path / "s")
    assert len(store.failures) == 0
    assert next(e for e in store.entries.to_pylist() if e["id"] == "1psm")["msa_coverage"] == 1.0
    psm = next(r for r in store.chains.to_pylist() if r["entry_id"] == "1psm" and r["mol_type"] == 0)
    assert psm["msa_depth"] == _expected_depth(
        _match_strings("openfold/1psm_A/bfd_uniclust_hits.a3m")[0], ["openfold/1psm_A/bfd_uniclust_hits.a3m"]
    )
    # verify recomputes every MSA's content hash: a changed residue is found
    row = next(r for r in store.msas.to_pylist() if r["sources"] and r["key"] == psm["msa_key"])
    arr = zarr.open_array(str(tmp_path / "s" / "parts" / row["part"] / row["array"]), mode="r+")
    arr[1, 0] = (int(np.asarray(arr[1, 0])) + 1) % 20
    problems = verify_store(tmp_path / "s")
    assert len(problems) == 1 and problems[0].startswith(f"MSA {psm['msa_key']}: content hash")


SUBSET = ("1psm.cif", "2q2k.cif", "102m.cif", "8f9h.cif", "209d-assembly1.cif", "7zzx.cif")


def test_msa_parts_are_byte_identical_across_worker_counts(tmp_path: Path) -> None:
    pdb = tmp_path / "pdb"
    pdb.mkdir()
    for name in SUBSET:
        (pdb / name).symlink_to(STRUCTURES / name)
    build_store(tmp_path / "w1", pdb, workers=1, part_size=2, msa_dir=MSAS, own_cluster=True)
    build_store(tmp_path / "w2", pdb, workers=2, part_size=5, msa_dir=MSAS, own_cluster=True)

    def msa_files(root: Path) -> dict[str, bytes]:
        out = {}
        for part in complete_parts(root):
            if part.name.startswith("m-"):
                for f in sorted(part.rglob("*")):
                    if f.is_file():
                        out[f.relative_to(root).as_posix()] = f.read_bytes()
        return out

    a, b = msa_files(tmp_path / "w1"), msa_files(tmp_path / "w2")
    assert a and a.keys() == b.keys()
    for name in a:
        assert a[name] == b[name], name
    ta = featurecache.open_store(tmp_path / "w1").msas
    tb = featurecache.open_store(tmp_path / "w2").msas
    assert ta.equals(tb)


def test_an_msa_no_entry_uses_any_more_is_kept_for_a_sequence_that_comes_back(tmp_path: Path) -> None:
    """102m is replaced by another structure (its myoglobin MSA leaves the index: no live entry
    uses it), then comes back while its alignment files are gone: the stored MSA is used again,
    not replaced by the single sequence (the MSA stage read which MSAs are stored from the index)."""
    from featurecache.store.index import read_table

    samples = Path(__file__).resolve().parents[2] / "samples"
    inputs, out, msas = tmp_path / "in", tmp_path / "s", tmp_path / "msas"
    inputs.mkdir()
    shutil.copytree(samples / "msas", msas)
    shutil.copy(samples / "structures" / "102m.cif", inputs / "102m.cif")
    build_store(out, inputs, workers=1, msa_dir=msas, ccd=samples / "ccd")
    first = {r["key"]: r for r in featurecache.open_store(out).msas.to_pylist()}
    (key,) = first
    assert first[key]["depth"] > 1  # the Protenix alignment of myoglobin

    shutil.copy(samples / "structures" / "1psm.cif", inputs / "102m.cif")  # another protein, same id
    build_store(out, inputs, workers=1, msa_dir=msas, ccd=samples / "ccd")
    assert key not in featurecache.open_store(out).msas.column("key").to_pylist()

    shutil.rmtree(msas / "Protenix")  # myoglobin's alignments are gone
    shutil.copy(samples / "structures" / "102m.cif", inputs / "102m.cif")  # and 102m comes back
    build_store(out, inputs, workers=1, msa_dir=msas, ccd=samples / "ccd")
    again = {r["key"]: r for r in featurecache.open_store(out).msas.to_pylist()}
    assert again[key]["depth"] == first[key]["depth"]
    assert again[key]["part"] == first[key]["part"]  # the stored MSA, not a rebuild
    m_parts = [p for p in complete_parts(out) if p.name.startswith("m-")]
    rows = [
        r for p in m_parts for r in read_table(p / "_index" / "msas.arrow").to_pylist() if r["key"] == key
    ]
    assert len(rows) == 1  # no single-sequence MSA was written for it
