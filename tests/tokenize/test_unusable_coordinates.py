"""Structures whose coordinates cannot be learned from fail at tokenize, naming why (review R15 s40
#5, #6): before, a coordinate of 1e300 (finite as a float64) passed the parse's non-finite check,
became inf in float32 and failed at featurize with scipy's "data must be finite", naming no atom;
and a file of hydrogens only was stored as an entry of one token with no resolved atom, which
training then sampled."""

from __future__ import annotations

import numpy as np
import pytest

from featurecache.errors import EmptyStructureError, TokenizeError
from featurecache.featurize.entry import featurize_bytes
from tests.conftest import STRUCTURES

#: 5y2e's first atom (N of MET 94, chain A) as the file writes its x, y
FIRST_ATOM = b"? 2.644   6.839"


def _with_x(x: bytes) -> bytes:
    src = (STRUCTURES / "5y2e.cif").read_bytes()
    assert src.count(FIRST_ATOM) == 1
    return src.replace(FIRST_ATOM, b"? " + x + b"   6.839")


def test_a_coordinate_beyond_any_molecule_names_its_atom() -> None:
    with pytest.raises(TokenizeError) as err:
        featurize_bytes(_with_x(b"1e300"), "huge.cif", "huge")
    assert err.value.stage == "tokenize"
    assert "for atom N of residue MET 94 in chain A" in str(err.value), err.value


def test_the_largest_coordinate_a_pdb_file_can_write_is_kept() -> None:
    got = featurize_bytes(_with_x(b"9999.999"), "far.cif", "far")
    assert np.isclose(np.abs(got.atoms["coords"]).max(), 9999.999)


def test_a_file_of_hydrogens_only_is_no_entry() -> None:
    text = b"ATOM      1  H   ALA A   1      10.000  10.000  10.000  1.00 20.00           H\nEND\n"
    with pytest.raises(EmptyStructureError, match="no resolved heavy atom") as err:
        featurize_bytes(text, "h_only.pdb", "h_only")
    assert err.value.stage == "tokenize"
