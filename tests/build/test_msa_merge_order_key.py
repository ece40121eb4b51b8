"""A stored MSA's inputs key keeps the merge order (a final review's finding on fdf468b).

Within one database label the files of a sequence merge in path order, and that order decides which
rows survive deduplication and the depth cap. fdf468b keyed the uses sorted by content, so two files
of one label that swapped contents left the key unchanged: the rebuild wrote no MSA and the store
kept the rows of the old order, unlike a fresh build of the same inputs. The build here is real
(102m from the corpus, two a3m files written in the test); the expected rows come from the files'
text (the query, then the first file's hits, as many as ``--msa-depth 3`` keeps), encoded by hand.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import gemmi
import numpy as np

import featurecache
from featurecache.build.config import BuildConfig
from featurecache.build.run import run_build
from featurecache.const import GAP, MSA_PROTEIN_LETTERS, UNK_PROTEIN
from tests.clusters import shared_scheduler
from tests.conftest import STRUCTURES


def _sequence() -> str:
    """102m chain A's sequence as gemmi reads it (its entity's full sequence)."""
    st = gemmi.read_structure(str(STRUCTURES / "102m.cif"))
    st.setup_entities()
    ent = next(e for e in st.entities if e.entity_type == gemmi.EntityType.Polymer)
    return gemmi.one_letter_code(list(ent.full_sequence)).upper()


def _mutant(seq: str, pos: int, letter: str) -> str:
    assert seq[pos] != letter
    return seq[:pos] + letter + seq[pos + 1 :]


def _encode(letters: str) -> list[int]:
    return [GAP if c == "-" else MSA_PROTEIN_LETTERS.get(c, UNK_PROTEIN) for c in letters]


def _stored_rows(store: Path) -> np.ndarray:
    reader = featurecache.open_store(store)
    try:
        chain = next(c for c in reader.entry_chains("102m") if c["label_id"] == "A")
        assert chain["msa_files"] == 2, chain
        return np.asarray(reader.msa(chain["msa_key"]).residues)
    finally:
        reader.close()


def _build(store: Path, pdb: Path, msa: Path) -> object:
    return run_build(pdb_dir=pdb, out=store, msa_dir=msa, scheduler=shared_scheduler(1), part_size=8,
                     config=BuildConfig(msa_depth_cap=3), progress=False)  # fmt: skip


def test_files_of_one_label_that_swap_contents_are_merged_again(tmp_path: Path) -> None:
    """The reviewer's /tmp/rf20c/B: before, 'MSAs written 0 / 0' and the store kept query r1 r2."""
    seq = _sequence()
    assert len(seq) == 154
    r1, r2, r3, r4 = (_mutant(seq, p, c) for p, c in ((5, "A"), (10, "A"), (20, "W"), (30, "W")))
    text_a = f">query\n{seq}\n>r1\n{r1}\n>r2\n{r2}\n"
    text_b = f">query\n{seq}\n>r3\n{r3}\n>r4\n{r4}\n"
    pdb, msa = tmp_path / "pdb", tmp_path / "msa"
    pdb.mkdir()
    shutil.copy(STRUCTURES / "102m.cif", pdb / "102m.cif")
    for sub in ("p", "q"):
        (msa / sub).mkdir(parents=True)
    (msa / "p" / "x.a3m").write_text(text_a)  # merges first (path order within the label)
    (msa / "q" / "x.a3m").write_text(text_b)
    store = tmp_path / "store"
    _build(store, pdb, msa)
    assert _stored_rows(store).tolist() == [_encode(seq), _encode(r1), _encode(r2)]

    (msa / "p" / "x.a3m").write_text(text_b)  # the same two files, contents swapped
    (msa / "q" / "x.a3m").write_text(text_a)
    summary = _build(store, pdb, msa)
    expected = [_encode(seq), _encode(r3), _encode(r4)]
    assert _stored_rows(store).tolist() == expected, summary.stages["msa"]  # type: ignore[attr-defined]
    assert summary.stages["msa"]["MSAs written (from files / single sequence)"] == "1 / 0"  # type: ignore[attr-defined]

    fresh = tmp_path / "fresh"
    _build(fresh, pdb, msa)
    assert _stored_rows(fresh).tolist() == expected
    assert np.array_equal(_stored_rows(store), _stored_rows(fresh))

    summary = _build(store, pdb, msa)  # nothing changed: up to date
    assert summary.stages["msa"]["MSAs up to date"] == 1  # type: ignore[attr-defined]
