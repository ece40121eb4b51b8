"""Prototype (session 12): dq and the bias gradient in one pass, without atomics or dq partials.

The backward's four exponential passes are fwd, dq, dk/dv and dbias (KERNEL_NOTES.md, "Why four
passes"). Session 5 folded dq into dk/dv with a read-modify-written dq scratch and lost (layout
conversions of the scratch on the critical path, per (key block, query block)). This does the other
fold: a dq-ordered kernel, one program per (query block, S group, b·h), whose loop visits each key
block once per ``SP`` S rows, sums those rows' dS tiles in registers, and read-modify-writes the
group's fp32 partial of the bias gradient (the program owns that partial: deterministic; groups
reduced by one ordered sum, as now). The partial's traffic is 8 B per score / SP (3.6 GB at N = 768,
SP = 4, mostly in L2) instead of a fourth exponential pass; dq needs nothing outside registers.
δ = rowsum(dO∘O) comes from torch here (a small kernel in production).

Run 61 (``kernels_ab_run61_dqdb.json``): neutral, not adopted (KERNEL_NOTES.md, session 12).

    PYTHONPATH=. python3 benchmarks/dev/dqdb.py OUT.json          # H200: A/B vs launch_dq + launch_dbias
    TRITON_INTERPRET=1 PYTHONPATH=. python benchmarks/dev/dqdb.py --check   # CPU: vs the shipped kernels
"""

from __future__ import annotations

import argparse
import functools
import json
import math
import statistics
import sys
from pathlib import Path

import torch
import triton
import triton.language as tl

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from benchmarks.dev.ab51 import time_ms as ab51_times
from featurecache.model.kernels import pair_bias_attention as pba

_LOG2E = tl.constexpr(1.4426950408889634)


@triton.jit
def _ds_tile(q, do, lse, dl, K, V, kv_off, cols, offs_d, bias, scale, D: tl.constexpr, PREC: tl.constexpr):
    k = tl.load(K + kv_off + cols[:, None] * D + offs_d[None, :])
    v = tl.load(V + kv_off + cols[:, None] * D + offs_d[None, :])
    st = tl.dot(q, tl.trans(k), input_precision=PREC) * scale + bias
    p = tl.math.exp2(st * _LOG2E - lse[:, None])
    dp = tl.dot(do, tl.trans(v), input_precision=PREC)
    return p * (dp - dl[:, None]), k


@triton.jit
def _row_in(Q, DO, LSE, DELTA, b, s, h, S, H, N, rows, offs_d, D: tl.constexpr):
    base = (b * S + s) * H + h
    q = tl.load(Q + (base * N + rows[:, None]) * D + offs_d[None, :])
    do = tl.load(DO + (base * N + rows[:, None]) * D + offs_d[None, :])
    return q, do, tl.load(LSE + base * N + rows), tl.load(DELTA + base * N + rows), base * N * D


@triton.jit
def _dq_dbias_kernel(
    Q, K, V, BIAS, DO, LSE, DELTA, DQ, DBP,  # contiguous; DBP [G, B, H, N, N] fp32
    S, H, N, S_PER_GROUP, scale,
    D: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, SP: tl.constexpr, PREC: tl.constexpr,
):  # fmt: skip
    pid_m = tl.program_id(0)
    g = tl.program_id(1).to(tl.int64)
    bh = tl.program_id(2).to(tl.int64)
    b = bh // H
    h = bh % H
    rows = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = tl.arange(0, BLOCK_N)
    offs_d = tl.arange(0, D)
    s_start = g * S_PER_GROUP
    s_end = tl.minimum(s_start + S_PER_GROUP, S)
    part_rows = DBP + ((g * tl.num_programs(2) + bh) * N + rows[:, None]) * N
    bias_rows = BIAS + (bh * N + rows[:, None]) * N
    for s in range(s_start, s_end, SP):
        q0, do0, lse0, dl0, o0 = _row_in(Q, DO, LSE, DELTA, b, s, h, S, H, N, rows, offs_d, D)
        dq0 = tl.zeros([BLOCK_M, D], tl.float32)
        if SP >= 2:
            q1, do1, lse1, dl1, o1 = _row_in(Q, DO, LSE, DELTA, b, s + 1, h, S, H, N, rows, offs_d, D)
            dq1 = tl.zeros([BLOCK_M, D], tl.float32)
        if SP >= 4:
            q2, do2, lse2, dl2, o2 = _row_in(Q, DO, LSE, DELTA, b, s + 2, h, S, H, N, rows, offs_d, D)
            q3, do3, lse3, dl3, o3 = _row_in(Q, DO, LSE, DELTA, b, s + 3, h, S, H, N, rows, offs_d, D)
            dq2 = tl.zeros([BLOCK_M, D], tl.float32)
            dq3 = tl.zeros([BLOCK_M, D], tl.float32)
        for j in range(0, N, BLOCK_N):
            cols = j + offs_n
            pptr = part_rows + cols[None, :]
            prev = tl.load(pptr, mask=(cols[None, :] < N) & (s > s_start), other=0.0)
            bias = tl.load(bias_rows + cols[None, :]).to(tl.float32)
            ds, k = _ds_tile(q0, do0, lse0, dl0, K, V, o0, cols, offs_d, bias, scale, D, PREC)
            dq0 += tl.dot(ds.to(k.dtype), k, input_precision=PREC)
            dsum = prev + ds
            if SP >= 2:
                ds, k = _ds_tile(q1, do1, lse1, dl1, K, V, o1, cols, offs_d, bias, scale, D, PREC)
                dq1 += tl.dot(ds.to(k.dtype), k, input_precision=PREC)
                dsum += ds
            if SP >= 4:
                ds, k = _ds_tile(q2, do2, lse2, dl2, K, V, o2, cols, offs_d, bias, scale, D, PREC)
                dq2 += tl.dot(ds.to(k.dtype), k, input_precision=PREC)
                dsum += ds
                ds, k = _ds_tile(q3, do3, lse3, dl3, K, V, o3, cols, offs_d, bias, scale, D, PREC)
                dq3 += tl.dot(ds.to(k.dtype), k, input_precision=PREC)
                dsum += ds
            tl.store(pptr, dsum)
        tl.store(DQ + o0 + rows[:, None] * D + offs_d[None, :], (dq0 * scale).to(DQ.dtype.element_ty))
        if SP >= 2:
            tl.store(DQ + o1 + rows[:, None] * D + offs_d[None, :], (dq1 * scale).to(DQ.dtype.element_ty))
        if SP >= 4:
            tl.store(DQ + o2 + rows[:, None] * D + offs_d[None, :], (dq2 * scale).to(DQ.dtype.element_ty))
            tl.store(DQ + o3 + rows[:, None] * D + offs_d[None, :], (dq3 * scale).to(DQ.dtype.element_ty))


def dq_dbias(q, k, v, bias, do, out, lse, scale, bm, bn, sp, warps, stages, target):  # type: ignore[no-untyped-def]
    """(dq, dbias) for contiguous [B, S, H, N, D] inputs without masks, N a multiple of the tiles."""
    b, s, h, n, d = q.shape
    delta = delta_torch(do, out)
    per = max(sp, math.ceil(s / max(1, target // ((n // bm) * b * h))))
    per = -(-per // sp) * sp
    groups = -(-s // per)
    assert s % sp == 0 and n % bm == 0 and n % bn == 0
    dbp = torch.empty((groups, b, h, n, n), device=q.device, dtype=torch.float32)
    dq = torch.empty_like(q)
    prec = "ieee" if q.dtype == torch.float32 else "tf32"
    _dq_dbias_kernel[(n // bm, groups, b * h)](q, k, v, bias, do, lse, delta, dq, dbp, s, h, n, per, scale,
                                               d, bm, bn, sp, prec, num_warps=warps, num_stages=stages)  # fmt: skip
    return dq, dbp.sum(0).to(bias.dtype)


def delta_torch(do: torch.Tensor, out: torch.Tensor) -> torch.Tensor:
    return (do.float() * out.float()).sum(-1)


def shipped(q, k, v, bias, do, out, lse, scale, cfg):  # type: ignore[no-untyped-def]
    a = pba.prepare_backward(do, q, k, v, bias, None, out, lse, scale)
    pba.launch_dq(a, cfg.dq)
    return a.dq, pba.launch_dbias(a, cfg.dbias, cfg.dbias_target_programs)


def inputs(n, s, h, d, dev, dtype, seed=0):  # type: ignore[no-untyped-def]
    g = torch.Generator(device=dev).manual_seed(seed)
    q, k, v, do = (torch.randn(1, s, h, n, d, device=dev, generator=g).to(dtype) for _ in range(4))
    bias = torch.randn(1, h, n, n, device=dev, generator=g).to(dtype)
    out, lse = pba.pair_bias_attention_forward(q, k, v, bias, None, d**-0.5)
    return q, k, v, bias, do, out, lse


def rel(a, b) -> float:  # type: ignore[no-untyped-def]
    return float((a.float() - b.float()).norm() / b.float().norm())


def check() -> None:
    for dtype in (torch.float32, torch.float16):
        for sp in (1, 2, 4):
            t = inputs(64, 8, 2, 16, "cpu", dtype)
            cfg = pba.default_config(16, dtype, torch.device("cpu"))
            dq0, db0 = shipped(*t, 16**-0.5, cfg)
            dq1, db1 = dq_dbias(*t, 16**-0.5, 32, 32, sp, 1, 1, 8)
            print(dtype, sp, f"dq {rel(dq1, dq0):.2e} dbias {rel(db1, db0):.2e}")
            assert rel(dq1, dq0) < (1e-5 if dtype == torch.float32 else 2e-3)
            assert rel(db1, db0) < (1e-5 if dtype == torch.float32 else 2e-3)


def time_ms(fn, reps=20):  # type: ignore[no-untyped-def]
    """Median ms of ``fn()`` after one warm-up call (CUDA events)."""
    fn()
    torch.cuda.synchronize()
    return statistics.median(ab51_times(fn, reps=reps))


CONFIGS = [  # (BLOCK_M, BLOCK_N, SP, warps, stages, target programs)
    (64, 32, 2, 4, 3, 528), (64, 64, 2, 4, 3, 528), (64, 32, 4, 4, 3, 528), (64, 64, 4, 4, 3, 528),
    (64, 32, 4, 4, 2, 528), (64, 32, 2, 4, 3, 1056), (128, 32, 2, 8, 3, 528), (128, 64, 4, 8, 3, 528),
    (64, 32, 4, 4, 3, 264), (64, 64, 1, 4, 3, 528),
]  # fmt: skip


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("out", nargs="?")
    ap.add_argument("--check", action="store_true")
    args = ap.parse_args()
    if args.check:
        check()
        return
    rows = []
    for n in (384, 768, 1024):
        t = inputs(n, n, 4, 32, "cuda", torch.bfloat16, seed=n)
        scale = 32**-0.5
        cfg = pba.default_config(32, torch.bfloat16, torch.device("cuda"))
        dq0, db0 = shipped(*t, scale, cfg)
        q, k, v, bias, do, out, _lse = t
        ref = None
        if n <= 384:  # fp32 oracle of dq, dbias
            qf, kf, vf, bf = (x.float().requires_grad_() for x in (q, k, v, bias))
            o = torch.softmax(qf @ kf.transpose(-1, -2) * scale + bf[:, None], -1) @ vf
            ref = torch.autograd.grad(o, (qf, bf), do.float())
        base = {"n": n, "variant": "shipped dq + dbias",
                "ms": [time_ms(functools.partial(shipped, *t, scale, cfg)) for _ in range(2)]}  # fmt: skip
        if ref is not None:
            base.update(err_dq=rel(dq0, ref[0]), err_db=rel(db0, ref[1]))
        base["delta_torch_ms"] = time_ms(functools.partial(delta_torch, do, out))
        rows.append(base)
        print(base, flush=True)
        for c in CONFIGS:
            row = {"n": n, "variant": list(c)}
            try:
                dq1, db1 = dq_dbias(*t, scale, *c)
                row.update(diff_dq=rel(dq1, dq0), diff_db=rel(db1, db0))
                if ref is not None:
                    row.update(err_dq=rel(dq1, ref[0]), err_db=rel(db1, ref[1]))
                row["ms"] = [time_ms(functools.partial(dq_dbias, *t, scale, *c)) for _ in range(2)]
            except Exception as exc:  # a config that fails to compile or launch is a result
                row["error"] = f"{type(exc).__name__}: {str(exc)[:300]}"
            rows.append(row)
            print(row, flush=True)
        Path(args.out).write_text(json.dumps({"gpu": torch.cuda.get_device_name(), "rows": rows}, indent=1))


if __name__ == "__main__":
    main()
