"""A store whose MSAs were merged by an older MSA stage says so (s25, E7): ``info`` (text and
``--json``: a new ``msa_stages`` key, every other key as before) and ``verify`` (a note, exit 0).
Before, the stage was only hashed into each MSA's inputs key: ``info`` and ``verify`` on a store
built before ``MSA_STAGE_VERSION`` 3 (c27ed06: a stored row's species is its pairing copy's) said
nothing, though the next build rewrites every such MSA.

The older store is real: built by the package of c27ed06's parent (MSA stage 2; git archive, skips
without the history) from 102m (its Protenix MSA) and 1psm (no MSA file: a single-sequence MSA),
then built again by this code with the same inputs."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa
import pyarrow.ipc as ipc
import pytest

from featurecache.build.msa_stage import MSA_STAGE_VERSION
from featurecache.store.versions import FIRST_RECORDED_STAGE
from tests.conftest import (
    MSAS,
    STRUCTURES,
    CliRun,
    build_store,
    build_with_package,
    cli_in_process,
    featurecache_at,
)

#: c27ed06^: the last commit of MSA stage 2 (its MSAs record no stage)
STAGE2_COMMIT = "dcfe0bbb5fb3a270275658190613ed330347efa7"


@dataclass
class Stage:
    pdb: Path
    msa: Path
    package: Path
    old: Path  # built by STAGE2_COMMIT's package
    rebuilt: Path  # a copy of old built again by this code from the same inputs
    rebuild_summary: object


@pytest.fixture(scope="module")
def stage_stores(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stage]:
    # the premise: 3 is the first stage that records itself; this code merges by a later one (6 since
    # review R11 s39)
    assert FIRST_RECORDED_STAGE == "3" and int(MSA_STAGE_VERSION) > 3
    tmp = tmp_path_factory.mktemp("e7_stage")
    pdb, msa = tmp / "pdb", tmp / "msa"
    pdb.mkdir()
    for name in ("102m.cif", "1psm.cif"):
        shutil.copy(STRUCTURES / name, pdb)
    shutil.copytree(MSAS / "Protenix" / "mmcif_msa" / "3", msa / "3")  # 102m's MSA only
    package = featurecache_at(STAGE2_COMMIT, tmp / "pkg")
    old = tmp / "old"
    done = build_with_package(package, pdb, old, msa_dir=msa)
    assert done.returncode == 0, done.stdout + done.stderr
    rebuilt = tmp / "rebuilt"
    shutil.copytree(old, rebuilt)
    summary = build_store(rebuilt, pdb, workers=1, msa_dir=msa)
    yield Stage(pdb.resolve(), msa.resolve(), package, old, rebuilt, summary)


def _msas(store: Path) -> pa.Table:
    with pa.memory_map(str(store / "index" / "msas.arrow")) as f:
        return ipc.open_file(f).read_all()


def _cli(*args: str, package: Path | None = None) -> CliRun | subprocess.CompletedProcess[str]:
    """``featurecache ARGS`` (info, verify): this code's in this process (tests/conftest.py), the
    older ``package``'s in a process of its own (its own featurecache on the path)."""
    if package is None:
        return cli_in_process(*args, env={"COLUMNS": "250"})
    env = {**os.environ, "COLUMNS": "250"}
    if package is not None:
        env["PYTHONPATH"] = str(package)
    return subprocess.run([sys.executable, "-m", "featurecache.cli", *args], capture_output=True, text=True,
                          timeout=180, env=env, cwd=package)  # fmt: skip


def _counts(store: Path) -> tuple[int, int]:
    """(MSAs from files, single-sequence MSAs) of the store's index, read with pyarrow alone."""
    files = _msas(store).column("n_files").to_pylist()
    return sum(1 for n in files if n > 0), sum(1 for n in files if n == 0)


def test_the_old_store_records_no_stage(stage_stores: Stage) -> None:
    """The premise, read without featurecache's help: stage 2 wrote no stage anywhere, and the
    store holds one MSA from a file (102m) and single-sequence ones (1psm)."""
    assert "msa_stage" not in _msas(stage_stores.old).column_names
    for p in (stage_stores.old / "parts").glob("m-*/_index/part.json"):
        assert "msa_stage" not in json.loads(p.read_text())
    n_files, n_single = _counts(stage_stores.old)
    assert n_files == 1 and n_single >= 1, (n_files, n_single)


def test_info_and_verify_say_the_msas_are_of_an_older_stage(stage_stores: Stage) -> None:
    from featurecache import open_store
    from featurecache.store.verify import verify_report

    old = stage_stores.old
    _, n_single = _counts(old)
    doc = open_store(old).info()
    assert doc["msa_stages"] == {
        "this_code": MSA_STAGE_VERSION,
        "msas": {"3 or older": 1},
        "msas_single_sequence": n_single,
    }

    text = _cli("info", str(old))
    assert text.returncode == 0, text.stderr
    assert "MSA stage of MSAs │ 1 of a stage 3 or older" in " ".join(text.stdout.split()), text.stdout
    warned = [line for line in text.stderr.splitlines() if "MSA stage" in line]
    assert warned == [
        f"warning: {old}: 1 MSA was built by an older MSA stage (1 of a stage 3 or older; this featurecache's "
        f"is {MSA_STAGE_VERSION}): the next `featurecache build` with their --msa-dir ({stage_stores.msa}) rewrites them"
    ], text.stderr

    report = verify_report(old)
    assert report.problems == []
    assert [n for n in report.notes if "MSA stage" in n] == [warned[0].removeprefix("warning: ")], (
        report.notes
    )
    done = _cli("verify", str(old), "--no-progress")
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"note: {warned[0].removeprefix('warning: ')}" in done.stderr.splitlines(), done.stderr


def test_info_json_adds_one_key_and_keeps_every_other(stage_stores: Stage) -> None:
    """``info --json`` of this code = that of the stage-2 package on the same store plus
    ``msa_stages``, ``warnings_by_stage`` (the count of the store's warnings by stage, added later)
    and ``ccd_definitions_mixed`` (session 44): no existing key changed."""
    mine = _cli("info", "--json", str(stage_stores.old))
    theirs = _cli("info", "--json", str(stage_stores.old), package=stage_stores.package)
    assert mine.returncode == 0 and theirs.returncode == 0, mine.stderr + theirs.stderr
    got, before = json.loads(mine.stdout), json.loads(theirs.stdout)
    assert "msa_stages" not in before
    stages = got.pop("msa_stages")
    assert "warnings_by_stage" not in before
    listed = json.loads(_cli("info", "--json", "--warnings", str(stage_stores.old)).stdout)["warnings"]
    assert got.pop("warnings_by_stage") == dict(sorted(Counter(w["stage"] for w in listed).items()))
    assert stages["msas"] == {"3 or older": 1}
    # held_parts: no part is held; 3f92635 added its new/updated counts (0 here)
    assert got["held_parts"] == {**before["held_parts"], "new": 0, "updated": 0}
    got["held_parts"] = before["held_parts"]
    # this_code: each package's own FEATURIZER_VERSION (0.7.0 here since the crop-first bump)
    from featurecache.const import FEATURIZER_VERSION

    assert got["featurizer_versions"]["this_code"] == FEATURIZER_VERSION
    got["featurizer_versions"]["this_code"] = before["featurizer_versions"]["this_code"]
    # ccd_definitions_mixed (review R26b s44 #6): none in a store whose parts record no definitions
    assert "ccd_definitions_mixed" not in before
    assert got.pop("ccd_definitions_mixed") == {"entries": 0, "codes": [], "by_pdb_dir": {}}
    assert got == before


def test_the_next_build_rewrites_them_and_the_warning_goes(stage_stores: Stage) -> None:
    from featurecache import open_store
    from featurecache.store.verify import verify_report

    rebuilt = stage_stores.rebuilt
    # the MSA from files is written again, into a new part that records this stage (row and part.json)
    new_parts = sorted(
        {p.name for p in (rebuilt / "parts").glob("m-*")}
        - {p.name for p in (stage_stores.old / "parts").glob("m-*")}
    )
    assert len(new_parts) == 1, new_parts
    own = ipc.open_file(str(rebuilt / "parts" / new_parts[0] / "_index" / "msas.arrow")).read_all()
    assert (
        own.column("msa_stage").to_pylist() == [MSA_STAGE_VERSION]
        and own.column("n_files").to_pylist()[0] > 0
    )
    assert (
        json.loads((rebuilt / "parts" / new_parts[0] / "_index" / "part.json").read_text())["msa_stage"]
        == MSA_STAGE_VERSION
    )

    # single-sequence MSAs are never rebuilt: still the old part's rows, no stage recorded, counted apart
    index = _msas(rebuilt)
    single = [
        s
        for s, n in zip(
            index.column("msa_stage").to_pylist(), index.column("n_files").to_pylist(), strict=True
        )
        if n == 0
    ]
    assert single and all(s is None for s in single), single
    doc = open_store(rebuilt).info()
    assert doc["msa_stages"] == {
        "this_code": MSA_STAGE_VERSION,
        "msas": {MSA_STAGE_VERSION: 1},
        "msas_single_sequence": len(single),
    }

    text = _cli("info", str(rebuilt))
    assert text.returncode == 0, text.stderr
    assert f"MSA stage of MSAs │ 1 of stage {MSA_STAGE_VERSION}" in " ".join(text.stdout.split()), text.stdout
    assert "MSA stage" not in text.stderr, text.stderr
    assert not [n for n in verify_report(rebuilt).notes if "MSA stage" in n]


def test_a_newer_stage_is_named_too(stage_stores: Stage, tmp_path: Path) -> None:
    """An MSA merged by a later featurecache's stage (here: the rebuilt part's rows relabelled one more
    and the index rebuilt from the parts) is another stage: this code's next build rewrites it."""
    from featurecache import open_store
    from featurecache.store.index import rebuild_index, write_table
    from featurecache.store.versions import msa_stage_notes

    store = tmp_path / "store"
    shutil.copytree(stage_stores.rebuilt, store)
    newer = str(int(MSA_STAGE_VERSION) + 1)
    for f in (store / "parts").glob("m-*/_index/msas.arrow"):
        t = ipc.open_file(str(f)).read_all()
        if "msa_stage" in t.column_names and t.num_rows:
            i = t.column_names.index("msa_stage")
            t = t.set_column(i, "msa_stage", pa.array([newer] * t.num_rows, pa.string()))
            f.unlink()
            write_table(f, t)
    rebuild_index(store, incremental=False)
    opened = open_store(store)
    assert opened.info()["msa_stages"]["msas"] == {newer: 1}
    assert msa_stage_notes(opened) == [
        f"{store}: 1 MSA was built by another MSA stage (1 of stage {newer}; this featurecache's is "
        f"{MSA_STAGE_VERSION}): the next "
        f"`featurecache build` of this featurecache with their --msa-dir ({stage_stores.msa}) rewrites them"
    ]


def test_the_training_client_and_serve_say_it_too(
    stage_stores: Stage, caplog: pytest.LogCaptureFixture
) -> None:
    """s26: ``info`` and ``verify`` said that MSAs were merged by an older stage, but a training run
    (``FeatureDataset`` over the store) and ``featurecache serve`` did not, though they serve those
    MSAs' rows. Now both warn with the line ``info`` prints; on the rebuilt store, neither does."""
    import logging

    from featurecache.client import FeatureDataset
    from services.lookup.server import free_port, wait_ready

    old, rebuilt = stage_stores.old, stage_stores.rebuilt
    line = (
        f"{old}: 1 MSA was built by an older MSA stage (1 of a stage 3 or older; this featurecache's is {MSA_STAGE_VERSION}): "
        f"the next `featurecache build` with their --msa-dir ({stage_stores.msa}) rewrites them"
    )
    for store, want in ((old, [line]), (rebuilt, [])):
        caplog.clear()
        with caplog.at_level(logging.WARNING, logger="featurecache.client.dataset"):
            FeatureDataset(store, crop_size=32, seed=0)
        got = [r.getMessage() for r in caplog.records if "MSA stage" in r.getMessage()]
        assert got == want, (store, got)

        port = free_port()
        cmd = [sys.executable, "-m", "featurecache.cli", "serve", str(store), "--port", str(port)]
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        try:
            wait_ready(f"http://127.0.0.1:{port}", timeout=60)
        finally:
            proc.terminate()
            out = proc.communicate(timeout=30)[0]
        said = [ln for ln in out.splitlines() if "MSA stage" in ln]
        assert len(said) == len(want) and all(ln.endswith(w) for ln, w in zip(said, want, strict=True)), out[
            -3000:
        ]
