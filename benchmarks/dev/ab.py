# ruff: noqa: B023, B905  (scratch A/B script: closures run inside their loop iteration)
"""Same-run A/B on the GPU (scratch): transition weight gradient by cuBLAS vs the Triton dW kernel,
and the host overhead of the fused attention (eager call vs CUDA-graph replay of the same work).

    PYTHONPATH=. python3 benchmarks/dev/ab.py OUT.json
"""

from __future__ import annotations

import dataclasses
import json
import sys
import time
from typing import Any

import torch
import torch.nn.functional as F

from benchmarks.dev.devcli import help_exit
from benchmarks.kernels import BF16, attention_inputs, ms, rel, transition_inputs
from featurecache.model.kernels import layernorm_linear as lnl
from featurecache.model.kernels import pair_bias_attention as pba
from featurecache.model.kernels.reference import swiglu_ref


def transition_ab(rows_out: list[dict[str, Any]]) -> None:
    n, c, nx = 768, 128, 4
    m = n * n
    base = lnl.default_config(c, BF16, torch.device("cuda"))
    cfgs = {"dw-cublas": dataclasses.replace(base, dw_library=True),
            "dw-triton": dataclasses.replace(base, dw_library=False)}  # fmt: skip
    # correctness on fresh inputs (fp32 reference of LN -> Linear -> SwiGLU)
    t = transition_inputs(m // 8, c, nx, seed=11)
    dh = torch.randn(m // 8, nx * c, device="cuda", dtype=BF16)
    xs = [t["x"].float().requires_grad_(), t["lnw"].float().requires_grad_(), t["lnb"].float().requires_grad_(),
          t["w1"].float().requires_grad_()]  # fmt: skip
    yr = swiglu_ref(F.linear(F.layer_norm(xs[0], (c,), xs[1], xs[2]), xs[3]))
    gr = torch.autograd.grad(yr, xs, dh.float())
    for name, cfg in cfgs.items():
        y = lnl.layernorm_linear_forward(t["x"], t["lnw"], t["lnb"], t["w1"], None, 1e-5, True, cfg)
        g = lnl.layernorm_linear_backward(dh, t["x"], t["lnw"], t["lnb"], t["w1"], None, 1e-5, True, cfg)
        g2 = lnl.layernorm_linear_backward(dh, t["x"], t["lnw"], t["lnb"], t["w1"], None, 1e-5, True, cfg)
        errs = {"y": rel(y, yr), **{k: rel(a, b) for k, a, b in zip(("dx", "dlnw", "dlnb", "dw"), g, gr)}}
        det = all(torch.equal(a, b) for a, b in zip(g[:4], g2[:4], strict=True))
        rows_out.append({"what": "lnl-check", "variant": name, **errs, "deterministic": det})
        print(rows_out[-1], flush=True)
    # timing at rows = 768², interleaved A B A B
    t = transition_inputs(m, c, nx, seed=12)
    dh = torch.randn(m, nx * c, device="cuda", dtype=BF16)
    a = lnl.prepare_backward(dh, t["x"], t["lnw"], t["lnb"], t["w1"], None, 1e-5, True)
    for rep in range(2):
        for name, cfg in cfgs.items():
            bwd = ms(lambda cfg=cfg: lnl.layernorm_linear_backward(dh, t["x"], t["lnw"], t["lnb"], t["w1"], None,
                                                                   1e-5, True, cfg))  # fmt: skip
            row = {"what": "lnl-bwd", "variant": name, "rep": rep, "ms": bwd}
            if rep == 0:
                store = name == "dw-cublas"
                row["dx_ms"] = ms(lambda store=store: lnl.launch_dx(a, cfg.dx, store_du=store))
                if store:
                    _, _, _, du, xln = lnl.launch_dx(a, cfg.dx, store_du=True)
                    row["gemm_ms"] = ms(lambda du=du, xln=xln: lnl.library_dw(du, xln, False))
                    del du, xln
                else:
                    row["dw_kernel_ms"] = ms(lambda: lnl.launch_dw(a, cfg.dw, cfg.dw_target_programs))
            torch.cuda.synchronize()
            torch.cuda.reset_peak_memory_stats()
            before = torch.cuda.memory_allocated()
            lnl.layernorm_linear_backward(dh, t["x"], t["lnw"], t["lnb"], t["w1"], None, 1e-5, True, cfg)
            torch.cuda.synchronize()
            row["bwd_peak_MiB"] = (torch.cuda.max_memory_allocated() - before) / 2**20
            rows_out.append(row)
            print(row, flush=True)


def attention_host(rows_out: list[dict[str, Any]]) -> None:
    for n in (64, 256, 384, 512):
        t = attention_inputs(n, 4, 32, seed=n + 5)
        xs = [t[k].detach().requires_grad_() for k in ("q", "k", "v", "bias")]
        do = t["do"]

        def step() -> tuple[torch.Tensor, ...]:
            out = pba.pair_bias_attention(*xs)
            return torch.autograd.grad(out, xs, do)

        step()
        eager = ms(step)
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        for _ in range(20):
            step()
        host = (time.perf_counter() - t0) / 20 * 1e3
        torch.cuda.synchronize()
        s = torch.cuda.Stream()
        s.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(s):
            for _ in range(2):
                step()
        torch.cuda.current_stream().wait_stream(s)
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            res = step()
        g.replay()
        torch.cuda.synchronize()
        ref = step()
        same = all(torch.equal(a, b) for a, b in zip(res, ref, strict=True))
        graph = ms(g.replay)
        row = {"what": "attn-host", "N": n, "eager_ms": eager, "graph_ms": graph, "host_ms_per_call": host,
               "graph_equal_eager": same}  # fmt: skip
        rows_out.append(row)
        print(row, flush=True)
        del g, res


def main() -> None:
    rows: list[dict[str, Any]] = []
    for fn in (transition_ab, attention_host):
        try:
            fn(rows)
        except Exception as exc:  # keep the other part's numbers
            rows.append({"what": fn.__name__, "error": f"{type(exc).__name__}: {exc}"[:500]})
            print(rows[-1], flush=True)
        torch.cuda.empty_cache()
    with open(sys.argv[1] if len(sys.argv) > 1 else "ab.json", "w") as f:
        json.dump(rows, f, indent=1)
    for r in rows:
        print(" ".join(f"{k}={v:.4g}" if isinstance(v, float) else f"{k}={v}" for k, v in r.items()))


if __name__ == "__main__":
    help_exit(__doc__)
    main()
