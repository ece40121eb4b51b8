"""Launch geometry shared by the kernels and the memory planner (no torch, no Triton imports)."""

from __future__ import annotations

import math
import os


def interpreting() -> bool:
    """True when Triton runs kernels in its interpreter (``TRITON_INTERPRET``): no inline asm there."""
    return os.environ.get("TRITON_INTERPRET", "0") not in ("", "0")


def dbias_groups(s: int, programs_per_group: int, target_programs: int) -> tuple[int, int]:
    """(groups, S rows per group) of the attention bias-gradient kernel.

    S is split into as few groups as give ``target_programs`` programs (each group writes one fp32
    partial of the bias gradient). When S is split (and S ≥ 16) a group's row count is a multiple of
    16 (rounded down, so the program count stays at or above the target): the row count is an int argument
    Triton's JIT specialises on (divisible by 16 or not), and without the rounding some N (128, 512)
    compiled a second dbias kernel in the middle of training.
    """
    groups = max(1, min(s, math.ceil(target_programs / programs_per_group)))
    per_group = math.ceil(s / groups)
    if groups > 1 and s >= 16:
        per_group = max(16, per_group // 16 * 16)
    return math.ceil(s / per_group), per_group
