"""Session 18: the attention fixes of the kernel-library review (stride-0 layouts, a -inf bias
without a mask, int64 offsets past 2**31 behind a constexpr) against the previous kernels, same
run, interleaved. The previous module is ``benchmarks/dev/pba_prev.py`` = ``git show
71a6b48:featurecache/model/kernels/pair_bias_attention.py`` (not committed: generate it, and carry it
to the device). fwd+bwd through the public op (autograd), B=1 H=4 D=32 bf16, S = N, for no mask,
the model's padding masks (key_mask + row_mask) and a general [B, S, N] mask, all True so that
every variant computes the same function; outputs and gradients are compared bitwise.

Historical: ran against 89e25c5 (run 90, at df447dd's kernels: 89e25c5 adds this script and changes
no kernel); to re-run: ``git worktree add /tmp/fc-89e25c5 89e25c5``, make
``benchmarks/dev/pba_prev.py`` there as said above, and run it there (without that file it exits 2
at once, saying so).

    PYTHONPATH=. python3 benchmarks/dev/ab_s18.py OUT.json
"""

from __future__ import annotations

import json
import sys
from typing import Any

import torch

from benchmarks.dev.devcli import help_exit, ran_elsewhere
from benchmarks.kernels import attention_inputs, ms
from featurecache.model.kernels import pair_bias_attention as pba

try:
    from benchmarks.dev import pba_prev  # not committed: made as said above
except ImportError:
    pba_prev = None

RAN_AGAINST = "89e25c585d4df889b38e404e96adfa60a6189875"


def call(
    mod: Any, mask: str, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, bias: torch.Tensor
) -> torch.Tensor:
    b, s, _, n, _ = q.shape
    if mask == "general":
        return mod.pair_bias_attention(q, k, v, bias, torch.ones(b, s, n, device=q.device, dtype=torch.bool))
    if mask == "padding":
        key_mask = torch.ones(b, n, device=q.device, dtype=torch.bool)
        row_mask = torch.ones(b, s, device=q.device, dtype=torch.bool)
        return mod.pair_bias_attention(q, k, v, bias, key_mask=key_mask, row_mask=row_mask)
    return mod.pair_bias_attention(q, k, v, bias)


def main() -> None:
    if pba_prev is None:
        ran_elsewhere(RAN_AGAINST, "run 90", "benchmarks/dev/pba_prev.py is missing", "after making it there "
                      "(git show 71a6b48:featurecache/model/kernels/pair_bias_attention.py > benchmarks/dev/pba_prev.py)")  # fmt: skip
    rows: list[dict[str, Any]] = []
    for n in (384, 768, 1024):
        t = attention_inputs(n, 4, 32, seed=n)
        leaves = [t[name].detach().requires_grad_(True) for name in ("q", "k", "v", "bias")]
        do = t["do"]
        for mask in ("", "padding", "general"):
            res = {}
            for name, mod in (("prev", pba_prev), ("new", pba)):
                out = call(mod, mask, *leaves)
                grads = torch.autograd.grad(out, leaves, do)
                res[name] = (out.detach(), *grads)
            diffs = [
                float((a.float() - b.float()).abs().max())
                for a, b in zip(res["prev"], res["new"], strict=True)
            ]
            check = {"what": "check", "N": n, "mask": mask or "none", "max_abs_diff out,dq,dk,dv,dbias": diffs,
                     "bitwise": all(torch.equal(a, b) for a, b in zip(res["prev"], res["new"], strict=True))}  # fmt: skip
            rows.append(check)
            print(check, flush=True)
            del res
            for rep in range(3):
                for name, mod in (("prev", pba_prev), ("new", pba)):

                    def step(
                        mod: Any = mod,
                        mask: str = mask,
                        leaves: list[torch.Tensor] = leaves,
                        do: torch.Tensor = do,
                    ) -> Any:
                        return torch.autograd.grad(call(mod, mask, *leaves), leaves, do)

                    row = {"what": "fwd+bwd", "N": n, "mask": mask or "none", "variant": name, "rep": rep,
                           "ms": ms(step)}  # fmt: skip
                    rows.append(row)
                    print(row, flush=True)
        torch.cuda.empty_cache()
    with open(sys.argv[1], "w") as f:
        json.dump({"torch": torch.__version__, "rows": rows}, f, indent=1)


if __name__ == "__main__":
    help_exit(__doc__)
    main()
