"""The chem stage's scan counts a chain's terminal standard residue as standard.

A standard residue's reference conformer is the packaged one, so the scan only counts residues
whose atoms all belong to the definition. Since a chain's terminal residue keeps its leaving atom
(OXT ending a protein chain, OP3 starting an RNA / DNA one: AF3's ``get_link_drop_atoms``), the
definition's atoms are every heavy atom, leaving atoms included; a terminal residue must not
become a signature of its own (a component looked up for every terminal residue kind).

The part is written by the product's writer from real files of the dev corpus; the expected
counts come from the files' ``_pdbx_poly_seq_scheme`` rows (every residue of a polymer chain,
resolved or not), never from our tokenizer.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import gemmi

from featurecache.build.chem_stage import scan_structure_part
from featurecache.build.components import component_resolvers
from featurecache.chem.standard import standard_components
from featurecache.featurize.entry import featurize_bytes
from featurecache.store.layout import PARTS_DIR
from featurecache.store.writer import EntryRecord, PartContents, write_structure_part
from tests.conftest import CCD, STRUCTURES

FILES = ("102m.cif", "1LCD.cif")


def _polymer_residue_counts(path: Path) -> Counter[str]:
    block = gemmi.cif.read(str(path)).sole_block()
    return Counter(row.str(0) for row in block.find("_pdbx_poly_seq_scheme.", ["mon_id"]))


def test_terminal_standard_residues_are_counted_as_standard(tmp_path: Path) -> None:
    atoms_fn, bonds_fn = component_resolvers(str(CCD))
    records = []
    for name in FILES:
        path = STRUCTURES / name
        data = path.read_bytes()
        s = featurize_bytes(data, name, name, component_atoms=atoms_fn, component_bonds=bonds_fn)
        records.append(EntryRecord(s, name, name, "0" * 64, len(data), "mmcif", 0.0))
    root = tmp_path / "store"
    manifest = write_structure_part(root, "s-000000", PartContents(records))
    scan = scan_structure_part(str(root / PARTS_DIR / manifest["part"]))

    standard = set(standard_components())
    want: Counter[str] = Counter()
    for name in FILES:
        want.update({k: n for k, n in _polymer_residue_counts(STRUCTURES / name).items() if k in standard})
    # 102m's protein ends in GLY 154 (OXT in the file); 1LCD's protein ends in ARG 51 (OXT in the
    # file), its DNA strands start with DA 1 and DC 1 (OP3 not in the file)
    assert want["GLY"] and want["ARG"] and want["DA"] and want["DC"]
    residues = Counter(
        {
            code: sum(n for n, _atoms in per_entry.values())
            for code, per_entry in scan.standard_entries.items()
        }
    )
    assert residues == want
    assert not [sig for sig in scan.entries if sig[0] in standard]
