"""AlphaFold 3 tokenization (supplement §2.6) of a gemmi structure.

Rules:
- first model only; hydrogens and waters dropped, and the residues named in ``drop`` (an X-ray
  structure's crystallization aids, SI §2.5.4: ``featurize.entry``) with their bonds; altlocs as
  AF3's ``ResolveMmcifAltLocs`` (:func:`_select_atoms`): in a residue whose every atom has an
  altloc, the letter with the highest mean occupancy (ties: alphabetically first), an atom name it
  lacks kept from another letter; in a residue with atoms both with and without one, per atom name
  the altloc of highest occupancy; microheterogeneity (two residues at one position): the one of
  highest occupancy (:func:`_dedupe_microhetero`), and the chain's sequence follows it; two atoms
  of one name and altloc in a residue: the first (a warning names the other when it is elsewhere);
- a polymer chain whose every residue is its kind's unknown residue (``UNK``, RNA ``N``, DNA
  ``DN``) is removed with a warning naming it (SI §2.5.4); an entry with nothing else fails;
- a PDB chain with a blank chain ID is named with the first ID no chain or SEQRES of the file
  uses (a warning says which), so that its polymer is one (gemmi makes no entity for a nameless
  chain); an mmCIF residue without ``label_asym_id`` fails (no entity says what it is);
- selenomethionine (MSE) is methionine (MET), as AF3 converts it (supplement §2.1): the residue is
  renamed, its SE atom becomes SD with element S, everything else about its atoms is kept;
- arginine NH1/NH2 naming is made unambiguous (supplement §2.1): when both are present and NH1 is
  farther from CD than NH2, the two atoms' data (coordinates, occupancy, B-factor, the charge the
  file states) swap, so NH1 is always the one closer to CD;
- an atom's formal charge (``types.Atom.charge``) is decided per residue (a standard residue, or
  one per-atom residue / ligand instance): where the file states a charge for any of the residue's
  atoms (non-zero, or an explicit 0: gemmi's 0 with the parser's
  ``parse.atom_site.STATED_ZERO_CHARGE`` flag), every atom of it has the file's charge, 0 where it
  states none and for an atom the file lacks (review R41a s51 #1: most writers, gemmi's among them,
  write a charge only on the charged atom, so an ARG with NH2 +1 or a HIS with NE2 +1 is that
  residue's whole charge; per atom, its blank NH1 / ND1 took the CCD's +1 too); only a residue whose
  file states none (mmCIF ``?`` / ``.`` or no column, PDB columns 79-80 blank: most wwPDB files)
  takes its definition's charges (a standard residue's packaged CCD definition; a per-atom
  residue's ``component_atoms`` definition where its tokens are laid out from it), resolved atoms
  and the ones the file lacks alike (LYS NZ +1 resolved or not, 1GBT's Ca²⁺ +2; review R40a s51
  #1); a residue whose tokens are the file's atoms (no definition, or another naming of it) keeps
  the file's charges, 0 where it states none;
- a standard amino acid / nucleotide (and ``UNK``) is one token, with the full CCD heavy-atom set
  and ``is_present = False`` for atoms missing from the file; leaving atoms as AF3's
  ``get_link_drop_atoms`` (``_leaving_atoms``, the same rule as per-atom residues below): OXT
  only where a protein chain ends (or the file has it), OP3 only where an RNA / DNA chain starts,
  unresolved where the file lacks them;
- anything else — ligands, ions, glycans, modified residues — is one token per heavy atom: when
  the component definition is known (``component_atoms``, from ``--ccd``), per heavy atom of the
  CCD component in CCD order, resolved or not (AF3's ``atom_layout.make_flat_atom_layout``): atoms
  the file lacks are ``is_present = False`` (no coordinates; their reference features come from
  the component, like a standard residue's missing atoms); leaving atoms as AF3's
  ``get_link_drop_atoms``: a polymer chain's per-atom residue loses OXT (protein) unless it ends
  the chain or the file has it, OP3 (RNA / DNA) unless it starts the chain; a glycan (CCD type
  "saccharide") loses O1 unless O1 itself has a covalent bond to another residue, also when the
  glycan is bonded to nothing (AF3's training and evaluation regime: ``run_alphafold.py``'s
  ``--fix_standalone_glycans`` is off by default); every other atom stays. Without a definition, or when the file has an atom the definition does not name
  (another naming of the component; a warning names the atoms), the file's atoms are the
  tokens, as written;
- polymer residues in the entity sequence but absent from the file become tokens whose atoms are
  all ``is_present = False`` (AF3 keeps them), when the file states the entity sequence;
- centre atom: Cα (protein), C1′ (nucleic acids), the atom itself (per-atom tokens);
- ``residue_index`` is the residue's number in its input chain (SI Table 5): its position in the
  entity sequence, else its ``label_seq_id`` (gaps kept), else 1, 2, 3 … in file order;
- a residue of a polymer subchain that the tables do not know as the chain's kind stays in the
  chain (per-atom tokens, the chain's type and ids, as AF3 keeps non-standard residues) when it
  is in the entity sequence or, without one, lies between the chain's polymer residues or is
  bonded into the chain at its ends (caps: 7a4d's ACE before LEU 2 and NH2 after LEU 41, by a
  covalent ``struct_conn`` row or, without one, a peptide / phosphodiester bond distance to the
  end residue); other residues inside a polymer subchain (ligands of PDB-style files and
  rewritten assemblies: 721p's MG and GNP after its last residue) become chains of their own;
- ``entity_id`` / ``sym_id`` follow the sequence, not the mmCIF entity (SI Table 5; AF3's
  ``_compute_asym_entity_and_sym_id``): chains with the same token-level residue names in the
  same order are one entity (copies of a ligand too, also when one copy misses atoms), numbered
  in chain order (``_entity_key``).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import gemmi
import numpy as np

from featurecache.chem.standard import standard_heavy_atom_charges, standard_heavy_atoms
from featurecache.const import (
    CENTRE_ATOM,
    DNA_RESIDUES,
    HYDROGEN_ELEMENTS,
    PROTEIN_ONE_LETTER,
    PROTEIN_RESIDUES,
    RESTYPE_INDEX,
    RNA_RESIDUES,
    UNK_DNA,
    UNK_PROTEIN,
    UNK_RNA,
    WATER_NAMES,
    MolType,
    decode_res_name,
    encode_atom_name,
    encode_res_name,
)
from featurecache.errors import EmptyStructureError, TokenizeError
from featurecache.featurize.seqhash import sequence_hash
from featurecache.parse.atom_site import STATED_ZERO_CHARGE
from featurecache.text import first_named
from featurecache.types import Atom, Chain, Token

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class ComponentAtomSet:
    """What the tokenizer needs of one component definition.

    ``atoms``: ``(atom name, element symbol, formal charge)`` of every heavy atom, in CCD order
    (hydrogens left out); ``glycan``: the CCD type names a saccharide (AF3's glycan sets,
    ``chemical_component_sets_gen``: the word "saccharide" in ``_chem_comp.type``).
    """

    atoms: tuple[tuple[str, str, int], ...]
    glycan: bool = False


#: code -> the component's heavy atoms, or None if no definition is known.
ComponentAtoms = Callable[[str], "ComponentAtomSet | None"]

#: Å; AF3 drops struct_conn bonds longer than this (``clean_structure(remove_bad_bonds=True)``).
_MAX_LINK_LENGTH = 2.4

#: Atoms dropped for a name their residue already has, named one warning each up to this many; the
#: rest counted in one more.
MAX_DUPLICATE_ATOM_WARNINGS = 10

_ONE_TOKEN = frozenset((*PROTEIN_RESIDUES, "UNK", *RNA_RESIDUES, *DNA_RESIDUES))
_PROTEIN_SET = frozenset((*PROTEIN_RESIDUES, "UNK"))


@dataclass
class _AtomRec:
    name: str
    element: int
    coords: tuple[float, float, float]
    present: bool
    #: the charge the file states; None where it states none or lacks the atom (0 where the file
    #: states a charge for another atom of the residue, else the residue's ``charges``; decided at
    #: assembly, :func:`_residue_charges`)
    charge: int | None
    occupancy: float
    b_factor: float


@dataclass
class _Residue:
    name: str
    atoms: list[_AtomRec]
    one_token: bool
    mol_type: MolType
    restype: int  # restype of its token(s)
    letter: str  # one-letter code in the chain sequence ("" for ligands)
    residue_index: int
    auth: tuple[str, int, str] | None  # (auth chain, seq num, icode) of the residue in the file
    #: per-atom residue laid out from its component definition (every CCD heavy atom but the
    #: leaving ones), not from the file's atoms
    from_definition: bool = False
    #: atom name -> formal charge of the definition the residue's atoms follow (standard residue:
    #: the packaged CCD one; per-atom: the ``component_atoms`` one when ``from_definition``), for
    #: atoms whose ``charge`` is None in a residue whose file states no charge at all; empty for a
    #: residue of the file's atoms (those get 0)
    charges: dict[str, int] = field(default_factory=dict)


@dataclass
class _Chain:
    label_id: str
    auth_id: str
    mol_type: MolType
    residues: list[_Residue] = field(default_factory=list)


#: Å: a coordinate beyond ±this is no molecule's (PDB files cannot write past 9999.999; a virus
#: capsid spans ~1e3). 1e300 is finite as a float64 and passed the parse's check, then became inf in
#: float32 and failed at featurize with scipy's "data must be finite", naming no atom (review R15 s40 #5)
MAX_COORDINATE = 1e6


def _far_atom(chains: Sequence[_Chain]) -> str:
    """The first atom of ``chains`` with a coordinate beyond :data:`MAX_COORDINATE`, named."""
    for ch in chains:
        for res in ch.residues:
            for a in res.atoms:
                if max(abs(c) for c in a.coords) > MAX_COORDINATE:
                    where = f"{res.auth[1]}{res.auth[2]}" if res.auth else f"#{res.residue_index}"
                    chain = res.auth[0] if res.auth else ch.auth_id
                    return (f"coordinates {a.coords} beyond ±{MAX_COORDINATE:g} Å for atom {a.name} of residue "
                            f"{res.name} {where} in chain {chain}: not a molecule's coordinates")  # fmt: skip
    return f"a coordinate beyond ±{MAX_COORDINATE:g} Å"  # pragma: no cover - the caller found one


@dataclass(frozen=True)
class Tokenized:
    atoms: np.ndarray  # Atom[n_atoms]
    tokens: np.ndarray  # Token[n_tokens]
    chains: tuple[Chain, ...]
    #: (auth chain, seq num, icode, residue name, atom name) -> entry atom index, for struct_conn
    atom_lookup: dict[tuple[str, int, str, str, str], int]
    #: (first atom, atom count, residue name) of every per-atom-tokenized residue (for bonds)
    per_atom_residues: tuple[tuple[int, int, str], ...]
    warnings: tuple[str, ...]


def tokenize(
    st: gemmi.Structure,
    *,
    fmt: str = "mmcif",
    component_atoms: ComponentAtoms | None = None,
    drop: frozenset[str] = frozenset(),
) -> Tokenized:
    """Tokenize the first model of ``st`` (modified in place: extra models and H removed, MSE renamed
    MET). ``drop``: residue names removed first, with the ``struct_conn`` bonds to them (the
    crystallization aids of an X-ray structure, ``featurize.entry``); never a polymer's residue."""
    if len(st) == 0:
        raise EmptyStructureError("structure has no models", stage="tokenize")
    if len(st) > 1:
        del st[1:]
    warnings: list[str] = []
    if fmt == "pdb":
        _name_blank_chains(st, warnings)
        _waters_after_polymer(st, warnings)
    else:
        _require_label_asym_ids(st)
    if fmt == "pdb" or not st.entities:
        st.setup_entities()
    if fmt == "pdb":
        st.assign_label_seq_id(False)
    st.remove_hydrogens()
    if drop:
        _drop_residues(st, drop)
    _mse_to_met(st)
    links, linked = _inter_residue_links(st)
    ctx = _Context(component_atoms, links, linked, warnings)
    chains = _collect_chains(st, ctx)
    chains = [c for c in chains if c.residues]
    warnings.extend(_duplicate_atom_warnings(ctx.duplicate_atoms))
    unknown = [c for c in chains if _all_unknown(c)]
    if unknown:
        chains = [c for c in chains if not _all_unknown(c)]
        warnings.extend(_unknown_chain_warning(c) for c in unknown)
        if not chains:
            raise EmptyStructureError(
                "no chain left: every polymer chain is made only of unknown residues ("
                + ", ".join(f"chain {c.auth_id}: {_UNKNOWN_RESIDUES[c.mol_type]}" for c in unknown)
                + "), removed as AF3 removes them (supplement §2.5.4), and the entry has no other chain",
                stage="tokenize",
            )
    if not chains or not any(r.atoms for c in chains for r in c.residues):
        raise EmptyStructureError("no polymer residues or ligand atoms after removing waters and hydrogens",
                                  stage="tokenize")  # fmt: skip
    if not any(a.present for c in chains for r in c.residues for a in r.atoms):
        # residues whose every atom is unresolved (a file of hydrogens only): an entry of tokens with no
        # coordinates, sampled and cropped with nothing to learn from (review R15 s40 #6)
        raise EmptyStructureError("no resolved heavy atom after removing waters and hydrogens: the file's residues "
                                  "have no coordinates to learn from", stage="tokenize")  # fmt: skip
    return _assemble(chains, warnings)


#: the unknown residue of each kind of polymer chain
_UNKNOWN_RESIDUES = {MolType.PROTEIN: "UNK", MolType.RNA: "N", MolType.DNA: "DN"}


def _all_unknown(ch: _Chain) -> bool:
    """Whether ``ch`` is a polymer chain whose every residue, resolved or not, is the unknown residue
    of its kind (``UNK``, ``N``, ``DN``): AF3 removes such chains (supplement §2.5.4, "polymer chains
    with all unknown residues are removed")."""
    unknown = _UNKNOWN_RESIDUES.get(ch.mol_type)
    return unknown is not None and bool(ch.residues) and all(r.name == unknown for r in ch.residues)


def _unknown_chain_warning(ch: _Chain) -> str:
    return (f"chain {ch.auth_id} (label {ch.label_id}): all {len(ch.residues)} residues are "
            f"{_UNKNOWN_RESIDUES[ch.mol_type]} (unknown); the chain is removed, as AF3 removes polymer chains "
            "with all unknown residues (supplement §2.5.4)")  # fmt: skip


def _drop_residues(st: gemmi.Structure, names: frozenset[str]) -> None:
    """Remove the residues named in ``names`` from the first model, except those of a polymer
    entity's sequence (a polymer keeps every residue), and the connections to them (a removed
    residue bonds to nothing: it does not keep a partner's leaving atom), in place."""
    model = st[0]
    polymer: dict[str, set[str]] = {ch.name: set() for ch in model}
    for ch in model:
        for span in ch.subchains():
            ent = st.get_entity_of(span)
            if ent is not None and ent.entity_type == gemmi.EntityType.Polymer:
                polymer[ch.name].update(gemmi.Entity.first_mon(m) for m in ent.full_sequence)
    gone: set[tuple[str, int, str, str]] = set()
    for ch in model:
        keep_names = polymer[ch.name]
        for i in reversed(range(len(ch))):
            res = ch[i]
            if res.name in names and res.name not in keep_names:
                gone.add((ch.name, int(res.seqid.num or 0), res.seqid.icode.strip(), res.name))
                del ch[i]
    if not gone:
        return
    for i in reversed(range(len(st.connections))):
        conn = st.connections[i]
        if any((str(p.chain_name), int(p.res_id.seqid.num or 0), p.res_id.seqid.icode.strip(), str(p.res_id.name))
               in gone for p in (conn.partner1, conn.partner2)):  # fmt: skip
            del st.connections[i]


#: names a PDB chain with a blank ID may take, in this order (the first one free)
_CHAIN_NAMES = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789"


def _name_blank_chains(st: gemmi.Structure, warnings: list[str]) -> None:
    """Give the chains of a PDB file whose chain ID is blank (MD, Rosetta, PyMOL exports) the first
    name of :data:`_CHAIN_NAMES` that neither a chain of the file nor its SEQRES uses, in place.

    gemmi makes no entity for a subchain of a chain without a name (``setup_entities``), so its
    protein would be tokenized as one ligand of per-atom tokens. Named, it is tokenized as the
    same file with that chain ID would be: every part of the blank chain takes the one name (the
    file's HETATM records after other chains' are a part of their own, as for any chain ID), and
    so do its subchains (gemmi names them after the chain: ``xp`` → ``Axp``), the SEQRES entity of
    the blank chain and the LINK / SSBOND partners. A SEQRES naming another chain is not taken
    for it (a file may hold SEQRES of chains it has no atoms of): that ID stays unused.
    """
    model = st[0]
    blank = [ch for ch in model if not ch.name.strip()]
    if not blank:
        return
    taken = {ch.name for ch in model} | {ent.name for ent in st.entities if len(ent.full_sequence)}
    name = next((n for n in _CHAIN_NAMES if n not in taken), None)
    if name is None:
        raise TokenizeError(f"a chain has a blank chain ID and all of {_CHAIN_NAMES} are taken: give it a "
                            "chain ID (column 22 of its ATOM / HETATM records)", stage="tokenize")  # fmt: skip
    old = {res.subchain for ch in blank for res in ch}
    for ch in blank:
        ch.name = name
        for res in ch:
            res.subchain = name + res.subchain
    for ent in st.entities:
        ent.subchains = [name + sub if sub in old else sub for sub in ent.subchains]
    for conn in st.connections:
        for partner in (conn.partner1, conn.partner2):
            if not partner.chain_name.strip():
                partner.chain_name = name
    n_residues = sum(len(ch) for ch in blank)
    warnings.append(f"{n_residues} residues have a blank chain ID: named chain {name}, the first ID that no "
                    "chain or SEQRES of the file uses")  # fmt: skip


def _waters_after_polymer(st: gemmi.Structure, warnings: list[str]) -> None:
    """Move the waters that a PDB chain lists before one of its ATOM records to the chain's end,
    in place, with a warning naming them (review R25a s43 #7).

    gemmi's ``setup_entities`` ends a PDB chain's polymer at its first residue that is tabulated
    and cannot link (``infer_polymer_end``), so one HOH among the ATOM records made every residue
    after it a ligand chain of its own (1A8O with one such line: 57 chains, 559 tokens instead of 1
    and 70), while the polymer kept them as unresolved. Waters are dropped from the tokens anyway;
    after the chain's last ATOM record they end nothing (wwPDB files list them there).
    """
    for ch in st[0]:
        last_atom = max((i for i, r in enumerate(ch) if r.het_flag == "A" and r.name not in WATER_NAMES),
                        default=-1)  # fmt: skip
        inside = [i for i in range(last_atom) if ch[i].name in WATER_NAMES]
        if not inside:
            continue
        where = [f"{ch[i].name} {ch[i].seqid}" + (f" after {ch[i - 1].name} {ch[i - 1].seqid}" if i else "")
                 for i in inside]  # fmt: skip
        for i in inside:  # appended copies first: the indices stay those of the originals
            ch.add_residue(ch[i])
        for i in reversed(inside):
            del ch[i]
        warnings.append(f"chain {ch.name}: {len(inside)} water residue(s) among the ATOM records of its polymer "
                        f"({first_named(where, 3)}): read as waters after the polymer, which stays one chain")  # fmt: skip


def _require_label_asym_ids(st: gemmi.Structure) -> None:
    """Refuse an mmCIF / BinaryCIF whose atoms lack ``label_asym_id`` (``.`` or ``?``): nothing
    then says which entity a residue belongs to, and gemmi puts all of a chain's residues,
    protein, ligands and waters, into one subchain of no entity (a ligand of per-atom tokens)."""
    for ch in st[0]:
        unlabelled = [res for res in ch if not res.subchain]
        if unlabelled:
            res = unlabelled[0]
            raise TokenizeError(
                f"{len(unlabelled)} residues of chain {ch.name or '(blank)'} have no label_asym_id "
                f"('.' or '?'; the first: {res.name} {res.seqid}): the file does not say which entity "
                "they belong to; write their label_asym_id (as in _struct_asym)",
                stage="tokenize",
            )


def _mse_to_met(st: gemmi.Structure) -> int:
    """Rename selenomethionine to methionine in place (AF3 supplement §2.1); returns how many.

    Residue ``MSE`` → ``MET``, atom ``SE`` → ``SD`` with element S; coordinates, occupancy,
    B-factor and charge are kept. Entity sequences and ``struct_conn`` partners are renamed the
    same way, so they still match the residues (sequence positions, bond lookup).
    """
    sulfur = gemmi.Element("S")
    n = 0
    for model in st:
        for chain in model:
            for res in chain:
                if res.name != "MSE":
                    continue
                res.name = "MET"
                res.het_flag = "A"
                for atom in res:
                    if atom.name == "SE":
                        atom.name = "SD"
                        atom.element = sulfur
                n += 1
    for ent in st.entities:
        seq = list(ent.full_sequence)
        if any("MSE" in item for item in seq):
            # microheterogeneity is stored as "MSE,MET": rename each alternative
            ent.full_sequence = [
                ",".join("MET" if m == "MSE" else m for m in item.split(",")) for item in seq
            ]
    for conn in st.connections:
        for partner in (conn.partner1, conn.partner2):
            if partner.res_id.name == "MSE":
                partner.res_id.name = "MET"
                if partner.atom_name == "SE":
                    partner.atom_name = "SD"
    return n


#: (auth chain, seq num, icode, residue name) of a residue in the file
_ResKey = tuple[str, int, str, str]


@dataclass(frozen=True)
class _Context:
    component_atoms: ComponentAtoms | None
    #: residue -> names of its atoms with a covalent bond to another residue (AF3's polymer-ligand
    #: and ligand-ligand bonds: struct_conn ``covale``, at most 2.4 Å where both atoms are found)
    links: dict[_ResKey, set[str]]
    #: (residue, its bonded atom's name, the residue at the bond's other end) for each of those
    #: bonds, both ways round
    linked: set[tuple[_ResKey, str, _ResKey]]
    warnings: list[str]
    #: atoms dropped for a name their residue already has (:func:`_select_atoms`)
    duplicate_atoms: list[str] = field(default_factory=list)


def _res_key(auth_id: str, res: gemmi.Residue) -> _ResKey:
    return (auth_id, int(res.seqid.num or 0), res.seqid.icode.strip(), res.name)


def _inter_residue_links(
    st: gemmi.Structure,
) -> tuple[dict[_ResKey, set[str]], set[tuple[_ResKey, str, _ResKey]]]:
    """Atoms of each residue covalently bonded to another residue (for glycans' leaving O1), and
    each such bond as (residue, its atom's name, other residue), both ways round (for caps at a
    polymer chain's ends: only a bond through the end residue's backbone atom makes one)."""
    model = st[0]
    out: dict[_ResKey, set[str]] = {}
    pairs: set[tuple[_ResKey, str, _ResKey]] = set()
    for conn in st.connections:
        if conn.type != gemmi.ConnectionType.Covale or conn.asu == gemmi.Asu.Different:
            continue
        ends = []
        for p in (conn.partner1, conn.partner2):
            key = (
                str(p.chain_name),
                int(p.res_id.seqid.num or 0),
                p.res_id.seqid.icode.strip(),
                p.res_id.name,
            )
            ends.append((key, str(p.atom_name), model.find_cra(p).atom))
        (k1, n1, a1), (k2, n2, a2) = ends
        if k1 == k2:
            continue
        if a1 is not None and a2 is not None and a1.pos.dist(a2.pos) > _MAX_LINK_LENGTH:
            continue
        out.setdefault(k1, set()).add(n1)
        out.setdefault(k2, set()).add(n2)
        pairs.add((k1, n1, k2))
        pairs.add((k2, n2, k1))
    return out, pairs


# --------------------------------------------------------------------------------------- chains
def _collect_chains(st: gemmi.Structure, ctx: _Context) -> list[_Chain]:
    model = st[0]
    polymer_chains: list[_Chain] = []
    ligand_chains: list[_Chain] = []
    spans = [(str(ch.name), span) for ch in model for span in ch.subchains()]
    for auth_id, span in spans:
        residues = [r for r in span if r.name not in WATER_NAMES]
        if not residues:
            continue
        sub_id = span.subchain_id() or residues[0].subchain or auth_id
        ent = st.get_entity_of(span)
        if ent is not None and ent.entity_type == gemmi.EntityType.Polymer:
            chain, embedded = _polymer_chain(ent, sub_id, auth_id, residues, ctx)
            if chain.residues:
                polymer_chains.append(chain)
            ligand_chains.extend(embedded)
        else:
            chain = _Chain(sub_id, auth_id, MolType.LIGAND)
            for i, res in enumerate(_dedupe_microhetero(residues), start=1):
                chain.residues.append(_ligand_residue(res, i, auth_id, ctx))
            ligand_chains.append(chain)
    return polymer_chains + ligand_chains


def _dedupe_microhetero(residues: list[gemmi.Residue]) -> list[gemmi.Residue]:
    """One residue per sequence position: of two or more (microheterogeneity), the one with the
    highest occupancy, as AF3's ``ResolveMmcifAltLocs`` picks a residue type at one position.

    A residue's occupancy is the sum over its altloc letters of the mean occupancy of its atoms
    under that letter (atoms without an altloc count as one more group); ties go to the residue
    whose alphabetically first altloc letter comes first, then to the first in the file. The kept
    residues stay in file order.
    """
    by_key: dict[tuple[int | None, str, int | None], gemmi.Residue] = {}
    order: list[tuple[int | None, str, int | None]] = []
    for res in residues:
        key = (res.seqid.num, res.seqid.icode, res.label_seq)
        best = by_key.get(key)
        if best is None:
            by_key[key] = res
            order.append(key)
        elif _microhetero_rank(res) < _microhetero_rank(best):
            by_key[key] = res
    return [by_key[k] for k in order]


def _microhetero_rank(res: gemmi.Residue) -> tuple[float, str]:
    """Sort key of one residue among those at one position (smallest wins): its occupancy,
    negated (:func:`_dedupe_microhetero`), then its alphabetically first altloc letter."""
    occ: dict[str, list[float]] = {}
    for a in res:
        occ.setdefault(a.altloc, []).append(a.occ)
    total = sum(sum(v) / len(v) for v in occ.values())
    letters = sorted(k for k in occ if k != "\0")
    return -total, letters[0] if letters else ""


def _chain_mol_type(ent: gemmi.Entity, residues: list[gemmi.Residue]) -> MolType:
    pt = ent.polymer_type
    if pt in (gemmi.PolymerType.PeptideL, gemmi.PolymerType.PeptideD):
        return MolType.PROTEIN
    if pt == gemmi.PolymerType.Rna:
        return MolType.RNA
    if pt == gemmi.PolymerType.Dna:
        return MolType.DNA
    counts = {MolType.PROTEIN: 0, MolType.RNA: 0, MolType.DNA: 0}
    for r in residues:
        t = _residue_kind(r.name)
        if t is not None:
            counts[t] += 1
    return max(counts, key=lambda k: (counts[k], -int(k)))


def _residue_kind(name: str) -> MolType | None:
    if name in _PROTEIN_SET:
        return MolType.PROTEIN
    if name in RNA_RESIDUES:
        return MolType.RNA
    if name in DNA_RESIDUES:
        return MolType.DNA
    info = gemmi.find_tabulated_residue(name)
    if info is None:
        return None
    if info.is_amino_acid():
        return MolType.PROTEIN
    if info.is_nucleic_acid():
        return MolType.DNA if info.kind == gemmi.ResidueKind.DNA else MolType.RNA
    return None


def _polymer_chain(
    ent: gemmi.Entity,
    sub_id: str,
    auth_id: str,
    residues: list[gemmi.Residue],
    ctx: _Context,
) -> tuple[_Chain, list[_Chain]]:
    mol_type = _chain_mol_type(ent, residues)
    chain = _Chain(sub_id, auth_id, mol_type)
    use_full = bool(ent.full_sequence) and all(r.label_seq is not None for r in residues)
    polymer: list[gemmi.Residue] = []
    embedded: list[_Chain] = []
    residues = _dedupe_microhetero(residues)
    full_seq = _entity_sequence(ent, residues)
    known = [_is_polymer_residue(res, full_seq if use_full else None, mol_type) for res in residues]
    if not use_full and any(known):
        # Without the entity sequence, a residue the tables do not know as this chain's kind
        # (PXA in actinomycin) stays in the chain when it lies between the chain's polymer
        # residues (AF3 keeps a polymer chain's non-standard residues, as per-atom tokens).
        # Before the first or after the last one it stays only when it is bonded into the chain
        # through the end residue's backbone (a cap: 7a4d's ACE before LEU 2 and NH2 after LEU 41,
        # :func:`_bonded_into_chain`), residue by residue outwards; else it is a ligand that a
        # rewritten assembly put into the polymer's subchain (721p: MG and GNP after HIS 166; a
        # ligand bonded to the end residue's side chain).
        first = known.index(True)
        last = len(known) - 1 - known[::-1].index(True)
        known = [k or first < i < last for i, k in enumerate(known)]
        for i in range(first - 1, -1, -1):
            if not _bonded_into_chain(residues[i], residues[i + 1], False, mol_type, auth_id, ctx):
                break
            known[i] = True
        for i in range(last + 1, len(residues)):
            if not _bonded_into_chain(residues[i], residues[i - 1], True, mol_type, auth_id, ctx):
                break
            known[i] = True
    for res, in_chain in zip(residues, known, strict=True):
        if in_chain:
            polymer.append(res)
        else:
            lig = _Chain(
                f"{sub_id}_{res.name}{res.seqid.num}{res.seqid.icode.strip()}", auth_id, MolType.LIGAND
            )
            lig.residues.append(_ligand_residue(res, 1, auth_id, ctx))
            embedded.append(lig)
    if use_full:
        by_pos: dict[int, gemmi.Residue] = {}
        for res in polymer:
            by_pos.setdefault(int(res.label_seq or 0), res)
        for pos, name in enumerate(full_seq, start=1):
            present = by_pos.get(pos)
            ends = (pos == 1, pos == len(full_seq))
            chain.residues.append(_polymer_residue(present.name if present else name, present, pos, mol_type,
                                                   auth_id, ends, ctx))  # fmt: skip
    else:
        # residue_index is the residue's number in the input chain (SI Table 5): label_seq_id
        # when the file gives one to each residue (gaps in it are kept), else 1, 2, 3 …
        seq_ids = [r.label_seq for r in polymer]
        numbered = all(i is not None for i in seq_ids) and len(set(seq_ids)) == len(seq_ids)
        for k, res in enumerate(polymer, start=1):
            pos = int(res.label_seq or 0) if numbered else k
            ends = (k == 1, k == len(polymer))
            chain.residues.append(_polymer_residue(res.name, res, pos, mol_type, auth_id, ends, ctx))
    return chain, embedded


def _entity_sequence(ent: gemmi.Entity, residues: list[gemmi.Residue]) -> list[str]:
    """The entity sequence of one chain, one residue name per position: where the entity lists
    two or more (microheterogeneity, ``"PRO,SER"``), the one of the chain's residues at that
    position (``residues``: one per position, :func:`_dedupe_microhetero`), else the first listed
    (the position is unresolved). The chain's sequence, and so its MSA query, follows the residue
    chosen."""
    chosen = {int(r.label_seq): r.name for r in residues if r.label_seq is not None}
    out: list[str] = []
    for pos, item in enumerate(ent.full_sequence, start=1):
        names = item.split(",")
        name = chosen.get(pos)
        out.append(name if name in names else names[0])
    return out


#: The chain's atom a residue before its first residue (False) / after its last one (True) bonds
#: to, as the chain's own residues do: peptide bond C–N, phosphodiester O3'–P.
_LINK_ATOM = {
    MolType.PROTEIN: {False: "N", True: "C"},
    MolType.RNA: {False: "P", True: "O3'"},
    MolType.DNA: {False: "P", True: "O3'"},
}
#: Å added to the sum of covalent radii for a bond read from the coordinates (as
#: ``featurize.bonds.PERCEPTION_TOLERANCE``).
_BOND_TOLERANCE = 0.45


def _bonded_into_chain(
    res: gemmi.Residue,
    neighbour: gemmi.Residue,
    after: bool,
    chain_type: MolType,
    auth_id: str,
    ctx: _Context,
) -> bool:
    """Whether ``res``, next to the chain's end residue ``neighbour`` (``after``: it follows it), is
    part of the chain: bonded to the atom through which the chain continues (``neighbour``'s N
    before a protein chain, C after it; P before a nucleic acid chain, O3' after it), as a peptide
    or phosphodiester bond would be. Either a covalent ``struct_conn`` / LINK bond names that atom
    (AF3's bonds: ``covale``, at most 2.4 Å), or else (a file without ``struct_conn`` / LINK
    records for it) an atom of ``res`` other than a metal lies within bonding distance (covalent
    radii + :data:`_BOND_TOLERANCE`) of it.

    A metal ion coordinated by the end residue, a ligand in contact with it (no atom within
    bonding distance of that atom), or a ligand bonded to its side chain (a glycan on ASN ND2, an
    acyl-enzyme's ester on SER OG, an inhibitor on CYS SG: AF3 keeps it a ligand, joined by a
    polymer–ligand bond) is not bonded this way.
    """
    link_name = _LINK_ATOM.get(chain_type, {}).get(after)
    if link_name is None:
        return False
    if (_res_key(auth_id, neighbour), link_name, _res_key(auth_id, res)) in ctx.linked:
        return True
    link = [a for a in neighbour if a.name == link_name]
    if not link:
        return False
    anchor = link[0]
    reach = anchor.element.covalent_r + _BOND_TOLERANCE
    for a in res:
        if a.element.is_metal or a.element.name.upper() in HYDROGEN_ELEMENTS:
            continue
        d = a.pos.dist(anchor.pos)
        if 0.4 < d <= reach + a.element.covalent_r:
            return True
    return False


def _is_polymer_residue(res: gemmi.Residue, full_seq: list[str] | None, chain_type: MolType) -> bool:
    if full_seq is not None:
        pos = int(res.label_seq or 0)
        return 1 <= pos <= len(full_seq) and res.name == full_seq[pos - 1]
    if res.name in _ONE_TOKEN:
        return True
    kind = _residue_kind(res.name)
    return kind is not None and (kind == chain_type or {kind, chain_type} <= {MolType.RNA, MolType.DNA})


# ------------------------------------------------------------------------------------- residues
def _select_atoms(res: gemmi.Residue, auth_id: str, ctx: _Context) -> list[gemmi.Atom]:
    """Heavy atoms of ``res`` after resolving altlocs as AF3's ``ResolveMmcifAltLocs``, in file order.

    Atoms without an altloc are kept. Of the atoms with one name under several altloc letters:
    when every atom of the residue has an altloc, the residue's best letter (highest mean
    occupancy; ties: alphabetically first) decides, and a name that letter lacks keeps its first
    atom in the file (an atom modelled only under another letter is not lost); otherwise each name
    keeps its atom of highest occupancy (ties: the alphabetically first letter), and an atom without
    altloc wins over those of its name with one (named in ``ctx.duplicate_atoms`` where they lie
    elsewhere: the file left a letter out). Unlike AF3, which compares only atoms written next to
    each other, atoms of one name are compared wherever the residue lists them.

    Of two atoms with one name and altloc the first in the file is kept. One at the same position is
    a repeated line; one elsewhere is another atom that a misnamed line made unreachable (``CB``
    written ``CA``), named in ``ctx.duplicate_atoms``.
    """
    unique: list[gemmi.Atom] = []
    kept: dict[tuple[str, str], gemmi.Atom] = {}
    for a in res:
        if a.element.name.upper() in HYDROGEN_ELEMENTS:
            continue
        first = kept.get((a.name, a.altloc))
        if first is None:
            kept[(a.name, a.altloc)] = a
            unique.append(a)
        elif (first.pos.x, first.pos.y, first.pos.z) != (a.pos.x, a.pos.y, a.pos.z):
            ctx.duplicate_atoms.append(_duplicate_atom(res, auth_id, first, a))
    alternatives: dict[str, list[gemmi.Atom]] = {}
    for a in unique:
        if a.altloc != "\0":
            alternatives.setdefault(a.name, []).append(a)
    if not alternatives:
        return unique
    plain = {a.name: a for a in unique if a.altloc == "\0"}
    chosen: set[int] = set()
    if not plain:
        occ: dict[str, list[float]] = {}
        for a in unique:
            occ.setdefault(a.altloc, []).append(a.occ)
        best = min(occ, key=lambda k: (-sum(occ[k]) / len(occ[k]), k))
        for group in alternatives.values():
            chosen.add(id(next((a for a in group if a.altloc == best), group[0])))
    else:
        for name, group in alternatives.items():
            if name not in plain:
                chosen.add(id(min(group, key=lambda a: (-a.occ, a.altloc))))
                continue
            # an altloc atom beside one of its name without altloc (disordered.pdb's ARG 27 CZ, its
            # altloc A letter left out): the file's mistake, named where the positions differ
            kept_atom = plain[name]
            for a in group:
                if (kept_atom.pos.x, kept_atom.pos.y, kept_atom.pos.z) != (a.pos.x, a.pos.y, a.pos.z):
                    ctx.duplicate_atoms.append(
                        _duplicate_atom(res, auth_id, kept_atom, a, "the one without an altloc")
                    )
    return [a for a in unique if a.altloc == "\0" or id(a) in chosen]


def _duplicate_atom(
    res: gemmi.Residue,
    auth_id: str,
    first: gemmi.Atom,
    dropped: gemmi.Atom,
    kept: str = "the first in the file",
) -> str:
    """The warning for ``dropped``, an atom of ``res`` named as ``first`` (the one ``kept``) is, at
    another position."""
    altloc = f" (altloc {dropped.altloc})" if dropped.altloc != "\0" else ""
    return (f"chain {auth_id} residue {res.name} {res.seqid.num}{res.seqid.icode.strip()}: two atoms named "
            f"{dropped.name}{altloc} at different positions, {_xyz(first)} and {_xyz(dropped)}; {kept} "
            "is kept, the other is dropped")  # fmt: skip


def _xyz(atom: gemmi.Atom) -> str:
    return f"({atom.pos.x:.3f}, {atom.pos.y:.3f}, {atom.pos.z:.3f})"


def _duplicate_atom_warnings(duplicates: list[str]) -> list[str]:
    """:func:`_select_atoms`' warnings, up to :data:`MAX_DUPLICATE_ATOM_WARNINGS`; the rest counted
    (a file whose models were written without MODEL records repeats every atom)."""
    out = duplicates[:MAX_DUPLICATE_ATOM_WARNINGS]
    if len(duplicates) > MAX_DUPLICATE_ATOM_WARNINGS:
        out.append(f"{len(duplicates) - MAX_DUPLICATE_ATOM_WARNINGS} more atoms dropped for a name their residue "
                   "already has at another position (the first in the file is kept)")  # fmt: skip
    return out


def _element_number(atom: gemmi.Atom, res_name: str) -> int:
    z = atom.element.atomic_number
    if z > 0:
        return int(z)
    # Unknown type symbol (some rewritten files): single-atom ions are named after their element.
    for guess in (atom.name.strip(), res_name.strip(), atom.name.strip()[:1]):
        el = gemmi.Element(guess.capitalize() if len(guess) <= 2 else guess[:1])
        if el.atomic_number > 0:
            return int(el.atomic_number)
    return 0


def _atom_rec(a: gemmi.Atom, res_name: str) -> _AtomRec:
    """An atom of the file; its charge None where the file states none: gemmi's 0 that the parser did
    not flag as stated (``parse.atom_site.STATED_ZERO_CHARGE``)."""
    charge = int(a.charge) if a.charge != 0 or a.flag == STATED_ZERO_CHARGE else None
    return _AtomRec(a.name, _element_number(a, res_name), (a.pos.x, a.pos.y, a.pos.z), True, charge,
                    float(a.occ), float(a.b_iso))  # fmt: skip


def _absent(name: str, element: str) -> _AtomRec:
    """An atom the file does not have: no coordinates, occupancy or B-factor; element from the
    definition; charge None (as for an atom whose file states none: :func:`_residue_charges`)."""
    return _AtomRec(
        name, int(gemmi.Element(element.capitalize()).atomic_number), (0.0, 0.0, 0.0), False, None, 0.0, 0.0
    )


def _polymer_residue(
    name: str,
    present: gemmi.Residue | None,
    pos: int,
    chain_type: MolType,
    auth_id: str,
    ends: tuple[bool, bool],
    ctx: _Context,
) -> _Residue:
    """One residue of a polymer chain; ``ends``: (starts the chain, ends the chain)."""
    auth = (
        (auth_id, int(present.seqid.num or 0), present.seqid.icode.strip()) if present is not None else None
    )
    selected = _select_atoms(present, auth_id, ctx) if present is not None else []
    if name in _ONE_TOKEN:
        mol_type = _residue_kind(name) or chain_type
        by_name = {a.name: a for a in selected}
        drop = _leaving_atoms(chain_type, ends, set(by_name))
        atoms = []
        for atom_name, element in standard_heavy_atoms(name, leaving=True):
            if atom_name in drop:
                continue
            a = by_name.get(atom_name)
            atoms.append(_atom_rec(a, name) if a is not None else _absent(atom_name, element))
        if name == "ARG":
            _fix_arginine(atoms)
        restype = RESTYPE_INDEX[name]
        # where the file states no charge for the residue: the definition's (ARG NH2 +1)
        charges = standard_heavy_atom_charges(name)
        return _Residue(
            name, atoms, True, mol_type, restype, _letter(name, mol_type), pos, auth, charges=charges
        )
    # modified / non-standard polymer residue: one token per heavy atom
    restype, letter = _parent_type(name, chain_type)
    defined = ctx.component_atoms(name) if ctx.component_atoms is not None else None
    where = f"{name} {auth[0]}{auth[1]}{auth[2]}" if auth is not None else f"{name} at position {pos}"
    flat: list[_AtomRec] | None = None
    if defined is not None and defined.atoms:
        drop = _leaving_atoms(chain_type, ends, {a.name for a in selected})
        flat = _ccd_atoms(name, selected, defined, drop, where, ctx.warnings)
    from_definition = flat is not None
    if flat is None:
        if present is not None:
            flat = [_atom_rec(a, name) for a in selected]
        else:
            # No definition: keep the position as a single unresolved token at the centre atom.
            centre = CENTRE_ATOM.get(chain_type, "CA")
            flat = [_absent(centre, "C")]
            ctx.warnings.append(f"unresolved non-standard residue {name} at position {pos} has no component "
                                f"definition; kept as one unresolved token")  # fmt: skip
    charges = _definition_charges(defined) if from_definition and defined is not None else {}
    return _Residue(name, flat, False, chain_type, restype, letter, pos, auth, from_definition, charges)


def _leaving_atoms(chain_type: MolType, ends: tuple[bool, bool], file_names: set[str]) -> set[str]:
    """The leaving atoms a polymer residue has lost, as AF3's ``get_link_drop_atoms`` (standard
    and per-atom residues alike); ``ends``: (starts the chain, ends the chain), by the entity
    sequence when the file gives it (AF3 ``residues_from_structure(include_missing_residues=True)``:
    the first / last residue of ``all_residues``), else by the file's residues.

    A protein chain's residue loses OXT unless it ends the chain or the file has its OXT (AF3
    then takes the residue for a C terminus); an RNA / DNA chain's residue loses OP3 unless it
    starts the chain (a file's OP3 elsewhere is dropped). The kind of chain decides, not the
    residue's. Hydrogens (H2, H3, HXT) are never tokens, so they are not listed.
    """
    if chain_type == MolType.PROTEIN:
        return set() if ends[1] or "OXT" in file_names else {"OXT"}
    if chain_type in (MolType.RNA, MolType.DNA):
        return set() if ends[0] else {"OP3"}
    return set()


def _ccd_atoms(
    name: str,
    selected: list[gemmi.Atom],
    defined: ComponentAtomSet,
    drop: set[str],
    where: str,
    warnings: list[str],
) -> list[_AtomRec] | None:
    """A per-atom residue's atoms as AF3 lays them out: every heavy atom of the definition but
    ``drop``, in CCD order, the file's data where the file has the atom, else unresolved.

    None (the caller keeps the file's atoms, warned) when the file has an atom the definition does
    not name: the file follows another naming of the component (1GBT's GBS, 4oz7's 22W: an older
    CCD version), so atoms matched by name could be the wrong atoms. AF3 drops such atoms
    (``drop_non_standard_atoms``) and would keep the few names that happen to match; the file's
    own atoms stay self-consistent (bonds and reference conformer perceived from them).
    """
    by_name = {a.name: a for a in selected}
    defined_names = {n for n, _, _ in defined.atoms}
    extra = [n for n in by_name if n not in defined_names]
    if extra:
        warnings.append(f"{where}: atom(s) {', '.join(extra)} not in the component definition of {name}; "
                        f"tokens from the file's atoms, as written")  # fmt: skip
        return None
    return [
        _atom_rec(by_name[n], name) if n in by_name else _absent(n, el)
        for n, el, _ in defined.atoms
        if n not in drop
    ]


def _definition_charges(defined: ComponentAtomSet) -> dict[str, int]:
    """Atom name -> formal charge of a component definition's heavy atoms."""
    return {n: charge for n, _, charge in defined.atoms}


def _residue_charges(res: _Residue) -> list[int]:
    """The formal charge of each atom of ``res``, decided per residue (module doc): where the file
    states a charge for any of its atoms, the file's (0 where it states none or lacks the atom);
    else the definition's (``res.charges``), 0 for a name it does not charge.

    Per residue, not per atom (review R41a s51 #1): a file that writes only its non-zero charges
    (gemmi's writers, most tools) puts a residue's charge on one atom and leaves the others blank,
    and that atom need not be the one the CCD charges (HIS NE2 +1 where the CCD has ND1 +1; an
    ARG whose NH2 +1 the arginine swap moved to NH1). Taking the blanks as unstated gave those
    residues +2. The swap only exchanges two atoms' records, so it cannot change this decision."""
    if any(a.charge is not None for a in res.atoms):
        return [a.charge if a.charge is not None else 0 for a in res.atoms]
    return [res.charges.get(a.name, 0) for a in res.atoms]


def _fix_arginine(atoms: list[_AtomRec]) -> bool:
    """Make NH1 the guanidinium nitrogen closer to CD (AF3 supplement §2.1); True if swapped.

    NH1 and NH2 are chemically equivalent but named by their position relative to CD; files do
    not always follow that. When CD, NH1 and NH2 are all present and d(CD, NH1) > d(CD, NH2), the
    two records exchange everything but their names — as if the file had named them the other
    way round. Anything missing: left as it is (the ambiguity cannot be resolved).
    """
    by_name = {a.name: a for a in atoms}
    cd, nh1, nh2 = by_name.get("CD"), by_name.get("NH1"), by_name.get("NH2")
    if cd is None or nh1 is None or nh2 is None or not (cd.present and nh1.present and nh2.present):
        return False
    centre = np.asarray(cd.coords, dtype=np.float64)
    d1 = np.linalg.norm(np.asarray(nh1.coords, dtype=np.float64) - centre)
    d2 = np.linalg.norm(np.asarray(nh2.coords, dtype=np.float64) - centre)
    if d1 <= d2:
        return False
    for attr in ("coords", "charge", "occupancy", "b_factor"):
        first, second = getattr(nh1, attr), getattr(nh2, attr)
        setattr(nh1, attr, second)
        setattr(nh2, attr, first)
    return True


def _letter(name: str, mol_type: MolType) -> str:
    if mol_type == MolType.PROTEIN:
        return PROTEIN_ONE_LETTER[PROTEIN_RESIDUES.index(name)] if name in PROTEIN_RESIDUES else "X"
    if mol_type == MolType.RNA:
        return name if name in RNA_RESIDUES else "N"
    return name[1] if name in DNA_RESIDUES else "N"


def _parent_type(name: str, chain_type: MolType) -> tuple[int, str]:
    """restype and sequence letter of a modified residue: its parent's when gemmi knows it."""
    info = gemmi.find_tabulated_residue(name)
    parent = info.one_letter_code.upper() if info is not None else " "
    if chain_type == MolType.PROTEIN:
        if parent in PROTEIN_ONE_LETTER:
            return PROTEIN_ONE_LETTER.index(parent), parent
        return UNK_PROTEIN, "X"
    if chain_type == MolType.RNA:
        return (RESTYPE_INDEX[parent], parent) if parent in "AGCU" else (UNK_RNA, "N")
    if chain_type == MolType.DNA:
        return (RESTYPE_INDEX["D" + parent], parent) if parent in "AGCT" else (UNK_DNA, "N")
    return UNK_PROTEIN, "X"


def _ligand_residue(res: gemmi.Residue, index: int, auth_id: str, ctx: _Context) -> _Residue:
    selected = _select_atoms(res, auth_id, ctx)
    auth = (auth_id, int(res.seqid.num or 0), res.seqid.icode.strip())
    defined = ctx.component_atoms(res.name) if ctx.component_atoms is not None else None
    atoms: list[_AtomRec] | None = None
    if defined is not None and defined.atoms:
        drop: set[str] = set()
        if defined.glycan and "O1" not in ctx.links.get(_res_key(auth_id, res), set()):
            # AF3's training regime (run_alphafold.py --fix_standalone_glycans=False, the
            # default): a glycan ligand loses O1 unless O1 itself is bonded to another residue,
            # also when it is bonded to nothing (a "standalone" glycan).
            drop.add("O1")
        where = f"{res.name} {auth_id}{auth[1]}{auth[2]}"
        atoms = _ccd_atoms(res.name, selected, defined, drop, where, ctx.warnings)
    from_definition = atoms is not None
    if atoms is None:
        atoms = [_atom_rec(a, res.name) for a in selected]
    charges = _definition_charges(defined) if from_definition and defined is not None else {}
    return _Residue(res.name, atoms, False, MolType.LIGAND, UNK_PROTEIN, "", index, auth, from_definition,
                    charges)  # fmt: skip


def residues_without_definition(tokens: np.ndarray, component_atoms: ComponentAtoms) -> dict[str, int]:
    """Per-atom residues (ligands, ions, glycans, modified residues) of one tokenized entry whose
    code ``component_atoms`` does not define, by code: their tokens are the file's atoms (no
    unresolved atoms, no leaving-atom rules). ``tokens``: Token[n_tokens]; a residue is one
    ``(asym_id, residue_index)`` of the non-standard tokens."""
    per_atom = tokens[~tokens["is_standard"]]
    if len(per_atom) == 0:
        return {}
    keys = np.stack(
        [per_atom["asym_id"].astype(np.int64), per_atom["residue_index"].astype(np.int64)], axis=1
    )
    _, first = np.unique(keys, axis=0, return_index=True)
    out: dict[str, int] = {}
    defined: dict[str, bool] = {}
    for row in per_atom["res_name"][first]:
        code = decode_res_name(row)
        if code not in defined:
            comp = component_atoms(code)
            defined[code] = comp is not None and bool(comp.atoms)
        if not defined[code]:
            out[code] = out.get(code, 0) + 1
    return out


# ------------------------------------------------------------------------------------- assemble
def _entity_key(ch: _Chain) -> tuple[str, ...]:
    """What makes two chains one entity: the residue name of each token, in order.

    AF3 (``features._compute_asym_entity_and_sym_id``) keys ``entity_id`` / ``sym_id`` on the
    chain's token-level residue names joined, and nothing else (SI Table 5: "unique integer for
    each distinct sequence"), not on the mmCIF entity: two chains of identical sequence in two
    mmCIF entities are one entity, and copies of a ligand are one entity. A per-atom residue has
    one token per CCD heavy atom there less its leaving atoms, resolved or not
    (``atom_layout.make_flat_atom_layout``), so its name repeats once per token: a residue laid
    out from its definition counts once per token, and copies that lost different leaving atoms
    (a glycan bonded through O1 keeps it) are different entities. Resolved atoms do not count —
    a copy that misses atoms of a modified residue or a ligand is still a copy. A residue whose
    tokens are the file's atoms (no definition: a build without ``--ccd``; or another naming of
    the component) counts once: its token count is what the file resolved, which would split
    copies that miss atoms.
    """
    key: list[str] = []
    for r in ch.residues:
        key.extend([r.name] * (len(r.atoms) if r.from_definition else 1))
    return tuple(key)


def _assemble(chains: list[_Chain], warnings: list[str]) -> Tokenized:
    # Collect plain Python lists and fill the structured arrays column by column: per-row numpy
    # assignment costs ~10 µs a field and dominated tokenization of large entries.
    a_coords: list[tuple[float, float, float]] = []
    a_present: list[bool] = []
    a_element: list[int] = []
    a_charge: list[int] = []
    a_name: list[tuple[int, ...]] = []
    a_uid: list[int] = []
    a_occ: list[float] = []
    a_b: list[float] = []
    a_token: list[int] = []
    t_cols: dict[str, list] = {k: [] for k in ("restype", "residue_index", "asym_id", "entity_id", "sym_id",
                                               "mol_type", "res_name", "is_standard", "is_resolved",
                                               "centre_atom", "atom_start", "atom_count")}  # fmt: skip
    entity_index: dict[tuple[str, ...], int] = {}
    sym_count: dict[int, int] = {}
    out_chains: list[Chain] = []
    lookup: dict[tuple[str, int, str, str, str], int] = {}
    per_atom: list[tuple[int, int, str]] = []
    name_codes: dict[str, tuple[int, ...]] = {}
    ai = ti = uid = 0
    for asym_id, ch in enumerate(chains):
        entity_id = entity_index.setdefault(_entity_key(ch), len(entity_index))
        sym_id = sym_count.get(entity_id, 0)
        sym_count[entity_id] = sym_id + 1
        token_start = ti
        n_resolved = 0
        for res in ch.residues:
            res_code = encode_res_name(res.name)
            first_atom = ai
            # the file's charges where it states any for the residue, else the definition's (module doc)
            a_charge.extend(_residue_charges(res))
            for a in res.atoms:
                a_coords.append(a.coords)
                a_present.append(a.present)
                a_element.append(a.element)
                code = name_codes.get(a.name)
                if code is None:
                    code = name_codes[a.name] = encode_atom_name(a.name)
                a_name.append(code)
                a_uid.append(uid)
                a_occ.append(a.occupancy)
                a_b.append(a.b_factor)
                if a.present and res.auth is not None:
                    lookup.setdefault((res.auth[0], res.auth[1], res.auth[2], res.name, a.name), ai)
                ai += 1
            if res.one_token:
                centre_name = CENTRE_ATOM[res.mol_type]
                names = [a.name for a in res.atoms]
                centre = first_atom + (names.index(centre_name) if centre_name in names else 0)
                spans = [(first_atom, len(res.atoms), centre)]
            else:
                spans = [(first_atom + k, 1, first_atom + k) for k in range(len(res.atoms))]
                if res.atoms:
                    per_atom.append((first_atom, len(res.atoms), res.name))
            for start, count, centre in spans:
                resolved = a_present[centre]
                for key, value in (
                    ("restype", res.restype), ("residue_index", res.residue_index), ("asym_id", asym_id),
                    ("entity_id", entity_id), ("sym_id", sym_id), ("mol_type", int(res.mol_type)),
                    ("res_name", res_code), ("is_standard", res.one_token), ("is_resolved", resolved),
                    ("centre_atom", centre), ("atom_start", start), ("atom_count", count),
                ):  # fmt: skip
                    t_cols[key].append(value)
                a_token.extend([ti] * count)
                n_resolved += int(resolved)
                ti += 1
            uid += 1
        if ch.mol_type == MolType.LIGAND:
            sequence = " ".join(r.name for r in ch.residues)
        else:
            sequence = "".join(r.letter for r in ch.residues)
        out_chains.append(
            Chain(
                asym_id=asym_id,
                label_id=ch.label_id,
                auth_id=ch.auth_id,
                entity_id=entity_id,
                sym_id=sym_id,
                mol_type=int(ch.mol_type),
                sequence=sequence,
                sequence_hash=sequence_hash(sequence, int(ch.mol_type)),
                token_start=token_start,
                token_count=ti - token_start,
                n_resolved=n_resolved,
            )  # fmt: skip
        )
    atoms = np.zeros(ai, dtype=Atom)
    if ai:
        coords = np.asarray(a_coords, dtype=np.float64)
        if np.abs(coords).max() > MAX_COORDINATE:
            raise TokenizeError(_far_atom(chains), stage="tokenize")
        atoms["coords"] = coords.astype(np.float32)
        atoms["is_present"] = a_present
        atoms["element"] = a_element
        atoms["charge"] = a_charge
        atoms["name"] = np.asarray(a_name, dtype=np.uint8)
        atoms["ref_space_uid"] = a_uid
        atoms["occupancy"] = a_occ
        atoms["b_factor"] = a_b
        atoms["token_index"] = a_token
    tokens = np.zeros(ti, dtype=Token)
    if ti:
        for key, values in t_cols.items():
            tokens[key] = np.asarray(values, dtype=np.uint8) if key == "res_name" else values
        tokens["centre_coords"] = atoms["coords"][tokens["centre_atom"]]
    if len(a_token) != ai:  # pragma: no cover - internal consistency
        raise TokenizeError(
            f"internal count mismatch: {len(a_token)} atom tokens for {ai} atoms", stage="tokenize"
        )
    return Tokenized(atoms, tokens, tuple(out_chains), lookup, tuple(per_atom), tuple(warnings))
