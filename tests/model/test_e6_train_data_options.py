"""``featurecache train`` sets the client's data settings (review R1 s25 #4): ``--weighting``
(default ``af3``: AF3's weighted-PDB sampling; ``FeatureDataset``'s default stays ``uniform``),
``--crop-weights``, ``--max-msa-rows``, ``--pair-msa/--no-pair-msa`` and ``--crop-whole-groups``.
Each reaches the client on a real store (the repo's samples with their MSAs), bad values exit 2
in one line naming the option, the log header and the checkpoint record them, and a ``--resume``
with other settings than its run's is refused in one line (an older checkpoint, which records
none, was trained with uniform sampling and the client's defaults)."""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import torch

import featurecache
from featurecache.client.sampler import Sampler
from featurecache.errors import UsageError
from featurecache.model.train import make_batches, run_training
from tests.conftest import CliRun, cli_in_process
from tests.model.test_trunk import TINY

SMALL: dict[str, Any] = {"crop_size": 16, "device": "cpu", "config": TINY, "workers": 1, "fused": False}
#: non-default settings of every option (crop weights as given: the run records them normalized)
OTHER: dict[str, Any] = {"weighting": "uniform", "crop_weights": (1, 1, 2), "max_msa_rows": 7, "pair_msa": False,
                         "crop_whole_groups": True}  # fmt: skip
DATA_KEYS = ("weighting", "crop_weights", "max_msa_rows", "pair_msa", "crop_whole_groups")


def _never(*_: Any) -> None:
    raise AssertionError("a refused run trained a step")


def _sampler(store: Path, weighting: str) -> Sampler:
    reader = featurecache.open_store(store)
    try:
        return Sampler(reader.entries, reader.chains, reader.interfaces, weighting=weighting, seed=0)
    finally:
        reader.close()


def _cli(*args: str) -> CliRun:
    """``featurecache train ARGS``, refused here before it trains: in this process (tests.conftest)."""
    return cli_in_process("train", *args)


# ----------------------------------------------------------------------- the options reach the client
def test_train_samples_af3_style_by_default_and_uniform_on_request(
    sample_store: Path, tmp_path: Path
) -> None:
    """The default run's entries are the AF3 sampler's at the run's stream positions (the weights
    tests/client/test_sampler.py checks against the formula), not the uniform sampler's; with
    --weighting uniform (and --max-msa-rows 3) the first epoch holds every entry once and no batch
    has more than 3 MSA rows, while the default run's (1024 rows at most) has more."""
    af3 = run_training(sample_store, None, steps=6, log_path=tmp_path / "af3.json", **SMALL)
    uni = run_training(sample_store, None, steps=6, log_path=tmp_path / "uni.json", weighting="uniform",
                       max_msa_rows=3, **SMALL)  # fmt: skip
    header = json.loads((tmp_path / "af3.json").read_text())
    assert {k: header[k] for k in DATA_KEYS} == {
        "weighting": "af3", "crop_weights": [0.2, 0.4, 0.4], "max_msa_rows": 1024, "pair_msa": True,
        "crop_whole_groups": False,
    }  # fmt: skip
    header = json.loads((tmp_path / "uni.json").read_text())
    assert (header["weighting"], header["max_msa_rows"]) == ("uniform", 3)

    weighted, uniform = _sampler(sample_store, "af3"), _sampler(sample_store, "uniform")
    entries = [e for r in af3["steps"] for e in r["entry_ids"]]
    positions = [p for r in af3["steps"] for p in r["positions"]]
    assert sorted(positions) == list(range(6))
    assert entries == [weighted.key(p).entry_id for p in positions]
    # the check can fail: the uniform stream's entries at those positions differ
    assert entries != [uniform.key(p).entry_id for p in positions]

    entries = [e for r in uni["steps"] for e in r["entry_ids"]]
    positions = [p for r in uni["steps"] for p in r["positions"]]
    all_ids = sorted(featurecache.open_store(sample_store).ids)
    assert len(all_ids) == 6 and sorted(entries) == all_ids  # an epoch: each entry once
    assert entries == [uniform.key(p).entry_id for p in positions]

    assert max(r["msa_rows"] for r in uni["steps"]) <= 3
    assert max(r["msa_rows"] for r in af3["steps"]) > 3  # the cap is what keeps them low


@pytest.fixture(scope="module")
def batches_of(sample_store: Path) -> Iterator[Any]:
    opened: list[Any] = []

    def first(n: int, **options: Any) -> tuple[list[dict[str, Any]], Any]:
        src = make_batches(sample_store, None, 16, 1, 0, 1, "thread", data_options=options)
        opened.append(src)
        return [next(src.batches) for _ in range(n)], src

    yield first
    for src in opened:
        src.close()


def test_crop_options_reach_the_client(sample_store: Path, batches_of: Any) -> None:
    """make_batches (train's source) hands its data settings to FeatureDataset: the crop weights
    choose the crop of every sample; whole-group crops are FeatureDataset(crop_whole_groups=True)'s
    and differ from the per-token default's; pairing off reaches the client's sample job (no store
    of the real data has a heteromer whose chains' MSAs share species, so pairing changes no row
    here: tests/client/test_msa_pairing.py shows what it does)."""
    from featurecache.client import FeatureDataset

    # 16 samples: whole groups change the crops of samples 14 and 16 of this seed's stream (12 were
    # enough while the sample store held 102m's and 2q2k's crystallization aids)
    default, _ = batches_of(16, weighting="af3")
    assert len({b["crop_method"][0] for b in default}) > 1  # the default mixes crops
    for weights, method in (((1, 0, 0), "contiguous"), ((0, 1, 0), "spatial")):
        got, _ = batches_of(12, weighting="af3", crop_weights=weights)
        assert [b["crop_method"][0] for b in got] == [method] * 12, weights

    whole, _ = batches_of(16, weighting="af3", crop_whole_groups=True)

    def tokens(batches: list[dict[str, Any]]) -> list[list[int]]:
        return [b["token_index"][0][b["token_mask"][0]].tolist() for b in batches]

    ds = FeatureDataset(
        sample_store, crop_size=16, weighting="af3", crop_whole_groups=True, workers=1, infinite=True
    )
    try:
        it = iter(ds)
        expected = [next(it) for _ in range(16)]
    finally:
        ds.close()
    assert [b["position"][0] for b in whole] == [s["position"] for s in expected] == list(range(16))
    assert tokens(whole) == [s["token_index"].tolist() for s in expected]
    assert tokens(whole) != tokens(default)  # the check can fail: whole groups change some crop

    _, src = batches_of(1, weighting="af3", pair_msa=False)
    _, on = batches_of(1, weighting="af3")
    assert src.close.__self__.job.pair_msa is False and on.close.__self__.job.pair_msa is True


# ----------------------------------------------------------------------------- bad values: exit 2
@pytest.mark.parametrize(
    ("args", "option"),
    [
        (["--weighting", "pdb"], "--weighting"),
        (["--crop-weights", "0.5,0.5"], "--crop-weights"),
        (["--crop-weights", "a,b,c"], "--crop-weights"),
        (["--crop-weights", "-1,1,1"], "--crop-weights"),
        (["--crop-weights", "0,0,0"], "--crop-weights"),
        (["--crop-weights", "nan,1,1"], "--crop-weights"),
        (["--max-msa-rows", "0"], "--max-msa-rows"),
    ],
    ids=["weighting", "two-weights", "not-numbers", "negative", "zero-sum", "nan", "msa-rows-0"],
)
def test_bad_values_exit_2_in_one_line_naming_the_option(
    sample_store: Path, tmp_path: Path, args: list[str], option: str
) -> None:
    log = tmp_path / "log.json"
    done = _cli("--store", str(sample_store), "--steps", "1", "--crop", "16", "--device", "cpu", "--log", str(log),
                *args)  # fmt: skip
    assert done.returncode == 2, done.stderr[-2000:]
    assert "Traceback" not in done.stderr
    lines = done.stderr.strip().splitlines()
    # the option named first: by the CLI's parser ("error: --crop-weights ...") or by run_training,
    # as the CLI's flag beside the Python argument ("error: weighting (--weighting) ...")
    named = lines[0].startswith(f"error: {option} ") or lines[0].startswith(
        f"error: {option[2:].replace('-', '_')} ({option}) "
    )
    assert len(lines) == 1 and named, done.stderr[-2000:]
    assert not log.exists()  # refused before anything ran


# -------------------------------------------------------------------------------------------- resume
@pytest.fixture(scope="module")
def other_run(sample_store: Path, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """(checkpoint, log) of a one-step run with :data:`OTHER`'s settings."""
    d = tmp_path_factory.mktemp("e6_resume")
    ck, log = d / "ck.pt", d / "log.json"
    run_training(sample_store, None, steps=1, log_path=log, checkpoint=ck, **OTHER, **SMALL)
    return ck, log


@pytest.mark.parametrize(
    ("change", "theirs", "ours"),
    [
        ({"weighting": "af3"}, "--weighting uniform", "--weighting af3"),
        ({"crop_weights": (0.2, 0.4, 0.4)}, "--crop-weights 0.25,0.25,0.5", "--crop-weights 0.2,0.4,0.4"),
        ({"max_msa_rows": 1024}, "--max-msa-rows 7", "--max-msa-rows 1024"),
        ({"pair_msa": True}, "--no-pair-msa", "--pair-msa"),
        ({"crop_whole_groups": False}, "--crop-whole-groups", "--crop-per-token"),
    ],
    ids=DATA_KEYS,
)
def test_resume_with_other_data_settings_is_refused_in_one_line(
    sample_store: Path, other_run: tuple[Path, Path], change: dict[str, Any], theirs: str, ours: str
) -> None:
    ck, _ = other_run
    doc = torch.load(ck, weights_only=True)
    assert {k: doc[k] for k in DATA_KEYS} == {**OTHER, "crop_weights": [0.25, 0.25, 0.5]}
    with pytest.raises(UsageError) as err:
        run_training(sample_store, None, steps=2, log_path=None, resume=ck, on_step=_never,
                     **{**OTHER, **change}, **SMALL)  # fmt: skip
    msg = str(err.value)
    assert "\n" not in msg and str(ck) in msg, msg
    assert f"its run used {theirs}" in msg and f"this one {ours} " in msg, msg


def test_resume_with_the_same_settings_continues(
    sample_store: Path, other_run: tuple[Path, Path], tmp_path: Path
) -> None:
    """The same settings (crop weights given in another scale normalize to the same) resume, and
    the carried-over log keeps them."""
    ck, log = other_run
    mine = tmp_path / "log.json"
    mine.write_bytes(log.read_bytes())
    doc = run_training(sample_store, None, steps=2, log_path=mine, resume=ck,
                       **{**OTHER, "crop_weights": (2, 2, 4)}, **SMALL)  # fmt: skip
    assert [r["step"] for r in doc["steps"]] == [0, 1] and doc["steps_from_earlier_log"] == 1
    written = json.loads(mine.read_text())
    assert {k: written[k] for k in DATA_KEYS} == {**OTHER, "crop_weights": [0.25, 0.25, 0.5]}


def test_the_log_of_a_run_with_other_settings_is_not_carried_over(
    sample_store: Path, other_run: tuple[Path, Path], tmp_path: Path
) -> None:
    ck, _ = other_run
    log = tmp_path / "af3.json"
    run_training(sample_store, None, steps=1, log_path=log, **SMALL)  # the same model, seed, crop, batch
    before = log.read_bytes()
    with pytest.raises(
        UsageError, match=r"is the log of another run \(its weighting 'af3', this run's 'uniform'\)"
    ):
        run_training(sample_store, None, steps=2, log_path=log, resume=ck, on_step=_never, **OTHER, **SMALL)
    assert log.read_bytes() == before


def test_cli_resume_with_another_weighting_exits_2(
    sample_store: Path, other_run: tuple[Path, Path], tmp_path: Path
) -> None:
    ck, _ = other_run
    cfg = tmp_path / "tiny.json"
    TINY.to_json(cfg)
    done = _cli("--store", str(sample_store), "--steps", "2", "--crop", "16", "--device", "cpu", "--workers", "1",
                "--model-config", str(cfg), "--resume", str(ck), "--log", str(tmp_path / "log.json"),
                "--crop-weights", "1,1,2", "--max-msa-rows", "7", "--no-pair-msa", "--crop-whole-groups")  # fmt: skip
    assert done.returncode == 2, done.stderr[-2000:]
    last = done.stderr.strip().splitlines()[-1]
    assert "Traceback" not in done.stderr and str(ck) in last, done.stderr[-2000:]
    assert (
        "its run used --weighting uniform, this one --weighting af3" in last
        and "give --weighting uniform" in last
    )
    assert not (tmp_path / "log.json").exists()


def test_an_older_checkpoint_was_trained_uniformly(
    sample_store: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A checkpoint of an older featurecache records no data settings: its train sampled uniformly
    (it had no --weighting) with the client's defaults, whole-group crops then (review RF4 s25 #1).
    Resuming it with the new defaults is refused, naming both; with --weighting uniform alone too
    (per-token crops); with --weighting uniform --crop-whole-groups it continues, unwarned."""
    ck = tmp_path / "old.pt"
    run_training(sample_store, None, steps=1, log_path=None, checkpoint=ck, weighting="uniform",
                 crop_whole_groups=True, **SMALL)  # fmt: skip
    doc = torch.load(ck, weights_only=True)
    for key in DATA_KEYS:
        del doc[key]
    torch.save(doc, ck)
    with pytest.raises(UsageError) as err:
        run_training(sample_store, None, steps=2, log_path=None, resume=ck, on_step=_never, **SMALL)
    msg = str(err.value)
    assert "\n" not in msg, msg
    assert "its run used --weighting uniform and --crop-whole-groups (an older checkpoint" in msg, msg
    assert "give --weighting uniform --crop-whole-groups," in msg, msg
    with pytest.raises(UsageError) as err:
        run_training(sample_store, None, steps=2, log_path=None, resume=ck, on_step=_never, weighting="uniform",
                     **SMALL)  # fmt: skip
    msg = str(err.value)
    assert "its run used --crop-whole-groups (an older checkpoint" in msg, msg
    assert "this one --crop-per-token" in msg and "give --crop-whole-groups," in msg, msg
    with caplog.at_level(logging.WARNING, logger="featurecache.model.train"):
        again = run_training(
            sample_store, None, steps=2, log_path=None, resume=ck, weighting="uniform", crop_whole_groups=True,
            **SMALL,
        )  # fmt: skip
    assert [r["step"] for r in again["steps"]] == [1]
    said = [r.getMessage() for r in caplog.records]
    assert not any(f"{ck} records no" in m for m in said), said
