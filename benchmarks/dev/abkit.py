"""Shared pieces of the A/B scripts. Attention (``ab11.py``, ``ab13.py``–``ab15.py``, ``ab27.py``,
``ab30.py``, ``ab32.py``, ``host.py``, ``launch_ab.py``): the N = 768 backward setup, the interleaved
fwd+bwd totals over N, the forward-only A/B loop and the host time per call. LayerNorm-Linear
(``ab29.py``, ``ab32.py``): the per-kernel tile sweep and the transition totals per config."""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable, Iterable
from typing import Any

import torch
import torch.nn.functional as F

from benchmarks.kernels import (
    BF16,
    attention_inputs,
    free,
    ms,
    peak_mib,
    rel,
    swiglu_ref,
    transition_eager,
    transition_inputs,
    transition_ln_linear,
    transition_run,
)
from featurecache.model.kernels import layernorm_linear as lnl
from featurecache.model.kernels import pair_bias_attention as pba


def backward_at(n: int = 768, h: int = 4, d: int = 32, seed: int = 31) -> tuple[pba.AttentionConfig, Any]:
    """The default config and the backward operands (``BackwardInputs``) after one forward at this
    size, with dq, dk, dv already computed by the split kernels (the reference of an A/B)."""
    t = attention_inputs(n, h, d, seed=seed)
    q, k, v, bias, do = t["q"], t["k"], t["v"], t["bias"], t["do"]
    scale = d**-0.5
    base = pba.default_config(d, BF16, q.device)
    out, lse = pba.pair_bias_attention_forward(q, k, v, bias, None, scale, base)
    a = pba.prepare_backward(do, q, k, v, bias, None, out, lse, scale)
    pba.launch_dq(a, base.dq)
    pba.launch_dkv(a, base.dkv, base.dkv_bias_copy)
    return base, a


def host_ms(run: Callable[[], Any], reps: int = 30) -> float:
    """Host milliseconds per call of ``run`` without synchronising in between (launch overhead)."""
    import time

    run()
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(reps):
        run()
    dt = (time.perf_counter() - t0) / reps * 1e3
    torch.cuda.synchronize()
    return dt


def fwd_bwd(t: dict[str, Any], cfg: pba.AttentionConfig) -> Callable[[], tuple[torch.Tensor, ...]]:
    """One forward+backward through the launchers with ``cfg``: (out, dq, dk, dv, dbias)."""
    xs = [t[kk] for kk in ("q", "k", "v", "bias")]
    scale = xs[0].shape[-1] ** -0.5

    def run() -> tuple[torch.Tensor, ...]:
        o, lse = pba.pair_bias_attention_forward(*xs, None, scale, cfg)
        return (o, *pba.pair_bias_attention_backward(t["do"], *xs, None, o, lse, scale, cfg))

    return run


def totals(
    cfgs: dict[str, pba.AttentionConfig],
    rows: list[dict[str, Any]],
    ns: Iterable[int] = (256, 384, 512, 768, 1024),
    check: Callable[[int, dict[str, Any], dict[str, tuple[torch.Tensor, ...]]], dict[str, Any]] | None = None,
) -> None:
    """fwd+bwd ms per N and variant, two interleaved reps; peak MiB and the relative difference of
    every output from the first variant's on rep 0; ``check(n, inputs, results)`` adds fields."""
    first = next(iter(cfgs))
    for n in ns:
        t = attention_inputs(n, 4, 32, seed=n)
        res: dict[str, tuple[torch.Tensor, ...]] = {}
        for rep in range(2):
            for name, cfg in cfgs.items():
                run = fwd_bwd(t, cfg)
                row: dict[str, Any] = {"what": "total", "N": n, "variant": name, "rep": rep, "ms": ms(run)}
                if rep == 0:
                    res[name] = run()
                    row["peak_mib"] = peak_mib(run)
                    if name != first:
                        row["diff_vs_" + first] = [
                            rel(x, y) for x, y in zip(res[name], res[first], strict=True)
                        ]
                rows.append(row)
                print(row, flush=True)
        if check is not None:
            extra = {"what": "check", "N": n, **check(n, t, res)}
            rows.append(extra)
            print(extra, flush=True)
        del res
        torch.cuda.empty_cache()


def forward_ab(
    variants: Iterable[Any],
    run_variant: Callable[..., tuple[torch.Tensor, torch.Tensor]],
    out_path: str,
    ns: Iterable[int] = (384, 768, 1024),
    skip: Callable[[Any, int], bool] = lambda var, n: False,
) -> dict[str, Any]:
    """Forward-only A/B at B = 1, H = 4, D = 32, S = N (bf16): the shipped forward (timed before
    and after the variants) against ``run_variant(q, k, v, bias, scale, variant) -> (out, lse)``
    for each variant: max |Δout| and |Δlse| vs the shipped kernel, rel. error vs fp32 at N ≤ 384,
    median ms. A variant that raises is recorded with its error. Writes ``out_path`` (JSON)."""
    import json
    from functools import partial
    from pathlib import Path

    import triton

    from featurecache.model.kernels.reference import pair_bias_attention_ref

    res: dict[str, Any] = {"triton": triton.__version__, "torch": torch.__version__, "rows": []}
    torch.manual_seed(0)
    for n in ns:
        b, h, d, s = 1, 4, 32, n
        q, k, v = (torch.randn(b, s, h, n, d, device="cuda", dtype=BF16) for _ in range(3))
        bias = torch.randn(b, h, n, n, device="cuda", dtype=BF16)
        scale = d**-0.5
        ref = None
        if n <= 384:
            ref = pair_bias_attention_ref(q.float(), k.float(), v.float(), bias.float(), None, scale)
        base_out, base_lse = pba.pair_bias_attention_forward(q, k, v, bias, None, scale)
        shipped = partial(pba.pair_bias_attention_forward, q, k, v, bias, None, scale)
        row: dict[str, Any] = {"n": n, "shipped_ms": triton.testing.do_bench(shipped, warmup=50, rep=300),
                               "variants": []}  # fmt: skip
        for var in variants:
            if skip(var, n):
                continue
            entry: dict[str, Any] = {"variant": list(var)}
            try:
                fn = partial(run_variant, q, k, v, bias, scale, var)
                out, lse = fn()
                torch.cuda.synchronize()
                entry["max_diff_vs_shipped"] = (out.float() - base_out.float()).abs().max().item()
                entry["lse_diff_vs_shipped"] = (lse - base_lse).abs().max().item()
                if ref is not None:
                    entry["rel_err_vs_fp32"] = ((out.float() - ref).norm() / ref.norm()).item()
                entry["ms"] = triton.testing.do_bench(fn, warmup=50, rep=300)
            except Exception as exc:  # a variant that fails to compile or launch is a result
                entry["error"] = f"{type(exc).__name__}: {str(exc)[-400:]}"
            row["variants"].append(entry)
        row["shipped_ms_again"] = triton.testing.do_bench(shipped, warmup=50, rep=300)
        res["rows"].append(row)
        print(f"N={n} shipped {row['shipped_ms']:.3f} / {row['shipped_ms_again']:.3f} ms")
        for e in row["variants"]:
            print(f"   {e['variant']} {e.get('ms', float('nan')):.3f} ms diff {e.get('max_diff_vs_shipped')} "
                  f"lse {e.get('lse_diff_vs_shipped')} err {e.get('rel_err_vs_fp32')} {e.get('error', '')[:300]}")  # fmt: skip
    Path(out_path).write_text(json.dumps(res, indent=1))
    return res


def lnl_kernel_sweep(
    kinds: Iterable[tuple[str, Iterable[Any]]], rows: list[dict[str, Any]], n: int = 768
) -> Any:
    """LayerNorm-Linear (SwiGLU) at rows = n², c = 128, n = 4, bf16: each ("fwd" | "dx", GemmConfigs)
    timed twice (interleaved per kind), errors vs fp32; returns the default config with the
    per-kernel winners of the second rep (error < 2e-2)."""
    c, nx = 128, 4
    m = n * n
    t = transition_inputs(m, c, nx, seed=3)
    x, lnw, lnb, w1 = t["x"], t["lnw"], t["lnb"], t["w1"]
    dh = torch.randn(m, nx * c, device="cuda", dtype=BF16)
    xs = [v.float().requires_grad_() for v in (x, lnw, lnb, w1)]
    yr = swiglu_ref(F.linear(F.layer_norm(xs[0], (c,), xs[1], xs[2]), xs[3]))
    gr = torch.autograd.grad(yr, xs, dh.float())
    yr = yr.detach()
    base = lnl.default_config(c, BF16, torch.device("cuda"))
    a = lnl.prepare_backward(dh, x, lnw, lnb, w1, None, 1e-5, True)
    best: dict[str, tuple[float, Any]] = {}
    for kind, cfgs in kinds:
        cfgs = list(cfgs)
        for rep in range(2):
            for g in cfgs:
                row: dict[str, Any] = {"what": kind, "config": str(g), "rep": rep}
                try:
                    if kind == "fwd":
                        cfg = dataclasses.replace(base, fwd=g)
                        fn = functools.partial(
                            lnl.layernorm_linear_forward, x, lnw, lnb, w1, None, 1e-5, True, cfg
                        )
                        row["err"] = rel(fn(), yr)
                    else:
                        fn = functools.partial(lnl.launch_dx, a, g, True)
                        got = fn()
                        row["err"] = rel(got[0], gr[0])
                        del got
                    row["ms"] = ms(fn)
                    if rep == 1 and row["err"] < 2e-2 and row["ms"] < best.get(kind, (float("inf"), None))[0]:
                        best[kind] = (row["ms"], g)
                except Exception as exc:
                    row["error"] = f"{type(exc).__name__}: {str(exc)[-300:]}"
                rows.append(row)
                print(row, flush=True)
        free()
    return dataclasses.replace(base, **{kind: g for kind, (_, g) in best.items()})


def lnl_totals(cfgs: dict[str, Any], rows: list[dict[str, Any]], n: int = 768) -> None:
    """Transition fwd+bwd (LayerNorm-Linear kernel + cuBLAS Linear) at rows = n² per LayerNorm-Linear
    config, two interleaved reps; on rep 0 the peak MiB, the forward's ms and the relative
    difference of every output from the first config's."""
    c = 128
    t = transition_inputs(n * n, c, 4)
    ref = None
    for rep in range(2):
        for name, cfg in cfgs.items():
            lnl.set_default_config(c, BF16, cfg)
            run = transition_run(transition_ln_linear, t)
            row: dict[str, Any] = {
                "what": "total",
                "variant": name,
                "config": str(cfg),
                "rep": rep,
                "ms": ms(run),
            }
            if rep == 0:
                got = run()
                if ref is None:
                    ref = got
                else:
                    row["diff_vs_first"] = [rel(u, v) for u, v in zip(got, ref, strict=True)]
                row["peak_mib"] = peak_mib(run)
                row["fwd_ms"] = ms(
                    functools.partial(transition_ln_linear, *[t[k] for k in ("x", "lnw", "lnb", "w1", "w2")])
                )
                del got
            lnl.set_default_config(c, BF16, None)
            rows.append(row)
            print(row, flush=True)
            free()


def transition_problem(
    n: int = 768, c: int = 128, nx: int = 4
) -> tuple[dict[str, Any], list[Any], int, Any, Any]:
    """The transition A/Bs' problem: inputs at rows = n² (``transition_inputs``), the five input
    tensors, the useful FLOPs of fwd+bwd, and the fp32-eager reference output and gradients on the
    same bf16 inputs."""
    t = transition_inputs(n * n, c, nx)
    xs = [t[k] for k in ("x", "lnw", "lnb", "w1", "w2")]
    r = [x.float().requires_grad_() for x in xs]
    yr = transition_eager(*r)
    gr = torch.autograd.grad(yr, r, t["dy"].float())
    return t, xs, 18 * n * n * nx * c * c, yr.detach(), gr
