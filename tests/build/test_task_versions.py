"""A worker that joins a cluster after the build's start check and runs another featurecache must
not write a part: each part task compares its process's versions with the driver's (sent with the
task) before it computes or writes anything. The check at the build's start only sees the workers
connected then (a reviewer's repro: a worker with an edited FEATURIZER_VERSION joining 2.5 s into a
build wrote s-000025 and s-000026 with its featurizer, exit 0, verify ok)."""

from __future__ import annotations

from pathlib import Path

import pytest

from featurecache.build.chem_stage import Job, build_component_part
from featurecache.build.discover import discover
from featurecache.build.msa_stage import PlannedMSA, build_msa_part
from featurecache.build.tasks import build_structure_part, worker_versions
from featurecache.errors import StoreError
from featurecache.parse.ccd import parse_component_file
from featurecache.store.root import init_store

SAMPLES = Path(__file__).resolve().parents[2] / "samples"


def _other() -> dict[str, str]:
    """The driver's versions as a worker with another featurizer sees them."""
    versions = dict(worker_versions())
    versions["featurizer"] = versions["featurizer"] + "-edited"
    return versions


def _store(tmp_path: Path) -> Path:
    out = tmp_path / "store"
    init_store(out, {"config_hash": "t", "entry_config_hash": "t", "config": {}})
    return out


def _nothing_written(out: Path) -> bool:
    """No part and no temporary part directory under ``parts/`` (its zarr.json is the store's)."""
    return [p.name for p in (out / "parts").iterdir()] == ["zarr.json"]


def test_a_structure_part_task_refuses_another_featurecache(tmp_path: Path) -> None:
    out = _store(tmp_path)
    inputs = [i for i in discover(SAMPLES / "structures", "t", {}) if i.entry_id == "102m"]
    with pytest.raises(StoreError, match=r"featurizer .*-edited"):
        build_structure_part(str(out), "s-000000", inputs, "t", versions=_other())
    assert _nothing_written(out)
    # the same call with the worker's own versions writes the part
    res = build_structure_part(str(out), "s-000000", inputs, "t", versions=worker_versions())
    assert res.n_entries == 1 and (out / "parts" / "s-000000").is_dir()


def test_an_msa_part_task_refuses_another_featurecache(tmp_path: Path) -> None:
    out = _store(tmp_path)
    item = PlannedMSA("k", "MKV", 0, [], "ik")
    with pytest.raises(StoreError, match=r"featurizer .*-edited"):
        build_msa_part(str(out), "m-000000", [item], "", 16, None, _other())
    assert _nothing_written(out)


def test_a_component_part_task_refuses_another_featurecache(tmp_path: Path) -> None:
    out = _store(tmp_path)
    job = Job("SO4", "ccd", definition=parse_component_file(SAMPLES / "ccd" / "SO4.cif"))
    with pytest.raises(StoreError, match=r"featurizer .*-edited"):
        build_component_part(str(out), "c-000000", [job], 10.0, _other())
    assert _nothing_written(out)
