"""Session 13: does ``run_training(cuda_graphs=True)`` leave GPU memory allocated after it returns?

Run 72's crop search (after the graph variants in the same process) measured every crop's peak
2.03 GiB above run 53's, and each graph variant's peak grew after the previous one. This prints
the allocated memory after each run (gc + empty_cache) and, if some is left, what still holds it:
live ``GraphedSteps`` / ``CUDAGraph`` objects and the largest live CUDA tensors with the types of
their referrers.

    PYTHONPATH=. python3 benchmarks/dev/graph_leak.py [--fresh-streams]
"""

from __future__ import annotations

import gc
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from benchmarks.dev.devcli import help_exit
from featurecache.model.batches import synthetic_batches
from featurecache.model.train import GraphedSteps, run_training


def allocated_mib() -> float:
    gc.collect()
    torch.cuda.empty_cache()
    return torch.cuda.memory_allocated() / 2**20


def holders() -> None:
    graphs = [o for o in gc.get_objects() if isinstance(o, GraphedSteps | torch.cuda.CUDAGraph)]
    print("  live GraphedSteps/CUDAGraph:", len(graphs))
    for g in graphs[:3]:
        print("   ", type(g).__name__, "referrers:", [type(r).__name__ for r in gc.get_referrers(g)][:8])
    tensors = [o for o in gc.get_objects() if torch.is_tensor(o) and o.is_cuda]
    total = sum(t.untyped_storage().nbytes() for t in tensors) / 2**20
    print(f"  live CUDA tensors seen by gc: {len(tensors)}, {total:.1f} MiB of storage")
    for t in sorted(tensors, key=lambda t: -t.untyped_storage().nbytes())[:8]:
        refs = [type(r).__name__ for r in gc.get_referrers(t) if r is not tensors]
        print(
            f"    {tuple(t.shape)} {t.dtype} {t.untyped_storage().nbytes() / 2**20:.1f} MiB  referrers {refs[:6]}"
        )


def main() -> None:
    if "--fresh-streams" in sys.argv:  # the behaviour before run 73: a new warm-up stream per recording
        import featurecache.model.train as train

        train._warmup_stream = lambda device: torch.cuda.Stream(device)  # type: ignore[assignment]
        print("a new warm-up stream per recording")
    print(f"start: {allocated_mib():.1f} MiB")
    for graphs in (False, True, True, False, True):
        doc = run_training(None, None, steps=8, crop_size=384, device="cuda", log_path=None,
                           batches=synthetic_batches(1, 384, seed=0, full=False), cuda_graphs=graphs)  # fmt: skip
        shapes = doc["steps"][-1]["graphs"]
        print(f"after run_training(cuda_graphs={graphs}, {shapes} shapes recorded): {allocated_mib():.1f} MiB "
              f"allocated; peak of the run {doc['summary']['peak_mem_bytes'] / 2**20:.0f} MiB", flush=True)  # fmt: skip
        holders()


if __name__ == "__main__":
    help_exit(__doc__)
    main()
