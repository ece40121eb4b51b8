"""A/B (session 11): the triangle-attention core op vs the previous trunk's path, per kernel.

Run 50 found the attention kernels 2.7 ms slower per training step at crop 768 after the core op
(fwd +1.7, dq +0.7 ms; dk/dv and the bias kernel unchanged). Candidates: the gate in the forward
epilogue / the dq prologue, and the ending node's transposed layout (rows 811 KB apart instead of
1 KB). Variants, each forward+backward of one triangle attention core (B=1, H=4, D=32, bf16,
width 528, padding masks):

* ``old``: commit 49f942b's path: q, k, v views, sigmoid(gate), ungated attention, gate * o,
  the split's cat (the same for both nodes: the old ending node transposed z first)
* ``start``: the core op on p (starting node)
* ``end``: the core op on p.transpose(1, 2) (ending node)
* ``end-copy``: the core op on a contiguous copy of p.transpose(1, 2) (the layout ``old`` had)

Per variant: the median of CUDA-event timings of fwd+bwd, and the GPU time of each kernel from
torch.profiler.

    PYTHONPATH=. python3 benchmarks/dev/ab51.py OUT.json [--n 384,768]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from collections import defaultdict
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from featurecache.model.kernels import triangle as tri
from featurecache.model.kernels.pair_bias_attention import pair_bias_attention

H, D = 4, 32


def old_path(p: torch.Tensor, tm: torch.Tensor) -> torch.Tensor:
    b, n = p.shape[0], p.shape[1]
    hd = H * D

    def heads(t: torch.Tensor) -> torch.Tensor:
        return t.unflatten(-1, (H, D)).permute(0, 1, 3, 2, 4)

    pq, pk, pv, pg, pb = p.split([hd, hd, hd, hd, p.shape[-1] - 4 * hd], dim=-1)
    gate = torch.sigmoid(pg)
    bias = pb[..., :H].permute(0, 3, 1, 2).contiguous()
    o = pair_bias_attention(heads(pq), heads(pk), heads(pv), bias, key_mask=tm, row_mask=tm)
    return gate * o.permute(0, 1, 3, 2, 4).reshape(b, n, n, hd)


def variants(n: int):  # type: ignore[no-untyped-def]
    g = torch.Generator(device="cuda").manual_seed(n)
    base = torch.randn(1, n, n, 4 * H * D + 16, device="cuda", generator=g).to(torch.bfloat16)
    tm = (torch.arange(n, device="cuda") < n - 5)[None]
    dout = torch.randn(1, n, n, H * D, device="cuda", generator=g).to(torch.bfloat16)

    def make(kind: str):  # type: ignore[no-untyped-def]
        p = base.clone().requires_grad_()

        def run() -> None:
            p.grad = None
            if kind == "old":
                out = old_path(p, tm)
            elif kind == "start":
                out = tri.triangle_attention_core(p, H, D, key_mask=tm, row_mask=tm)
            elif kind == "end":
                out = tri.triangle_attention_core(p.transpose(1, 2), H, D, key_mask=tm, row_mask=tm)
            else:
                out = tri.triangle_attention_core(
                    p.transpose(1, 2).contiguous(), H, D, key_mask=tm, row_mask=tm
                )
            out.backward(dout.transpose(1, 2) if kind == "end" else dout)

        return run

    return {k: make(k) for k in ("old", "start", "end", "end-copy")}


def time_ms(fn, reps: int = 20) -> list[float]:  # type: ignore[no-untyped-def]
    ts = []
    for _ in range(reps):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        fn()
        b.record()
        torch.cuda.synchronize()
        ts.append(a.elapsed_time(b))
    return ts


def kernels_ms(fn, reps: int = 3) -> dict[str, float]:  # type: ignore[no-untyped-def]
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(reps):
            fn()
        torch.cuda.synchronize()
    out: dict[str, float] = defaultdict(float)
    for ev in prof.events():
        if ev.device_type == torch.autograd.DeviceType.CUDA:
            out[ev.name[:60]] += ev.device_time_total / 1e3 / reps
    return dict(sorted(out.items(), key=lambda kv: -kv[1]))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--n", default="384,768")
    args = ap.parse_args()
    doc: dict = {"gpu": torch.cuda.get_device_name(), "torch": torch.__version__, "rows": []}
    for n in (int(x) for x in args.n.split(",")):
        vs = variants(n)
        for fn in vs.values():
            fn()
        torch.cuda.synchronize()
        for rep in range(2):  # interleaved reps
            for name, fn in vs.items():
                ts = time_ms(fn)
                row = {"n": n, "variant": name, "rep": rep, "ms_median": statistics.median(ts)}
                if rep == 0:
                    row["kernels_ms"] = kernels_ms(fn)
                doc["rows"].append(row)
                top = ", ".join(f"{k[:22]} {v:.3f}" for k, v in list(row.get("kernels_ms", {}).items())[:7])
                print(f"N={n} {name:9} rep {rep}: {row['ms_median']:.3f} ms  {top}", flush=True)
        Path(args.out).write_text(json.dumps(doc, indent=1))


if __name__ == "__main__":
    main()
