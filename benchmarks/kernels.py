"""Fused pair-bias attention and the AF3 transition on the GPU, against the alternatives.

Attention (B=1, S=N, H=4, D=32, bf16, forward+backward w.r.t. q, k, v and bias):
fused Triton kernels vs eager PyTorch, ``scaled_dot_product_attention`` with the bias as a float
mask, and ``torch.compile(flex_attention)`` with a bias ``score_mod``. Transition (rows = N²,
c = 128, n = 4): fused LN+Linear+SwiGLU kernel → cuBLAS Linear vs eager and ``torch.compile``.

Time: ``triton.testing.do_bench`` (CUDA events, median, L2 flushed between calls); backward via
``torch.autograd.grad`` (no accumulation kernels). Peak memory: ``max_memory_allocated`` during
one forward+backward minus what was allocated before it (the inputs and dout), i.e. the memory
the op itself needs. TFLOP/s counts the useful FLOPs (attention: 14·S·N²·D·H; transition:
18·rows·n·c²) over the measured time; the ceiling measured here (bf16 8192³ matmul) is printed too.

``--sweep`` first times tile configurations of every kernel (each checked against an fp32
reference) and uses the fastest for the rest of the run; the choice goes to the JSON.

    python benchmarks/kernels.py [--sweep] [--ns 256,384,512,768,1024] [--json PATH]
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import gc
import json
import math
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.harness import RESULTS_DIR, Bench, machine
from featurecache.model.kernels import layernorm_linear as lnl
from featurecache.model.kernels import pair_bias_attention as pba
from featurecache.model.kernels import transition as tr
from featurecache.model.kernels.reference import swiglu_ref

BF16 = torch.bfloat16
MiB = 2**20
KC, GC = pba.KernelConfig, lnl.GemmConfig

# ---------------------------------------------------------------------------------- tile sweeps
# (block_m, block_n, num_warps, num_stages, sp)
FWD_CONFIGS = [KC(128, 64, 4, 3, 2), KC(128, 64, 4, 3, 1), KC(128, 64, 8, 3, 2), KC(64, 64, 4, 3, 2),
               KC(128, 128, 8, 3, 2), KC(128, 32, 4, 3, 2), KC(64, 64, 4, 3, 1), KC(128, 64, 4, 2, 2),
               KC(128, 64, 4, 4, 2), KC(64, 128, 4, 3, 2)]  # fmt: skip
DQ_CONFIGS = [KC(128, 32, 4, 3, 1), KC(128, 64, 4, 3, 1), KC(128, 64, 8, 3, 1), KC(128, 32, 4, 3, 2),
              KC(128, 64, 4, 3, 2), KC(64, 64, 4, 3, 1), KC(64, 64, 4, 3, 2), KC(64, 32, 4, 3, 2),
              KC(128, 32, 8, 3, 2)]  # fmt: skip
DKV_CONFIGS = [KC(64, 64, 4, 3, 2), KC(64, 64, 4, 3, 1), KC(32, 64, 4, 3, 2), KC(64, 32, 4, 3, 2),
               KC(64, 64, 4, 2, 2), KC(64, 128, 8, 3, 2), KC(32, 128, 4, 3, 2), KC(128, 64, 4, 3, 2),
               KC(64, 128, 4, 3, 1)]  # fmt: skip
DBIAS_CONFIGS = [KC(64, 64, 4, 2), KC(64, 64, 4, 3), KC(64, 32, 4, 2), KC(32, 64, 4, 2), KC(64, 128, 4, 2),
                 KC(128, 64, 8, 2), KC(128, 128, 8, 2)]  # fmt: skip
DBIAS_TARGETS = [528, 1056, 2112]
LNL_FWD = [GC(128, 64, 8, 3, 1), GC(128, 64, 8, 3, 0), GC(128, 128, 8, 3, 0), GC(64, 128, 4, 3, 0),
           GC(128, 64, 8, 3, 2), GC(128, 64, 4, 3, 0), GC(256, 64, 8, 3, 0), GC(64, 64, 4, 3, 0),
           GC(128, 32, 4, 3, 0)]  # fmt: skip
LNL_DX = [GC(64, 64, 8, 2), GC(64, 64, 4, 2), GC(128, 64, 8, 2), GC(64, 128, 8, 2), GC(32, 64, 4, 2),
          GC(128, 32, 8, 2), GC(64, 32, 4, 3)]  # fmt: skip
LNL_DW = [GC(64, 64, 8, 2), GC(64, 64, 4, 2), GC(128, 64, 8, 2), GC(64, 128, 8, 2), GC(128, 128, 8, 2),
          GC(32, 64, 4, 2), GC(64, 32, 4, 3)]  # fmt: skip
LNL_TARGETS = [264, 528]


def ms(fn: Callable[[], Any]) -> float:
    """Median milliseconds of fn() (CUDA events, after warm-up)."""
    from triton.testing import do_bench

    return float(do_bench(fn, warmup=25, rep=100, return_mode="median"))


def peak_mib(fn: Callable[[], Any]) -> float:
    gc.collect()
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    base = torch.cuda.memory_allocated()
    fn()
    torch.cuda.synchronize()
    return (torch.cuda.max_memory_allocated() - base) / MiB


def rel(a: torch.Tensor, b: torch.Tensor) -> float:
    a, b = a.float(), b.float()
    if not torch.isfinite(a).all():
        return float("inf")
    return float((a - b).norm() / b.norm().clamp_min(1e-30))


def free() -> None:
    gc.collect()
    torch.cuda.empty_cache()


# ------------------------------------------------------------------------------------ ceilings
def ceilings() -> dict[str, float]:
    import triton
    import triton.language as tl

    @triton.jit
    def _l2_read(X, OUT, n, REPS: tl.constexpr, BLOCK: tl.constexpr):  # type: ignore[no-untyped-def]
        pid = tl.program_id(0)
        step = tl.num_programs(0) * BLOCK
        acc = tl.zeros([BLOCK], tl.float32)
        for _ in range(REPS):
            for start in range(pid * BLOCK, n, step):
                acc += tl.load(X + start + tl.arange(0, BLOCK)).to(tl.float32)
        tl.store(OUT + pid * BLOCK + tl.arange(0, BLOCK), acc)

    def matmul() -> float:
        a = torch.randn(8192, 8192, device="cuda", dtype=BF16)
        b = torch.randn(8192, 8192, device="cuda", dtype=BF16)
        return 2 * 8192**3 / ms(lambda: a @ b) / 1e9

    def copy() -> float:
        x = torch.randn(2**30 // 2, device="cuda", dtype=BF16)  # 1 GiB
        y = torch.empty_like(x)
        return 2 * x.numel() * 2 / ms(lambda: y.copy_(x)) / 1e9

    def l2() -> float:
        n_sm = torch.cuda.get_device_properties(0).multi_processor_count
        x = torch.randn(12 * 2**20, device="cuda", dtype=BF16)  # 24 MiB: inside the L2
        res = torch.empty(n_sm * 4 * 2048, device="cuda")
        t = ms(lambda: _l2_read[(n_sm * 4,)](x, res, x.numel(), REPS=40, BLOCK=2048, num_warps=8))
        return 40 * x.numel() * 2 / t / 1e9

    out = {"bf16_matmul_tflops": matmul(), "copy_tb_s": copy(), "l2_read_tb_s": l2()}
    free()
    return out


# ----------------------------------------------------------------------------------- attention
def attention_inputs(n: int, h: int, d: int, s: int | None = None, seed: int = 0) -> dict[str, Any]:
    g = torch.Generator(device="cuda").manual_seed(seed)
    s = n if s is None else s
    q, k, v = (torch.randn(1, s, h, n, d, device="cuda", generator=g, dtype=BF16) for _ in range(3))
    bias = torch.randn(1, h, n, n, device="cuda", generator=g, dtype=BF16)
    do = torch.randn(1, s, h, n, d, device="cuda", generator=g, dtype=BF16)
    return {"q": q, "k": k, "v": v, "bias": bias, "do": do}


def method_fused(mask: str = "") -> Callable[..., torch.Tensor]:
    """mask: "" none, "general" a [B, S, N] mask, "padding" key_mask + row_mask (the model's form);
    all-True, so every variant computes the same function."""

    def f(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
        b, s, _, n, _ = q.shape
        if mask == "general":
            return pba.pair_bias_attention(
                q, k, v, bias, torch.ones(b, s, n, device=q.device, dtype=torch.bool)
            )
        if mask == "padding":
            key_mask = torch.ones(b, n, device=q.device, dtype=torch.bool)
            row_mask = torch.ones(b, s, device=q.device, dtype=torch.bool)
            return pba.pair_bias_attention(q, k, v, bias, key_mask=key_mask, row_mask=row_mask)
        return pba.pair_bias_attention(q, k, v, bias)

    return f


#: attention methods that take q, k, v as projection views: the pad after 4·H·D columns (the launcher
#: copies the unaligned ones)
VIEW_PAD = {"fused, trunk views": 16, "fused, unaligned views": 8}


def as_projection_views(t: dict[str, Any], pad: int) -> dict[str, Any]:
    """The same inputs with q, k, v as the trunk passes them: views of one [B, S, N, 4·H·D + pad]
    projection (TriangleAttention; pad 16 keeps the row stride a multiple of 16, pad 8 does not)."""
    b, s, h, n, d = t["q"].shape
    hd = h * d
    p = torch.zeros(b, s, n, 4 * hd + pad, device="cuda", dtype=BF16)
    views = []
    for i, key in enumerate(("q", "k", "v")):
        view = p[..., i * hd : (i + 1) * hd].unflatten(-1, (h, d)).permute(0, 1, 3, 2, 4)
        view.copy_(t[key])
        views.append(view)
    return {**t, "q": views[0], "k": views[1], "v": views[2]}


def _flat(t: torch.Tensor) -> torch.Tensor:  # [1, S, H, N, D] -> [S, H, N, D]
    return t[0]


def method_eager(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
    scale = q.shape[-1] ** -0.5
    s = torch.matmul(_flat(q), _flat(k).transpose(-1, -2)) * scale + bias[0]
    return torch.matmul(torch.softmax(s, dim=-1), _flat(v))[None]


def method_sdpa(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
    return F.scaled_dot_product_attention(_flat(q), _flat(k), _flat(v), attn_mask=bias)[None]


class Flex:
    """``torch.compile(flex_attention)`` with ``score + bias[0, h, q, kv]``; one score_mod per bias
    tensor (it closes over the leaf that gets the gradient), so one compilation per shape."""

    def __init__(self) -> None:
        from torch.nn.attention.flex_attention import flex_attention

        self.compiled = torch.compile(flex_attention, dynamic=False)
        self._bias: torch.Tensor | None = None
        self._mod: Callable[..., Any] | None = None

    def __call__(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
        if self._bias is not bias:

            def score_mod(score, b, h, q_idx, kv_idx):  # type: ignore[no-untyped-def]
                return score + bias[0, h, q_idx, kv_idx]

            self._bias, self._mod = bias, score_mod
        return self.compiled(_flat(q), _flat(k), _flat(v), score_mod=self._mod)[None]


def fwd_bwd(method: Callable[..., torch.Tensor], t: dict[str, Any]) -> Callable[[], tuple[torch.Tensor, ...]]:
    xs = [t[k].detach().requires_grad_() for k in ("q", "k", "v", "bias")]

    def run() -> tuple[torch.Tensor, ...]:
        out = method(*xs)
        return (out.detach(), *torch.autograd.grad(out, xs, t["do"]))

    return run


def fp32_reference(t: dict[str, Any]) -> tuple[torch.Tensor, ...]:
    """Eager fp32 forward+backward, chunked over S so it fits at N = 768."""
    q, k, v, bias, do = (t[x].float() for x in ("q", "k", "v", "bias", "do"))
    dq, dk, dv = torch.empty_like(q), torch.empty_like(k), torch.empty_like(v)
    out = torch.empty_like(q)
    dbias = torch.zeros_like(bias)
    step = max(1, 2**31 // (q.shape[2] * q.shape[3] ** 2 * 4 * 6))
    for s0 in range(0, q.shape[1], step):
        sl = slice(s0, s0 + step)
        xs = [q[:, sl].clone().requires_grad_(), k[:, sl].clone().requires_grad_(),
              v[:, sl].clone().requires_grad_(), bias.clone().requires_grad_()]  # fmt: skip
        scores = torch.einsum("bshid,bshjd->bshij", xs[0], xs[1]) * q.shape[-1] ** -0.5 + xs[3][:, None]
        o = torch.einsum("bshij,bshjd->bshid", torch.softmax(scores, -1), xs[2])
        g = torch.autograd.grad(o, xs, do[:, sl])
        out[:, sl], dq[:, sl], dk[:, sl], dv[:, sl] = o.detach(), g[0], g[1], g[2]
        dbias += g[3]
        del scores, o, g, xs
    return out, dq, dk, dv, dbias


def sweep_attention(n: int, h: int, d: int, log: list[dict[str, Any]]) -> pba.AttentionConfig:
    t = attention_inputs(n, h, d, seed=1)
    ref = fp32_reference(t)
    free()
    scale = d**-0.5
    base = pba.default_config(d, BF16, torch.device("cuda"))
    q, k, v, bias, do = (t[x] for x in ("q", "k", "v", "bias", "do"))

    def pick(kind: str, rows: list[tuple[Any, float, float]]) -> Any:
        ok = [r for r in rows if r[2] < 2e-2 and math.isfinite(r[1])]
        for cfg, tm, err in rows:
            log.append({"kernel": f"attn_{kind}", "n": n, "config": str(cfg), "ms": tm, "err": err})
        best = min(ok, key=lambda r: r[1])
        print(f"  attn {kind}: best {best[0]} {best[1]:.3f} ms (of {len(rows)})", flush=True)
        return best[0]

    rows = []
    for cfg in FWD_CONFIGS:
        c = dataclasses.replace(base, fwd=cfg)
        try:
            out, lse = pba.pair_bias_attention_forward(q, k, v, bias, None, scale, c)
            rows.append((cfg, ms(functools.partial(pba.pair_bias_attention_forward, q, k, v, bias, None, scale, c)),
                         rel(out, ref[0])))  # fmt: skip
        except Exception as exc:  # a config that does not compile (e.g. shared memory)
            rows.append((cfg, math.inf, math.inf))
            print(f"  fwd {cfg}: {type(exc).__name__}: {str(exc)[:200]}", flush=True)
    best_fwd = pick("fwd", rows)
    out, lse = pba.pair_bias_attention_forward(
        q, k, v, bias, None, scale, dataclasses.replace(base, fwd=best_fwd)
    )
    a = pba.prepare_backward(do, q, k, v, bias, None, out, lse, scale)

    def sweep(
        kind: str, configs: list[Any], launch: Callable[[Any], Any], check: Callable[[Any], float]
    ) -> Any:
        rows = []
        for cfg in configs:
            try:
                res = launch(cfg)
                err = check(res)
                rows.append((cfg, ms(functools.partial(launch, cfg)), err))
            except Exception as exc:
                rows.append((cfg, math.inf, math.inf))
                print(f"  {kind} {cfg}: {type(exc).__name__}: {str(exc)[:200]}", flush=True)
        return pick(kind, rows)

    best_dq = sweep("dq", DQ_CONFIGS, lambda c: pba.launch_dq(a, c), lambda _: rel(a.dq, ref[1]))
    pba.launch_dq(a, best_dq)  # δ for the others
    best_dkv = sweep("dkv", DKV_CONFIGS, lambda c: pba.launch_dkv(a, c),
                     lambda _: max(rel(a.dk, ref[2]), rel(a.dv, ref[3])))  # fmt: skip
    targeted = [(c, tg) for c in DBIAS_CONFIGS for tg in DBIAS_TARGETS]
    best_db = sweep(
        "dbias", targeted, lambda ct: pba.launch_dbias(a, ct[0], ct[1]), lambda db: rel(db, ref[4])
    )
    return pba.AttentionConfig(best_fwd, best_dq, best_dkv, best_db[0], dbias_target_programs=best_db[1])


def bench_attention(ns: list[int], h: int, d: int, bench: Bench, skip: set[str]) -> None:
    flex = None if "flex" in skip else Flex()
    methods: list[tuple[str, Callable[..., torch.Tensor] | None]] = [
        ("fused", method_fused()), ("fused+mask", method_fused("general")), ("fused+padmask", method_fused("padding")),
        ("fused (repeat)", method_fused()), ("fused, trunk views", method_fused()),
        ("fused, unaligned views", method_fused()),
        ("eager", method_eager), ("sdpa", method_sdpa), ("flex", flex),
    ]  # fmt: skip
    for n in ns:
        t = attention_inputs(n, h, d, seed=n)
        flops = 14 * n * n * n * d * h
        ref = fp32_reference(t) if n <= 768 else None
        free()
        results: dict[str, float] = {}
        for name, method in methods:
            if method is None or name.split()[0] in skip:
                continue
            row: dict[str, Any] = {"op": "attention", "N": n, "method": name}
            try:
                run = fwd_bwd(method, as_projection_views(t, VIEW_PAD[name]) if name in VIEW_PAD else t)
                got = run()  # warm-up / compile
                if ref is not None:
                    row["err_out"] = rel(got[0], ref[0])
                    row["err_dbias"] = rel(got[4], ref[4])
                    row["err_dq"] = rel(got[1], ref[1])
                del got
                row["peak_MiB"] = peak_mib(run)
                row["ms"] = ms(run)
                row["TFLOP/s"] = flops / row["ms"] / 1e9
                if name == "fused":
                    row["fwd_ms"] = ms(functools.partial(method, t["q"], t["k"], t["v"], t["bias"]))
                results[name] = row["ms"]
            except torch.cuda.OutOfMemoryError:
                row["ms"] = "OOM"
            except Exception as exc:
                row["ms"] = f"error: {type(exc).__name__}: {str(exc)[:120]}"
            if "flex" in results and isinstance(row.get("ms"), float):
                row["x_vs_flex"] = results["flex"] / row["ms"]
            bench.add(**row)
            print(row, flush=True)
            free()
        if "flex" in results:  # flex runs last: fill in the speed-ups of the others
            for row in bench.rows:
                if row["op"] == "attention" and row["N"] == n and isinstance(row.get("ms"), float):
                    row["x_vs_flex"] = results["flex"] / row["ms"]
        free()


# ---------------------------------------------------------------------------------- transition
def transition_inputs(rows: int, c: int, nx: int, seed: int = 0) -> dict[str, torch.Tensor]:
    g = torch.Generator(device="cuda").manual_seed(seed)
    return {
        "x": torch.randn(rows, c, device="cuda", generator=g, dtype=BF16),
        "lnw": (1 + 0.1 * torch.randn(c, device="cuda", generator=g)).to(BF16),
        "lnb": (0.1 * torch.randn(c, device="cuda", generator=g)).to(BF16),
        "w1": (torch.randn(2 * nx * c, c, device="cuda", generator=g) / c**0.5).to(BF16),
        "w2": (torch.randn(c, nx * c, device="cuda", generator=g) / (nx * c) ** 0.5).to(BF16),
        "dy": torch.randn(rows, c, device="cuda", generator=g, dtype=BF16),
    }


def transition_eager(x, lnw, lnb, w1, w2):  # type: ignore[no-untyped-def]
    return F.linear(swiglu_ref(F.linear(F.layer_norm(x, (x.shape[-1],), lnw, lnb), w1)), w2)


def transition_fused(x, lnw, lnb, w1, w2):  # type: ignore[no-untyped-def]
    """The shipped path: the whole block as two Triton kernels (``kernels/transition.py``)."""
    return tr.transition(x, lnw, lnb, w1, w2, 1e-5)


def transition_ln_linear(x, lnw, lnb, w1, w2):  # type: ignore[no-untyped-def]
    """The path before run 33: the LayerNorm-Linear-SwiGLU kernel, then a cuBLAS Linear."""
    return F.linear(lnl.layernorm_linear(x, lnw, lnb, w1, None, 1e-5, True), w2)


def transition_run(fn: Callable[..., torch.Tensor], t: dict[str, torch.Tensor]) -> Callable[[], Any]:
    xs = [t[k].detach().requires_grad_() for k in ("x", "lnw", "lnb", "w1", "w2")]

    def run() -> tuple[torch.Tensor, ...]:
        y = fn(*xs)
        return (y.detach(), *torch.autograd.grad(y, xs, t["dy"]))

    return run


def sweep_layernorm_linear(
    rows: int, c: int, nx: int, log: list[dict[str, Any]]
) -> lnl.LayerNormLinearConfig:
    t = transition_inputs(rows, c, nx, seed=3)
    x, lnw, lnb, w1 = t["x"], t["lnw"], t["lnb"], t["w1"]
    dh = torch.randn(rows, nx * c, device="cuda", dtype=BF16)
    xs = [
        x.float().requires_grad_(),
        lnw.float().requires_grad_(),
        lnb.float().requires_grad_(),
        w1.float().requires_grad_(),
    ]
    yr = swiglu_ref(F.linear(F.layer_norm(xs[0], (c,), xs[1], xs[2]), xs[3]))
    gr = torch.autograd.grad(yr, xs, dh.float())
    base = lnl.default_config(c, BF16, torch.device("cuda"))

    def run_rows(
        kind: str, configs: list[Any], launch: Callable[[Any], Any], check: Callable[[Any], float]
    ) -> Any:
        rows_ = []
        for cfg in configs:
            try:
                res = launch(cfg)
                rows_.append((cfg, ms(functools.partial(launch, cfg)), check(res)))
            except Exception as exc:
                rows_.append((cfg, math.inf, math.inf))
                print(f"  lnl {kind} {cfg}: {type(exc).__name__}: {str(exc)[:200]}", flush=True)
        for cfg, tm, err in rows_:
            log.append({"kernel": f"lnl_{kind}", "rows": rows, "config": str(cfg), "ms": tm, "err": err})
        best = min((r for r in rows_ if r[2] < 2e-2), key=lambda r: r[1])
        print(f"  lnl {kind}: best {best[0]} {best[1]:.3f} ms", flush=True)
        return best[0]

    fwd = run_rows("fwd", LNL_FWD,
                   lambda g: lnl.layernorm_linear_forward(x, lnw, lnb, w1, None, 1e-5, True, dataclasses.replace(base, fwd=g)),
                   lambda y: rel(y, yr))  # fmt: skip
    a = lnl.prepare_backward(dh, x, lnw, lnb, w1, None, 1e-5, True)
    dx = run_rows("dx", LNL_DX, lambda g: lnl.launch_dx(a, g), lambda r: rel(r[0], gr[0]))
    dw = run_rows("dw", [(g, tg) for g in LNL_DW for tg in LNL_TARGETS], lambda gt: lnl.launch_dw(a, gt[0], gt[1]),
                  lambda r: rel(r[0], gr[3]))  # fmt: skip
    return lnl.LayerNormLinearConfig(fwd, dx, dw[0], dw_target_programs=dw[1])


def bench_transition(n: int, c: int, nx: int, bench: Bench) -> None:
    rows = n * n
    t = transition_inputs(rows, c, nx)
    flops = 18 * rows * nx * c * c
    compiled = torch.compile(transition_eager)
    base_out = None
    for name, fn in (("fused", transition_fused), ("fused (repeat)", transition_fused),
                     ("LN-Linear kernel + cuBLAS Linear (previous)", transition_ln_linear),
                     ("eager", transition_eager), ("torch.compile", compiled)):  # fmt: skip
        row: dict[str, Any] = {"op": "transition", "N": n, "method": name}
        try:
            run = transition_run(fn, t)
            got = run()
            if base_out is None:
                base_out = got
            else:
                row["diff_vs_fused"] = max(rel(a, b) for a, b in zip(got, base_out, strict=True))
            del got
            row["peak_MiB"] = peak_mib(run)
            row["ms"] = ms(run)
            row["TFLOP/s"] = flops / row["ms"] / 1e9
            if name == "fused":
                xs = [t[k] for k in ("x", "lnw", "lnb", "w1", "w2")]
                row["fwd_ms"] = ms(functools.partial(transition_fused, *xs))
        except Exception as exc:
            row["ms"] = f"error: {type(exc).__name__}: {str(exc)[:120]}"
        bench.add(**row)
        print(row, flush=True)
        free()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument(
        "--ns", default="256,384,512,768,1024", help="comma list of N (tokens) to time (default 256,...,1024)"
    )
    ap.add_argument("--heads", type=int, default=4, help="attention heads (default 4)")
    ap.add_argument("--head-dim", type=int, default=32, help="head dimension (default 32)")
    ap.add_argument("--sweep", action="store_true", help="tune tiles first (N = --sweep-n) and use the best")
    ap.add_argument("--sweep-n", type=int, default=768, help="N of the tile sweep (default 768)")
    ap.add_argument("--skip", default="", help="comma list of: attention,transition,eager,sdpa,flex,ceilings")
    ap.add_argument("--json", type=Path, default=RESULTS_DIR / "kernels.json", metavar="FILE",
                    help="results JSON (default benchmarks/results/kernels.json)")  # fmt: skip
    args = ap.parse_args()
    if not torch.cuda.is_available():
        raise SystemExit("benchmarks/kernels.py needs a CUDA GPU")
    skip = {s for s in args.skip.split(",") if s}
    ns = [int(x) for x in args.ns.split(",")]
    t0 = time.time()
    import triton

    bench = Bench("kernels", heads=args.heads, head_dim=args.head_dim, dtype="bf16", batch=1, ns=ns,
                  triton=triton.__version__)  # fmt: skip
    extra: dict[str, Any] = {"machine": machine()}
    if "ceilings" not in skip:
        extra["ceilings"] = ceilings()
        print("ceilings", extra["ceilings"], flush=True)
    if args.sweep:
        log: list[dict[str, Any]] = []
        extra["sweep"] = log
        if "attention" not in skip:
            try:
                cfg = sweep_attention(args.sweep_n, args.heads, args.head_dim, log)
                pba.set_default_config(args.head_dim, BF16, cfg)
                extra["attention_config"] = dataclasses.asdict(cfg)
                print("attention config", cfg, f"({time.time() - t0:.0f} s)", flush=True)
            except Exception as exc:  # keep the built-in tiles and go on measuring
                print(f"attention sweep failed: {type(exc).__name__}: {exc}", flush=True)
        free()
        if "transition" not in skip:
            try:
                lcfg = sweep_layernorm_linear(args.sweep_n**2, 128, 4, log)
                lnl.set_default_config(128, BF16, lcfg)
                extra["layernorm_linear_config"] = dataclasses.asdict(lcfg)
                print("layernorm_linear config", lcfg, f"({time.time() - t0:.0f} s)", flush=True)
            except Exception as exc:
                print(f"layernorm_linear sweep failed: {type(exc).__name__}: {exc}", flush=True)
        free()
    if "attention" not in skip:
        bench_attention(ns, args.heads, args.head_dim, bench, skip)
    if "transition" not in skip:
        bench_transition(768, 128, 4, bench)
    bench.params["extra"] = extra
    args.json.parent.mkdir(parents=True, exist_ok=True)
    bench.finish(args.json)
    print(json.dumps({k: v for k, v in extra.items() if k != "sweep"}, indent=1, default=str))
    print(f"total {time.time() - t0:.0f} s")


if __name__ == "__main__":
    main()
