"""Session 22: hardware counters (Nsight Compute) for the shipped kernels at N = 768.

Twenty-one sessions reasoned about the attention passes from SASS instruction counts and same-run
A/Bs ("issue-bound", session 7), never from the hardware's own counters: the H200 machine is a
Firecracker VM where `ncu` reads them. This script runs the shipped attention fwd+bwd (B = 1,
S = N = 768, H = 4, D = 32, bf16, no mask) and the shipped transition fwd+bwd (rows = 768²,
c = 128, n = 4) once each after a warm-up, between cudaProfilerStart/Stop, so that

    ncu --clock-control none --profile-from-start off --set full -o OUT/k -f \
        python3 benchmarks/dev/ncu_profile.py

profiles exactly the kernels of one measured call (the warm-up compiles and fills the launch cache
outside the profiled range). `benchmarks/dev/ncu_profile.sh OUT` runs it and exports the details
and the per-instruction source counters as CSV.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from featurecache.model.kernels import pair_bias_attention as pba
from featurecache.model.kernels import transition as tr

BF16 = torch.bfloat16


def attention(n: int = 768, h: int = 4, d: int = 32):  # type: ignore[no-untyped-def]
    g = torch.Generator(device="cuda").manual_seed(0)
    q, k, v, do = (torch.randn(1, n, h, n, d, device="cuda", generator=g, dtype=BF16) for _ in range(4))
    bias = torch.randn(1, h, n, n, device="cuda", generator=g, dtype=BF16)
    xs = [t.requires_grad_() for t in (q, k, v, bias)]

    def run() -> None:
        out = pba.pair_bias_attention(*xs)
        torch.autograd.grad(out, xs, do)

    return run


def transition(n: int = 768, c: int = 128, nx: int = 4):  # type: ignore[no-untyped-def]
    g = torch.Generator(device="cuda").manual_seed(0)
    rows = n * n
    x = torch.randn(rows, c, device="cuda", generator=g, dtype=BF16).requires_grad_()
    lnw = (1 + 0.1 * torch.randn(c, device="cuda", generator=g)).to(BF16).requires_grad_()
    lnb = (0.1 * torch.randn(c, device="cuda", generator=g)).to(BF16).requires_grad_()
    w1 = (torch.randn(2 * nx * c, c, device="cuda", generator=g) / c**0.5).to(BF16).requires_grad_()
    w2 = (torch.randn(c, nx * c, device="cuda", generator=g) / (nx * c) ** 0.5).to(BF16).requires_grad_()
    dy = torch.randn(rows, c, device="cuda", generator=g, dtype=BF16)
    xs = [x, lnw, lnb, w1, w2]

    def run() -> None:
        y = tr.transition(x, lnw, lnb, w1, w2, 1e-5)
        torch.autograd.grad(y, xs, dy)

    return run


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument(
        "which", nargs="*", metavar="attention|transition", help="what to profile (default: both)"
    )
    kinds = {"attention": attention, "transition": transition}
    which = ap.parse_args().which or list(kinds)
    if unknown := [w for w in which if w not in kinds]:
        ap.error(f"unknown {', '.join(unknown)} (attention, transition)")
    runs = [kinds[w]() for w in which]
    for run in runs:  # compile, fill the launch cache, settle clocks
        for _ in range(3):
            run()
    torch.cuda.synchronize()
    torch.cuda.profiler.start()
    for run in runs:
        run()
    torch.cuda.synchronize()
    torch.cuda.profiler.stop()


if __name__ == "__main__":
    main()
