"""End-to-end training on the GPU: fused Triton kernels vs the torch references.

1. ``--steps`` steps of ``run_training`` at ``--crop`` for each variant, over the data source
   (``--store`` / ``--url``; synthetic batches without either): median step time, peak memory,
   data-wait fraction (each variant's JSON log is written next to the results).
2. Largest crop that fits, per variant: increasing crops (``--search-crops``), ``--search-steps``
   steps each on full synthetic batches (exactly ``crop`` tokens, so the numbers are per token
   count), until the first out-of-memory. The peak memory of every crop tried is recorded with
   the model config: the memory planner's calibration data.

    python benchmarks/train_e2e.py --store STORE [--steps 50] [--crop 384] \\
        [--search-crops 256,384,512,640,768,896,1024] [--model-config model.json] [--out DIR]
"""

from __future__ import annotations

import argparse
import gc
import json
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.harness import RESULTS_DIR, Bench, store_argument

if TYPE_CHECKING:
    from featurecache.model.config import ModelConfig

# torch and the model are imported where they are used, after the arguments are parsed: ``--help``
# and usage errors (a --store that is not a store) answer without them

VARIANTS = (("fused", True), ("reference", False))


def _free() -> None:
    import torch

    gc.collect()
    torch.cuda.empty_cache()


def train_variant(
    args: argparse.Namespace,
    cfg: ModelConfig,
    fused: bool,
    log_path: Path,
    pad_multiple: int | None,
    compile: bool = False,
    cuda_graphs: bool = False,
    prefetch: bool = True,
) -> dict[str, Any]:
    import torch

    from featurecache.model.train import run_training

    try:
        doc = run_training(
            args.store, args.url, steps=args.steps, crop_size=args.crop, device="cuda", batch_size=args.batch_size,
            fused=fused, log_path=log_path, seed=args.seed, workers=args.workers, config=cfg,
            pad_multiple=pad_multiple, compile=compile, cuda_graphs=cuda_graphs, prefetch=prefetch,
        )  # fmt: skip
        return {"ok": True, "source": doc["source"], "pad_multiple": doc["pad_multiple"], "compiled": compile,
                "cuda_graphs": cuda_graphs, "prefetch": prefetch, **doc["summary"]}  # fmt: skip
    except torch.cuda.OutOfMemoryError as exc:
        return {"ok": False, "error": f"OOM: {str(exc)[:200]}"}
    finally:
        _free()


def memory_at_crop(cfg: ModelConfig, fused: bool, crop: int, steps: int, batch_size: int) -> dict[str, Any]:
    import torch

    from featurecache.model.batches import synthetic_batches
    from featurecache.model.train import run_training

    row: dict[str, Any] = {"fused": fused, "crop": crop, "batch_size": batch_size}
    try:
        doc = run_training(
            None, None, steps=steps, crop_size=crop, device="cuda", batch_size=batch_size, fused=fused,
            log_path=None, config=cfg, batches=synthetic_batches(batch_size, crop, seed=crop, full=True),
        )  # fmt: skip
        s = doc["summary"]
        row.update(ok=True, tokens=doc["steps"][-1]["tokens"], peak_mem_bytes=s["peak_mem_bytes"],
                   median_step_time_s=s["median_step_time_s"])  # fmt: skip
    except torch.cuda.OutOfMemoryError:
        row.update(ok=False, peak_mem_bytes=None)
    finally:
        _free()
    return row


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--store", type=store_argument, default=None,
                    help="an existing store (default: --url, or synthetic batches without either)")  # fmt: skip
    ap.add_argument("--url", default=None, help="a lookup service to train from instead of --store")
    ap.add_argument("--steps", type=int, default=50, help="training steps per variant (default 50)")
    ap.add_argument(
        "--crop", type=int, default=384, help="crop size in tokens of the training runs (default 384)"
    )
    ap.add_argument("--batch-size", type=int, default=1, help="samples per step (default 1)")
    ap.add_argument("--workers", type=int, default=4, help="client workers feeding the runs (default 4)")
    ap.add_argument("--seed", type=int, default=0, help="seed of the sampler, crops and model (default 0)")
    ap.add_argument("--search-crops", default="256,384,512,640,768,896,1024",
                    help="comma list of crops whose peak memory is measured (default 256,...,1024)")  # fmt: skip
    ap.add_argument(
        "--search-steps", type=int, default=3, help="steps per crop of the memory search (default 3)"
    )
    ap.add_argument("--model-config", type=Path, default=None, metavar="FILE",
                    help="model config JSON (default: ModelConfig())")  # fmt: skip
    ap.add_argument("--skip-train", action="store_true", help="only the crop search")
    ap.add_argument(
        "--pad-multiple", type=int, default=None, help="token-axis padding (default: run_training's)"
    )
    ap.add_argument("--compare-padding", action="store_true",
                    help="also train the fused model without token padding (pad multiple 1), same run")  # fmt: skip
    ap.add_argument("--compare-compile", action="store_true",
                    help="also train the fused model under torch.compile (train --compile), same run")  # fmt: skip
    ap.add_argument("--compare-graphs", action="store_true",
                    help="also train the fused model with CUDA-graph steps (train --cuda-graphs), eager and "
                    "compiled, same run")  # fmt: skip
    ap.add_argument("--compare-prefetch", action="store_true",
                    help="also train the fused model without the next batch's prefetch (eager, and with CUDA "
                    "graphs under --compare-graphs), same run")  # fmt: skip
    ap.add_argument("--out", type=Path, default=RESULTS_DIR, metavar="DIR",
                    help="folder for train_e2e.json, train_e2e_memory.json and the training logs "
                    "(default benchmarks/results)")  # fmt: skip
    args = ap.parse_args()
    import torch

    from featurecache.model.config import ModelConfig
    from featurecache.model.train import run_training  # noqa: F401 (imported before anything is timed)

    if not torch.cuda.is_available():
        raise SystemExit("benchmarks/train_e2e.py needs a CUDA GPU")
    cfg = ModelConfig.from_json(args.model_config) if args.model_config else ModelConfig()
    args.out.mkdir(parents=True, exist_ok=True)
    t0 = time.time()
    bench = Bench("train_e2e", crop=args.crop, steps=args.steps, batch_size=args.batch_size,
                  source=str(args.store or args.url or "synthetic"), model_config=cfg.to_dict())  # fmt: skip

    runs: dict[str, Any] = {}
    if not args.skip_train:
        # (name, fused, pad multiple, compiled, CUDA graphs, prefetch)
        train_runs = [(name, fused, args.pad_multiple, False, False, True) for name, fused in VARIANTS]
        if args.compare_prefetch:
            train_runs.append(("fused_no_prefetch", True, args.pad_multiple, False, False, False))
        if args.compare_padding:
            train_runs.append(("fused_unpadded", True, 1, False, False, True))
        if args.compare_compile:
            train_runs.append(("fused_compiled", True, args.pad_multiple, True, False, True))
        if args.compare_graphs:
            if args.compare_prefetch:
                train_runs.append(("fused_graphs_no_prefetch", True, args.pad_multiple, False, True, False))
            train_runs.append(("fused_graphs", True, args.pad_multiple, False, True, True))
            train_runs.append(("fused_compiled_graphs", True, args.pad_multiple, True, True, True))
        for name, fused, pad, comp, graphs, prefetch in train_runs:
            r = train_variant(args, cfg, fused, args.out / f"train_{name}.json", pad, comp, graphs, prefetch)
            runs[name] = r
            bench.add(part="train", variant=name, crop=args.crop, ok=r["ok"], pad=r.get("pad_multiple"),
                      median_step_s=r.get("median_step_time_s"), peak_GiB=(r.get("peak_mem_bytes") or 0) / 2**30,
                      data_wait_frac=r.get("data_wait_fraction"), loader_wait_frac=r.get("loader_wait_fraction"),
                      tokens_per_s=r.get("tokens_per_s"),
                      median_tokens_per_s=r.get("median_tokens_per_s"), slow_steps=len(r.get("slow_steps") or []),
                      first_loss=r.get("first_loss"), last_loss=r.get("last_loss"))  # fmt: skip
            print(name, r, flush=True)

    memory: list[dict[str, Any]] = []
    largest: dict[str, int | None] = {}
    for name, fused in VARIANTS:
        largest[name] = None
        for crop in (int(c) for c in args.search_crops.split(",")):
            row = memory_at_crop(cfg, fused, crop, args.search_steps, args.batch_size)
            row["variant"] = name
            memory.append(row)
            bench.add(part="memory", variant=name, crop=crop, ok=row["ok"],
                      peak_GiB=(row["peak_mem_bytes"] or 0) / 2**30, median_step_s=row.get("median_step_time_s"))  # fmt: skip
            print(row, flush=True)
            if not row["ok"]:
                break
            largest[name] = crop
    doc = {"model_config": cfg.to_dict(), "gpu": torch.cuda.get_device_name(0),
           "gpu_memory_bytes": torch.cuda.get_device_properties(0).total_memory, "torch": torch.__version__,
           "train": runs, "memory_per_crop": memory, "largest_crop": largest, "seconds": time.time() - t0}  # fmt: skip
    (args.out / "train_e2e_memory.json").write_text(json.dumps(doc, indent=2, default=str))
    bench.params["largest_crop"] = largest
    bench.finish(args.out / "train_e2e.json")


if __name__ == "__main__":
    main()
