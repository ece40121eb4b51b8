"""Review R26b s44 #4: an older featurecache's build over a store a newer one had rebuilt rebuilt
every entry and MSA as its older featurizer, exit 0, naming no version. Now such a build is refused
(UsageError, exit 2, nothing written) naming the versions and counts, unless ``--allow-downgrade``.

The newer featurecache is this package with FEATURIZER_VERSION one minor version up, run in a
process of its own (as an upgraded install would be)."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from featurecache.build.run import run_build
from featurecache.const import FEATURIZER_VERSION
from featurecache.errors import UsageError
from tests.clusters import scheduler_args, shared_scheduler
from tests.conftest import REPO, SAMPLES, cli_in_process, store_snapshot

OPENFOLD = SAMPLES / "msas" / "openfold"


def _newer_package(dest: Path) -> tuple[Path, str]:
    major, minor, patch = (int(x) for x in FEATURIZER_VERSION.split("."))
    newer = f"{major}.{minor + 1}.{patch}"
    shutil.copytree(
        REPO / "featurecache", dest / "featurecache", ignore=shutil.ignore_patterns("__pycache__")
    )
    const = dest / "featurecache" / "const.py"
    text, n = re.subn(
        r'^FEATURIZER_VERSION = ".*"$', f'FEATURIZER_VERSION = "{newer}"', const.read_text(), flags=re.M
    )
    assert n == 1
    const.write_text(text)
    return dest, newer


def test_an_older_build_refuses_to_downgrade_a_newer_store(tmp_path: Path) -> None:
    pdb, msa = tmp_path / "pdb", tmp_path / "msa"
    pdb.mkdir()
    shutil.copy(SAMPLES / "structures" / "1psm.cif", pdb)
    (msa / "1psm_A").mkdir(parents=True)
    shutil.copy(OPENFOLD / "1psm_A" / "bfd_uniclust_hits.a3m", msa / "1psm_A")
    store = tmp_path / "store"
    package, newer = _newer_package(tmp_path / "newer")
    args = ["build", "--pdb-dir", str(pdb), "--msa-dir", str(msa), "--out", str(store), "--workers", "1",
            "--no-progress", "--no-dashboard"]  # fmt: skip
    first = subprocess.run([sys.executable, "-m", "featurecache.cli", *args], capture_output=True, text=True,
                           cwd=package, env={**os.environ, "PYTHONPATH": str(package)}, timeout=300)  # fmt: skip
    assert first.returncode == 0, first.stdout + first.stderr
    before = store_snapshot(store)

    # the CLI in this process (tests/conftest.py), on the session's 1-worker cluster: a Python start saved
    refused = cli_in_process("build", "--pdb-dir", str(pdb), "--msa-dir", str(msa), "--out", str(store),
                             *scheduler_args(1), "--no-progress", cwd=REPO)  # fmt: skip
    assert refused.returncode == 2, refused.stdout + refused.stderr
    said = f"this build would rebuild 1 entry and 1 MSA of featurizer {newer}, built by a newer featurecache"
    assert said in refused.stderr and f"as featurizer {FEATURIZER_VERSION}" in refused.stderr, refused.stderr
    assert "--allow-downgrade" in refused.stderr and "nothing was written" in refused.stderr
    assert store_snapshot(store) == before

    with pytest.raises(UsageError, match="a downgrade of"):
        run_build(pdb_dir=pdb, out=store, msa_dir=msa, scheduler=shared_scheduler(1), progress=False)
    assert store_snapshot(store) == before
    allowed = run_build(pdb_dir=pdb, out=store, msa_dir=msa, scheduler=shared_scheduler(1), progress=False,
                        allow_downgrade=True)  # fmt: skip
    assert (allowed.n_built, allowed.n_rebuilt, allowed.n_failed) == (1, 1, 0)
    # now of this featurizer: nothing to refuse
    again = run_build(pdb_dir=pdb, out=store, msa_dir=msa, scheduler=shared_scheduler(1), progress=False)
    assert (again.n_built, again.n_skipped) == (0, 1)
