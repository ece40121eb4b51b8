"""Where a training step's time goes (session 10): the fused trunk's step at a few crops under
``torch.profiler``, on one fixed synthetic batch already on the GPU (no data wait).

Variants: ``new`` (this tree's trunk and optimizer), ``new-foreach`` (the same with the foreach
AdamW instead of the fused one) and ``prev`` (the trunk of commit 49f942b, before the triangle
attention became one op over its projection, with the foreach AdamW). ``prev`` needs
``git show 49f942b:featurecache/model/trunk.py > benchmarks/dev/trunk_prev.py``. (Run 46's
``prev``/``prev-copy`` variants were a0d48e9's trunk; see KERNEL_NOTES.md.)

Per crop: the median wall time of a synchronised step; the same steps issued back to back with
one synchronisation at the end (if that is no faster, the step is GPU-bound, else host-bound);
the profiler's GPU time per step split into our Triton kernels, library GEMMs, elementwise /
reduction / copy kernels and the optimizer; and the 25 kernels with the most GPU time.

Session 12: ``base`` is ``benchmarks/dev/trunk_base.py`` (any trunk, e.g. ``git show
COMMIT:featurecache/model/trunk.py``) with this tree's optimizer, for same-run A/Bs of trunk changes
(run 64: bfc8ca6's trunk, before ``TableLookup``). ``--graphs`` also profiles the ``new`` trunk's step replayed as a CUDA graph
(``train.GraphedSteps``), eagerly and (with ``--compile``) compiled.

    PYTHONPATH=. python3 benchmarks/dev/step_profile.py OUT.json [--crops 384,768] [--reference] [--compile]
        [--graphs]
"""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import json
import statistics
import sys
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from featurecache.model.batches import pad_tokens, synthetic_batches
from featurecache.model.train import GraphedSteps, make_optimizer, train_step
from featurecache.model.trunk import Trunk

# variant -> (the module it needs, not committed: how to make it)
GENERATED = {
    "prev": ("trunk_prev", "git show 49f942b:featurecache/model/trunk.py > benchmarks/dev/trunk_prev.py"),
    "base": (
        "trunk_base",
        "git show COMMIT:featurecache/model/trunk.py > benchmarks/dev/trunk_base.py (any trunk)",
    ),
}
CATEGORIES = (
    ("triton: attention", ("_fwd_kernel", "_dq_kernel", "_dkv_kernel", "_dbias_kernel", "pair_bias")),
    ("triton: transition / LN-linear", ("_bwd_kernel", "_dx_kernel", "_dw_kernel", "swiglu", "layernorm")),
    ("GEMM (cuBLAS)", ("gemm", "sm90_xmma", "cutlass", "nvjet", "gemv", "splitK")),
    ("optimizer", ("multi_tensor", "foreach", "adam")),
    ("copy / layout", ("copy", "transpose", "cat", "permute", "contiguous")),
    ("reduction", ("reduce", "sum", "norm", "softmax", "cross_entropy", "nll")),
    ("elementwise", ("elementwise", "vectorized", "unrolled", "fill", "where", "sigmoid", "index")),
)


def category(name: str) -> str:
    low = name.lower()
    for cat, keys in CATEGORIES:
        if any(k.lower() in low for k in keys):
            return cat
    return "other"


def make_step(model: Trunk, opt: torch.optim.Optimizer, batch: dict[str, torch.Tensor], compiled: bool,
              graphs: bool = False):  # type: ignore[no-untyped-def]  # fmt: skip
    loss_fn = torch.compile(model.loss) if compiled else model.loss
    if graphs:
        graphed = GraphedSteps(model, opt, loss_fn)
        return lambda: graphed(batch)
    return lambda: train_step(model, opt, loss_fn, batch)


def profile_crop(
    crop: int, fused: bool, compiled: bool = False, reps: int = 10, variant: str = "new", graphs: bool = False
) -> dict[str, Any]:
    torch.manual_seed(0)
    trunk_cls = Trunk
    if variant in GENERATED:  # prev: 49f942b's trunk; base: the fused optimizer with another trunk
        trunk_cls = importlib.import_module(f"benchmarks.dev.{GENERATED[variant][0]}").Trunk
    elif variant not in ("new", "new-foreach"):
        raise ValueError(f"unknown variant {variant}")
    return _profile(trunk_cls, crop, fused, compiled, reps, variant, graphs)


def _profile(
    trunk_cls: type, crop: int, fused: bool, compiled: bool, reps: int, variant: str, graphs: bool = False
) -> dict[str, Any]:
    model = trunk_cls(fused=fused).cuda()
    if variant in ("new", "base"):
        opt = make_optimizer(model, 1e-4, capturable=graphs)
    else:
        opt = torch.optim.AdamW(model.parameters(), lr=1e-4, foreach=True)
    raw = next(synthetic_batches(1, crop, seed=1, full=True))
    batch = pad_tokens({k: v.cuda() for k, v in raw.items() if isinstance(v, torch.Tensor)}, 128, cap=crop)
    step = make_step(model, opt, batch, compiled, graphs)
    t0 = time.perf_counter()
    for _ in range(3):
        step()
    torch.cuda.synchronize()
    warm_s = time.perf_counter() - t0
    torch.cuda.synchronize()
    walls = []
    for _ in range(reps):
        t0 = time.perf_counter()
        step()
        torch.cuda.synchronize()
        walls.append((time.perf_counter() - t0) * 1e3)
    t0 = time.perf_counter()
    for _ in range(reps):
        step()
    host_issue = (time.perf_counter() - t0) * 1e3 / reps  # host time to issue one step, no sync
    torch.cuda.synchronize()
    back_to_back = (time.perf_counter() - t0) * 1e3 / reps
    from torch.profiler import ProfilerActivity, profile

    prof_steps = 3
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        for _ in range(prof_steps):
            step()
        torch.cuda.synchronize()
    kernels: dict[str, list[float]] = defaultdict(lambda: [0.0, 0])
    for ev in prof.events():
        if ev.device_type == torch.autograd.DeviceType.CUDA:
            k = kernels[ev.name]
            k[0] += ev.device_time_total / 1e3 / prof_steps  # ms per step
            k[1] += 1 / prof_steps
    gpu_ms = sum(v[0] for v in kernels.values())
    cats: dict[str, float] = defaultdict(float)
    for name, (t, _) in kernels.items():
        cats[category(name)] += t
    top = sorted(kernels.items(), key=lambda kv: -kv[1][0])[:25]
    res = {
        "variant": variant, "crop": crop, "fused": fused, "compiled": compiled, "graphs": graphs, "warmup_s": warm_s, "tokens": int(batch["token_mask"].shape[1]),
        "wall_ms_median": statistics.median(walls), "wall_ms_all": walls,
        "host_issue_ms": host_issue, "back_to_back_ms": back_to_back,
        "gpu_kernel_ms_per_step": gpu_ms, "kernel_launches_per_step": sum(v[1] for v in kernels.values()),
        "categories_ms": dict(sorted(cats.items(), key=lambda kv: -kv[1])),
        "top_kernels": [{"name": n[:160], "ms": t, "calls": c} for n, (t, c) in top],
        "peak_gib": torch.cuda.max_memory_allocated() / 2**30,
    }  # fmt: skip
    print(f"\n{variant}: crop {crop} fused={fused} compiled={compiled} graphs={graphs} (warm-up {warm_s:.1f} s): wall {res['wall_ms_median']:.1f} ms, back-to-back {back_to_back:.1f}, "
          f"host issue {host_issue:.1f}, GPU kernels {gpu_ms:.1f} ms in {res['kernel_launches_per_step']:.0f} launches")  # fmt: skip
    for cat, t in res["categories_ms"].items():
        print(f"   {cat:32} {t:8.2f} ms")
    for e in res["top_kernels"]:
        print(f"   {e['ms']:7.2f} ms {e['calls']:5.0f}x  {e['name'][:110]}")
    del model, opt, step
    torch.cuda.empty_cache()
    torch.cuda.reset_peak_memory_stats()
    return res


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--crops", default="384,768")
    ap.add_argument("--reference", action="store_true", help="also profile the torch-reference trunk")
    ap.add_argument("--compile", action="store_true", help="also the fused trunk's loss under torch.compile")
    ap.add_argument("--graphs", action="store_true", help="also the new trunk's step as a CUDA-graph replay")
    ap.add_argument("--variants", default="new", help="comma-separated: new, new-foreach, prev, base")
    args = ap.parse_args()
    for var in args.variants.split(","):
        if var not in ("new", "new-foreach", *GENERATED):
            ap.error(f"--variants: unknown variant {var!r} (new, new-foreach, prev, base)")
        if var in GENERATED and importlib.util.find_spec(f"benchmarks.dev.{GENERATED[var][0]}") is None:
            ap.error(
                f"--variants {var} needs benchmarks/dev/{GENERATED[var][0]}.py, not committed: {GENERATED[var][1]}"
            )
    rows: list[dict[str, Any]] = []
    doc = {"torch": torch.__version__, "gpu": torch.cuda.get_device_name(), "rows": rows}

    def attempt(crop: int, **kw: Any) -> None:
        try:
            rows.append(profile_crop(crop, **kw))
        except Exception as exc:  # a failed compile or an out-of-memory is a result
            print(f"crop {crop} {kw}: {type(exc).__name__}: {str(exc)[:500]}")
            rows.append({"crop": crop, **kw, "error": f"{type(exc).__name__}: {str(exc)[:2000]}"})
            torch.cuda.empty_cache()
        Path(args.out).write_text(json.dumps(doc, indent=1))

    for crop in (int(c) for c in args.crops.split(",")):
        for var in args.variants.split(","):
            attempt(crop, fused=True, variant=var)
        if args.compile:
            for var in args.variants.split(","):
                attempt(crop, fused=True, compiled=True, variant=var)
        if args.graphs:
            attempt(crop, fused=True, graphs=True)
            if args.compile:
                attempt(crop, fused=True, compiled=True, graphs=True)
        if args.reference:
            attempt(crop, fused=False)


if __name__ == "__main__":
    main()
