"""Values made fit for strict JSON (``json.dumps(..., allow_nan=False)``): what the training log and
the benchmark results write."""

from __future__ import annotations

import math
from typing import Any

import numpy as np


def finite(value: Any) -> Any:
    """``value`` with every non-finite float (NaN, ±inf) inside dicts, lists and tuples made None;
    numpy scalars (``np.float32``, ``np.int64``, ``np.bool_`` …) become their Python values first
    (``json.dumps(default=str)`` would write them as strings, a NaN as ``"nan"``)."""
    if isinstance(value, np.generic):
        value = value.item()
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: finite(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [finite(v) for v in value]
    return value
