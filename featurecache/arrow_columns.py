"""Arrow table columns as numpy arrays: one rule for their nulls."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc


def column_array(table: pa.Table, name: str, dtype: Any) -> np.ndarray:
    """Column ``name`` of ``table`` as a numpy array of ``dtype`` (one value a row), its nulls
    filled first: NaN for a float ``dtype``, 0 otherwise."""
    fill = math.nan if np.dtype(dtype).kind == "f" else 0
    return np.asarray(pc.fill_null(table.column(name), fill).to_numpy(zero_copy_only=False), dtype=dtype)
