"""Scratch (session 30): is the N = 384 attention fwd+bwd GPU- or host-bound on today's device host?
Interleaved reps of: kernels.py's timing (do_bench, L2 flushed) of the fused call and of Flex, the
fused call's host ms per call (no sync), and the GPU time of the same work replayed as a CUDA graph;
then cProfile's top entries for the fused call.   PYTHONPATH=. python3 benchmarks/dev/host384.py OUT.json"""

from __future__ import annotations

import cProfile
import io
import json
import pstats
import sys

import torch

from benchmarks.dev.abkit import host_ms
from benchmarks.dev.devcli import help_exit
from benchmarks.kernels import Flex, attention_inputs, fwd_bwd, method_fused, ms


def graph_ms(run) -> float:  # type: ignore[no-untyped-def]
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        for _ in range(2):
            run()
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        run()
    g.replay()
    torch.cuda.synchronize()
    return ms(g.replay)


help_exit(__doc__)
rows = []
for n in (256, 384, 512):
    t = attention_inputs(n, 4, 32, seed=1)
    fused, flex = fwd_bwd(method_fused(), t), fwd_bwd(Flex(), t)
    fused(), flex()
    torch.cuda.synchronize()
    g = graph_ms(fused)
    for rep in range(5):
        row = {"N": n, "rep": rep, "fused_ms": ms(fused), "flex_ms": ms(flex), "fused_host_ms": host_ms(fused, 50),
               "flex_host_ms": host_ms(flex, 50), "fused_graph_ms": g}  # fmt: skip
        rows.append(row)
        print(json.dumps(row), flush=True)
    if n == 384:
        pr = cProfile.Profile()
        pr.enable()
        for _ in range(50):
            fused()
        pr.disable()
        torch.cuda.synchronize()
        out = io.StringIO()
        pstats.Stats(pr, stream=out).sort_stats("tottime").print_stats(25)
        print("\n".join(out.getvalue().splitlines()[4:40]))
with open(sys.argv[1], "w") as fh:
    json.dump(rows, fh, indent=1)
