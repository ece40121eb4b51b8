"""verify's printed rebuild command must not cut undamaged MSAs (review R3 s24 #4).

The store's root config records the LATEST build's options: an extension from another --pdb-dir
with ``--msa-depth 100`` overwrites the cap of the build that made the deep MSAs. verify printed
``--msa-depth 100`` from it, and following the printed command rebuilt an undamaged MSA of more
than 100 rows to 100. Real builds (102m with its real Protenix MSA, 836 distinct rows, at the
default cap; then the sample 2q2k from another directory at ``--msa-depth 100``), a real damaged shard, real CLI runs; the printed
command is run exactly as printed (on the session's cluster)."""

from __future__ import annotations

import json
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import featurecache
from featurecache.build.config import BuildConfig
from featurecache.build.run import run_build
from featurecache.store.verify import verify_store
from tests.clusters import scheduler_args, shared_scheduler
from tests.conftest import MSAS, SAMPLES, STRUCTURES, CliRun, build_store, cli_in_process


def _cli(*args: str | Path) -> CliRun:
    """``featurecache ARGS`` (verify): the real CLI, in this process (tests/conftest.py)."""
    return cli_in_process(*map(str, args))


def _cli_process(*args: str | Path) -> subprocess.CompletedProcess[str]:
    """``featurecache ARGS`` in a process of its own: a build (it starts a Dask cluster)."""
    return subprocess.run([sys.executable, "-m", "featurecache.cli", *map(str, args)], capture_output=True,
                          text=True, timeout=300, check=False)  # fmt: skip


def _msa_of(store: Path, entry_id: str) -> dict[str, object]:
    s = featurecache.open_store(store)
    key = next(
        r["msa_key"] for r in s.chains.to_pylist() if r["entry_id"] == entry_id and r["auth_id"] == "A"
    )
    return next(r for r in s.msas.to_pylist() if r["key"] == key)


def test_the_printed_command_keeps_an_msa_deeper_than_the_latest_builds_cap(
    tmp_path: Path, real_dir: Path
) -> None:
    deep, other, msa, store = tmp_path / "deep", tmp_path / "other", tmp_path / "msa", tmp_path / "s"
    deep.mkdir()
    other.mkdir()
    shutil.copy(STRUCTURES / "102m.cif", deep)
    shutil.copy(SAMPLES / "structures" / "2q2k.cif", other)
    shutil.copytree(MSAS / "Protenix" / "mmcif_msa" / "3", msa / "msa" / "3")  # 102m's (SOURCES.tsv)
    assert build_store(store, deep, workers=1, msa_dir=msa, part_size=1).n_failed == 0
    # the extension: another --pdb-dir, no --msa-dir, --msa-depth 100 (the root config now says 100)
    summary = run_build(pdb_dir=other, out=store, scheduler=shared_scheduler(1), part_size=1,
                        config=BuildConfig(msa_depth_cap=100), progress=False)  # fmt: skip
    assert summary.n_failed == 0
    config = json.loads((store / "zarr.json").read_text())["attributes"]["config"]
    assert config["msa_depth_cap"] == 100
    before = _msa_of(store, "102m")
    # 102m's MSA (its files hold 836 distinct rows) was built at the default cap
    assert before["n_files"] and before["depth"] > 100, before
    assert verify_store(store) == []

    # damage 102m's atoms (one shard per part array)
    part = str(featurecache.open_store(store).entries.to_pylist()[0]["part"])
    shards = [
        f for f in (store / "parts" / part / "atoms").rglob("*") if f.is_file() and f.name != "zarr.json"
    ]
    assert len(shards) == 1
    with shards[0].open("r+b") as fh:
        fh.truncate(shards[0].stat().st_size // 2)

    bad = _cli("verify", store, "--no-progress")
    assert bad.returncode == 4, bad.stdout + bad.stderr
    assert "MISMATCH entry 102m" in bad.stdout, bad.stdout
    hint = bad.stderr.split("; then `", 1)[1]
    command, note = hint.split("`", 1)
    assert command.startswith(f"featurecache build --pdb-dir {deep.resolve()} --msa-dir {msa.resolve()} "), (
        command
    )
    # not the latest build's 100, which would cut the undamaged MSA
    assert "--msa-depth 100" not in command, command
    # the note names both numbers: the recorded cap and the rows it would cut
    assert "records --msa-depth 100" in note and f"up to {before['depth']} rows" in note, note

    rep = _cli("verify", store, "--repair", "--no-progress")
    assert rep.returncode == 0, rep.stdout + rep.stderr
    printed = rep.stdout.split("repaired: now run `", 1)[1].split("`", 1)[0]
    assert printed == command, (printed, command)

    # follow the printed command exactly (on the session's cluster, no progress bar)
    args = shlex.split(command)
    assert args[:2] == ["featurecache", "build"]
    built = _cli_process(*args[1:], *scheduler_args(1), "--no-progress")
    assert built.returncode == 0, built.stdout + built.stderr
    after = _msa_of(store, "102m")
    assert (after["depth"], after["content_hash"]) == (before["depth"], before["content_hash"]), (
        after,
        before,
    )
    assert verify_store(store) == []
    assert featurecache.open_store(store).ids == ["102m", "2q2k"]
