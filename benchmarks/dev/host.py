"""Scratch: host time per fused attention fwd+bwd call (N = 64) before and after a torch.compile'd
FlexAttention has run in the process, with the top cProfile entries.  PYTHONPATH=. python3 benchmarks/dev/host.py"""

from __future__ import annotations

import cProfile
import io
import pstats

import torch
import triton

from benchmarks.dev.abkit import host_ms
from benchmarks.dev.devcli import help_exit
from benchmarks.kernels import Flex, attention_inputs, fwd_bwd, method_fused


def profile(run, tag: str) -> None:  # type: ignore[no-untyped-def]
    pr = cProfile.Profile()
    pr.enable()
    for _ in range(30):
        run()
    pr.disable()
    torch.cuda.synchronize()
    s = io.StringIO()
    pstats.Stats(pr, stream=s).sort_stats("tottime").print_stats(14)
    print(f"--- {tag}\n" + "\n".join(s.getvalue().splitlines()[6:24]))


def hooks() -> str:
    k = triton.knobs.runtime
    return f"enter={k.launch_enter_hook} exit={k.launch_exit_hook}"


help_exit(__doc__)
t = attention_inputs(64, 4, 32, seed=3)
run = fwd_bwd(method_fused(), t)
print("before:", f"{host_ms(run, 50):.3f} ms/call", hooks())
profile(run, "before")
flex = fwd_bwd(Flex(), t)
flex()
print("flex host:", f"{host_ms(flex, 50):.3f} ms/call")
print("after:", f"{host_ms(run, 50):.3f} ms/call", hooks())
profile(run, "after")
