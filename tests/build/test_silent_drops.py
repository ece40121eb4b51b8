"""Structure data a real build dropped without a word (review R1, notes/s32/r1_malformed.md, L7).

L7a: two atoms of one name in a residue (102m's MET 0 ``CB`` written ``CA``; 5e5z.pdb's LEU 1 the
same): the first in the file is kept, as before, and a warning in the store's warnings table now
names the chain, the residue and the atom (its row: the entry and the file); past ten such atoms
(two models written without MODEL records) the rest are counted in one more. An exact repeat of an atom line (same position) is no
loss: built as the original file, with no warning. L7b: an mmCIF of two data blocks (102m.cif, then
5y2e.cif) is read from the first, as before, with a warning naming the file, the block read and the
blocks ignored. Before, both were built with no warning at all. One build, on the session's Dask
cluster (one worker), with the corpus's CCD.
"""

from __future__ import annotations

import numpy as np
import pytest

import featurecache
from featurecache.store.info import store_info
from featurecache.store.reader import LocalStore
from tests.conftest import CCD, STRUCTURES, build_store


def _renamed_cb(cif: bytes) -> bytes:
    """102m.cif with MET 0's CB atom written as a second CA (the label and auth atom ids)."""
    lines = cif.split(b"\n")
    k = next(i for i, line in enumerate(lines) if line.startswith(b"ATOM   5    C  CB  . MET A 1 1"))
    lines[k] = lines[k].replace(b" CB ", b" CA ")
    return b"\n".join(lines)


def _repeated_line(cif: bytes) -> bytes:
    """102m.cif with its sixth atom line written twice (the copy with another serial number)."""
    lines = cif.split(b"\n")
    k = [i for i, line in enumerate(lines) if line.startswith(b"ATOM ")][5]
    copy = lines[k].split(b" ", 1)[0] + b" 99999 " + lines[k].split(maxsplit=2)[2]
    return b"\n".join([*lines[: k + 1], copy, *lines[k + 1 :]])


def _renamed_pdb_cb(pdb: bytes) -> bytes:
    """5e5z.pdb with LEU 1's CB (atom name columns 13-16) written as a second CA."""
    lines = pdb.split(b"\n")
    k = next(
        i for i, line in enumerate(lines) if line.startswith(b"ATOM") and line[12:26] == b" CB  LEU A   1"
    )
    lines[k] = lines[k][:12] + b" CA " + lines[k][16:]
    return b"\n".join(lines)


def _models_without_model_records(pdb: bytes) -> bytes:
    """5e5z.pdb's atom lines, then the same lines 1 Å along x: two models written without MODEL
    records, so gemmi reads each residue with every atom twice."""
    atoms = [line for line in pdb.split(b"\n") if line.startswith((b"ATOM", b"HETATM"))]
    shifted = [line[:30] + b"%8.3f" % (float(line[30:38]) + 1.0) + line[38:] for line in atoms]
    return b"\n".join([*atoms, *shifted, b"END", b""])


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> LocalStore:
    tmp = tmp_path_factory.mktemp("silent_drops")
    pdb = tmp / "pdb"
    pdb.mkdir()
    cif = (STRUCTURES / "102m.cif").read_bytes()
    (pdb / "102m.cif").write_bytes(cif)
    (pdb / "5e5z.pdb").write_bytes((STRUCTURES / "5e5z.pdb").read_bytes())
    (pdb / "dup_atom.cif").write_bytes(_renamed_cb(cif))
    (pdb / "dup_line.cif").write_bytes(_repeated_line(cif))
    (pdb / "dup_atom_pdb.pdb").write_bytes(_renamed_pdb_cb((STRUCTURES / "5e5z.pdb").read_bytes()))
    (pdb / "two_models.pdb").write_bytes(
        _models_without_model_records((STRUCTURES / "5e5z.pdb").read_bytes())
    )
    (pdb / "two_blocks.cif").write_bytes(cif + b"\n" + (STRUCTURES / "5y2e.cif").read_bytes())
    summary = build_store(tmp / "store", pdb, ccd=CCD, workers=1)
    assert summary.n_failed == 0, summary.failures
    return featurecache.open_store(tmp / "store")


def _warnings(store: LocalStore, entry_id: str) -> list[dict[str, str]]:
    return [w for w in store.warnings.to_pylist() if w["entry_id"] == entry_id]


def _name(chars: np.ndarray) -> str:
    """An atom's name from ``Atom.name`` (``ord(c) - 32`` per character)."""
    return "".join(chr(c + 32) for c in chars).rstrip()


def _assert_same_arrays(store: LocalStore, entry_id: str, reference: str) -> None:
    a, b = store.entry(reference), store.entry(entry_id)
    for group in ("atoms", "tokens", "bonds"):
        x, y = getattr(a, group), getattr(b, group)
        assert x.keys() == y.keys()
        for field in x:
            np.testing.assert_array_equal(x[field], y[field], err_msg=f"{entry_id} {group}/{field}")


def test_a_second_atom_of_one_name_is_a_warning_naming_it(store: LocalStore) -> None:
    (row,) = _warnings(store, "dup_atom")
    assert row["path"] == "dup_atom.cif"
    assert row["message"] == (
        "chain A residue MET 0: two atoms named CA at different positions, (24.523, 9.740, -9.865) and "
        "(24.143, 10.414, -8.560); the first in the file is kept, the other is dropped"
    )
    (pdb_row,) = _warnings(store, "dup_atom_pdb")
    assert pdb_row["path"] == "dup_atom_pdb.pdb"
    assert pdb_row["message"].startswith("chain A residue LEU 1: two atoms named CA at different positions, ")
    # still built, as before: the first CA is kept, the residue's CB is not present
    atoms = store.entry("dup_atom").atoms
    met = {_name(atoms["name"][i]): i for i in range(8)}  # MET 0's heavy atoms, in CCD order
    np.testing.assert_allclose(atoms["coords"][met["CA"]], (24.523, 9.740, -9.865), atol=1e-3)
    assert atoms["is_present"][met["CA"]] and not atoms["is_present"][met["CB"]]
    entries = {e["id"]: e for e in store.entries.to_pylist()}
    assert entries["dup_atom"]["n_warnings"] == entries["102m"]["n_warnings"] + 1
    assert store_info(store)["counts"]["warnings"] == sum(e["n_warnings"] for e in entries.values())


def test_atoms_dropped_past_ten_are_counted_in_one_warning(store: LocalStore) -> None:
    rows = _warnings(store, "two_models")
    assert len(rows) == 11
    assert rows[0]["message"] == (
        "chain A residue LEU 1: two atoms named N at different positions, (6.078, -0.306, -5.753) and "
        "(7.078, -0.306, -5.753); the first in the file is kept, the other is dropped"
    )
    assert rows[-1]["message"] == (
        "36 more atoms dropped for a name their residue already has at another position (the first in the "
        "file is kept)"
    )


def test_a_repeated_atom_line_is_built_as_the_file_without_it(store: LocalStore) -> None:
    assert _warnings(store, "dup_line") == _warnings(store, "102m") == []
    _assert_same_arrays(store, "dup_line", "102m")


def test_a_second_data_block_is_a_warning_naming_the_blocks(store: LocalStore) -> None:
    (row,) = _warnings(store, "two_blocks")
    assert (row["path"], row["stage"]) == (
        "two_blocks.cif",
        "parse",
    )  # the parser's warning, not the tokenizer's
    assert row["message"] == (
        "two_blocks.cif: 2 data blocks: read the first, data_102M; 1 other block ignored (data_5Y2E)"
    )
    _assert_same_arrays(store, "two_blocks", "102m")
