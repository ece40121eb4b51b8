"""Session 13: why do 128-token CUDA-graph steps get slower with the prefetch (run 68: 5.2 -> 9.3 ms
median, while 256/384-token steps get faster)? Hypothesis: the client's worker *threads* hold the
GIL when the main thread wakes from the loss's synchronisation, and it waits up to the
interpreter's switch interval (5 ms) to run again.

Same run, same store, ``--steps`` steps at crop 384 with ``--cuda-graphs`` per variant:
prefetch off/on x client pool thread/process x switch interval default / 0.5 ms. Per padded token
length: median step, GPU and compute time; overall wall tokens/s and the exposed data wait.

    PYTHONPATH=. python3 benchmarks/dev/feed_ab.py --store STORE OUT.json [--steps 120]
"""

from __future__ import annotations

import argparse
import gc
import json
import statistics
import sys
from pathlib import Path
from typing import Any

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from featurecache.client import FeatureDataset, FeatureLoader
from featurecache.model.train import run_training


def variant(store: Path, steps: int, prefetch: bool, pool: str, switch: float | None,
            graphs: bool = True) -> dict[str, Any]:  # fmt: skip
    default_switch = sys.getswitchinterval()
    ds = FeatureDataset(str(store), crop_size=384, seed=0, workers=4, infinite=True, pool=pool)
    try:
        if switch is not None:
            sys.setswitchinterval(switch)
        doc = run_training(None, None, steps=steps, crop_size=384, device="cuda", log_path=None,
                           batches=iter(FeatureLoader(ds, batch_size=1)), cuda_graphs=graphs,
                           prefetch=prefetch)  # fmt: skip
    finally:
        sys.setswitchinterval(default_switch)
        ds.close()
        gc.collect()
        torch.cuda.empty_cache()
    steps_ = [r for r in doc["steps"][1:] if r["step_time_s"] < 0.05]  # leave out the recordings
    by: dict[int, dict[str, float]] = {}
    for n in sorted({r["padded_tokens"] for r in steps_}):
        rs = [r for r in steps_ if r["padded_tokens"] == n]
        by[n] = {
            "count": len(rs),
            **{f"median_{k}_ms": 1e3 * statistics.median(r[k] for r in rs)
               for k in ("step_time_s", "gpu_s", "compute_s", "data_wait_s")},
        }  # fmt: skip
    s = doc["summary"]
    return {"graphs": graphs, "prefetch": prefetch, "pool": pool, "switch_interval_s": switch or default_switch, "by_tokens": by,
            "tokens_per_s": s["tokens_per_s"], "data_wait_fraction": s["data_wait_fraction"],
            "slow_steps": len(doc["steps"]) - 1 - len(steps_), "wall_s": sum(r["step_time_s"] for r in doc["steps"][1:]),
            "median_tokens_per_s": s["median_tokens_per_s"]}  # fmt: skip


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("out", type=Path)
    ap.add_argument("--store", type=Path, required=True)
    ap.add_argument("--steps", type=int, default=120)
    ap.add_argument("--pools-only", action="store_true",
                    help="session 13, run 71: thread vs process pools, eager and graphed steps, twice each")  # fmt: skip
    args = ap.parse_args()
    rows = []
    plan = [(False, "thread", None, True), (True, "thread", None, True), (True, "thread", 5e-4, True),
            (False, "thread", 5e-4, True), (True, "process", None, True), (False, "process", None, True),
            (True, "thread", None, True)]  # fmt: skip
    if args.pools_only:
        plan = [(True, pool, None, graphs) for _ in range(2) for graphs in (False, True)
                for pool in ("thread", "process")]  # fmt: skip
    for prefetch, pool, switch, graphs in plan:
        r = variant(args.store, args.steps, prefetch, pool, switch, graphs)
        rows.append(r)
        cells = "  ".join(f"{n}: {v['median_step_time_s_ms']:.1f}/{v['median_gpu_s_ms']:.1f}/{v['median_compute_s_ms']:.1f}"
                          for n, v in r["by_tokens"].items())  # fmt: skip
        print(f"graphs={graphs!s:5} prefetch={prefetch!s:5} pool={pool:7} switch={r['switch_interval_s'] * 1e3:.1f} ms  "
              f"tokens/s {r['tokens_per_s']:.0f} (median {r['median_tokens_per_s']:.0f})  slow {r['slow_steps']}  exposed wait {r['data_wait_fraction']:.3f}  "
              f"step/gpu/compute ms by tokens: {cells}", flush=True)  # fmt: skip
    args.out.write_text(json.dumps(rows, indent=2))


if __name__ == "__main__":
    main()
