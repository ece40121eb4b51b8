"""A store where every input failed: the sampler (and the dataset, and so ``train``) says the store
has no entries and where the failures are listed, not that filters nobody gave reject everything."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from featurecache import open_store
from featurecache.client import FeatureDataset
from featurecache.client.sampler import Sampler, SamplerFilter
from featurecache.errors import InvalidRequest
from tests.conftest import STRUCTURES, build_store


@pytest.fixture(scope="module")
def failed_store(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, int]:
    """A real build whose every input fails to parse: (store, number of inputs)."""
    root = tmp_path_factory.mktemp("all_failed")
    inputs = root / "in"
    inputs.mkdir()
    (inputs / "garbage.cif").write_text("this is not an mmCIF file\n")
    real = (STRUCTURES / "102m.cif").read_text()
    (inputs / "cut.cif").write_text(real[: len(real) // 3].replace("data_", "", 1))  # no block header
    store = root / "store"
    build_store(store, inputs, workers=1)
    return store, 2


def test_dataset_over_a_store_without_entries_says_so(failed_store: tuple[Path, int]) -> None:
    store, n_inputs = failed_store
    with pytest.raises(InvalidRequest) as info:
        FeatureDataset(store)
    message = str(info.value)
    assert "no entries" in message and "featurecache info" in message and "--failures" in message
    assert f"{n_inputs} inputs failed to build" in message  # the dataset passes the failures table on
    assert "filter" not in message  # no filter was given


def test_sampler_counts_the_failed_inputs(failed_store: tuple[Path, int]) -> None:
    store, n_inputs = failed_store
    reader = open_store(store)
    assert reader.entries.num_rows == 0
    with pytest.raises(InvalidRequest, match=f"no entries; {n_inputs} inputs failed to build"):
        Sampler(reader.entries, failures=reader.failures)
    reader.close()


def test_filters_that_leave_nothing_are_named(client_reader: Any) -> None:
    n = client_reader.entries.num_rows
    with pytest.raises(InvalidRequest) as info:
        Sampler(client_reader.entries, filters=SamplerFilter(max_tokens=1, keep_undated=False))
    message = str(info.value)
    assert f"no entry of the store's {n} passes" in message
    assert "max_tokens=1" in message and "keep_undated=False" in message and "max_resolution" not in message


@pytest.mark.parametrize(
    ("kwargs", "words"),
    [({"crop_size": 0}, "crop_size must be an integer ≥ 1; got 0"),
     ({"crop_size": 2.5}, "crop_size must be an integer ≥ 1; got 2.5"),
     ({"crop_size": "384"}, "crop_size must be an integer ≥ 1; got '384'"),
     ({"seed": -1}, "seed must be an integer ≥ 0; got -1"),
     ({"workers": 0}, "workers must be an integer ≥ 1; got 0")],
)  # fmt: skip
def test_dataset_arguments_are_checked_by_name(
    client_store: Path, kwargs: dict[str, Any], words: str
) -> None:
    """A float or string crop size, a negative seed and no workers are refused when the dataset is
    made, naming the argument (a float crop was accepted, a string gave a bare TypeError, a negative
    seed failed only at the first sample, workers=0 named an internal limit)."""
    with pytest.raises(InvalidRequest, match=f"FeatureDataset: {words}"):
        FeatureDataset(client_store, **kwargs)
