"""Session 31: the kernels compiled with Ampere's ``mma.sync`` (HMMA) instead of Hopper's async
``wgmma`` (HGMMA), A/B on the H200.

Why: ncu (session 22) has the attention passes latency-bound at 49-62 % issue with no pipe
saturated (tensor 21-34 %), dk/dv losing 29 % of its stall samples on the ``WARPGROUP.DEPBAR``
after each wgmma (ptxas's C7515 serialisation), and the transition stalled on wgmma barriers.
``mma.sync`` has a lower tensor peak but no warpgroup-wide arrive/wait: each warp issues and
consumes its own MMAs, so the scheduler can interleave one warp's exponentials with another's
MMAs. Never measured before. Triton picks the MMA version per compile; ``DISABLE_MMA_V3=1`` (read
by its AccelerateMatmul pass, and part of the compile cache key) makes it use mma v2 on sm_90.
The SASS (``DISABLE_MMA_V3=1 python benchmarks/dev/sass.py 768``) at the shipped tiles: fwd 1229
-> 1282 loop instructions, dq 316 -> 333 (128 -> 140 registers), dk/dv 396 -> 398 (168 -> 254
registers, no C7515), dbias 292 -> 345; the transition's forward 736 -> 1303, backward 531 -> 679.

The MMA version is fixed per process, so the parent runs children alternately with and without
the variable: wgmma, mma.sync (each: the per-kernel tile sweeps of ``ab30.py`` at N = 768, the
attention fwd+bwd at N = 384/768/1024 with the shipped and the swept tiles, and the transition's
tile sweep of ``ab33.py`` and its fwd+bwd), then both again without the sweeps (their winners
passed in), for a second rep in fresh processes.

    PYTHONPATH=. python3 benchmarks/dev/ab_mma2.py OUT.json
"""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
from typing import Any

import torch

from benchmarks.dev.devcli import help_exit

MODES = {"wgmma": {}, "mma_sync": {"DISABLE_MMA_V3": "1"}}


def child(out: str, winners_path: str | None) -> None:
    from benchmarks.dev import ab30, ab33
    from benchmarks.dev.abkit import totals, transition_problem
    from benchmarks.kernels import BF16, ms, transition_run
    from featurecache.model.kernels import pair_bias_attention as pba
    from featurecache.model.kernels import transition as tr

    rows: list[dict[str, Any]] = []
    dev = torch.device("cuda")
    base = pba.default_config(32, BF16, dev)
    tbase = tr.default_config(128, BF16, dev)
    if winners_path is None:
        won = ab30.sweep(768, {**ab30.SWEEP, "target": ab30.TARGETS}, rows, reps=1)
        tuned = dataclasses.replace(
            base, **{k: w for k, w in won.items() if k != "target"},
            dbias_target_programs=won.get("target", base.dbias_target_programs),
        )  # fmt: skip
        tbest = ab33.sweep_tiles(rows)
    else:
        with open(winners_path) as f:
            w = json.load(f)["winners"]
        kc, tc = pba.KernelConfig, tr.TileConfig
        tuned = pba.AttentionConfig(
            **{k: kc(**w["attention"][k]) for k in ("fwd", "dq", "dkv", "dbias")},
            dbias_target_programs=w["attention"]["dbias_target_programs"],
        )
        tbest = tr.TransitionConfig(tc(**w["transition"]["fwd"]), tc(**w["transition"]["bwd"]))
    totals({"shipped": base, "tuned": tuned}, rows, ns=(384, 768, 1024))
    t = transition_problem(768, 128)[0]
    for rep in range(2):
        for name, cfg in (("shipped", tbase), ("tuned", tbest)):
            tr.set_default_config(128, BF16, cfg)
            run = transition_run(lambda *xs: tr.transition(*xs, 1e-5), t)
            row = {"what": "transition", "variant": name, "rep": rep, "ms": ms(run)}
            rows.append(row)
            print(row, flush=True)
    tr.set_default_config(128, BF16, None)
    with open(out, "w") as f:
        json.dump(
            {
                "winners": {
                    "attention": dataclasses.asdict(tuned),
                    "transition": {k: dataclasses.asdict(getattr(tbest, k)) for k in ("fwd", "bwd")},
                },
                "rows": rows,
            },
            f,
            indent=1,
        )


def summary(runs: list[dict[str, Any]]) -> None:
    print(f"{'child':<22} {'what':<12} {'N':>5} {'shipped ms':>11} {'tuned ms':>9}")
    for r in runs:
        got: dict[tuple[str, Any, str], list[float]] = {}
        for row in r["rows"]:
            if row.get("what") in ("total", "transition") and "ms" in row:
                got.setdefault((row["what"], row.get("N", 768), row["variant"]), []).append(row["ms"])
        for what, n in sorted({(w, n) for w, n, _ in got}):
            s = "/".join(f"{x:.3f}" for x in got.get((what, n, "shipped"), []))
            t = "/".join(f"{x:.3f}" for x in got.get((what, n, "tuned"), []))
            print(f"{r['child']:<22} {what:<12} {n:>5} {s:>11} {t:>9}")
        sweeps = [x for x in r["rows"] if x.get("what") in ("fwd", "dq", "dkv", "dbias", "bwd") and "ms" in x]
        for x in sweeps:
            print(f"{r['child']:<22} sweep {x['what']:<6} {x['config']:<60} {x['ms']:.3f}")


def main() -> None:
    if sys.argv[1] == "--child":
        child(sys.argv[2], sys.argv[3] if len(sys.argv) > 3 else None)
        return
    out = sys.argv[1]
    runs: list[dict[str, Any]] = []
    for rep in range(2):
        for mode, env in MODES.items():
            part = f"{out}.{mode}.{rep}.json"
            cmd = [sys.executable, __file__, "--child", part]
            if rep:
                cmd.append(f"{out}.{mode}.0.json")
            rc = subprocess.run(cmd, env={**os.environ, **env}).returncode
            if rc or not os.path.exists(part):
                print(f"child {mode} rep {rep} failed: exit {rc}", flush=True)
                continue
            with open(part) as f:
                runs.append({"child": f"{mode}.{rep}", **json.load(f)})
            with open(out, "w") as f:
                json.dump({"torch": torch.__version__, "runs": runs}, f, indent=1)
    summary(runs)


if __name__ == "__main__":
    help_exit(__doc__)
    main()
