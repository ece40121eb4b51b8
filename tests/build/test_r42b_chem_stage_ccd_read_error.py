"""Review R42b s52 #2, the driver's part: a read error (EIO) on the CCD in the build's chem stage.

The worker's side was fixed in bbb6338; the driver's chem stage (``load_definitions``) still took a
CCD directory's file that the OS did not let it read for a broken definition: the component was
stored as ``failed`` (reason "cannot read the CCD file …"), the build exited 0, and since the
structure parts were recorded as scanned, no later build read the file again: the component
stayed failed, its atoms masked, for good. Now the run has a failure row keyed "" (exit 1), no
failed component is stored (a standard residue gets its packaged definition for now, stored
without a definition hash), and the next build scans the parts again and computes the component
from the CCD. A ``components.cif`` the driver cannot read stops the build with exit 3 and one
line naming the file, the OS's reason and that the build can be run again; the next build resumes.

Real builds (``featurecache build`` in a process of its own, on its embedded LocalCluster) of real
files; the EIO is made by the ``LD_PRELOAD`` shim of ``tests/faults.py`` (compiled with gcc): the
first ``read`` of a file under a given path fails with EIO, once, only in the build's driver (its
command line holds ``--pdb-dir``, its forkserver workers' do not), and only once the last structure
part exists (the driver reads every CCD file at start, for the CCD's fingerprint: the fault is for
the chem stage).
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

import featurecache
from featurecache.parse.ccd import CCD
from tests.conftest import REPO, SAMPLES
from tests.faults import ccd_inputs, cli_build, compiled_shim, fault_env

STANDARD_CIF = REPO / "featurecache" / "chem" / "data" / "standard_components.cif"


@pytest.fixture(scope="module")
def shim(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return compiled_shim(tmp_path_factory, missing="fail")


def _build(pdb: Path, ccd: Path, out: Path, *, shim: Path | None = None, fail: Path | None = None):  # type: ignore[no-untyped-def]
    """``featurecache build`` (1 worker, parts of 1 entry) in a process of its own; with ``shim``,
    the driver's first read of ``fail`` once the last structure part (s-000001) exists fails with EIO."""
    env: dict[str, str] = dict(os.environ)
    if shim is not None:
        assert fail is not None
        env = fault_env(shim, fail, env=env, cmd="--pdb-dir", trigger=out / "parts" / "s-000001")
    return cli_build(pdb, ccd, out, env)


def _block(text: str, code: str) -> str:
    """The ``data_<code>`` block of a CCD text."""
    start = text.index(f"data_{code}\n")
    end = text.find("\ndata_", start)
    return text[start : len(text) if end < 0 else end + 1]


def _components(out: Path) -> dict[str, dict[str, Any]]:
    """The store's components, the latest row of each key."""
    return {r["key"]: r for r in featurecache.open_store(out).components.to_pylist()}


def _chem_warnings(out: Path, code: str) -> list[str]:
    """The store's chem warnings of residues of ``code`` ("43 atom(s) of HEM (x1) get ref_mask=False…")."""
    return [
        m
        for w in featurecache.open_store(out).warnings.to_pylist()
        if w["stage"] == "chem" and (f" of {code} (" in (m := w["message"]) or f" residue {code} (" in m)
    ]


def _output(run: subprocess.CompletedProcess[str]) -> str:
    return run.stdout[-4000:] + run.stderr[-4000:]


@pytest.mark.parametrize("code", ["HEM", "ALA"])
def test_eio_on_a_ccd_file_in_the_chem_stage_fails_the_run_and_the_next_build_computes_it(
    tmp_path: Path, shim: Path, code: str
) -> None:
    """A CCD directory's file (HEM: a ligand, ALA: a standard residue) that the driver cannot read
    once, in the chem stage: exit 1 with a failure row naming the file, no failed component stored;
    the next build, the disk fine again, exits 0 with the component computed from the CCD."""
    pdb = ccd_inputs(tmp_path)
    ccd = tmp_path / "ccd"
    shutil.copytree(SAMPLES / "ccd", ccd)
    if code == "ALA":  # the packaged text: the CCD's definition hashes as the packaged one
        (ccd / "ALA.cif").write_text(_block(STANDARD_CIF.read_text(), "ALA"))
    file = ccd / f"{code}.cif"
    sha = CCD(ccd)[code].sha256
    out = tmp_path / "store"

    first = _build(pdb, ccd, out, shim=shim, fail=file)
    assert first.returncode == 1, _output(first)  # before: 0
    assert "Traceback" not in first.stderr, first.stderr[-4000:]
    line = next(x for x in first.stdout.splitlines() if "CCDReadError" in x)
    assert str(file) in line and "chem" in line, line
    message = " ".join(first.stdout.split())
    assert (
        f"cannot read the CCD file {file} (the definition of {code}): Input/output error (EIO): a read "
        "error of the CCD, not a fault of the definition;"
    ) in message, message[-3000:]
    assert "fix or replace" not in first.stdout + first.stderr
    store = featurecache.open_store(out)
    assert sorted(store.ids) == ["102m", "2q2k"]
    assert store.failures.to_pylist() == []  # no entry failed: the run's row is the chem stage's
    comps = _components(out)
    if code == "HEM":
        assert "HEM" not in comps, comps.get("HEM")  # before: stored as failed, for good
        assert _chem_warnings(out, "HEM"), store.warnings.to_pylist()
    else:
        ala = comps["ALA"]  # the packaged definition for now, without a definition hash
        assert (ala["source"], ala["source_sha256"]) == ("packaged", ""), ala
        assert ala["strategy"] != "failed" and "Input/output error" in ala["reason"], ala
        assert _chem_warnings(out, "ALA") == []

    again = _build(pdb, ccd, out)  # the disk is fine again
    assert again.returncode == 0, _output(again)
    assert "CCDReadError" not in again.stdout
    comp = _components(out)[code]  # before: HEM still failed; ALA still the stand-in
    assert (comp["source"], comp["source_sha256"]) == ("ccd", sha), comp
    assert comp["strategy"] != "failed" and "cannot read" not in comp["reason"], comp
    assert _chem_warnings(out, code) == []
    assert featurecache.open_store(out).failures.to_pylist() == []


def test_eio_on_a_components_cif_in_the_chem_stage_stops_the_build_and_the_next_resumes(
    tmp_path: Path, shim: Path
) -> None:
    """One ``components.cif`` the driver cannot read in the chem stage: no definition at all, so
    the build stops (exit 3) with one line naming the file, the OS's reason and the way out; the
    next build resumes and computes every component."""
    pdb = ccd_inputs(tmp_path)
    ccd = tmp_path / "components.cif"
    ccd.write_text(
        "".join(f.read_text().rstrip("\n") + "\n" for f in sorted((SAMPLES / "ccd").glob("*.cif")))
    )
    out = tmp_path / "store"

    first = _build(pdb, ccd, out, shim=shim, fail=ccd)
    assert first.returncode == 3, _output(first)
    assert "Traceback" not in first.stderr, first.stderr[-4000:]
    errors = [x for x in first.stderr.splitlines() if x.startswith("error:")]
    assert errors == [
        f"error: cannot read the CCD {ccd}: Input/output error (EIO); the build stopped before computing "
        "reference conformers (every part written is kept): run it again once the file reads"
    ], first.stderr[-4000:]
    assert first.stderr.rstrip().endswith(errors[0])

    again = _build(pdb, ccd, out)
    assert again.returncode == 0, _output(again)
    store = featurecache.open_store(out)
    assert sorted(store.ids) == ["102m", "2q2k"]
    comps = _components(out)
    assert comps["HEM"]["strategy"] != "failed" and comps["HEM"]["source"] == "ccd", comps["HEM"]
    assert _chem_warnings(out, "HEM") == []
