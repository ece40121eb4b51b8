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


def variant(store: Path, steps: int, prefetch: bool, pool: str, switch: float | None) -> dict[str, Any]:
    default_switch = sys.getswitchinterval()
    ds = FeatureDataset(str(store), crop_size=384, seed=0, workers=4, infinite=True, pool=pool)
    try:
        if switch is not None:
            sys.setswitchinterval(switch)
        doc = run_training(None, None, steps=steps, crop_size=384, device="cuda", log_path=None,
                           batches=iter(FeatureLoader(ds, batch_size=1)), cuda_graphs=True,
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
    return {"prefetch": prefetch, "pool": pool, "switch_interval_s": switch or default_switch, "by_tokens": by,
            "tokens_per_s": s["tokens_per_s"], "data_wait_fraction": s["data_wait_fraction"],
            "recorded_steps": len(doc["steps"]) - 1 - len(steps_)}  # fmt: skip


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("out", type=Path)
    ap.add_argument("--store", type=Path, required=True)
    ap.add_argument("--steps", type=int, default=120)
    args = ap.parse_args()
    rows = []
    for prefetch, pool, switch in [(False, "thread", None), (True, "thread", None), (True, "thread", 5e-4),
                                   (False, "thread", 5e-4), (True, "process", None), (False, "process", None),
                                   (True, "thread", None)]:  # fmt: skip
        r = variant(args.store, args.steps, prefetch, pool, switch)
        rows.append(r)
        cells = "  ".join(f"{n}: {v['median_step_time_s_ms']:.1f}/{v['median_gpu_s_ms']:.1f}/{v['median_compute_s_ms']:.1f}"
                          for n, v in r["by_tokens"].items())  # fmt: skip
        print(f"prefetch={prefetch!s:5} pool={pool:7} switch={r['switch_interval_s'] * 1e3:.1f} ms  "
              f"tokens/s {r['tokens_per_s']:.0f}  exposed wait {r['data_wait_fraction']:.3f}  "
              f"step/gpu/compute ms by tokens: {cells}", flush=True)  # fmt: skip
    args.out.write_text(json.dumps(rows, indent=2))


if __name__ == "__main__":
    main()
