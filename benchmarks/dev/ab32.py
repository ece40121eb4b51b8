"""Run 32 (session 8): three changes found in the SASS on the CPU (``benchmarks/dev/sass.py``).

* SwiGLU's sigmoid by ``tanh.approx.f32`` (``GemmConfig.fast_sigmoid``): ``tl.sigmoid`` divides
  with ``div.rn`` (range checks, ~10 instructions per element); the transition forward's loop goes
  762 -> 474 instructions, the dx loop 698 -> 551.
* The dx kernel without a loop-carried wgmma accumulator: ptxas stops serialising its wgmmas
  (C7515) for +5 % instructions.
* The same for dk in the attention dk/dv kernel: C7515 gone, loop 396 -> 410 instructions.

Run 32 measured the second and third as switches (``GemmConfig.split_acc``,
``AttentionConfig.dkv_split_dk``) on the uncommitted tree of commit 8c27aa2; the first was adopted
as the only dx path and the second refuted (``kernels_ab_run32.json`` has both). This script, as
committed, re-runs what the switches that remain allow: the transition kernels with and without the
fast sigmoid (and the tiles run 32 tried, now with the fresh-tile dx), the LayerNorm-Linear totals,
and the attention backward's peak memory with the bias gradient before dk/dv (this tree) vs after
(the previous order), plus the fwd+bwd totals. The pre-run-32 kernels are
``git show 93a3e14:featurecache/model/kernels/layernorm_linear.py``.

    PYTHONPATH=. python3 benchmarks/dev/ab32.py OUT.json
"""

from __future__ import annotations

import dataclasses
import functools
import json
import sys
from typing import Any

import torch

from benchmarks.dev.abkit import lnl_kernel_sweep, lnl_totals, totals
from benchmarks.dev.devcli import help_exit
from benchmarks.kernels import (
    BF16,
    attention_inputs,
    free,
    peak_mib,
)  # fmt: skip
from featurecache.model.kernels import layernorm_linear as lnl
from featurecache.model.kernels import pair_bias_attention as pba

GC = lnl.GemmConfig


def transition(rows: list[dict[str, Any]]) -> None:
    base = lnl.default_config(128, BF16, torch.device("cuda"))
    old = dataclasses.replace(
        base, fwd=dataclasses.replace(base.fwd, fast_sigmoid=False, num_warps=4),
        dx=dataclasses.replace(base.dx, fast_sigmoid=False),
    )  # fmt: skip
    fwd_cfgs = [old.fwd, dataclasses.replace(old.fwd, fast_sigmoid=True)] + [
        GC(bm, bn, w, st, 0) for bm, bn, w, st in ((128, 64, 4, 3), (128, 32, 8, 3), (64, 64, 4, 3), (128, 64, 8, 3))
    ]  # fmt: skip
    dx_cfgs = [old.dx, base.dx] + [GC(bm, bn, w, st) for bm, bn, w, st in ((64, 32, 4, 4), (64, 64, 4, 3),
                                                                          (128, 32, 8, 3), (64, 32, 8, 3))]  # fmt: skip
    tuned = lnl_kernel_sweep((("fwd", fwd_cfgs), ("dx", dx_cfgs)), rows)
    print("best", tuned, flush=True)
    lnl_totals({"previous sigmoid": old, "this tree": base, "tuned": tuned}, rows)


def ordered_fwd_bwd(t: dict[str, Any], base: pba.AttentionConfig, old_order: bool) -> None:
    """Forward + backward through the launchers, the bias gradient before dk/dv (this tree's
    ``_run_backward``) or after them (the previous order, dk/dv allocated first)."""
    q, k, v, bias, do = t["q"], t["k"], t["v"], t["bias"], t["do"]
    scale = 32**-0.5
    target = max(base.dbias_target_programs, 2 * pba._num_sms(q.device))
    out, lse = pba.pair_bias_attention_forward(q, k, v, bias, None, scale, base)
    a = pba.prepare_backward(do, q, k, v, bias, None, out, lse, scale)
    pba.launch_dq(a, base.dq)
    if old_order:
        pba.launch_dkv(a, base.dkv, base.dkv_bias_copy)
        pba.launch_dbias(a, base.dbias, target)
    else:
        pba.launch_dbias(a, base.dbias, target)
        pba.launch_dkv(a, base.dkv, base.dkv_bias_copy)


def attention(rows: list[dict[str, Any]]) -> None:
    base = pba.default_config(32, BF16, torch.device("cuda"))
    totals({"shipped": base}, rows, ns=(256, 768, 1024))
    # peak memory of one backward: this tree's order (dq, dbias, dk/dv) vs the previous (dq, dk/dv, dbias)
    for n in (256, 768):
        t = attention_inputs(n, 4, 32, seed=n)
        for name, old_order in (("previous order", True), ("this tree", False)):
            run = functools.partial(ordered_fwd_bwd, t, base, old_order)
            row = {"what": "peak", "N": n, "variant": name, "peak_mib": peak_mib(run)}
            rows.append(row)
            print(row, flush=True)
        free()


def main() -> None:
    rows: list[dict[str, Any]] = []
    for part in (transition, attention):
        try:
            part(rows)
        except Exception as exc:  # keep what the other part measured
            rows.append({"what": part.__name__, "error": f"{type(exc).__name__}: {str(exc)[-500:]}"})
            print(rows[-1], flush=True)
    with open(sys.argv[1], "w") as f:
        json.dump({"torch": torch.__version__, "rows": rows}, f, indent=1)


if __name__ == "__main__":
    help_exit(__doc__)
    main()
