# ruff: noqa: B023, B905  (scratch A/B script: closures run inside their loop iteration)
"""Run 11 (session 4): the dk/dv kernel reading a transposed copy of the bias
(``AttentionConfig.dkv_bias_copy``) against the strided [key, query] read, same run, interleaved.

    PYTHONPATH=. python3 benchmarks/dev/ab11.py OUT.json
"""

from __future__ import annotations

import dataclasses
import json
import sys
from typing import Any

import torch

from benchmarks.dev.abkit import backward_at
from benchmarks.dev.devcli import help_exit
from benchmarks.kernels import attention_inputs, ms, rel
from featurecache.model.kernels import pair_bias_attention as pba

KC = pba.KernelConfig
DKV = [KC(64, 64, 4, 3, 2), KC(32, 64, 4, 3, 2), KC(64, 128, 8, 3, 1), KC(64, 64, 4, 2, 2), KC(32, 128, 8, 3, 1),
       KC(64, 64, 8, 3, 2)]  # fmt: skip


def main() -> None:
    rows: list[dict[str, Any]] = []
    base, a = backward_at()  # its dk, dv: bitwise equal with and without the bias copy (run 11)
    scale = a.scale
    ref_dk, ref_dv = a.dk.clone(), a.dv.clone()
    for rep in range(2):
        for c in DKV:
            for copy in (False, True) if c == DKV[0] else (True,):
                row: dict[str, Any] = {"what": "dkv", "config": str(c), "bias_copy": copy, "rep": rep}
                try:
                    a.dk.fill_(float("nan"))
                    pba.launch_dkv(a, c, copy)
                    row["diff"] = max(rel(a.dk, ref_dk), rel(a.dv, ref_dv))
                    row["ms"] = ms(lambda: pba.launch_dkv(a, c, copy))
                except Exception as exc:
                    row["error"] = f"{type(exc).__name__}: {str(exc)[:200]}"
                rows.append(row)
                print(row, flush=True)
    for n in (256, 384, 512, 768, 1024):
        t = attention_inputs(n, 4, 32, seed=n)
        xs = [t[kk] for kk in ("q", "k", "v", "bias")]
        cfgs = {"copy": dataclasses.replace(base, dkv_bias_copy=True),
                "strided": dataclasses.replace(base, dkv_bias_copy=False)}  # fmt: skip
        res = {}
        for rep in range(2):
            for name, cfg in cfgs.items():

                def run() -> Any:
                    o, l_ = pba.pair_bias_attention_forward(*xs, None, scale, cfg)
                    return pba.pair_bias_attention_backward(t["do"], *xs, None, o, l_, scale, cfg)

                if rep == 0:
                    res[name] = run()
                row = {"what": "total", "N": n, "variant": name, "rep": rep, "ms": ms(run)}
                if rep == 0 and name == "strided":
                    row["bitwise_equal_to_copy"] = all(
                        torch.equal(x, y) for x, y in zip(res["copy"], res["strided"])
                    )
                rows.append(row)
                print(row, flush=True)
        torch.cuda.empty_cache()
    with open(sys.argv[1], "w") as f:
        json.dump({"torch": torch.__version__, "rows": rows}, f, indent=1)
    print("\n== summary")
    for r in rows:
        print({kk: (round(vv, 3) if isinstance(vv, float) else vv) for kk, vv in r.items()})


if __name__ == "__main__":
    help_exit(__doc__)
    main()
