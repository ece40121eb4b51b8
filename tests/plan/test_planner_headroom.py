"""The planner's headroom: an entry fits only when its predicted peak leaves that share free."""

from __future__ import annotations

import pytest

from featurecache.model.config import ModelConfig
from featurecache.plan.planner import Planner


def test_headroom_shrinks_the_budget_and_is_validated() -> None:
    cfg = ModelConfig()
    full = Planner(cfg, 100 * 2**30, headroom=0.0)
    kept = Planner(cfg, 100 * 2**30, headroom=0.08)
    assert full.budget == 100 * 2**30
    assert kept.budget == int(100 * 2**30 * 0.92)
    with pytest.raises(ValueError):
        Planner(cfg, 2**30, headroom=1.0)
