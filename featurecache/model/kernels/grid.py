"""Launch geometry shared by the kernels and the memory planner, and the kernels' device check
(no torch, no Triton imports)."""

from __future__ import annotations

import math
import os
from typing import Any

from featurecache.errors import KernelShapeError


def interpreting() -> bool:
    """True when Triton runs kernels in its interpreter (``TRITON_INTERPRET``): no inline asm there."""
    return os.environ.get("TRITON_INTERPRET", "0") not in ("", "0")


def check_devices(op: str, reference: str, tensors: dict[str, Any]) -> None:
    """Refuse (``KernelShapeError`` naming the argument and its device) tensors the kernels cannot
    run on: not on CUDA (unless Triton interprets, ``TRITON_INTERPRET=1``), or not all on one
    device. ``tensors``: argument name -> tensor or None (skipped), the first one sets the device;
    ``reference``: the pure-torch function to suggest for CPU tensors."""
    first = ""
    for name, t in tensors.items():
        if t is None:
            continue
        if not first:
            first = name
            if t.device.type != "cuda" and not interpreting():
                raise KernelShapeError(
                    f"{op}: {name} is on {t.device}; the fused kernels run on CUDA tensors only "
                    f"(or under TRITON_INTERPRET=1): use fused=False / {reference} for {t.device.type} tensors"
                )
        elif t.device != tensors[first].device:
            raise KernelShapeError(
                f"{op}: {name} is on {t.device} but {first} on {tensors[first].device}; "
                "all tensors must be on one device"
            )


#: the transition backward writes h, dU and LN(x) (``3·H + C`` elements per row in the weights' dtype)
#: for the weight GEMMs; it runs over the rows in chunks whose buffers take at most this many bytes,
#: each chunk's GEMMs adding into fp32 dW1, dW2 in chunk order (deterministic). At N = 768 (rows =
#: 768², 1.96 GB of buffers) the backward's peak goes 2025 -> 910 MiB for +3-6 % of its time (runs 40, 44,
#: KERNEL_NOTES.md); the pair transition's backward is where the training step peaks
TRANSITION_BWD_CHUNK_BYTES = 512 << 20


def chunk_rows(rows: int, c: int, hidden: int, itemsize: int, block_m: int, chunk_bytes: int | None) -> int:
    """Rows per transition-backward chunk: the fewest equal chunks whose buffers fit
    ``chunk_bytes``, rounded up to whole row blocks (the LayerNorm-weight partials are indexed by
    row block). ``chunk_bytes`` None: all rows in one chunk."""
    if rows <= 0 or not chunk_bytes:
        return max(rows, 1)
    n_chunks = math.ceil(rows * (3 * hidden + c) * itemsize / chunk_bytes)
    step = math.ceil(rows / n_chunks)
    return min(rows, math.ceil(step / block_m) * block_m)


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
