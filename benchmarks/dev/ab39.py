"""Run 39 (session 9): fewer instructions in the transition's SwiGLU epilogues and in its backward's
dLN accumulation, against session 8's kernels, at N = 768 (rows = 768², c = 128, n = 4, bf16).

* SwiGLU forward as p + p·tanh(a/2) with p = (a/2)·b (``swiglu_fwd_tile``), backward's da as
  dy·b·(σ + silu·(1 − σ)) (``swiglu_fwd_bwd_tile``, which also returns h): SASS loops
  forward 736 -> 649 instructions, backward 531 -> 515.
* ``TileConfig.unroll = 2``: two hidden blocks per backward iteration, their four dLN products
  chained into one fresh tile, so the add that keeps ptxas from serialising the wgmmas (run 33)
  runs once per two blocks: 515 -> 476.5 instructions per block.

The baseline is ``benchmarks/dev/transition_prev.py``: session 8's ``kernels/transition.py``
(commit fb3a7f2) with its SwiGLU helpers inlined and without the torch.library registration (not
committed; generated from git and carried to the device). fwd and bwd are timed alone and
together (the launchers called directly, the same way for both), two interleaved reps; errors vs
an fp32 reference; bitwise repeatability of the new backward.

    PYTHONPATH=. python3 benchmarks/dev/ab39.py OUT.json

Outcome (``kernels_ab_run39.json``): forward 0.585 -> 0.603 ms, backward unchanged, unroll 2 slower
at every tile; all reverted (46b7112). Run this script at commit 8dfcf22, which has the changes
and ``TileConfig.unroll`` (KERNEL_NOTES.md, session 9).

Historical: ran against 8dfcf22 (run 39); to re-run: ``git worktree add /tmp/fc-8dfcf22 8dfcf22``,
make ``benchmarks/dev/transition_prev.py`` there as said above, and run it there (on this tree it
exits 2 at once: ``TileConfig`` has no ``unroll``).
"""

from __future__ import annotations

import dataclasses
import functools
import json
import sys
from typing import Any

import torch

from benchmarks.dev.abkit import transition_problem
from benchmarks.dev.devcli import help_exit, ran_elsewhere
from benchmarks.kernels import free, ms, rel
from featurecache.model.kernels import transition as tr

try:
    from benchmarks.dev import transition_prev as prev  # not committed: made as said above
except ImportError:
    prev = None

RAN_AGAINST = "8dfcf22c677759480a7fe1e0f7c9f792ebe52b24"
TC = tr.TileConfig
if __name__ == "__main__":  # before the configs below need TileConfig.unroll
    help_exit(__doc__)
    if "unroll" not in {f.name for f in dataclasses.fields(TC)}:
        ran_elsewhere(RAN_AGAINST, "run 39", "this tree's transition TileConfig has no unroll (removed in 46b7112)",
                      "after making benchmarks/dev/transition_prev.py there (see the docstring)")  # fmt: skip
NEW_F = TC(128, 128, 8, 2)
BWD = {"unroll1": TC(64, 32, 4, 3), "unroll2": TC(64, 32, 4, 3, unroll=2), "unroll2_s2": TC(64, 32, 4, 2, unroll=2),
       "unroll2_s4": TC(64, 32, 4, 4, unroll=2), "unroll2_n16": TC(64, 16, 4, 3, unroll=2),
       "unroll2_m128": TC(128, 32, 8, 3, unroll=2)}  # fmt: skip


def main() -> None:
    rows: list[dict[str, Any]] = []
    c = 128
    t, xs, flops, yr, gr = transition_problem(768, c)
    pcfg = prev.default_config(c, torch.bfloat16, torch.device("cuda"))
    fwds = {
        "prev": functools.partial(prev.transition_forward, *xs, 1e-5, pcfg),
        "new": functools.partial(
            tr.transition_forward, *xs, 1e-5, tr.TransitionConfig(NEW_F, BWD["unroll1"])
        ),
    }
    bwds = {"prev": functools.partial(prev.transition_backward, t["dy"], *xs, 1e-5, pcfg)}
    for name, cfg in BWD.items():
        bwds[name] = functools.partial(
            tr.transition_backward, t["dy"], *xs, 1e-5, tr.TransitionConfig(NEW_F, cfg)
        )
    for name, fn in fwds.items():
        rows.append({"what": "fwd", "variant": name, "err": rel(fn(), yr)})
    for name, fn in bwds.items():
        try:
            got = fn()
            rows.append(
                {"what": "bwd", "variant": name, "err": [rel(a, b) for a, b in zip(got, gr, strict=True)]}
            )
            del got
        except Exception as exc:
            rows.append({"what": "bwd", "variant": name, "error": f"{type(exc).__name__}: {str(exc)[-300:]}"})
        print(rows[-1], flush=True)
    ok = {row["variant"] for row in rows if row["what"] == "bwd" and "err" in row}
    for rep in range(2):
        for name, fn in fwds.items():
            rows.append({"what": "fwd", "variant": name, "rep": rep, "ms": ms(fn)})
            print(rows[-1], flush=True)
        for name, fn in bwds.items():
            if name in ok:
                rows.append({"what": "bwd", "variant": name, "rep": rep, "ms": ms(fn)})
                print(rows[-1], flush=True)
        free()
    best = min((row for row in rows if row["what"] == "bwd" and "ms" in row and row["variant"] != "prev"),
               key=lambda row: row["ms"])["variant"]  # fmt: skip
    a, b = bwds[best](), bwds[best]()
    rows.append(
        {
            "what": "repeatable",
            "variant": best,
            "bitwise": all(torch.equal(x, y) for x, y in zip(a, b, strict=True)),
        }
    )
    print(rows[-1], flush=True)
    del a, b

    def total(f, g):  # type: ignore[no-untyped-def]
        def run():  # type: ignore[no-untyped-def]
            f()
            return g()

        return run

    for rep in range(2):
        for name, run in (
            ("prev", total(fwds["prev"], bwds["prev"])),
            ("new", total(fwds["new"], bwds[best])),
        ):
            row = {
                "what": "total",
                "variant": name if name == "prev" else f"new ({best})",
                "rep": rep,
                "ms": ms(run),
            }
            row["TFLOP/s"] = flops / row["ms"] / 1e9
            rows.append(row)
            print(row, flush=True)
        free()
    with open(sys.argv[1], "w") as f:
        json.dump({"torch": torch.__version__, "best": best, "rows": rows}, f, indent=1)
    print("\nwhat   variant                  ms (rep 0, rep 1)")
    for what in ("fwd", "bwd", "total"):
        names = dict.fromkeys(row["variant"] for row in rows if row["what"] == what and "ms" in row)
        for name in names:
            t2 = [row["ms"] for row in rows if row["what"] == what and row["variant"] == name and "ms" in row]
            print(f"{what:6} {name:24} " + " ".join(f"{x:.3f}" for x in t2))


if __name__ == "__main__":
    main()
