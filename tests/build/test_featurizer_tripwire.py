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

When this test fails with "features changed": bump ``FEATURIZER_VERSION`` (const.py; for MSA
arrays only, ``MSA_STAGE_VERSION`` in build/msa_stage.py will do) and regenerate the file with::

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


def _inputs() -> dict[str, str]:
    """sha256 of every sample input a build reads (structures, MSAs, CCD files), by path under samples/."""
    out = {}
    for sub in ("structures", "msas", "ccd"):
        for p in sorted((SAMPLES / sub).rglob("*")):
            if p.is_file():
                out[str(p.relative_to(SAMPLES))] = hashlib.sha256(p.read_bytes()).hexdigest()[:32]
    return out


def store_digests(store: Path) -> dict[str, Any]:
    """The digests of the sample store at ``store``: per entry id, one per array group and one per
    chain's MSA (by label chain id and asym number; chains without a stored MSA left out)."""
    from featurecache.store.reader import open_store

    reader = open_store(store)
    chains = reader.chains.select(["entry_id", "asym_id", "label_id", "msa_key"]).to_pylist()
    entries: dict[str, Any] = {}
    for eid in sorted(reader.ids):
        groups = reader.read_groups(eid, list(GROUPS))
        doc: dict[str, Any] = {g: _digest([groups[g]]) for g in GROUPS}
        msas = {}
        for c in chains:
            if c["entry_id"] == eid and c["msa_key"]:
                block = reader.msa(c["msa_key"])
                msas[f"{c['label_id']} (asym {c['asym_id']})"] = _digest(
                    [getattr(block, name) for name in MSA_ARRAYS]
                )
        doc["msas"] = dict(sorted(msas.items()))
        entries[eid] = doc
    reader.close()
    return entries


def _record() -> dict[str, Any]:
    return {
        "featurizer_version": FEATURIZER_VERSION,
        "msa_stage_version": MSA_STAGE_VERSION,
        "regenerate": REGENERATE,
        "inputs": _inputs(),
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
    assert recorded["inputs"] == now["inputs"], (
        f"the sample inputs changed since {DIGESTS.name} was written: regenerate it with `{REGENERATE}` "
        "(features of other inputs are not a featurizer change)"
    )
    got = store_digests(sample_store)
    want = recorded["entries"]
    assert sorted(got) == sorted(want), f"other entries than recorded: {sorted(got)} vs {sorted(want)}"
    changed = [f"{eid} {g}" for eid in sorted(want) for g in GROUPS if got[eid][g] != want[eid][g]]
    msa_changed = [
        f"{eid} MSA of chain {c}"
        for eid in sorted(want)
        for c in sorted(set(want[eid]["msas"]) | set(got[eid]["msas"]))
        if got[eid]["msas"].get(c) != want[eid]["msas"].get(c)
    ]
    assert not changed and not msa_changed, (
        f"features changed: bump FEATURIZER_VERSION{' (or MSA_STAGE_VERSION)' if not changed else ''} "
        f"and regenerate with `{REGENERATE}` (changed: {', '.join(changed + msa_changed)})"
    )


def main() -> None:
    """Build the samples into a temporary store (one worker, its own cluster) and write the digests."""
    from featurecache.build.run import run_build

    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "sample"
        summary = run_build(pdb_dir=SAMPLES / "structures", out=out, msa_dir=SAMPLES / "msas",
                            ccd=SAMPLES / "ccd", workers=1, progress=False)  # fmt: skip
        if summary.n_failed:
            sys.exit(f"the sample build failed {summary.n_failed} input(s): {summary.failures}")
        doc = {**_record(), "entries": store_digests(out)}
    DIGESTS.parent.mkdir(exist_ok=True)
    DIGESTS.write_text(json.dumps(doc, indent=1, sort_keys=True) + "\n")
    print(
        f"wrote {DIGESTS} ({len(doc['entries'])} entries, featurizer {FEATURIZER_VERSION}, MSA stage {MSA_STAGE_VERSION})"
    )


if __name__ == "__main__":
    main()
