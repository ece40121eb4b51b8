"""A stray SIGINT to a build worker during the chem stage does not change the stored conformers
(a review's finding). RDKit sets a SIGINT handler of its own while it embeds; a worker's SIGINT
then cancelled ETKDG and the component fell back to random coordinates or the CCD's coordinates,
committed for good (7CFN's CLR, PLM, FX0; 2q2k's 5IU). The workers now keep SIGINT blocked and
take it in a thread of their own.

Real CLI builds with the real CCD on an embedded LocalCluster: each worker imports a preload
module (before it registers, before any plugin runs) whose thread sends the worker's own process
SIGINT every 5 ms for as long as it lives, so every embedding runs under it (deterministic, where
a timed signal from outside is a race). The reference is the same build without it."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import numpy as np

from featurecache.store.components import load_component_table
from tests.conftest import REPO

INPUTS = ("7CFN.cif", "2q2k.cif")
LIGANDS = {"CLR", "PLM", "FX0", "5IU"}

PRELOAD = """
import os, signal, threading, time

def _stray():
    while True:
        os.kill(os.getpid(), signal.SIGINT)
        time.sleep(0.005)

threading.Thread(target=_stray, daemon=True).start()
"""


def _build(pdb: Path, ccd: Path, out: Path, preload: Path | None) -> subprocess.CompletedProcess[str]:
    cmd = [sys.executable, "-m", "featurecache.cli", "build", "--pdb-dir", str(pdb), "--ccd", str(ccd),
           "--out", str(out), "--workers", "2", "--no-progress"]  # fmt: skip
    env = dict(os.environ)
    if preload is not None:
        env["DASK_DISTRIBUTED__WORKER__PRELOAD"] = repr([str(preload)])
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)  # the child's at its default
    try:
        return subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=300,
                              start_new_session=True)  # fmt: skip
    finally:
        signal.signal(signal.SIGINT, previous)


def _components(out: Path) -> dict[str, tuple[str, np.ndarray, np.ndarray]]:
    t = load_component_table(out)
    return {
        k: (t.strategy[i], t.ref_pos[t.atom_start[i] : t.atom_start[i] + t.atom_count[i]],
            t.mask[t.atom_start[i] : t.atom_start[i] + t.atom_count[i]])
        for i, k in enumerate(t.keys)
    }  # fmt: skip


def test_stray_sigints_to_the_workers_leave_the_conformers_unchanged(
    tmp_path: Path, structures_dir: Path, ccd_dir: Path
) -> None:
    pdb = tmp_path / "pdb"
    pdb.mkdir()
    for name in INPUTS:
        shutil.copy(structures_dir / name, pdb)
    preload = tmp_path / "stray_sigint_preload.py"
    preload.write_text(PRELOAD)
    ref = _build(pdb, ccd_dir, tmp_path / "ref", None)
    assert ref.returncode == 0, ref.stderr[-3000:]
    hit = _build(pdb, ccd_dir, tmp_path / "hit", preload)
    assert hit.returncode == 0, hit.stderr[-3000:]
    assert "Traceback" not in hit.stderr, hit.stderr[-3000:]
    expected, got = _components(tmp_path / "ref"), _components(tmp_path / "hit")
    # the reference embeds the reviewer's components with ETKDG (as tests/chem asserts of them)
    assert LIGANDS <= set(expected) and {expected[k][0] for k in LIGANDS} == {"etkdg"}
    assert sorted(got) == sorted(expected)
    assert {k: v[0] for k, v in got.items()} == {k: v[0] for k, v in expected.items()}
    for key, (_, pos, mask) in expected.items():
        np.testing.assert_array_equal(got[key][1], pos, err_msg=key)
        np.testing.assert_array_equal(got[key][2], mask, err_msg=key)
