"""Seeds are 0 <= seed < 2**32 (review R41b s51 #2), on a real store.

A sample's generator is ``np.random.default_rng([seed, epoch, index])`` and an epoch's
``[seed, epoch, 0x5A3D]``. numpy's ``SeedSequence`` splits an int of 2**32 or more into 32-bit
words, so seed ``2**32 + a`` drew other seeds' streams: ``[2**32, 5, 0]`` is ``[0, 1, 5]``, sample
(epoch 5, index 0) of seed 2**32 the crop, MSA rows and rotations of sample (epoch 1, index 5) of
seed 0. Such seeds were accepted (a hash or ``random.getrandbits(63)`` gives them); they are
refused now where the dataset, the sampler, the sample job and ``featurecache train`` take a seed,
naming the argument and the range. 2**32 - 1 is still a seed.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from featurecache.client import FeatureDataset
from featurecache.client.sampler import Sampler
from tests.conftest import cli_in_process

TOO_LARGE = (2**32, 2**32 + 5, 2**63 - 1)


def test_the_aliasing_the_range_keeps_out() -> None:
    """Why: numpy gives seed 2**32's key the stream of a key of seed 0 (the premise of the check)."""
    a = np.random.default_rng([2**32, 5, 0]).integers(0, 2**63, 8)
    b = np.random.default_rng([0, 1, 5]).integers(0, 2**63, 8)
    assert np.array_equal(a, b)


@pytest.mark.parametrize("seed", TOO_LARGE)
def test_the_dataset_refuses_a_seed_outside_the_range(client_store: Path, seed: int) -> None:
    with pytest.raises(
        ValueError,
        match=r"FeatureDataset: seed must be an integer with 0 ≤ seed < 2\*\*32 \(4294967296\); got ",
    ) as err:
        FeatureDataset(client_store, crop_size=32, samples_per_epoch=2, workers=1, seed=seed)
    assert repr(seed) in str(err.value)


@pytest.mark.parametrize("seed", TOO_LARGE)
def test_the_sampler_refuses_a_seed_outside_the_range(client_reader, seed: int) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(
        ValueError, match=r"Sampler: seed must be an integer with 0 ≤ seed < 2\*\*32 \(4294967296\); got "
    ):
        Sampler(client_reader.entries, seed=seed)


def test_a_negative_seed_is_refused_too(client_reader) -> None:  # type: ignore[no-untyped-def]
    """(FeatureDataset said so before, as ``seed must be an integer ≥ 0``; the sampler took it.)"""
    with pytest.raises(
        ValueError, match=r"Sampler: seed must be an integer with 0 ≤ seed < 2\*\*32 \(4294967296\); got -1"
    ):
        Sampler(client_reader.entries, seed=-1)


def test_the_largest_seed_draws_its_own_samples(client_store: Path) -> None:
    """2**32 - 1 is accepted and samples; its stream is not seed 0's."""
    kw = dict(crop_size=32, samples_per_epoch=4, workers=1, window=0)
    with (
        FeatureDataset(client_store, seed=2**32 - 1, **kw) as top,
        FeatureDataset(client_store, seed=0, **kw) as zero,
    ):
        assert top.seed == 2**32 - 1 and top.sampler.seed == 2**32 - 1 and top.job.seed == 2**32 - 1
        a, b = top.sample(0), zero.sample(0)
        assert a["token_index"].size > 0
        assert top.sampler.epoch_units(0).tolist() != zero.sampler.epoch_units(
            0
        ).tolist() or not np.array_equal(a["ref_pos"], b["ref_pos"])
        again = top.sample(0)
        assert all(np.array_equal(v, again[k]) for k, v in a.items() if isinstance(v, np.ndarray))


def test_train_refuses_seed_2_to_the_32_as_a_usage_error(sample_store: Path, tmp_path: Path) -> None:
    """``featurecache train --seed 4294967296``: exit 2 naming --seed and the range, before training
    (it trained, on samples of seed 0's streams)."""
    log = tmp_path / "log.json"
    proc = cli_in_process("train", "--store", str(sample_store), "--device", "cpu", "--crop", "16", "--steps", "1",
                          "--workers", "1", "--seed", str(2**32), "--log", str(log))  # fmt: skip
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert "seed (--seed) must be ≥ 0 and < 2**32 (4294967296); got 4294967296" in proc.stderr, proc.stderr[
        -2000:
    ]
    assert "Traceback" not in proc.stderr and not log.exists()


def test_train_takes_seed_2_to_the_32_minus_1(sample_store: Path, tmp_path: Path) -> None:
    log = tmp_path / "log.json"
    proc = cli_in_process("train", "--store", str(sample_store), "--device", "cpu", "--crop", "16", "--steps", "1",
                          "--workers", "1", "--seed", str(2**32 - 1), "--log", str(log))  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert log.exists()
