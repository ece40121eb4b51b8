"""Run 40 (session 9): the transition backward in row chunks, the weight GEMMs of one chunk
overlapping the kernel of the next, at N = 768 (rows = 768², c = 128, n = 4, bf16).

Run 38 split the backward into the kernel (1.456 ms, bound by neither FLOPs nor bytes: it moves
2.3 GB in that time, 1.6 TB/s) and two cuBLAS GEMMs that run at HBM bandwidth (dW1 0.332, dW2
0.197 ms). Run as K row chunks, chunk k's GEMMs (fp32 out, summed in chunk order: deterministic)
can run on a second stream while chunk k + 1's kernel runs, and only two chunks' dU, h, LN(x)
buffers are alive at a time instead of all rows' (−1.4 GB at K = 4 if they overlap, more if not).

Variants: the shipped backward; K ∈ {2, 4, 8} on one stream; on a side stream; on a side stream with
higher priority. Whole backward time, two interleaved reps; peak memory; errors vs fp32; bitwise
repeatability; agreement with the shipped backward.

    PYTHONPATH=. python3 benchmarks/dev/ab40.py OUT.json
"""

from __future__ import annotations

import functools
import json
import sys
from typing import Any

import torch
import triton

from benchmarks.dev.devcli import help_exit
from benchmarks.kernels import free, ms, peak_mib, rel, transition_eager, transition_inputs
from featurecache.model.kernels import transition as tr
from featurecache.model.kernels.layernorm_linear import _cp, _prec
from featurecache.model.kernels.swiglu import use_fast_sigmoid

F32 = torch.float32


def chunked_backward(dy, x, lnw, lnb, w1, w2, chunks: int, mode: str):  # type: ignore[no-untyped-def]
    """transition_backward with the rows in ``chunks`` parts; mode: 'same' (one stream), 'side'
    (GEMMs on a second stream), 'prio' (a second stream of higher priority)."""
    cfg = tr.default_config(x.shape[1], w1.dtype, x.device).bwd
    m, c = x.shape
    nh = w2.shape[1]
    wdt, dev = w1.dtype, x.device
    blocks = triton.cdiv(m, cfg.block_m)
    per = triton.cdiv(blocks, chunks) * cfg.block_m
    dx = torch.empty((m, c), device=dev, dtype=x.dtype)
    dlnw_part = torch.zeros((blocks, c), device=dev, dtype=F32)
    dlnb_part = torch.zeros((blocks, c), device=dev, dtype=F32)
    dw1 = torch.zeros((2 * nh, c), device=dev, dtype=F32)
    dw2 = torch.zeros((c, nh), device=dev, dtype=F32)
    main = torch.cuda.current_stream()
    side = main if mode == "same" else _stream(mode)
    for r0 in range(0, m, per):
        r1 = min(m, r0 + per)
        mk, b0 = r1 - r0, r0 // cfg.block_m
        h = torch.empty((mk, nh), device=dev, dtype=wdt)
        du = torch.empty((mk, 2 * nh), device=dev, dtype=wdt)
        xln = torch.empty((mk, c), device=dev, dtype=wdt)
        xk, dyk, dxk = x[r0:r1], dy[r0:r1], dx[r0:r1]
        tr._bwd_kernel[(triton.cdiv(mk, cfg.block_m),)](
            xk, lnw, lnb, w1, w2, dyk, dxk, dlnw_part[b0:], dlnb_part[b0:], h, du, xln,
            mk, c, nh, xk.stride(0), w1.stride(0), w2.stride(0), dyk.stride(0), dxk.stride(0), h.stride(0),
            du.stride(0), xln.stride(0), 1e-5,
            CP=_cp(c), BLOCK_M=cfg.block_m, BLOCK_N=cfg.block_n, PREC=_prec(wdt),
            FAST=use_fast_sigmoid(cfg.fast_sigmoid, w1), num_warps=cfg.num_warps, num_stages=cfg.num_stages,
        )  # fmt: skip
        if side is not main:
            side.wait_stream(main)
        with torch.cuda.stream(side):
            dw1 += torch.mm(du.t(), xln, out_dtype=F32)
            dw2 += torch.mm(dyk.t(), h, out_dtype=F32)
        if side is not main:
            for t in (h, du, xln):
                t.record_stream(side)
    if side is not main:
        main.wait_stream(side)
    return (
        dx,
        dlnw_part.sum(0).to(lnw.dtype),
        dlnb_part.sum(0).to(lnb.dtype),
        dw1.to(w1.dtype),
        dw2.to(w2.dtype),
    )


_STREAMS: dict[str, torch.cuda.Stream] = {}


def _stream(mode: str) -> torch.cuda.Stream:
    if mode not in _STREAMS:
        _least, hi = torch.cuda.Stream.priority_range()  # (least, greatest)
        _STREAMS[mode] = torch.cuda.Stream(priority=hi if mode == "prio" else 0)
    return _STREAMS[mode]


def main() -> None:
    rows: list[dict[str, Any]] = []
    n, c, nx = 768, 128, 4
    m = n * n
    t = transition_inputs(m, c, nx)
    xs = [t[k] for k in ("x", "lnw", "lnb", "w1", "w2")]
    r = [x.float().requires_grad_() for x in xs]
    gr = torch.autograd.grad(transition_eager(*r), r, t["dy"].float())
    variants = {"shipped": functools.partial(tr.transition_backward, t["dy"], *xs, 1e-5)}
    for k in (2, 4, 8):
        for mode in ("same", "side", "prio"):
            variants[f"k{k}_{mode}"] = functools.partial(chunked_backward, t["dy"], *xs, k, mode)
    ref = variants["shipped"]()
    ok = []
    for name, fn in variants.items():
        row: dict[str, Any] = {"what": "check", "variant": name}
        try:
            got = fn()
            again = fn()
            row["err"] = [rel(a, b) for a, b in zip(got, gr, strict=True)]
            row["vs_shipped"] = [rel(a, b) for a, b in zip(got, ref, strict=True)]
            row["bitwise_repeat"] = all(torch.equal(a, b) for a, b in zip(got, again, strict=True))
            del got, again
            row["peak_mib"] = peak_mib(fn)
            ok.append(name)
        except Exception as exc:
            row["error"] = f"{type(exc).__name__}: {str(exc)[-300:]}"
        rows.append(row)
        print(row, flush=True)
        free()
    for rep in range(2):
        for name in ok:
            rows.append({"what": "bwd", "variant": name, "rep": rep, "ms": ms(variants[name])})
            print(rows[-1], flush=True)
        free()
    with open(sys.argv[1], "w") as f:
        json.dump({"torch": torch.__version__, "rows": rows}, f, indent=1)
    print("\nvariant       ms (rep 0, rep 1)   peak MiB   max err vs fp32")
    for name in ok:
        t2 = [row["ms"] for row in rows if row["what"] == "bwd" and row["variant"] == name]
        chk = next(row for row in rows if row["what"] == "check" and row["variant"] == name)
        print(f"{name:12} {t2[0]:.3f} {t2[1]:.3f}   {chk['peak_mib']:9.1f}   {max(chk['err']):.2e}")


if __name__ == "__main__":
    help_exit(__doc__)
    main()
