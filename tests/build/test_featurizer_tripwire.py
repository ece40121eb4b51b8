"""Tripwire: stored features do not change unless the featurizer version does (review R3 s24 #1).

An entry's key holds ``FEATURIZER_VERSION`` and an MSA's inputs key holds it and the MSA stage's
``MSA_STAGE_VERSION``: that is the whole of what tells an existing store that its features are
out of date (README: "a bump rebuilds"). Four feature changes after 0.5.0 went without a bump, and a
store built before them stayed "up to date" while serving other features than a fresh build.

The independent reason for the recorded values is that version contract, not the code's output
being right: ``tests/data/featurizer_digests.json`` holds, for the versions it names, a sha256 of
each stored array group (atoms, tokens, bonds, interfaces) of the six sample inputs (samples/:
protein, NMR models, protein-DNA with a modified nucleotide, ligands, metal ions, glycans, a PDB
file) and of each of their chains' MSAs, read back from a real build (the session's
``sample_store``). While the versions are those recorded, the stored features must be those
recorded. Reference conformers (component parts; they depend on the RDKit version) are left out;
so is everything of the index but the arrays.

Each entry is recorded with the sha256 of the inputs it was built from (its structure file, the
MSA files its chains' MSAs merged, the CCD files of its residue names; by path under samples/) and is compared whenever
those are unchanged, whatever else changed in samples/: a sample added, changed or removed asks
for a regeneration of its own entry only, and the regeneration refuses to rewrite an entry whose
inputs are unchanged but whose features are not (review RF2 s24 #3: one added sample turned the
whole comparison into "regenerate", and the regeneration then passed a feature change without a
bump).

When this test fails with "features changed": bump ``FEATURIZER_VERSION`` (const.py; for MSA
arrays only, ``MSA_STAGE_VERSION`` in const.py will do) and regenerate the file with::

    .venv/bin/python -m tests.build.test_featurizer_tripwire
"""

from __future__ import annotations

import hashlib
import json
import sys
import tempfile
from pathlib import Path
from typing import Any

import numpy as np

from featurecache.build.msa_stage import MSA_STAGE_VERSION
from featurecache.const import FEATURIZER_VERSION
from tests.conftest import SAMPLES

DIGESTS = Path(__file__).resolve().parents[1] / "data" / "featurizer_digests.json"
REGENERATE = ".venv/bin/python -m tests.build.test_featurizer_tripwire"
GROUPS = ("atoms", "tokens", "bonds", "interfaces")
MSA_ARRAYS = ("residues", "deletions", "species", "source", "profile", "deletion_mean")


def _digest(arrays: list[np.ndarray]) -> str:
    h = hashlib.sha256()
    for a in arrays:
        a = np.ascontiguousarray(a)
        h.update(f"{a.dtype.descr}{a.shape}".encode())
        h.update(a.tobytes())
    return h.hexdigest()[:32]


def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()[:32]


def _ccd_inputs(structure: Path) -> dict[str, str]:
    """sha256 of the sample CCD's files of the components the structure file names (its residue
    names; a component without a file under samples/ccd/ left out, so adding its file changes the
    entry's inputs)."""
    import gemmi

    names = {res.name for model in gemmi.read_structure(str(structure)) for chain in model for res in chain}
    files = [SAMPLES / "ccd" / f"{name}.cif" for name in sorted(names)]
    return {str(p.relative_to(SAMPLES)): _sha(p) for p in files if p.is_file()}


def store_digests(store: Path) -> dict[str, Any]:
    """The digests of the sample store at ``store``: per entry id, one per array group and one per
    chain's MSA (by label chain id and asym number; chains without a stored MSA left out), and the
    ``inputs`` it was built from (path under samples/ -> sha256: its structure file, its MSAs'
    files, the CCD files of its components)."""
    from featurecache.store.reader import open_store

    reader = open_store(store)
    chains = reader.chains.select(["entry_id", "asym_id", "label_id", "msa_key"]).to_pylist()
    msa_files = {
        r["key"]: [label.split("#", 1)[0] for label in r["sources"]]
        for r in reader.msas.select(["key", "sources"]).to_pylist()
    }
    sources = dict(zip(reader.entries.column("id").to_pylist(),
                       reader.entries.column("source_path").to_pylist(), strict=True))  # fmt: skip
    entries: dict[str, Any] = {}
    for eid in sorted(reader.ids):
        groups = reader.read_groups(eid, list(GROUPS))
        doc: dict[str, Any] = {g: _digest([groups[g]]) for g in GROUPS}
        msas = {}
        structure = f"structures/{sources[eid]}"  # source_path: under --pdb-dir
        inputs = {structure: _sha(SAMPLES / structure), **_ccd_inputs(SAMPLES / structure)}
        for c in chains:
            if c["entry_id"] == eid and c["msa_key"]:
                block = reader.msa(c["msa_key"])
                msas[f"{c['label_id']} (asym {c['asym_id']})"] = _digest(
                    [getattr(block, name) for name in MSA_ARRAYS]
                )
                for rel in msa_files.get(c["msa_key"], []):
                    inputs[f"msas/{rel}"] = _sha(SAMPLES / "msas" / rel)
        doc["msas"] = dict(sorted(msas.items()))
        doc["inputs"] = dict(sorted(inputs.items()))
        entries[eid] = doc
    reader.close()
    return entries


def compare(recorded: dict[str, Any], got: dict[str, Any]) -> tuple[list[str], list[str]]:
    """``(changed, stale)`` of the entries ``got`` (:func:`store_digests` now) against those
    ``recorded`` under the same versions. ``changed``: the array groups and MSAs that differ in an
    entry whose inputs are those recorded (a featurizer change: bump the version); ``stale``: the
    entries that cannot be compared, being new, gone, or built from other inputs (regenerate)."""
    changed: list[str] = []
    stale: list[str] = []
    for eid in sorted(set(recorded) | set(got)):
        want, now = recorded.get(eid), got.get(eid)
        if want is None or now is None:
            stale.append(f"{eid} ({'new' if want is None else 'gone'})")
            continue
        if want.get("inputs") != now["inputs"]:
            stale.append(f"{eid} (other inputs)")
            continue
        changed += [f"{eid} {g}" for g in GROUPS if now[g] != want.get(g)]
        changed += [
            f"{eid} MSA of chain {c}"
            for c in sorted(set(want.get("msas", {})) | set(now["msas"]))
            if now["msas"].get(c) != want.get("msas", {}).get(c)
        ]
    return changed, stale


def _record() -> dict[str, Any]:
    return {
        "featurizer_version": FEATURIZER_VERSION,
        "msa_stage_version": MSA_STAGE_VERSION,
        "regenerate": REGENERATE,
    }


def test_stored_features_change_only_with_the_featurizer_version(sample_store: Path) -> None:
    recorded = json.loads(DIGESTS.read_text())
    now = _record()
    versions = ("featurizer_version", "msa_stage_version")
    if any(recorded[k] != now[k] for k in versions):
        raise AssertionError(
            f"the versions were bumped (recorded {[recorded[k] for k in versions]}, the code's "
            f"{[now[k] for k in versions]}): regenerate {DIGESTS.name} with `{REGENERATE}`"
        )
    changed, stale = compare(recorded["entries"], store_digests(sample_store))
    assert not changed, (
        f"features changed: bump FEATURIZER_VERSION{'' if any(' MSA ' not in c for c in changed) else ' (or MSA_STAGE_VERSION)'} "
        f"and regenerate with `{REGENERATE}` (changed: {', '.join(changed)})"
    )
    assert not stale, (
        f"sample inputs changed since {DIGESTS.name} was written: regenerate it with `{REGENERATE}` "
        f"(features of other inputs are not a featurizer change; {', '.join(stale)})"
    )


def test_compare_checks_every_entry_of_unchanged_inputs() -> None:
    """The comparison itself, on hand-made digests: an entry whose inputs are those recorded is
    compared although another sample was added, one changed and one removed."""
    base = {g: "d-" + g for g in GROUPS} | {"msas": {"A (asym 0)": "m"}}
    recorded = {
        "kept": base | {"inputs": {"structures/kept.cif": "1", "ccd/HEM.cif": "2"}},
        "edited": base | {"inputs": {"structures/edited.cif": "3"}},
        "removed": base | {"inputs": {"structures/removed.cif": "4"}},
    }
    got = {
        "kept": base | {"atoms": "other", "msas": {"A (asym 0)": "m2"}, "inputs": recorded["kept"]["inputs"]},
        "edited": base | {"atoms": "other", "inputs": {"structures/edited.cif": "5"}},
        "added": base | {"inputs": {"structures/added.cif": "6"}},
    }
    changed, stale = compare(recorded, got)
    assert changed == ["kept atoms", "kept MSA of chain A (asym 0)"]
    assert stale == ["added (new)", "edited (other inputs)", "removed (gone)"]
    assert compare(recorded, {k: dict(v) for k, v in recorded.items()}) == ([], [])
    # a CCD file changed under an entry: not comparable (its features may follow the CCD)
    ccd = got["kept"] | {"atoms": "d-atoms", "inputs": {"structures/kept.cif": "1", "ccd/HEM.cif": "9"}}
    assert compare({"kept": recorded["kept"]}, {"kept": ccd}) == ([], ["kept (other inputs)"])


def main() -> None:
    """Build the samples into a temporary store (one worker, its own cluster) and write the digests."""
    from featurecache.build.run import run_build

    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "sample"
        summary = run_build(pdb_dir=SAMPLES / "structures", out=out, msa_dir=SAMPLES / "msas",
                            ccd=SAMPLES / "ccd", workers=1, progress=False)  # fmt: skip
        if summary.n_failed:
            sys.exit(f"the sample build failed {summary.n_failed} input(s): {summary.failures}")
        got = store_digests(out)
    if DIGESTS.exists():
        recorded = json.loads(DIGESTS.read_text())
        if all(recorded.get(k) == v for k, v in _record().items() if k != "regenerate"):
            changed, _ = compare(recorded.get("entries", {}), got)
            if changed:  # same versions, same inputs, other features: not a regeneration's business
                sys.exit(
                    f"not regenerated: features changed under featurizer {FEATURIZER_VERSION} / MSA stage "
                    f"{MSA_STAGE_VERSION} for unchanged inputs ({', '.join(changed)}): bump FEATURIZER_VERSION "
                    "(or MSA_STAGE_VERSION) first"
                )
    doc = {**_record(), "entries": got}
    DIGESTS.parent.mkdir(exist_ok=True)
    DIGESTS.write_text(json.dumps(doc, indent=1, sort_keys=True) + "\n")
    print(
        f"wrote {DIGESTS} ({len(doc['entries'])} entries, featurizer {FEATURIZER_VERSION}, MSA stage {MSA_STAGE_VERSION})"
    )


if __name__ == "__main__":
    main()
