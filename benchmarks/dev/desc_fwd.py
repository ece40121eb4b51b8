"""Experiment (session 6): the attention forward with TMA tensor descriptors for K, V and the bias
tile, optionally with Triton's automatic warp specialisation (``tl.range(warp_specialize=True)``,
Meta's autoWS, on Hopper since Triton 3.5).

KERNEL_NOTES names TMA loads of the bias tile and producer/consumer warp specialisation as the two
levers Triton had not been asked for. This file holds a forward kernel that uses both, a host
launcher, a compile check that runs without a GPU and, on the H200, an A/B against the shipped
forward kernel (correctness vs an fp32 reference and timing, same run).

Runs 20–21 added ``_pipe_fwd_kernel``: the online softmax software-pipelined by hand (iteration j
computes key block j's scores and row max, and block j − 1's exponentials, sum and P·V), so that
the MUFU work of one block can issue beside the FMA/ALU work of the next. ``VARIANTS`` holds the
run-21 list; ``--run16`` (after ``compile`` or ``ab OUT.json``) runs the descriptor survey
``VARIANTS_RUN16`` instead. Results: KERNEL_NOTES.md, session 6.

    python benchmarks/dev/desc_fwd.py compile          # sm_90 compile of every variant (CPU)
    PYTHONPATH=. python benchmarks/dev/desc_fwd.py ab OUT.json   # on the H200

Restrictions of the prototype (the shipped kernel has none): q, k, v contiguous [B, S, H, N, D];
N % 8 == 0 (TMA needs 16-byte row strides for the bf16 bias); no general [B, S, N] mask (a key
mask folds into the bias as -inf, as the shipped path does).
"""

from __future__ import annotations

import sys
from pathlib import Path

import triton
import triton.language as tl

_LOG2E = tl.constexpr(1.4426950408889634)


@triton.jit
def _desc_fwd_kernel(
    Q, desc_k, desc_v, desc_b, OUT, LSE,
    S, H, N, scale,
    GUARD_EMPTY: tl.constexpr, EVEN_N: tl.constexpr, D: tl.constexpr, BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr, SP: tl.constexpr, WS: tl.constexpr, NAT: tl.constexpr,
):  # fmt: skip
    pid_m = tl.program_id(0)
    pid_s = tl.program_id(1)
    pid_bh = tl.program_id(2)
    b = pid_bh // H
    h = pid_bh % H
    s0 = pid_s * SP
    s1 = tl.minimum(s0 + 1, S - 1)
    slab0 = ((b * S + s0) * H + h) * N  # first row of (b, s0, h) in the [B·S·H·N, D] view
    slab1 = ((b * S + s1) * H + h) * N
    rows = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = tl.arange(0, BLOCK_N)
    offs_d = tl.arange(0, D)
    row_ok = rows < N
    q0 = tl.load(
        Q + slab0.to(tl.int64) * D + rows[:, None] * D + offs_d[None, :], mask=row_ok[:, None], other=0.0
    )
    acc0 = tl.zeros([BLOCK_M, D], tl.float32)
    m0 = tl.full([BLOCK_M], float("-inf"), tl.float32)
    l0 = tl.zeros([BLOCK_M], tl.float32)
    if SP == 2:
        q1 = tl.load(Q + slab1.to(tl.int64) * D + rows[:, None] * D + offs_d[None, :], mask=row_ok[:, None],
                     other=0.0)  # fmt: skip
        acc1 = tl.zeros([BLOCK_M, D], tl.float32)
        m1 = tl.full([BLOCK_M], float("-inf"), tl.float32)
        l1 = tl.zeros([BLOCK_M], tl.float32)
    brow = (b * H + h) * N + pid_m * BLOCK_M
    for start_n in tl.range(0, N, BLOCK_N, warp_specialize=WS):
        bias = desc_b.load([brow, start_n]).to(tl.float32)
        if not NAT:
            bias = bias * _LOG2E
        if not EVEN_N:
            bias += tl.where(start_n + offs_n < N, 0.0, float("-inf"))[None, :]
        acc0, m0, l0 = _desc_step(
            acc0, m0, l0, q0, desc_k, desc_v, slab0 + start_n, bias, scale, GUARD_EMPTY, NAT
        )
        if SP == 2:
            acc1, m1, l1 = _desc_step(acc1, m1, l1, q1, desc_k, desc_v, slab1 + start_n, bias, scale, GUARD_EMPTY,
                                      NAT)  # fmt: skip
    if NAT:  # the finish (and the backward) take m in log2 units
        m0 = m0 * _LOG2E
        if SP == 2:
            m1 = m1 * _LOG2E
    _desc_finish(acc0, m0, l0, OUT, LSE, slab0, rows, offs_d, row_ok, D)
    if SP == 2:
        _desc_finish(acc1, m1, l1, OUT, LSE, slab1, rows, offs_d, row_ok & (s0 + 1 < S), D)


@triton.jit
def _desc_step(
    acc, m_i, l_i, q, desc_k, desc_v, krow, bias, scale, GUARD_EMPTY: tl.constexpr, NAT: tl.constexpr
):
    """One key block of the online softmax. NAT: s and m in natural units (one FMA per score turns
    s − m into log2 units; the bias needs no ·log2 e); else log2 units (bias pre-scaled)."""
    k = desc_k.load([krow, 0])
    v = desc_v.load([krow, 0])
    qk_scale = scale
    if not NAT:
        qk_scale = scale * _LOG2E
    s = tl.dot(q, tl.trans(k)) * qk_scale + bias
    mn = tl.maximum(m_i, tl.max(s, 1))
    if GUARD_EMPTY:
        mn = tl.where(mn == float("-inf"), 0.0, mn)
    if NAT:
        p = tl.math.exp2(s * _LOG2E - (mn * _LOG2E)[:, None])
        alpha = tl.math.exp2((m_i - mn) * _LOG2E)
    else:
        p = tl.math.exp2(s - mn[:, None])
        alpha = tl.math.exp2(m_i - mn)
    l_i = l_i * alpha + tl.sum(p, 1)
    acc = acc * alpha[:, None] + tl.dot(p.to(v.dtype), v)
    return acc, mn, l_i


@triton.jit
def _desc_finish(acc, m_i, l_i, OUT, LSE, slab, rows, offs_d, ok, D: tl.constexpr):
    empty = l_i == 0.0
    out = tl.where(empty[:, None], 0.0, acc / tl.where(empty, 1.0, l_i)[:, None])
    lse = tl.where(empty, float("inf"), m_i + tl.math.log2(tl.where(empty, 1.0, l_i)))
    base = slab.to(tl.int64)
    tl.store(
        OUT + base * D + rows[:, None] * D + offs_d[None, :], out.to(OUT.dtype.element_ty), mask=ok[:, None]
    )
    tl.store(LSE + base + rows, lse, mask=ok)


@triton.jit
def _pipe_scores(
    q, K, bias_rows, krow, start_n, offs_n, offs_d, row_ok, N, qk_scale, EVEN_N: tl.constexpr, D: tl.constexpr
):
    """Scores of one key block in log2 units (bias·log2 e added, keys past N at −inf). The bias tile
    is a pointer load: as a TMA load that does not feed a dot it stops Triton from pipelining the
    loop once a score tile is carried across iterations (run 20, compile check)."""
    cols = start_n + offs_n
    if EVEN_N:
        bias = tl.load(bias_rows + cols[None, :]).to(tl.float32) * _LOG2E
    else:
        bias = tl.load(bias_rows + cols[None, :], mask=row_ok[:, None] & (cols < N)[None, :], other=0.0)
        bias = bias.to(tl.float32) * _LOG2E + tl.where(cols < N, 0.0, float("-inf"))[None, :]
    k = tl.load(K + (krow + offs_n).to(tl.int64)[:, None] * D + offs_d[None, :])
    return tl.dot(q, tl.trans(k)) * qk_scale + bias


@triton.jit
def _pipe_fwd_kernel(
    Q, K, V, BIAS, OUT, LSE,
    S, H, N, scale,
    GUARD_EMPTY: tl.constexpr, EVEN_N: tl.constexpr, D: tl.constexpr, BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
):  # fmt: skip
    """Software-pipelined online softmax (one S row per program): iteration j computes the scores
    and row max of key block j (FMA/ALU work) and the exponentials, sum and P·V of block j − 1
    (MUFU work), which do not depend on each other, so the two can issue side by side."""
    qk_scale = scale * _LOG2E
    pid_m = tl.program_id(0)
    pid_s = tl.program_id(1)
    pid_bh = tl.program_id(2)
    b = pid_bh // H
    h = pid_bh % H
    slab = ((b * S + pid_s) * H + h) * N
    rows = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = tl.arange(0, BLOCK_N)
    offs_d = tl.arange(0, D)
    row_ok = rows < N
    q = tl.load(
        Q + slab.to(tl.int64) * D + rows[:, None] * D + offs_d[None, :], mask=row_ok[:, None], other=0.0
    )
    bias_rows = BIAS + ((b * H + h) * N).to(tl.int64) * N + rows[:, None] * N
    acc = tl.zeros([BLOCK_M, D], tl.float32)
    l_i = tl.zeros([BLOCK_M], tl.float32)
    m_old = tl.full([BLOCK_M], float("-inf"), tl.float32)
    s_prev = _pipe_scores(q, K, bias_rows, slab, 0, offs_n, offs_d, row_ok, N, qk_scale, EVEN_N, D)
    m_prev = tl.max(s_prev, 1)
    if GUARD_EMPTY:
        m_prev = tl.where(m_prev == float("-inf"), 0.0, m_prev)
    for start_n in tl.range(BLOCK_N, N, BLOCK_N, num_stages=2):
        s = _pipe_scores(
            q, K, bias_rows, slab + start_n, start_n, offs_n, offs_d, row_ok, N, qk_scale, EVEN_N, D
        )
        # V of the previous block is loaded again rather than carried: a loop-carried register tile
        # that feeds a wgmma goes back through shared memory every iteration and stops Triton from
        # pipelining the loop's TMA loads (run 20)
        v_prev = tl.load(V + (slab + start_n - BLOCK_N + offs_n).to(tl.int64)[:, None] * D + offs_d[None, :])
        row_max = tl.max(s, 1)
        p = tl.math.exp2(s_prev - m_prev[:, None])
        alpha = tl.math.exp2(m_old - m_prev)
        l_i = l_i * alpha + tl.sum(p, 1)
        acc = acc * alpha[:, None] + tl.dot(p.to(v_prev.dtype), v_prev)
        m_old = m_prev
        m_prev = tl.maximum(m_prev, row_max)
        if GUARD_EMPTY:
            m_prev = tl.where(m_prev == float("-inf"), 0.0, m_prev)
        s_prev = s
    v_prev = tl.load(V + (slab + tl.cdiv(N, BLOCK_N) * BLOCK_N - BLOCK_N + offs_n).to(tl.int64)[:, None] * D
                     + offs_d[None, :])  # fmt: skip
    p = tl.math.exp2(s_prev - m_prev[:, None])
    alpha = tl.math.exp2(m_old - m_prev)
    l_i = l_i * alpha + tl.sum(p, 1)
    acc = acc * alpha[:, None] + tl.dot(p.to(v_prev.dtype), v_prev)
    _desc_finish(acc, m_prev, l_i, OUT, LSE, slab, rows, offs_d, row_ok, D)


# run 16: descriptor variants (BLOCK_M, BLOCK_N, num_warps, num_stages, SP, WS, NAT)
VARIANTS_RUN16 = [
    (128, 64, 4, 3, 2, False, False),  # the shipped forward's tiles
    (128, 64, 4, 2, 2, False, False),
    (128, 64, 8, 2, 2, False, False),
    (128, 64, 8, 3, 2, False, False),
    (128, 64, 8, 2, 1, False, False),
    (128, 64, 8, 2, 1, False, True),
    (128, 64, 8, 3, 1, False, True),
    (64, 64, 4, 3, 2, False, False),
    (64, 64, 4, 3, 1, False, True),
    (128, 128, 8, 2, 1, False, True),
    (128, 64, 8, 2, 2, True, False),  # autoWS: ignored at 8 warps, a pass failure at 4 (compile survey)
]
# run 20: the software-pipelined kernel ("pipe", BLOCK_M, BLOCK_N, num_warps, num_stages), beside the
# descriptor kernel at the shipped tiles
VARIANTS = [
    (128, 64, 4, 3, 2, False, False),
    ("pipe", 64, 64, 4, 2),
    ("pipe", 64, 64, 4, 3),
    ("pipe", 128, 64, 4, 2),
    ("pipe", 128, 64, 8, 2),
    ("pipe", 128, 64, 8, 3),
    ("pipe", 64, 128, 4, 2),
    ("pipe", 128, 128, 8, 2),
    ("pipe", 64, 32, 4, 3),
]


def _variants() -> list:
    return VARIANTS_RUN16 if "--run16" in sys.argv else VARIANTS


def _pipe(variant) -> bool:
    return variant[0] == "pipe"


def launch(q, k, v, bias, scale, variant, key_mask_inf=False):
    """out, lse for contiguous q, k, v [B, S, H, N, D] and bias [B, H, N, N] (N % 8 == 0)."""
    import torch
    from triton.tools.tensor_descriptor import TensorDescriptor

    if _pipe(variant):
        (_, bm, bn, warps, stages), sp = variant, 1
    else:
        bm, bn, warps, stages, sp, ws, nat = variant
    b, s, h, n, d = q.shape
    assert n % 8 == 0 and q.is_contiguous() and k.is_contiguous() and v.is_contiguous()
    bias = bias.contiguous()
    k2, v2, b2 = k.view(-1, d), v.view(-1, d), bias.view(-1, n)
    dk = TensorDescriptor(k2, list(k2.shape), list(k2.stride()), [bn, d])
    dv = TensorDescriptor(v2, list(v2.shape), list(v2.stride()), [bn, d])
    db = TensorDescriptor(b2, list(b2.shape), list(b2.stride()), [bm, bn])
    out = torch.empty_like(q)
    lse = torch.empty((b, s, h, n), device=q.device, dtype=torch.float32)
    grid = (triton.cdiv(n, bm), triton.cdiv(s, sp), b * h)
    even = n % bm == 0 and n % bn == 0
    if _pipe(variant):
        _pipe_fwd_kernel[grid](q, k, v, bias, out, lse, s, h, n, scale, key_mask_inf, even, d, bm, bn,
                               num_warps=warps, num_stages=stages)  # fmt: skip
    else:
        _desc_fwd_kernel[grid](q, dk, dv, db, out, lse, s, h, n, scale, key_mask_inf, even, d, bm, bn, sp, ws, nat,
                               num_warps=warps, num_stages=stages)  # fmt: skip
    return out, lse


def compile_all() -> None:
    """Compile every variant for sm_90 (no GPU needed); print regs, spills, whether autoWS split the
    loop into partitions, and ptxas's serialization warnings."""
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    sys.path.insert(0, str(Path(__file__).resolve().parent))
    import sass

    d = 32
    print(f"triton {triton.__version__}")
    for var in _variants():
        if _pipe(var):
            _, bm, bn, warps, stages = var
            fn, tag = _pipe_fwd_kernel, f"pipe {bm}x{bn} w{warps} st{stages}"
            consts = {"GUARD_EMPTY": False, "EVEN_N": True, "D": d, "BLOCK_M": bm, "BLOCK_N": bn}
        else:
            bm, bn, warps, stages, sp, ws, nat = var
            fn, tag = _desc_fwd_kernel, f"{bm}x{bn} w{warps} st{stages} sp{sp} ws{int(ws)} nat{int(nat)}"
            consts = {"GUARD_EMPTY": False, "EVEN_N": True, "D": d, "BLOCK_M": bm, "BLOCK_N": bn, "SP": sp, "WS": ws,
                      "NAT": nat}  # fmt: skip
        sig = {"Q": "*bf16", "desc_k": f"tensordesc<bf16[{bn}, {d}]>", "desc_v": f"tensordesc<bf16[{bn}, {d}]>",
               "desc_b": f"tensordesc<bf16[{bm}, {bn}]>", "OUT": "*bf16", "LSE": "*fp32", "S": "i32", "H": "i32",
               "N": "i32", "scale": "fp32"}  # fmt: skip
        if _pipe(var):
            sig = {"Q": "*bf16", "K": "*bf16", "V": "*bf16", "BIAS": "*bf16", "OUT": "*bf16", "LSE": "*fp32",
                   "S": "i32", "H": "i32", "N": "i32", "scale": "fp32"}  # fmt: skip
        for c in consts:
            sig[c] = "constexpr"
        ptrs = (0, 1, 2, 3, 4, 5, 8) if _pipe(var) else (0, 4, 5, 8)  # pointer args and N: divisible by 16
        attrs = {(i,): [["tt.divisibility", 16]] for i in ptrs}
        try:
            ck = triton.compile(ASTSource(fn, sig, consts, attrs), target=GPUTarget("cuda", 90, 128),
                                options={"num_warps": warps, "num_stages": stages})  # fmt: skip
        except Exception as exc:
            print(f"{tag:28} FAILED {type(exc).__name__}: {str(exc).splitlines()[-1][:160]}")
            continue
        text, regs, local = sass.sass_of(ck)
        ops, nbody = sass.loop_mix(text)
        parts = ck.asm["ttgir"].count("ttg.warp_specialize")
        ir = ck.asm["ttgir"][ck.asm["ttgir"].index("scf.for") :]
        loop = ir[: ir.index("scf.yield")]
        sync_tma = loop.count("ttng.init_barrier") + loop.count(
            "ttg.async_wait {num = 0"
        )  # loads waited in place
        print(f"{tag:28} regs {regs:3} local {local:4} ws-ops {parts} unpipelined-tma {sync_tma} loop {nbody:4} "
              f"mufu {ops.get('MUFU.EX2', 0)} warps_total {ck.metadata.num_warps}")  # fmt: skip
        if "-v" in sys.argv:
            print(f"{'':28} {dict(ops.most_common(18))}")
        for w in sass.ptxas_warnings(ck):
            print(f"{'':28} ptxas: {w}")


def ab(out_path: str) -> None:
    """On the H200: the shipped forward vs each variant (benchmarks/dev/abkit.forward_ab)."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
    from benchmarks.dev.abkit import forward_ab

    forward_ab(_variants(), launch, out_path)


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
    from benchmarks.dev.devcli import help_exit

    help_exit(__doc__)
    if sys.argv[1] == "compile":
        compile_all()
    else:
        ab(sys.argv[2])
