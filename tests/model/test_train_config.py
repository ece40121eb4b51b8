"""``ModelConfig`` refuses what the trunk cannot run or would train wrong, as a ``UsageError``
(``featurecache train --model-config``: exit status 2) naming the field and the reason."""

from __future__ import annotations

import json
from typing import Any

import pytest

from featurecache.errors import UsageError
from featurecache.model.config import ModelConfig


@pytest.mark.parametrize(
    ("fields", "match"),
    [
        ({"c_token": "64"}, r"c_token must be an integer; got '64'"),
        ({"n_blocks": 1.5}, r"n_blocks must be an integer; got 1\.5"),
        ({"n_blocks": True}, r"n_blocks must be an integer; got True"),
        ({"distogram_min": "2"}, "distogram_min must be a number"),
        ({"relpos_max": -3}, r"relpos_max must be ≥ 0; got -3"),
        ({"relchain_max": -1}, "relchain_max must be ≥ 0"),
        ({"msa_classes": 8}, r"msa_classes must be 32 .*got 8"),
        ({"eps": -1.0}, "eps must be > 0"),
        ({"eps": float("nan")}, "eps must be a finite number"),
        ({"distogram_min": 22.0, "distogram_max": 2.0}, r"distogram_min < distogram_max.*22\.0.*2\.0"),
        ({"distogram_min": 5.0, "distogram_max": 5.0}, "distogram_min < distogram_max"),
        ({"distogram_min": -1.0}, "distogram_min must be ≥ 0"),
        ({"distogram_bins": 1}, r"distogram_bins must be ≥ 2; got 1"),
        ({"n_heads": 0}, "n_heads must be ≥ 1"),
        ({"head_dim": 24}, "head_dim"),
    ],
)
def test_model_config_refuses_what_the_model_cannot_train(fields: dict[str, Any], match: str) -> None:
    with pytest.raises(UsageError, match=match):
        ModelConfig(**fields)
    with pytest.raises(UsageError, match=match):  # the same from a --model-config file
        ModelConfig.from_json(json.dumps(fields, allow_nan=True))


def test_model_config_takes_integers_for_its_float_fields() -> None:
    cfg = ModelConfig.from_json('{"distogram_min": 2, "distogram_max": 20}')
    assert cfg.distogram_min == 2.0 and isinstance(cfg.distogram_min, float)
    assert cfg == ModelConfig(distogram_min=2.0, distogram_max=20.0)
