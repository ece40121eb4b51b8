"""A/B (session 11): what the gate costs in the attention forward's epilogue.

Run 51 (ab51.py): with the gate, the forward kernel took 1.49 ms at N = 768 instead of 1.28
(+16 %), although the epilogue adds only ~7 % instructions. Variants of the epilogue, made by text
substitution from this tree's ``pair_bias_attention.py`` into module copies (each compiles its
own kernels), all run through ``pair_bias_attention_forward`` with the trunk's layout (q, k, v,
gate as views of one [1, N, N, 528] projection, padding masks):

* ``ungated``: gate=None (the kernel compiled without the epilogue)
* ``sigmoid``: out · tl.sigmoid(g) (IEEE division)
* ``exp2-fdiv``: out / (1 + exp2(−g·log2 e)) with an approximate division (this tree)
* ``load-only``: out · g (the gate's load, no math): what the load alone costs
* ``rcp-row``: the normalisation by a per-row reciprocal (acc · (1/l)) instead of a division per
  element, and the gate as in exp2-fdiv

    PYTHONPATH=. python3 benchmarks/dev/ab52.py OUT.json [--n 384,768]
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import statistics
import sys
import tempfile
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from benchmarks.dev.ab51 import time_ms

SRC = Path(__file__).resolve().parents[2] / "featurecache/model/kernels/pair_bias_attention.py"
GATE_LINE = (
    "        out = tl.fdiv(out, 1.0 + tl.math.exp2(g.to(tl.float32) * -_LOG2E), ieee_rounding=False)\n"
)
NORM_LINE = "    out = tl.where(empty[:, None], 0.0, acc / tl.where(empty, 1.0, l_i)[:, None])\n"
VARIANTS = {
    "sigmoid": [(GATE_LINE, "        out = out * tl.sigmoid(g.to(tl.float32))\n")],
    "exp2-fdiv": [],
    "load-only": [(GATE_LINE, "        out = out * g.to(tl.float32)\n")],
    "rcp-row": [
        (
            NORM_LINE,
            "    out = tl.where(empty[:, None], 0.0, acc * (1.0 / tl.where(empty, 1.0, l_i))[:, None])\n",
        )
    ],
}


def load_variant(name: str, subs: list[tuple[str, str]], tmp: Path):  # type: ignore[no-untyped-def]
    text = SRC.read_text()
    for old, new in subs:
        assert text.count(old) == 1, (name, old)
        text = text.replace(old, new)
    path = tmp / f"pba_{name.replace('-', '_')}.py"
    path.write_text(text)
    spec = importlib.util.spec_from_file_location(path.stem, path)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    sys.modules[path.stem] = mod
    spec.loader.exec_module(mod)
    return mod


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--n", default="384,768")
    args = ap.parse_args()
    tmp = Path(tempfile.mkdtemp())
    mods = {name: load_variant(name, subs, tmp) for name, subs in VARIANTS.items()}
    doc: dict = {"gpu": torch.cuda.get_device_name(), "torch": torch.__version__, "rows": []}
    for n in (int(x) for x in args.n.split(",")):
        run_n(n, mods, doc)
        Path(args.out).write_text(json.dumps(doc, indent=1))


def run_n(n: int, mods: dict, doc: dict) -> None:
    h, d = 4, 32
    hd = h * d
    g = torch.Generator(device="cuda").manual_seed(n)
    p = torch.randn(1, n, n, 4 * hd + 16, device="cuda", generator=g).to(torch.bfloat16)
    tm = (torch.arange(n, device="cuda") < n - 5)[None]

    def heads(i: int) -> torch.Tensor:
        return p[..., i * hd : (i + 1) * hd].unflatten(-1, (h, d)).permute(0, 1, 3, 2, 4)

    q, k, v, gate = heads(0), heads(1), heads(2), heads(3)
    bias = p[..., 4 * hd : 4 * hd + h].permute(0, 3, 1, 2).contiguous()

    def call(m, gated: bool):  # type: ignore[no-untyped-def]
        return lambda: m.pair_bias_attention_forward(
            q, k, v, bias, None, d**-0.5, None, tm, tm, gate=gate if gated else None
        )

    calls = {"ungated": call(mods["exp2-fdiv"], False)}
    calls.update({name: call(m, True) for name, m in mods.items()})
    ref = calls["sigmoid"]()[0].float()
    for name, fn in calls.items():
        if name != "ungated":
            err = float((fn()[0].float() - ref).norm() / ref.norm())
            print(f"N={n} {name}: rel diff vs sigmoid {err:.2e}")
    torch.cuda.synchronize()
    for rep in range(3):
        for name, fn in calls.items():
            ms = statistics.median(time_ms(fn, reps=40))
            doc["rows"].append({"n": n, "variant": name, "rep": rep, "fwd_ms": ms})
            print(f"N={n} {name:10} rep {rep}: {ms:.3f} ms", flush=True)


if __name__ == "__main__":
    main()
