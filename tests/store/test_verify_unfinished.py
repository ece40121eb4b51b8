"""``featurecache verify`` on a store whose first build has not finished warns (stderr, one line
naming the store), as ``info`` does (tests/store/test_info_index_lag.py): its index lists only the
entries written so far, so what verify checked is partial. The exit status is the same as without
the flag. The store is flagged the way the build does it (``rebuild_index(finished=False)``, what
``build.run`` publishes until its first build ends)."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

from featurecache import open_store
from featurecache.store.index import rebuild_index

REPO = Path(__file__).resolve().parents[2]
WARNING = "its first build has not finished"


def unfinished_copy(sample_store: Path, dest: Path) -> Path:
    """A copy of the sample store whose index is published as an unfinished first build's."""
    shutil.copytree(sample_store, dest)
    rebuild_index(dest, finished=False)
    assert not open_store(dest).finished  # the flag the lookup service and `info` read
    return dest


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "featurecache.cli", *args], cwd=REPO, capture_output=True,
                          text=True, timeout=300)  # fmt: skip


def test_verify_warns_on_an_unfinished_first_build(sample_store: Path, tmp_path: Path) -> None:
    store = unfinished_copy(sample_store, tmp_path / "store")
    run = cli("verify", "--no-progress", str(store))
    assert run.returncode == 0 and "ok: store verified" in run.stdout, (run.returncode, run.stderr[-2000:])
    said = " ".join(run.stderr.split())
    warnings = [line for line in run.stderr.splitlines() if line.startswith("warning: ")]
    assert len(warnings) == 1, run.stderr[-2000:]
    assert f"warning: {store}: {WARNING}" in said and "partial" in said, run.stderr[-2000:]

    finished = cli("verify", "--no-progress", str(sample_store))
    assert finished.returncode == 0 and "warning" not in finished.stderr, finished.stderr[-2000:]


def test_verify_of_an_unfinished_store_with_a_mismatch_still_exits_4(
    sample_store: Path, tmp_path: Path
) -> None:
    """The warning comes with the mismatch lines; the exit status is still the mismatch's."""
    store = unfinished_copy(sample_store, tmp_path / "store")
    part = next(p for p in sorted((store / "parts").iterdir()) if p.name.startswith("s-"))
    (part / "_index" / "part.json").unlink()  # an incomplete part: a mismatch verify names
    run = cli("verify", "--no-progress", str(store))
    assert run.returncode == 4, (run.returncode, run.stderr[-2000:])
    said = " ".join(run.stderr.split())
    assert f"warning: {store}: {WARNING}" in said, run.stderr[-2000:]
    assert "MISMATCH" in run.stdout, run.stdout[-2000:]  # the result: on stdout
