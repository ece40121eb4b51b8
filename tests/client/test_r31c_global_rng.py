"""The client leaves the trainer's global random state alone (review R31c s47 #1, #2).

A training script seeds ``random`` and ``torch`` for its own draws (dropout masks, its own
augmentation); a library that draws from those streams shifts them, so the same script gives
another run depending on how often a service was retried or how many loader passes ran."""

from __future__ import annotations

import random
from pathlib import Path

import pytest
import torch

from featurecache.client import FeatureDataset
from featurecache.client.http import LookupClient
from featurecache.errors import ServiceUnavailable
from services.lookup.server import free_port


def test_retrying_a_service_draws_no_global_random_numbers() -> None:
    # nothing listens on the port: every attempt is a connection error, retried with jittered backoff
    url = f"http://127.0.0.1:{free_port()}"
    random.seed(1234)
    before = random.getstate()
    client = LookupClient(
        url, token="", first_contact_s=1.0, retry_budget_s=1.0, backoff=0.05, max_backoff=0.1
    )
    try:
        with pytest.raises(ServiceUnavailable, match="attempts"):
            client.ids  # noqa: B018 - the first call contacts the service
    finally:
        client.close()
    assert random.getstate() == before


def test_a_loader_pass_draws_no_global_torch_random_numbers(client_store: Path) -> None:
    with FeatureDataset(client_store, crop_size=32, seed=0, samples_per_epoch=4) as ds:
        loader = ds.loader(batch_size=2, num_workers=0)
        torch.manual_seed(99)
        before = torch.get_rng_state()
        batches = list(loader)
        assert len(batches) == 2
        assert torch.equal(torch.get_rng_state(), before)
