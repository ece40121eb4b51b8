"""`featurecache plan` on a real store: the plan table against the index, its survival of an
index rebuild, and the sampler filter it feeds."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest
from typer.testing import CliRunner

import featurecache
from featurecache.cli import app
from featurecache.client.sampler import Sampler, SamplerFilter
from featurecache.errors import InvalidRequest, StoreError, UsageError
from featurecache.model.config import ModelConfig
from featurecache.plan import STANDARD_CROPS, estimate_step, fitting_ids, parse_bytes, plan_store, read_plan
from featurecache.plan.planner import DEFAULT_MAX_MSA_ROWS, padded_tokens, plan_path
from featurecache.store.index import read_table, rebuild_index


@pytest.fixture()
def store(sample_store: Path, tmp_path: Path) -> Path:
    """A private copy of the session's sample store (the plan writes into index/)."""
    dst = tmp_path / "store"
    shutil.copytree(sample_store, dst)
    return dst


def test_parse_bytes() -> None:
    assert parse_bytes("80GiB") == 80 * 2**30
    assert parse_bytes("141 GB") == 141 * 10**9
    assert parse_bytes("512MiB") == 512 * 2**20
    assert parse_bytes("1e9") == 10**9
    for bad in ("lots", "80", "0", "-1GiB", "nanGiB", "1e400GiB"):  # "80" would be 80 bytes: a unit mistake
        with pytest.raises(UsageError):
            parse_bytes(bad)
    # the words fit the mistake: a size with a unit is not told to "give a unit"
    for text, words in (("0GiB", "must be > 0"), ("0", "must be > 0"), ("80", "give a unit"),
                        ("12MiB", "not a GPU memory size")):  # fmt: skip
        with pytest.raises(UsageError, match=words) as info:
            parse_bytes(text)
        assert text == "80" or "give a unit" not in str(info.value), (text, str(info.value))


def test_plan_runs_at_the_padded_length_training_uses(store: Path) -> None:
    """On CUDA `featurecache train` pads a batch's tokens up to a multiple of 128, capped at the crop;
    the plan predicts that length, not the entry's own (a 600-token entry runs at 640 at crop 640)."""
    from featurecache.model.train import DEFAULT_PAD_MULTIPLE
    from featurecache.plan.planner import DEFAULT_PAD_MULTIPLE as PLAN_PAD

    assert PLAN_PAD == DEFAULT_PAD_MULTIPLE
    assert padded_tokens(np.array([600, 202, 128, 1]), 640, 128).tolist() == [640, 256, 128, 128]
    assert padded_tokens(np.array([600, 202]), 384, 128).tolist() == [384, 256]
    assert padded_tokens(np.array([600, 202]), 384, 1).tolist() == [384, 202]
    padded = plan_store(store, gpu_memory="80GiB", write_index=False)
    plain = plan_store(store, gpu_memory="80GiB", write_index=False, pad_multiple=1)
    tokens = np.asarray(padded.column("token_count").to_pylist())
    for crop in (384, 640):
        assert padded.column(f"tokens_{crop}").to_pylist() == padded_tokens(tokens, crop, 128).tolist()
        assert plain.column(f"tokens_{crop}").to_pylist() == np.minimum(tokens, crop).tolist()
        longer = np.asarray(padded.column(f"tokens_{crop}")) > np.asarray(plain.column(f"tokens_{crop}"))
        assert longer.any()  # some sample entry is not a multiple of 128
        more = np.asarray(padded.column(f"predicted_peak_bytes_{crop}")) > np.asarray(
            plain.column(f"predicted_peak_bytes_{crop}")
        )
        assert (more == longer).all()
    with pytest.raises(UsageError, match="headroom"):
        plan_store(store, gpu_memory="80GiB", write_index=False, headroom=1.5)


def test_plan_matches_the_index(store: Path) -> None:
    budget = 40 * 2**30
    table = plan_store(store, gpu_memory=budget, fused=False)
    reader = featurecache.open_store(store)
    entries, chains = reader.entries.to_pylist(), reader.chains.to_pylist()
    assert table.column("id").to_pylist() == [e["id"] for e in entries]
    deepest: dict[str, int] = {}
    for ch in chains:  # worst-case sampled MSA rows: deepest chain MSA, capped, at least 1
        deepest[ch["entry_id"]] = max(deepest.get(ch["entry_id"], 1), ch["msa_depth"] or 0)
    cfg = ModelConfig()
    for e, row in zip(entries, table.to_pylist(), strict=True):
        m = min(deepest.get(e["id"], 1), DEFAULT_MAX_MSA_ROWS)
        assert row["msa_rows"] == m
        assert row["recommended_crop"] == min(e["token_count"], row["max_tokens"])
        for crop in STANDARD_CROPS:
            n = min(-(-min(e["token_count"], crop) // 128) * 128, crop)  # train's padding on CUDA
            assert row[f"tokens_{crop}"] == n
            peak = estimate_step(cfg, n, m, fused=False).peak_bytes
            assert row[f"predicted_peak_bytes_{crop}"] == peak
            assert row[f"fits_{crop}"] == (peak <= budget)
    # the sample holds 7DDO (863 tokens): with the reference kernels it does not fit 40 GiB at 768
    assert not all(table.column("fits_768").to_pylist())
    assert all(table.column("fits_384").to_pylist())


def test_plan_survives_an_index_rebuild_and_filters_the_sampler(store: Path) -> None:
    plan_store(store, gpu_memory="40GiB", fused=False)
    before = plan_path(store).read_bytes()
    rebuild_index(store)
    assert plan_path(store).read_bytes() == before
    reader = featurecache.open_store(store)
    assert read_plan(reader).num_rows == len(reader.ids)

    ids = fitting_ids(reader, 768)
    plan = read_table(plan_path(store))
    expected = [
        i
        for i, ok in zip(plan.column("id").to_pylist(), plan.column("fits_768").to_pylist(), strict=True)
        if ok
    ]
    assert ids == expected and 0 < len(ids) < len(reader.ids)
    sampler = Sampler(reader.entries, filters=SamplerFilter(ids=ids), seed=3)
    drawn = {sampler.key(p).entry_id for p in range(3 * len(sampler))}
    assert drawn == set(ids)
    with pytest.raises(InvalidRequest):
        fitting_ids(reader, 500)


def test_read_plan_without_one(store: Path) -> None:
    with pytest.raises(StoreError):
        read_plan(store)


def test_cli_plan(store: Path, tmp_path: Path) -> None:
    cfg_file = tmp_path / "model.json"
    ModelConfig(n_blocks=2).to_json(cfg_file)
    result = CliRunner().invoke(
        app, ["plan", str(store), "--model-config", str(cfg_file), "--gpu-memory", "24GiB", "--reference"]
    )
    assert result.exit_code == 0, result.output
    assert "memory plan" in result.output
    table = read_table(plan_path(store))
    assert isinstance(table, pa.Table) and table.num_rows == len(featurecache.open_store(store).ids)
    peaks = np.array(table.column("predicted_peak_bytes_768").to_pylist())
    fits = np.array(table.column("fits_768").to_pylist())
    assert np.array_equal(fits, peaks <= 24 * 2**30)
    result = CliRunner().invoke(app, ["plan", str(store), "--gpu-memory", "a lot"])
    assert result.exit_code == 2  # a usage error
