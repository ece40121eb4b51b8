"""Run 27 (session 7): natural-unit scores in the forward and dk/dv kernels with the bias tile
converted to fp32 once for both S rows (no ·log2 e multiply per bias element; exp2's argument is
one FMA): SASS loop bodies 1235 → 1187 (fwd) and 412 → 396 (dk/dv) instructions. Same run,
interleaved: the base module (``benchmarks/dev/pba_base.py`` = ``git show
307622c:featurecache/model/kernels/pair_bias_attention.py``; generate it before running, and carry
it to the device: it is not committed) vs the working tree's, per kernel and fwd+bwd over N. Run 27
ran both changes; only dk/dv's was kept (the forward was slower), so a re-run now measures that.

Historical: ran against 6e63982 (run 27, whose tree also had the natural-unit forward); to re-run:
``git worktree add /tmp/fc-6e63982 6e63982``, make ``benchmarks/dev/pba_base.py`` there as said
above, and run it there (without that file it exits 2 at once, saying so).

    PYTHONPATH=. python3 benchmarks/dev/ab27.py OUT.json
"""

from __future__ import annotations

import json
import sys
from typing import Any

import torch

from benchmarks.dev.devcli import help_exit, ran_elsewhere
from benchmarks.kernels import BF16, attention_inputs, ms, rel
from featurecache.model.kernels import pair_bias_attention as pba

try:
    from benchmarks.dev import pba_base  # not committed: made as said above
except ImportError:
    pba_base = None

RAN_AGAINST = "6e63982505deabae654264836b98009d4bd2d511"


def kernels(mod: Any, t: dict[str, Any]) -> dict[str, Any]:
    q, k, v, bias, do = t["q"], t["k"], t["v"], t["bias"], t["do"]
    scale = q.shape[-1] ** -0.5
    cfg = mod.default_config(q.shape[-1], BF16, q.device)
    out, lse = mod.pair_bias_attention_forward(q, k, v, bias, None, scale, cfg)
    a = mod.prepare_backward(do, q, k, v, bias, None, out, lse, scale)
    mod.launch_dq(a, cfg.dq)
    mod.launch_dkv(a, cfg.dkv, cfg.dkv_bias_copy)
    return {
        "fwd": lambda: mod.pair_bias_attention_forward(q, k, v, bias, None, scale, cfg),
        "dq": lambda: mod.launch_dq(a, cfg.dq),
        "dkv": lambda: mod.launch_dkv(a, cfg.dkv, cfg.dkv_bias_copy),
        "dbias": lambda: mod.launch_dbias(a, cfg.dbias, cfg.dbias_target_programs),
        "total": lambda: (o := mod.pair_bias_attention_forward(q, k, v, bias, None, scale, cfg),
                          mod.pair_bias_attention_backward(do, q, k, v, bias, None, o[0], o[1], scale, cfg)),
        "outputs": (out, lse, a),
    }  # fmt: skip


def main() -> None:
    if pba_base is None:
        ran_elsewhere(RAN_AGAINST, "run 27", "benchmarks/dev/pba_base.py is missing", "after making it there "
                      "(git show 307622c:featurecache/model/kernels/pair_bias_attention.py > benchmarks/dev/pba_base.py)")  # fmt: skip
    rows: list[dict[str, Any]] = []
    for n in (384, 768, 1024):
        t = attention_inputs(n, 4, 32, seed=n)
        mods = {"base": kernels(pba_base, t), "natural": kernels(pba, t)}
        (ob, lb, ab), (on, ln, an) = mods["base"]["outputs"], mods["natural"]["outputs"]
        tb = mods["base"]["total"]()
        tn = mods["natural"]["total"]()
        check = {"what": "check", "N": n, "out": rel(on, ob), "lse_max_abs": (ln - lb).abs().max().item(),
                 "dq": rel(an.dq, ab.dq), "dk": rel(an.dk, ab.dk), "dv": rel(an.dv, ab.dv),
                 "dbias": rel(tn[1][3], tb[1][3])}  # fmt: skip
        rows.append(check)
        print(check, flush=True)
        for rep in range(3):
            for kern in ("fwd", "dq", "dkv", "dbias", "total"):
                for name, ks in mods.items():
                    row = {"what": kern, "N": n, "variant": name, "rep": rep, "ms": ms(ks[kern])}
                    rows.append(row)
                    print(row, flush=True)
        del mods
        torch.cuda.empty_cache()
    with open(sys.argv[1], "w") as f:
        json.dump({"torch": torch.__version__, "rows": rows}, f, indent=1)


if __name__ == "__main__":
    help_exit(__doc__)
    main()
