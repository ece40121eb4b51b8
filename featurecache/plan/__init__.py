"""Memory planning: predict the peak GPU memory of a training step per entry from the index alone.

:mod:`.memory` is the analytic model of the reference trunk; :mod:`.planner` applies it to a
store's index and writes ``STORE/index/plan.arrow``.
"""

from __future__ import annotations

from featurecache.plan.memory import (
    CUDA_WORKSPACE_BYTES,
    MemoryEstimate,
    Precision,
    estimate_step,
    max_tokens_within,
    parameter_count,
)
from featurecache.plan.planner import (
    STANDARD_CROPS,
    Planner,
    fitting_ids,
    parse_bytes,
    plan_store,
    read_plan,
    run_plan,
    stale_plan_warning,
    summarize_plan,
    unfinished_plan_warning,
    write_plan,
)

__all__ = [
    "CUDA_WORKSPACE_BYTES",
    "STANDARD_CROPS",
    "MemoryEstimate",
    "Planner",
    "Precision",
    "estimate_step",
    "fitting_ids",
    "max_tokens_within",
    "parameter_count",
    "parse_bytes",
    "plan_store",
    "read_plan",
    "run_plan",
    "stale_plan_warning",
    "summarize_plan",
    "unfinished_plan_warning",
    "write_plan",
]
