"""Compile the attention and transition kernels for sm_90 on a machine without a GPU and count SASS per loop.

Mirrors the JIT's specialisation for one problem (ints == 1 become constants, ints divisible by
16 and all pointers get divisibility 16), so register counts, spills and instruction mixes match
what the H200 runs; prints ptxas's performance warnings (C75xx: serialized wgmma) too.

    python benchmarks/dev/sass.py [N] [--dump DIR] [--only dq,dkv,tdx] [--dkv BLOCK_M,BLOCK_N,WARPS,STAGES,SP]
        [--no-fast-sigmoid]

Kernels: the attention fwd, dq, dkv, dbias (B=1, S=N, H=4, D=32) and the transition's fused
forward (tfwd) and dx kernel (tdx) at rows = N², C = 128, O = 1024 with SwiGLU, and the two-kernel
transition's forward (trf) and backward (trb), which is what ``Transition`` runs.
"""

from __future__ import annotations

import argparse
import collections
import dataclasses
import re
import subprocess
import sys
import tempfile
from pathlib import Path

import triton
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

CUOBJDUMP = Path(triton.__file__).parent / "backends/nvidia/bin/cuobjdump"  # ships with the Triton wheel
PTXAS = Path(triton.__file__).parent / "backends/nvidia/bin/ptxas"


def compile_kernel(fn, tensors, ints, scale, constexprs, num_warps, num_stages):
    import torch

    names = fn.arg_names
    sig, consts, attrs = {}, {}, {}
    i = 0
    for t in tensors:
        sig[names[i]] = (
            "*"
            + {
                torch.bfloat16: "bf16",
                torch.float16: "fp16",
                torch.float32: "fp32",
                torch.uint8: "u8",
                torch.int64: "i64",
                torch.int32: "i32",
            }[t]
        )
        attrs[(i,)] = [["tt.divisibility", 16]]
        i += 1
    for v in ints:
        if v == 1:
            sig[names[i]] = "constexpr"
            consts[names[i]] = 1
        else:
            sig[names[i]] = "i64" if abs(v) >= 2**31 else "i32"
            if v % 16 == 0:
                attrs[(i,)] = [["tt.divisibility", 16]]
        i += 1
    sig[names[i]] = "fp32"
    i += 1
    for v in constexprs:
        sig[names[i]] = "constexpr"
        consts[names[i]] = v
        i += 1
    src = ASTSource(fn, sig, consts, attrs)
    return triton.compile(
        src, target=GPUTarget("cuda", 90, 128), options={"num_warps": num_warps, "num_stages": num_stages}
    )


def ptxas_warnings(ck) -> list[str]:
    """ptxas's performance warnings (C75xx, e.g. serialized wgmma) for the kernel's PTX."""
    ptx = "".join(ch for ch in ck.asm["ptx"] if ord(ch) < 128)  # ptxas refuses the non-ASCII in .loc comments
    with tempfile.TemporaryDirectory() as tmp:
        src = Path(tmp) / "k.ptx"
        src.write_text(ptx)
        res = subprocess.run([str(PTXAS), "-arch=sm_90a", "-v", str(src), "-o", str(Path(tmp) / "k.cubin")],
                             capture_output=True, text=True)  # fmt: skip
    return sorted({m.group(0) for m in re.finditer(r"\(C75\d\d\)[^\n]*?due to [^\n]*?(?= in the function|$)",
                                                   res.stdout + res.stderr)})  # fmt: skip


def sass_of(ck) -> tuple[str, int, int]:
    """SASS text, registers per thread and local (spill) bytes of a compiled kernel."""
    with tempfile.NamedTemporaryFile(suffix=".cubin") as f:
        f.write(ck.asm["cubin"])
        f.flush()
        sass = subprocess.run([str(CUOBJDUMP), "-sass", f.name], capture_output=True, text=True).stdout
        res = subprocess.run([str(CUOBJDUMP), "-res-usage", f.name], capture_output=True, text=True).stdout
    m = re.search(r"REG:(\d+).*?LOCAL:(\d+)", res)
    return sass, int(m.group(1)), int(m.group(2))


def loop_mix(sass: str) -> tuple[collections.Counter, int]:
    """Opcode counts of the largest innermost loop body (a backward branch with none inside it)."""
    addr = []
    for ln in sass.splitlines():
        m = re.match(r"\s+/\*([0-9a-f]+)\*/\s+(.*?);", ln)
        if m:
            addr.append((int(m.group(1), 16), m.group(2)))
    loops = []
    for a, ins in addr:
        tgt = re.search(r"0x([0-9a-f]+)", ins) if "BRA" in ins else None
        if tgt and int(tgt.group(1), 16) < a:
            loops.append((int(tgt.group(1), 16), a))
    inner = [
        (t, a) for t, a in loops if not any(t <= t2 and a2 < a and (t2, a2) != (t, a) for t2, a2 in loops)
    ]
    best = max(inner, key=lambda ta: ta[1] - ta[0], default=(0, 0))
    body = [ins for a, ins in addr if best[0] <= a <= best[1]]
    ops = collections.Counter()
    for ins in body:
        ins = re.sub(r"^@!?U?P\w+\s+", "", ins)
        op = ins.split()[0] if ins.split() else "?"
        ops[op] += 1
    return ops, len(body)


def main() -> None:
    import torch

    from featurecache.model.kernels import pair_bias_attention as pba

    ap = argparse.ArgumentParser()
    ap.add_argument("n", nargs="?", type=int, default=768)
    ap.add_argument("--dump", type=Path)
    ap.add_argument("--only", help="comma-separated kernel names")
    for name in ("fwd", "dq", "dkv", "dbias"):
        ap.add_argument(f"--{name}", help=f"tiles of the {name} kernel: BLOCK_M,BLOCK_N,WARPS,STAGES,SP")
    for name in ("trf", "trb"):
        ap.add_argument(
            f"--{name}",
            help=f"tiles of the transition's {name} kernel: BLOCK_M,BLOCK_N,WARPS,STAGES",
        )
    ap.add_argument(
        "--qkv-row-stride",
        type=int,
        default=None,
        help="attention: q, k, v as the trunk's views of one projection with this row stride "
        "(elements; the trunk's TriangleAttention uses 4·H·D + the padded bias heads)",
    )
    ap.add_argument("--gated", action="store_true",
                    help="attention fwd, dq: the gated form (kernels/triangle.py), gate a view like q")  # fmt: skip
    ap.add_argument("--fast-sigmoid", action=argparse.BooleanOptionalAction, default=None,
                    help="transition kernels (tfwd, tdx): override GemmConfig.fast_sigmoid")  # fmt: skip
    args = ap.parse_args()
    n, s, h, d = args.n, args.n, 4, 32
    bf = torch.bfloat16
    cfg = pba._builtin_config(d, bf, torch.device("cuda"))
    for name in ("fwd", "dq", "dkv", "dbias"):
        if getattr(args, name):
            bm, bn, w, st, sp = (int(x) for x in getattr(args, name).split(","))
            cfg = dataclasses.replace(cfg, **{name: pba.KernelConfig(bm, bn, w, st, sp)})
    q_str = (s * h * n * d, h * n * d, n * d, d)
    r = args.qkv_row_stride
    qkv_str = q_str if r is None else (s * n * r, n * r, d, r)  # [B, S, H, N, D] views of [B, S, N, r]
    bias_str = (h * n * n, n * n, n, 1)
    bias_t_str = (h * n * n, n * n, 1, n)  # the dk/dv kernel's transposed copy (dkv_bias_copy)
    even = lambda c: pba._even(n, c.block_m, c.block_n)  # noqa: E731
    kernels = {
        "fwd": (
            pba._fwd_kernel,
            [bf, bf, bf, bf, bf, bf, bf, torch.float32, bf],
            (
                *qkv_str * 3,
                *q_str,
                *bias_str,
                0,
                0,
                0,
                0,
                0,
                *(qkv_str if args.gated else (0, 0, 0, 0)),
                s,
                h,
                n,
            ),
            lambda c: (False, False, even(c), d, c.block_m, c.block_n, c.sp, "tf32", args.gated, False),
            cfg.fwd,
        ),
        "dq": (
            pba._bwd_dq_kernel,
            [bf, bf, bf, bf, bf, bf, bf, torch.float32, torch.float32, bf, bf, bf, bf],
            (
                *qkv_str * 3,
                *q_str * 3,
                *bias_str,
                0,
                0,
                0,
                *((*qkv_str, *q_str, *qkv_str) if args.gated else (0,) * 12),
                s,
                h,
                n,
            ),
            lambda c: (False, even(c), d, c.block_m, c.block_n, c.sp, "tf32", args.gated, False),
            cfg.dq,
        ),
        "dkv": (
            pba._bwd_dkv_kernel,
            [bf, bf, bf, bf, bf, bf, torch.float32, torch.float32, bf, bf],
            (*qkv_str * 3, *q_str * 3, *(bias_t_str if cfg.dkv_bias_copy else bias_str), 0, 0, 0, s, h, n),
            lambda c: (False, even(c), d, c.block_m, c.block_n, c.sp, "tf32", False),
            cfg.dkv,
        ),
        "dbias": (
            pba._bwd_dbias_kernel,
            [bf, bf, bf, bf, bf, bf, torch.float32, torch.float32, torch.float32],
            (*qkv_str * 3, *q_str, *bias_str, 0, 0, 0, s, h, n, 24),
            lambda c: (False, even(c), d, c.block_m, c.block_n, "tf32", False),
            cfg.dbias,
        ),
    }
    # the transition at this N: rows = N², C = 128, O = 2·4·128 (SwiGLU), bias on, bf16
    from featurecache.model.kernels import layernorm_linear as lnl

    lcfg = lnl.default_config(128, bf, torch.device("cuda"))
    over = {} if args.fast_sigmoid is None else {"fast_sigmoid": args.fast_sigmoid}
    tf, tdx = dataclasses.replace(lcfg.fwd, **over), dataclasses.replace(lcfg.dx, **over)
    rows, ch, oh = n * n, 128, 512
    kernels["tfwd"] = (  # X, LNW, LNB, W, BIAS, Y; M, C, OH, sx_m, sw_o, sy_m, cols_per_prog
        lnl._fwd_kernel, [bf] * 6, (rows, ch, oh, ch, ch, oh, oh),
        lambda g: (True, True, ch, g.block_m, g.block_n, "tf32", g.fast_sigmoid), tf,
    )  # fmt: skip
    kernels["tdx"] = (  # X, LNW, LNB, W, BIAS, DY, DX, DLNW_PART, DLNB_PART, DU, XLN; M, C, OH and strides
        lnl._bwd_dx_kernel, [bf] * 7 + [torch.float32] * 2 + [bf] * 2, (rows, ch, oh, ch, ch, oh, ch, 2 * oh, ch),
        lambda g: (True, True, ch, g.block_m, g.block_n, "tf32", True, g.fast_sigmoid), tdx,
    )  # fmt: skip
    # the two-kernel transition (kernels/transition.py, what Transition runs for c <= 256)
    from featurecache.model.kernels import transition as trk

    tcfg = trk.default_config(ch, bf, torch.device("cuda"))
    for name in ("trf", "trb"):  # --trf / --trb BLOCK_M,BLOCK_N,WARPS,STAGES
        if getattr(args, name):
            bm, bn, w, st = (int(x) for x in getattr(args, name).split(","))
            tile = trk.TileConfig(bm, bn, w, st)
            tcfg = dataclasses.replace(tcfg, **{"fwd" if name == "trf" else "bwd": tile})
    tfast = True if args.fast_sigmoid is None else args.fast_sigmoid
    kernels["trf"] = (  # X, LNW, LNB, W1, W2, Y; M, C, NH, sx_m, sw1_o, sw2_o, sy_m
        trk._fwd_kernel, [bf] * 6, (rows, ch, oh, ch, ch, oh, ch),
        lambda g: (ch, g.block_m, g.block_n, "tf32", tfast), tcfg.fwd,
    )  # fmt: skip
    kernels["trb"] = (  # X, LNW, LNB, W1, W2, DY, DX, DLNW_PART, DLNB_PART, H, DU, XLN; M, C, NH, strides
        trk._bwd_kernel, [bf] * 7 + [torch.float32] * 2 + [bf] * 3,
        (rows, ch, oh, ch, ch, oh, ch, ch, oh, 2 * oh, ch),
        lambda g: (ch, g.block_m, g.block_n, "tf32", tfast), tcfg.bwd,
    )  # fmt: skip
    print(f"{'kernel':8} {'regs':>5} {'spill':>6} {'loop':>5}  mix (per loop body)")
    for name, (fn, tens, ints, cx, c) in kernels.items():
        if args.only and name not in args.only.split(","):
            continue
        ck = compile_kernel(fn, tens, ints, 0.17, cx(c), c.num_warps, c.num_stages)
        sass, regs, local = sass_of(ck)
        ops, nbody = loop_mix(sass)
        print(f"{name:8} {regs:5} {local:6} {nbody:5}  {dict(ops.most_common(16))}")
        for w in ptxas_warnings(ck):
            print(f"{'':8} ptxas: {w}")
        if args.dump:
            args.dump.mkdir(parents=True, exist_ok=True)
            (args.dump / f"{name}.sass").write_text(sass)
            (args.dump / f"{name}.ptx").write_text(ck.asm["ptx"])
            (args.dump / f"{name}.ttgir").write_text(ck.asm["ttgir"])


if __name__ == "__main__":
    main()
