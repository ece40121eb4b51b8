"""A build killed between its structure parts and its MSA/chem stages, for the tests of held-back
parts (tests/services/test_extension_visibility.py, tests/store/test_prune_held_parts.py)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def structure_parts(store: Path) -> set[str]:
    return {p.name for p in (store / "parts").iterdir() if p.name.startswith("s-") and p.is_dir()}


def indexed_parts(store: Path) -> set[str]:
    """The parts the last index rebuild took in (its kept part rows' manifest, written after the
    index files)."""
    try:
        return set(json.loads((store / "index" / ".part-rows" / "manifest.json").read_text())["parts"])
    except (OSError, ValueError, KeyError):
        return set()


def kill_build_when(args: list[str], ready: Callable[[], bool], what: str) -> None:
    """Run ``featurecache build ARGS`` (one worker, no progress) as a CLI process and SIGKILL it,
    its embedded cluster too, as soon as ``ready()`` holds (``what``: the moment, for the timeout's
    message); it must still be running then."""
    cmd = [sys.executable, "-m", "featurecache.cli", "build", *args, "--workers", "1", "--no-progress"]
    proc = subprocess.Popen(cmd, cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)  # fmt: skip
    try:
        deadline = time.monotonic() + 300
        while not ready():
            assert proc.poll() is None, f"the build ended first (exit {proc.returncode})"
            assert time.monotonic() < deadline, f"{what} not within 300 s"
            time.sleep(0.005)
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()
    assert proc.returncode == -signal.SIGKILL  # killed, not ended: the stages had not all run


def kill_after_the_pre_msa_rebuild(store: Path, pdb: Path, msas: Path, ccd: Path) -> None:
    """Run the extension as a CLI build and SIGKILL it (its embedded cluster too) once an index
    rebuild has taken in its new structure part (the one before its MSA stage), before the build ends."""
    before = structure_parts(store)
    kill_build_when(
        ["--pdb-dir", str(pdb), "--msa-dir", str(msas), "--ccd", str(ccd), "--out", str(store)],
        lambda: bool(indexed_parts(store) & (structure_parts(store) - before)),
        "no index rebuild took in the new part",
    )
