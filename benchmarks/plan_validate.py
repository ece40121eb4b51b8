"""Validate the memory planner against measured peaks on the GPU.

For each crop (256 … 768) and kernel mode (fused Triton / torch reference) it builds the project's
trunk, runs a few real training steps on synthetic batches shaped like the client's (every sample
a full crop, ``--msa-rows`` MSA rows) exactly as ``featurecache train`` does them (bf16 autocast,
AdamW, gradient clipping), and compares ``torch.cuda.max_memory_allocated()`` of each step after
the first (AdamW state allocated, previous gradients alive in the forward) with the planner's
prediction. It also measures what autograd saves (``saved_tensors_hooks``, unique storages) against
the planner's ledger at the end of the forward. A configuration that runs out of memory is
recorded as such next to its prediction.

    PYTHONPATH=. python benchmarks/plan_validate.py [--crops 256 384 …] [--steps 3]

Without CUDA it prints the predictions only and exits 0 (nothing written). On CUDA it writes
``benchmarks/results/plan_validate.json``.
"""

from __future__ import annotations

import argparse
import gc
import logging
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import numpy as np
import torch

from benchmarks.harness import Bench
from featurecache.client.schema import MODEL_INPUT_KEYS
from featurecache.model.batches import synthetic_batch
from featurecache.model.config import ModelConfig
from featurecache.model.train import DEFAULT_CLIP_GRAD_NORM
from featurecache.model.trunk import Trunk
from featurecache.plan.memory import estimate_step
from featurecache.plan.planner import DEFAULT_HEADROOM

GiB = 2**30


def _identity(t: torch.Tensor) -> torch.Tensor:
    return t


def _recorder(storages: dict[int, int], known: set[int]) -> Callable[[torch.Tensor], torch.Tensor]:
    """A pack hook that records the storages autograd saves (parameters and inputs excluded)."""

    def pack(t: torch.Tensor) -> torch.Tensor:
        st = t.untyped_storage()
        if st.data_ptr() not in known:
            storages[st.data_ptr()] = st.nbytes()
        return t

    return pack


def measure(cfg: ModelConfig, crop: int, msa_rows: int, fused: bool, steps: int) -> dict[str, Any]:
    """Peaks of ``steps`` training steps (the first excluded from the max) and the saved bytes."""
    dev = torch.device("cuda")
    torch.manual_seed(0)
    model = Trunk(cfg, fused=fused).to(dev)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    rng = np.random.default_rng(0)
    peaks: list[int] = []
    saved = 0
    t0 = time.perf_counter()
    for step in range(steps):
        raw = synthetic_batch(rng, 1, crop, msa_rows=msa_rows)
        batch = {k: raw[k].to(dev, non_blocking=True) for k in MODEL_INPUT_KEYS}
        torch.cuda.synchronize(dev)
        torch.cuda.reset_peak_memory_stats(dev)
        record = step == steps - 1
        storages: dict[int, int] = {}
        known = {t.untyped_storage().data_ptr() for t in [*model.parameters(), *batch.values()]}
        pack = _recorder(storages, known) if record else _identity
        with (
            torch.autograd.graph.saved_tensors_hooks(pack, _identity),
            torch.autocast("cuda", dtype=torch.bfloat16),
        ):
            loss = model.loss(batch)
        if record:
            saved = sum(storages.values())
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), DEFAULT_CLIP_GRAD_NORM)
        opt.step()
        float(loss.item())
        torch.cuda.synchronize(dev)
        peaks.append(int(torch.cuda.max_memory_allocated(dev)))
        del loss, batch, raw
    seconds = time.perf_counter() - t0
    del model, opt
    return {"peaks": peaks, "saved": saved, "seconds": seconds}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--crops", type=int, nargs="+", default=[256, 384, 512, 640, 768],
                    help="crops (tokens) to measure and predict (default 256 384 512 640 768)")  # fmt: skip
    ap.add_argument("--modes", nargs="+", default=["fused", "reference"], choices=["fused", "reference"],
                    help="kernels: the fused Triton ones and/or the torch references (default both)")  # fmt: skip
    ap.add_argument(
        "--msa-rows", type=int, default=256, help="MSA rows of the synthetic batches (default 256)"
    )
    ap.add_argument("--steps", type=int, default=3, help="steps per configuration (the first is excluded)")
    args = ap.parse_args()
    logging.basicConfig(level=logging.WARNING)
    cfg = ModelConfig()
    cuda = torch.cuda.is_available()
    bench = Bench("plan_validate", model_config=cfg.to_dict(), msa_rows=args.msa_rows, steps=args.steps,
                  batch_size=1, precision="bf16 autocast, fp32 weights, AdamW")  # fmt: skip
    total = torch.cuda.mem_get_info()[1] if cuda else None
    if total is not None:
        bench.params["gpu_total_bytes"] = total
    for mode in args.modes:
        fused = mode == "fused"
        for crop in args.crops:
            est = estimate_step(cfg, crop, args.msa_rows, 1, fused=fused)
            row: dict[str, Any] = {
                "crop": crop, "mode": mode, "predicted_GiB": est.peak_bytes / GiB,
                "predicted_saved_GiB": (est.saved_bytes + est.weight_copy_bytes) / GiB,
                "predicted_phase": est.peak_phase,
            }  # fmt: skip
            if cuda:
                try:
                    m = measure(cfg, crop, args.msa_rows, fused, args.steps)
                except torch.OutOfMemoryError:
                    row.update(measured_GiB="OOM", error_pct=None,
                               predicted_exceeds_gpu=bool(total is not None and est.peak_bytes > total * (1 - DEFAULT_HEADROOM)))  # fmt: skip
                else:
                    measured = max(m["peaks"][1:] or m["peaks"])
                    row.update(
                        measured_GiB=measured / GiB,
                        error_pct=100.0 * (est.peak_bytes - measured) / measured,
                        measured_saved_GiB=m["saved"] / GiB,
                        saved_error_pct=(100.0 * (est.saved_bytes + est.weight_copy_bytes - m["saved"]) / m["saved"]
                                         if m["saved"] else None),
                        first_step_GiB=m["peaks"][0] / GiB,
                        seconds=round(m["seconds"], 2),
                    )  # fmt: skip
                gc.collect()
                torch.cuda.empty_cache()
            bench.add(**row)
    if not cuda:
        sys.stdout.write(f"CUDA is absent: predictions only, nothing measured or written.\n{bench.table()}\n")
        return
    errors = [abs(r["error_pct"]) for r in bench.rows if isinstance(r.get("error_pct"), float)]
    bench.params["max_abs_error_pct"] = max(errors) if errors else None
    bench.finish()


if __name__ == "__main__":
    main()
