"""A standard residue's atom the file lacks takes its CCD formal charge (RF1 5).

``types.Atom``'s charge is "from the file, else the CCD, else 0"; per-atom residues' missing
atoms took the CCD charge, standard residues' got 0 (1ffk's unresolved ARG NH2: 0, the CCD says
+1). Input: real 102m with ARG 31's NH2 and LYS 16's NZ lines deleted (written with gemmi into
``tmp_path``); expected charges from gemmi's reading of the CCD files ARG.cif / LYS.cif
(``_chem_comp_atom.charge``), never from the package's own definitions.
"""

from __future__ import annotations

from pathlib import Path

import gemmi

from featurecache.const import decode_atom_name, decode_res_name
from featurecache.featurize.entry import featurize_bytes
from tests.conftest import CCD, STRUCTURES

DELETE = {("ARG", 31): "NH2", ("LYS", 16): "NZ"}


def _ccd_charge(code: str, atom: str) -> int:
    block = gemmi.cif.read(str(CCD / f"{code}.cif")).sole_block()
    table = block.find("_chem_comp_atom.", ["atom_id", "charge"])
    return next(int(gemmi.cif.as_string(r[1])) for r in table if gemmi.cif.as_string(r[0]) == atom)


def test_missing_standard_atoms_take_the_ccd_charge(tmp_path: Path) -> None:
    st = gemmi.read_structure(str(STRUCTURES / "102m.cif"))
    deleted = 0
    for res in st[0][0]:
        name = DELETE.get((res.name, int(res.seqid.num or 0)))
        if name is not None:
            del res[next(i for i, a in enumerate(res) if a.name == name)]
            deleted += 1
    assert deleted == len(DELETE)
    path = tmp_path / "102m_edit.cif"
    st.make_mmcif_document().write_file(str(path))
    expected = {k: _ccd_charge(k[0], atom) for k, atom in DELETE.items()}
    assert expected == {("ARG", 31): 1, ("LYS", 16): 1}

    s = featurize_bytes(path.read_bytes(), path.name, path.stem)
    # the file's auth numbers are the sequence positions in 102m (residue_index = label_seq_id)
    written = gemmi.read_structure(str(path))
    label_of = {(r.name, r.seqid.num): r.label_seq for r in written[0][0]}
    file_charge = {(r.name, r.seqid.num, a.name): a.charge for r in written[0][0] for a in r}
    for (code, num), atom in DELETE.items():
        tok = [
            i
            for i in range(len(s.tokens))
            if decode_res_name(s.tokens["res_name"][i]) == code
            and int(s.tokens["residue_index"][i]) == label_of[(code, num)]
            and int(s.tokens["asym_id"][i]) == 0
        ]
        assert len(tok) == 1
        start, count = int(s.tokens["atom_start"][tok[0]]), int(s.tokens["atom_count"][tok[0]])
        atoms = s.atoms[start : start + count]
        names = [decode_atom_name(n) for n in atoms["name"]]
        row = atoms[names.index(atom)]
        assert not row["is_present"]
        assert int(row["charge"]) == expected[(code, num)]
        # the residue's other atoms keep the file's charges
        for a, n in zip(atoms, names, strict=True):
            if n != atom:
                assert a["is_present"] and int(a["charge"]) == file_charge[(code, num, n)]
