"""Readers never see an extension's new entries before its MSA and chem stages have run for them
(review R2 s24 #1). An extension build published its index with the new entries before those
stages (and again on each refresh, and on Ctrl-C): the lookup service and FeatureDataset served
them with no MSA (msa_key "", a 1-row MSA instead of 428) and all-zero ref_pos for their ligand
atoms; a build killed in that window left it so until the next build, with ``info`` silent.

Now the build holds its new structure parts back from the published index until both stages have
run; ``info`` and ``verify`` say that parts are written but not published, and the next build
publishes them with what an uninterrupted build gives them.

Real builds with the real MSAs and CCD: a store of 1A8O and 5y2e; 102m (a protein with HEM and
sulfate ligands, 428-row MSA) added by a CLI build (its own embedded cluster) that is SIGKILLed as
soon as its index rebuild before the MSA stage has run (the kept part rows list the new part).
The reference is the same three inputs built uninterrupted.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from featurecache import open_store
from featurecache.store.verify import verify_store
from tests.conftest import MSAS, REPO, STRUCTURES, build_store
from tests.killed_builds import kill_after_the_pre_msa_rebuild

NEW = "102m"


def _chain_msas(store: object, entry_id: str) -> list[tuple[str, int, bytes]]:
    """Each chain's MSA as stored: its key, depth and the sha of its MSA arrays (b"" without one)."""
    import hashlib

    entry = store.entry(entry_id, arrays=[])  # type: ignore[attr-defined]
    out = []
    for c in entry.chains:
        digest = b""
        if c["msa_key"]:
            block = store.msa(c["msa_key"])  # type: ignore[attr-defined]
            h = hashlib.sha256()
            for name in ("residues", "deletions", "species", "source"):
                h.update(np.ascontiguousarray(getattr(block, name)).tobytes())
            digest = h.digest()
        out.append((c["msa_key"], c["msa_depth"], digest))
    return out


def _ref_pos(store: object, entry_id: str) -> np.ndarray:
    entry = store.entry(entry_id)  # type: ignore[attr-defined]
    return store.reference_features(entry)["ref_pos"]  # type: ignore[attr-defined,no-any-return]


def _served(url: str) -> object:
    """A fresh client of the service (it reopens a changed store within a second)."""
    from featurecache.client.http import LookupClient

    return LookupClient(url, retry_budget_s=0)


def _served_msas(url: str, within_s: float = 0.0) -> list[tuple[str, int]] | None:
    """The new entry's chains' (msa_key, msa_depth) as the service answers; None while it does not
    list the entry (asked again for up to ``within_s``)."""
    deadline = time.monotonic() + within_s
    while True:
        client = _served(url)
        try:
            if NEW in client.ids:  # type: ignore[attr-defined]
                entry = client.entry(NEW, arrays=[])  # type: ignore[attr-defined]
                return [(c["msa_key"], c["msa_depth"]) for c in entry.chains]
        finally:
            client.close()  # type: ignore[attr-defined]
        if time.monotonic() > deadline:
            return None
        time.sleep(0.2)


@pytest.mark.timeout(900)
def test_a_killed_extension_serves_no_entry_without_its_msas_and_the_next_build_publishes_them(
    tmp_path: Path, ccd_dir: Path
) -> None:
    from services.lookup.server import ThreadedServer
    from services.lookup.settings import Settings

    pdb = tmp_path / "pdb"
    pdb.mkdir()
    for name in ("1A8O.cif", "5y2e.cif"):
        shutil.copy(STRUCTURES / name, pdb / name)
    store = tmp_path / "store"
    build_store(store, pdb, workers=1, msa_dir=MSAS, ccd=ccd_dir)
    shutil.copy(STRUCTURES / f"{NEW}.cif", pdb / f"{NEW}.cif")
    reference = tmp_path / "reference"
    build_store(reference, pdb, workers=1, msa_dir=MSAS, ccd=ccd_dir)
    ref = open_store(reference)
    expected_msas = _chain_msas(ref, NEW)
    assert any(depth > 1 for _key, depth, _d in expected_msas)  # 102m's chain A has its 428-row MSA

    expected_served = [(k, d) for k, d, _ in expected_msas]
    with ThreadedServer(Settings(store_path=store)) as url:
        assert _served_msas(url) is None
        kill_after_the_pre_msa_rebuild(store, pdb, MSAS, ccd_dir)

        # what a reader sees now: the new entry is not listed, or listed as an uninterrupted build has it
        killed = open_store(store)
        if NEW in killed.ids:
            assert _chain_msas(killed, NEW) == expected_msas, "the new entry is listed without its MSAs"
            assert np.array_equal(_ref_pos(killed, NEW), _ref_pos(ref, NEW))
        assert set(killed.ids) >= {"1A8O", "5y2e"}
        # the service answers as the reader does (once it has had time to reopen the store)
        time.sleep(1.5)
        assert _served_msas(url) in (None, expected_served)

        # info (exit 0) and verify say that written parts are not published
        info = subprocess.run([sys.executable, "-m", "featurecache.cli", "info", str(store)], cwd=REPO,
                              capture_output=True, text=True, timeout=300)  # fmt: skip
        assert info.returncode == 0, info.stderr
        said = " ".join(info.stderr.split())
        assert "written but not yet published" in said and "1 entry" in said, info.stderr
        problems = verify_store(store)
        assert any("not yet published" in p for p in problems), problems

        # the next build publishes it, from the part already written, as the uninterrupted build has it
        summary = build_store(store, pdb, workers=1, msa_dir=MSAS, ccd=ccd_dir)
        assert summary.n_built == 0 and summary.n_skipped == 3  # nothing built again
        done = open_store(store)
        assert sorted(done.ids) == sorted(ref.ids)
        assert _chain_msas(done, NEW) == expected_msas
        assert np.array_equal(_ref_pos(done, NEW), _ref_pos(ref, NEW))
        assert done.unpublished_parts == []
        assert verify_store(store) == []
        info = subprocess.run([sys.executable, "-m", "featurecache.cli", "info", str(store)], cwd=REPO,
                              capture_output=True, text=True, timeout=300)  # fmt: skip
        assert info.returncode == 0 and "warning" not in info.stderr, info.stderr
        assert _served_msas(url, within_s=30) == expected_served
