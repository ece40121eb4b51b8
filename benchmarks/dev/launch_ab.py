# ruff: noqa: B023  (closures run inside their loop iteration)
"""Same-run A/B on the GPU: fused pair-bias attention fwd+bwd through the v3 launchers, the current
launchers with the launch cache off, and with it on. The v3 launchers are the module as of commit
9952a21; recreate them first with
``git show 9952a21:featurecache/model/kernels/pair_bias_attention.py > benchmarks/dev/pba_v3.py``.

Checks first that all three give bitwise-equal out/dq/dk/dv/dbias at every N (fresh random inputs,
plus a q that is not 16-byte aligned so the cache must tell the specialisations apart), then times
them interleaved (v3, nocache, cache; twice): ``do_bench`` median ms and host ms per call (no sync).

    PYTHONPATH=. python3 benchmarks/dev/launch_ab.py OUT.json [N,N,...]

Historical: ran against a54112e (run 9), which has ``pba_v3.py`` committed (227f563 dropped it); to
re-run: ``git worktree add /tmp/fc-a54112e a54112e`` and run it there (here, without that file, it
exits 2 at once, saying so).
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from typing import Any

import torch

from benchmarks.dev.abkit import host_ms
from benchmarks.dev.devcli import help_exit, ran_elsewhere
from benchmarks.kernels import BF16, attention_inputs, ms
from featurecache.model.kernels import pair_bias_attention as pba

try:
    from benchmarks.dev import pba_v3  # not committed since 227f563: made as said above
except ImportError:
    pba_v3 = None

RAN_AGAINST = "a54112ea094c230c3144db301c8e61648a73463e"

Step = Callable[[], tuple[torch.Tensor, ...]]


def make_step(fn: Callable[..., torch.Tensor], xs: list[torch.Tensor], do: torch.Tensor) -> Step:
    def step() -> tuple[torch.Tensor, ...]:
        out = fn(*xs)
        return (out.detach(), *torch.autograd.grad(out, xs, do))

    return step


def with_cache(enabled: bool, step: Step) -> Step:
    def run() -> tuple[torch.Tensor, ...]:
        pba.set_fast_launch(enabled)
        return step()

    return run


def misaligned_check(n: int) -> bool:
    """q at a 2-byte offset (not 16-byte aligned), then aligned again: cache vs no cache, bitwise."""
    t = attention_inputs(n, 4, 32, s=8, seed=n + 99)
    buf = torch.empty(t["q"].numel() + 1, device="cuda", dtype=BF16)
    q_odd = buf[1:].view_as(t["q"])
    q_odd.copy_(t["q"])
    results = []
    for q in (q_odd, t["q"], q_odd):
        xs = [x.detach().requires_grad_() for x in (q, t["k"], t["v"], t["bias"])]
        step = make_step(pba.pair_bias_attention, xs, t["do"])
        pair = [with_cache(flag, step)() for flag in (False, True, True)]
        results.append(all(torch.equal(a, b) and torch.equal(a, c) for a, b, c in zip(*pair, strict=True)))
    return all(results)


def main() -> None:
    if pba_v3 is None:
        ran_elsewhere(RAN_AGAINST, "run 9", "benchmarks/dev/pba_v3.py is missing (git show "
                      "9952a21:featurecache/model/kernels/pair_bias_attention.py > benchmarks/dev/pba_v3.py)")  # fmt: skip
    out_path = sys.argv[1] if len(sys.argv) > 1 else "launch_ab.json"
    ns = [int(x) for x in sys.argv[2].split(",")] if len(sys.argv) > 2 else [256, 384, 512, 768, 1024]
    rows: list[dict[str, Any]] = []
    for n in ns:
        t = attention_inputs(n, 4, 32, seed=n + 17)
        xs = [t[k].detach().requires_grad_() for k in ("q", "k", "v", "bias")]
        v3 = make_step(pba_v3.pair_bias_attention, xs, t["do"])
        new = make_step(pba.pair_bias_attention, xs, t["do"])
        variants = {"v3": v3, "nocache": with_cache(False, new), "cache": with_cache(True, new)}
        ref = v3()
        equal = {}
        for name, run in variants.items():
            run()  # warm-up / compile / fill the cache
            got = run()
            equal[name] = all(torch.equal(a, b) for a, b in zip(got, ref, strict=True))
        row: dict[str, Any] = {"N": n, "bitwise_equal_v3": equal, "misaligned_ok": misaligned_check(n)}
        for rep in range(2):
            for name, run in variants.items():
                row[f"{name}_ms_{rep}"] = ms(run)
                row[f"{name}_host_ms_{rep}"] = host_ms(run)
        rows.append(row)
        print(row, flush=True)
        del t, xs, ref
        torch.cuda.empty_cache()
    pba.set_fast_launch(True)
    with open(out_path, "w") as f:
        json.dump(rows, f, indent=1)
    print(f"{'N':>5} {'v3 ms':>13} {'nocache ms':>13} {'cache ms':>13} | {'host v3':>8} {'nocache':>8} "
          f"{'cache':>8} | equal, misaligned")  # fmt: skip
    for r in rows:
        cell = lambda k: f"{r[k + '_ms_0']:.3f}/{r[k + '_ms_1']:.3f}"  # noqa: E731
        host = lambda k: f"{min(r[k + '_host_ms_0'], r[k + '_host_ms_1']):.3f}"  # noqa: E731
        print(f"{r['N']:>5} {cell('v3'):>13} {cell('nocache'):>13} {cell('cache'):>13} | {host('v3'):>8} "
              f"{host('nocache'):>8} {host('cache'):>8} | {all(r['bitwise_equal_v3'].values())}, "
              f"{r['misaligned_ok']}")  # fmt: skip


if __name__ == "__main__":
    help_exit(__doc__)
    main()
