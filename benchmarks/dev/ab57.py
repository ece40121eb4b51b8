"""A/B (session 12): the attention forward without a running max.

The forward's loop spends ~2 of its 9.6 instructions per score on the online softmax's running
max (FMNMX, the rescaling of acc and l) and 1 on the row sum. ``AttentionConfig.fwd_max_bound``
shifts the scores by a per-row upper bound computed before the loop instead (Cauchy–Schwarz:
qk_scale·‖q_i‖·max_j‖k_j‖ + max_j bias_ij; exp2 cannot overflow, and a block whose row sums show
an overshoot > 2^64 is redone with the running max); ``fwd_rowsum_mma`` also takes the row sums
from a tensor-core product of the bf16 P with ones. SASS loop bodies (``sass.py 768 --only fwd
[--max-bound|--rowsum-mma] --fwd TILES``), instructions per score: shipped tiles 9.6 → 7.8 → 7.2
(with more spills); 128×64/8 warps 9.9 → 8.0 → 6.9; 128×128/8 warps 8.7 → 7.3 → 6.3.

Parts: forward-only A/B over modes × tiles (``abkit.forward_ab``); the forced fallback (q × 30:
every block redone); the bound statistics alone; the trunk's layout (gated views of one
projection, padding masks); fwd+bwd totals for the candidates (``abkit.totals``).

    PYTHONPATH=. python3 benchmarks/dev/ab57.py OUT_DIR

Refuted (run 57, ``kernels_ab_run57_*.json``) and reverted (a678621): the kernel and ``sass.py``
flags are in commit fd881be (``git show fd881be:featurecache/model/kernels/pair_bias_attention.py``).

Historical: ran against fd881be (run 57); to re-run: ``git worktree add /tmp/fc-fd881be fd881be``
and run it there (on this tree it exits 2 at once: no ``AttentionConfig.fwd_max_bound``).
"""

from __future__ import annotations

import dataclasses
import functools
import json
import statistics
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from benchmarks.dev.ab51 import time_ms
from benchmarks.dev.abkit import forward_ab, totals
from benchmarks.dev.devcli import help_exit, ran_elsewhere
from featurecache.model.kernels import pair_bias_attention as pba

RAN_AGAINST = "fd881bea7b87588bb0939353a8486927f43e961b"
BF16 = torch.bfloat16
TILES = [(128, 64, 4, 3, 2), (128, 64, 8, 3, 2), (64, 64, 4, 3, 2), (128, 32, 4, 3, 2), (128, 128, 8, 3, 2),
         (64, 128, 4, 3, 2), (128, 64, 8, 2, 2)]  # fmt: skip
MODES = {"online": {}, "bound": {"fwd_max_bound": True},
         "rowsum": {"fwd_max_bound": True, "fwd_rowsum_mma": True}}  # fmt: skip


def config(mode: str, tiles: tuple[int, ...]) -> pba.AttentionConfig:
    base = pba.default_config(32, BF16, torch.device("cuda"))
    return dataclasses.replace(base, fwd=pba.KernelConfig(*tiles), **MODES[mode])


def main() -> None:
    if "fwd_max_bound" not in {f.name for f in dataclasses.fields(pba.AttentionConfig)}:
        ran_elsewhere(
            RAN_AGAINST, "run 57", "this tree's AttentionConfig has no fwd_max_bound (reverted in a678621)"
        )
    out = Path(sys.argv[1])
    out.mkdir(parents=True, exist_ok=True)
    variants = [(m, *t) for t in TILES for m in MODES if not (m == "online" and t == TILES[0])]

    def run_variant(q, k, v, bias, scale, var):  # type: ignore[no-untyped-def]
        return pba.pair_bias_attention_forward(q, k, v, bias, None, scale, config(var[0], var[1:]))

    fwd = forward_ab(variants, run_variant, str(out / "ab57_fwd.json"))
    doc: dict = {"gpu": torch.cuda.get_device_name(), "torch": torch.__version__, "rows": []}

    # forced fallback, bound statistics alone, the trunk layout: N = 768
    n, h, d = 768, 4, 32
    g = torch.Generator(device="cuda").manual_seed(5)
    q, k, v = (torch.randn(1, n, h, n, d, device="cuda", generator=g, dtype=BF16) for _ in range(3))
    bias = torch.randn(1, h, n, n, device="cuda", generator=g, dtype=BF16)
    q30 = q * 30
    for mode in MODES:
        cfg = config(mode, TILES[0])
        for tag, qq in (("normal", q), ("q*30 (fallback)", q30)):
            fn = functools.partial(pba.pair_bias_attention_forward, qq, k, v, bias, None, d**-0.5, cfg)
            o, lse = fn()
            ms = statistics.median(time_ms(fn, reps=30))
            ref_o, ref_l = pba.pair_bias_attention_forward(
                qq, k, v, bias, None, d**-0.5, config("online", TILES[0])
            )
            row = {"part": "fallback", "mode": mode, "input": tag, "ms": ms,
                   "max_diff_vs_online": (o.float() - ref_o.float()).abs().max().item(),
                   "lse_diff_vs_online": (lse - ref_l).abs().max().item()}  # fmt: skip
            doc["rows"].append(row)
            print(row, flush=True)
    stats = lambda: pba.score_bound_stats(k, bias)  # noqa: E731
    doc["rows"].append({"part": "stats", "ms": statistics.median(time_ms(stats, reps=50))})
    print(doc["rows"][-1], flush=True)

    hd = h * d
    p = torch.randn(1, n, n, 4 * hd + 16, device="cuda", generator=g).to(BF16)
    tm = (torch.arange(n, device="cuda") < n - 5)[None]

    def heads(i: int) -> torch.Tensor:
        return p[..., i * hd : (i + 1) * hd].unflatten(-1, (h, d)).permute(0, 1, 3, 2, 4)

    tq, tk, tv, tg = heads(0), heads(1), heads(2), heads(3)
    tb = p[..., 4 * hd : 4 * hd + h].permute(0, 3, 1, 2)
    for rep in range(2):
        for mode in MODES:
            for tiles in TILES[:3]:
                cfg = config(mode, tiles)
                fn = functools.partial(
                    pba.pair_bias_attention_forward, tq, tk, tv, tb, None, d**-0.5, cfg, tm, tm, gate=tg
                )
                row = {"part": "trunk layout", "mode": mode, "tiles": tiles, "rep": rep,
                       "ms": statistics.median(time_ms(fn, reps=30))}  # fmt: skip
                doc["rows"].append(row)
                print(row, flush=True)
    (out / "ab57_misc.json").write_text(json.dumps(doc, indent=1))

    # fwd+bwd totals: shipped vs the two fastest bound/rowsum forwards at N = 768
    at768 = next(r for r in fwd["rows"] if r["n"] == 768)
    ok = [e for e in at768["variants"] if "ms" in e and e["variant"][0] != "online"]
    best = sorted(ok, key=lambda e: e["ms"])[:2]
    cfgs = {"shipped": pba.default_config(32, BF16, torch.device("cuda"))}
    for e in best:
        cfgs["/".join(map(str, e["variant"]))] = config(e["variant"][0], tuple(e["variant"][1:]))
    rows: list = []
    totals(cfgs, rows, ns=(384, 768, 1024))
    (out / "ab57_totals.json").write_text(json.dumps({"rows": rows}, indent=1))


if __name__ == "__main__":
    help_exit(__doc__)
    main()
