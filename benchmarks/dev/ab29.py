"""Run 29 (session 7): the transition's two Triton kernels re-swept where the earlier sweeps did not
look. The dx kernel's tiles were chosen (sweeps 3-4) for ``launch_dx`` without ``store_du``, but
since the cuBLAS weight gradient (run 7) it also stores dU and LN(x); the forward sweep only tried 3
pipeline stages, and run 26 found a 1.6x spread between 2 and 3 stages in a similar loop. Rows =
768², c = 128, n = 4, bf16: per-kernel times of every config, then the transition fwd+bwd with the
per-kernel winners vs the shipped tiles, two interleaved reps, errors vs fp32.

    PYTHONPATH=. python3 benchmarks/dev/ab29.py OUT.json
"""

from __future__ import annotations

import json
import sys
from typing import Any

import torch

from benchmarks.dev.abkit import lnl_kernel_sweep, lnl_totals
from benchmarks.dev.devcli import help_exit
from featurecache.model.kernels import layernorm_linear as lnl

GC = lnl.GemmConfig
FWD = [GC(bm, bn, w, st, 0) for bm, bn, w in ((128, 32, 4), (64, 32, 4), (64, 64, 4), (128, 64, 8), (128, 32, 8),
                                              (256, 32, 8), (128, 128, 8)) for st in (2, 3, 4)]  # fmt: skip
DX = [GC(bm, bn, w, st) for bm, bn, w in ((64, 32, 4), (32, 32, 4), (64, 64, 4), (128, 32, 8), (128, 64, 8),
                                          (64, 32, 8), (64, 64, 8), (32, 64, 4)) for st in (2, 3, 4)]  # fmt: skip


def main() -> None:
    rows: list[dict[str, Any]] = []
    tuned = lnl_kernel_sweep((("fwd", FWD), ("dx", DX)), rows)
    print("best", tuned, flush=True)
    base = lnl.default_config(128, torch.bfloat16, torch.device("cuda"))
    lnl_totals({"shipped": base, "tuned": tuned}, rows)
    with open(sys.argv[1], "w") as f:
        json.dump({"torch": torch.__version__, "best": str(tuned), "rows": rows}, f, indent=1)


if __name__ == "__main__":
    help_exit(__doc__)
    main()
