"""Glycan ligands: AF3's O1 regime and the entity key of copies with different token counts.

AF3 was trained and evaluated with a glycan ligand's leaving atom O1 dropped unless O1 itself is
bonded to another residue, standalone (unbonded) glycans included (google-deepmind/alphafold3
``run_alphafold.py``: ``--fix_standalone_glycans`` defaults to False, "AlphaFold 3 model training
and evaluation filtered out leaving atoms from glycan ligands even if they were not bonded to
anything"). We kept a standalone glycan's O1 (the opt-in fixed behaviour).

AF3 keys ``entity_id`` on the token-level residue names (``features.
_compute_asym_entity_and_sym_id``): a per-atom residue's name once per token, so two copies of a
glycan that lost different leaving atoms are two entities. We keyed on one name per residue.

Inputs are copies of real 7DDO (PDB format: four NAGs, each LINKed through C1 to an Asn) with
LINK records edited; the expected atom names come from gemmi's reading of the CCD file, the
LINK partners from the file's text, never from our tokenizer.
"""

from __future__ import annotations

from pathlib import Path

import gemmi
import pytest

from featurecache.build.components import component_resolvers
from featurecache.const import decode_atom_name, decode_res_name
from featurecache.featurize.entry import featurize_bytes
from featurecache.types import Structure
from tests.conftest import CCD, STRUCTURES

SRC = STRUCTURES / "7DDO.pdb"


def _ccd_heavy(code: str) -> list[str]:
    """Heavy atom ids of a CCD component in ``_chem_comp_atom`` order (gemmi)."""
    block = gemmi.cif.read(str(CCD / f"{code}.cif")).sole_block()
    table = block.find("_chem_comp_atom.", ["atom_id", "type_symbol"])
    return [gemmi.cif.as_string(r[0]) for r in table if gemmi.cif.as_string(r[1]).upper() not in ("H", "D")]


def _nag_links(text: str) -> dict[tuple[str, str], str]:
    """(chain, seq num) of each NAG named in a LINK record -> the NAG's atom in that bond."""
    out: dict[tuple[str, str], str] = {}
    for line in text.splitlines():
        if not line.startswith("LINK"):
            continue
        f = line.split()
        if f[6] == "NAG":
            out[(f[7], f[8])] = f[5]
    return out


def _featurize(path: Path) -> Structure:
    atoms_fn, bonds_fn = component_resolvers(str(CCD))
    return featurize_bytes(path.read_bytes(), path.name, path.stem, component_atoms=atoms_fn,
                           component_bonds=bonds_fn)  # fmt: skip


def _nag_chains(s: Structure) -> dict[str, tuple[list[str], int]]:
    """label id of each NAG chain -> (atom names of its tokens, entity_id)."""
    out: dict[str, tuple[list[str], int]] = {}
    for c in s.chains:
        sl = slice(c.token_start, c.token_start + c.token_count)
        if {decode_res_name(r) for r in s.tokens["res_name"][sl]} != {"NAG"}:
            continue
        names = [decode_atom_name(s.atoms["name"][a]) for a in s.tokens["centre_atom"][sl]]
        out[c.label_id] = (names, int(c.entity_id))
    return out


@pytest.fixture(scope="module")
def text() -> str:
    return SRC.read_text()


def test_standalone_glycan_drops_o1(tmp_path: Path, text: str) -> None:
    """7DDO with chain C's NAG LINK deleted (the review's repro): that NAG is bonded to nothing
    and still loses O1, as AF3's training regime; all four copies are one entity."""
    edited = "".join(
        ln for ln in text.splitlines(keepends=True) if not ln.startswith("LINK         ND2 ASN C 343")
    )
    assert len(_nag_links(edited)) == len(_nag_links(text)) - 1 == 3
    path = tmp_path / "7DDO_nolink.pdb"
    path.write_text(edited)
    nags = _nag_chains(_featurize(path))
    assert len(nags) == 4
    expected = [n for n in _ccd_heavy("NAG") if n != "O1"]
    assert "O1" in _ccd_heavy("NAG") and len(expected) == 14
    for names, _ in nags.values():
        assert names == expected
    assert len({e for _, e in nags.values()}) == 1


def test_glycan_copies_with_different_leaving_atoms_are_two_entities(tmp_path: Path, text: str) -> None:
    """7DDO with chain C's NAG LINKed through O1 (the file has no O1 for it: unresolved, so the
    bond is kept): that copy keeps O1 (15 tokens), the three others drop it (14). AF3's key is
    per token: two entities (before: one)."""
    old = "LINK         ND2 ASN C 343                 C1  NAG C 601"
    new = "LINK         ND2 ASN C 343                 O1  NAG C 601"
    assert text.count(old) == 1
    edited = text.replace(old, new)
    links = _nag_links(edited)
    assert links[("C", "601")] == "O1" and sorted(set(links.values())) == ["C1", "O1"]
    path = tmp_path / "7DDO_o1link.pdb"
    path.write_text(edited)
    nags = _nag_chains(_featurize(path))
    full = _ccd_heavy("NAG")
    by_len = {len(names): [] for names, _ in nags.values()}  # type: dict[int, list[int]]
    for names, entity in nags.values():
        assert names in (full, [n for n in full if n != "O1"])
        by_len[len(names)].append(entity)
    assert sorted((k, len(v)) for k, v in by_len.items()) == [(len(full) - 1, 3), (len(full), 1)]
    # one entity per token sequence, distinct between the two
    assert len(set(by_len[len(full) - 1])) == 1 and len(set(by_len[len(full)])) == 1
    assert by_len[len(full) - 1][0] != by_len[len(full)][0]
