"""Session 21 experiment: deterministic gradients through fixed-point integer atomics.

"Why four passes" (KERNEL_NOTES.md) rests on one premise: a deterministic S-sum of the bias gradient
cannot use atomics, so it needs its own pass (or a read-modify-written partial, which sessions 5, 12
and 19 measured as slower than the pass). Integer addition is associative: if every summand is
rounded to a fixed-point grid first, atomic integer adds give the same bits in any order. The grid
comes from a bound computed before the kernel: |dS| ≤ P·(|dP| + |δ|) ≤ 2·max‖dO‖·max‖V‖ per
(b, h) (Cauchy–Schwarz, Σ_j P_ij ≤ 1), so the S-sum is bounded by S times that; scaled by a power
of two to 2^61 it fits int64 with margin, and the grid is ~2^-50 of the bound, far finer than fp32.
dq's per-key-block partials are bounded by 2·max‖dO‖·max‖V‖·max‖K‖ the same way (int32 is enough
there: 2^-30 of the bound per summand, 12–16 summands per element at N = 768).

Variants (B = 1, H = 4, D = 32, bf16; each against the shipped dq + dbias + dk/dv):

* ``dq+db``: the dq kernel also adds Σ_{its SP rows} dS to an int64 [B·H, N, N] buffer
  (one red.add per score / SP); the dbias pass disappears (3 exponential passes).
* ``dkv+db``: the same in the dk/dv kernel (transposed buffer).
* ``dkv+dq+db``: the dk/dv kernel also adds dSᵀ·K per (key block, query block) to an int32 dq buffer
  (FA2's dq, made deterministic): the whole backward is one exponential pass (2 with the forward);
  a small kernel computes δ and the norms first.
* ``…/f32``: the same with fp32 atomics (nondeterministic) — what the integer grid costs.

    TRITON_INTERPRET=1 python benchmarks/dev/fixed_atomics.py check   # CPU: vs the shipped kernels
    python benchmarks/dev/fixed_atomics.py sass                        # CPU: sm_90 SASS of the variants
    python benchmarks/dev/fixed_atomics.py ab OUT.json                 # H200: correctness + timings
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

import torch
import triton
import triton.language as tl

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from benchmarks.dev.devcli import help_exit
from featurecache.model.kernels import pair_bias_attention as pba

_LOG2E = pba._LOG2E


# --------------------------------------------------------------------------------------------
# δ and the norms the grids come from
# --------------------------------------------------------------------------------------------


@triton.jit
def _prep_kernel(
    DO, OUT, V, K, DELTA, STATS,  # STATS [B·H, S, n_blocks, 3] fp32: max ‖dO‖², ‖V‖², ‖K‖² of a row block
    sdo_b, sdo_s, sdo_h, sdo_n, so_b, so_s, so_h, so_n, sv_b, sv_s, sv_h, sv_n, sk_b, sk_s, sk_h, sk_n,
    S, H, N, unused,
    D: tl.constexpr, BLOCK: tl.constexpr, WITH_DELTA: tl.constexpr,
):  # fmt: skip
    pid_m = tl.program_id(0)
    s = tl.program_id(1).to(tl.int64)
    pid_bh = tl.program_id(2).to(tl.int64)
    b = pid_bh // H
    h = pid_bh % H
    rows = pid_m * BLOCK + tl.arange(0, BLOCK)
    ok = (rows < N)[:, None]
    offs_d = tl.arange(0, D)
    do = tl.load(DO + b * sdo_b + s * sdo_s + h * sdo_h + rows[:, None] * sdo_n + offs_d[None, :], mask=ok,
                 other=0.0).to(tl.float32)  # fmt: skip
    v = tl.load(V + b * sv_b + s * sv_s + h * sv_h + rows[:, None] * sv_n + offs_d[None, :], mask=ok,
                other=0.0).to(tl.float32)  # fmt: skip
    k = tl.load(K + b * sk_b + s * sk_s + h * sk_h + rows[:, None] * sk_n + offs_d[None, :], mask=ok,
                other=0.0).to(tl.float32)  # fmt: skip
    if WITH_DELTA:
        o = tl.load(OUT + b * so_b + s * so_s + h * so_h + rows[:, None] * so_n + offs_d[None, :], mask=ok,
                    other=0.0).to(tl.float32)  # fmt: skip
        tl.store(DELTA + ((b * S + s) * H + h) * N + rows, tl.sum(do * o, 1), mask=rows < N)
    st = STATS + ((pid_bh * S + s) * tl.num_programs(0) + pid_m) * 3
    tl.store(st, tl.max(tl.sum(do * do, 1), 0))
    tl.store(st + 1, tl.max(tl.sum(v * v, 1), 0))
    tl.store(st + 2, tl.max(tl.sum(k * k, 1), 0))


def grids(a: pba.BackwardInputs, with_delta: bool) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(δ into a.delta when asked), and per (b·h) fp32 powers of two: the dbias grid's inverse step
    (int64, S-sum < 2^61) and dq's (int32, each partial < 2^29), and the bound (NaN/inf: not finite)."""
    b, s, h, n, d = a.q.shape
    block = 64
    nb = triton.cdiv(n, block)
    stats = torch.empty((b * h, s, nb, 3), device=a.q.device, dtype=torch.float32)
    pba._launch(
        _prep_kernel, (nb, s, b * h), (a.do, a.out, a.v, a.k, a.delta, stats),
        (*a.do.stride()[:4], *a.out.stride()[:4], *a.v.stride()[:4], *a.k.stride()[:4], s, h, n),
        0.0, (d, block, with_delta), 4, 1,
    )  # fmt: skip
    m = stats.amax(dim=(1, 2)).sqrt()  # [B·H, 3]
    ds_bound = 2.0 * m[:, 0] * m[:, 1] * 2.0  # ×2: P a little above 1 from rounding, the dots' rounding
    e_db = torch.ceil(torch.log2(ds_bound * s))
    e_dq = torch.ceil(torch.log2(ds_bound * m[:, 2]))
    inv_db = torch.exp2(torch.clamp(61.0 - e_db, -126.0, 126.0))
    inv_dq = torch.exp2(torch.clamp(29.0 - e_dq, -126.0, 126.0))
    return inv_db.contiguous(), inv_dq.contiguous(), ds_bound


# --------------------------------------------------------------------------------------------
# dq + dbias
# --------------------------------------------------------------------------------------------


@triton.jit
def _dq_step_ds(
    dq, q, do, lse, delta, K, V, k_off, v_off, sk_n, sv_n, cols, offs_d, N, bias, key_add, scale,
    HAS_KEY_ADD: tl.constexpr, EVEN_N: tl.constexpr, PREC: tl.constexpr,
):  # fmt: skip
    k, v = pba._kv_tiles(K, V, k_off, v_off, sk_n, sv_n, cols, offs_d, N, EVEN_N)
    s = tl.dot(q, tl.trans(k), input_precision=PREC) * scale + bias.to(tl.float32)
    if HAS_KEY_ADD:
        s += key_add[None, :]
    p = tl.math.exp2(s * _LOG2E - lse[:, None])
    dp = tl.dot(do, tl.trans(v), input_precision=PREC)
    ds = p * (dp - delta[:, None])
    dq += tl.dot(ds.to(k.dtype), k, input_precision=PREC)
    return dq, ds


@triton.jit
def _red(ptrs, val, inv, ok, EVEN: tl.constexpr, INT: tl.constexpr, ITYPE: tl.constexpr):
    """Atomic add of val (fp32) to ptrs: on the fixed-point grid 1/inv (INT), or in fp32."""
    if INT:  # noqa: SIM108 (a Triton constexpr branch)
        x = (val * inv).to(ITYPE)
    else:
        x = val
    if EVEN:
        tl.atomic_add(ptrs, x, sem="relaxed")
    else:
        tl.atomic_add(ptrs, x, mask=ok, sem="relaxed")


@triton.jit
def _dq_db_kernel(
    Q, K, V, BIAS, MASK, OUT, DO, LSE, DELTA, DQ, G, DOU, DG,
    DBI,  # [B·H, N, N] int64 (INT) or fp32, zeroed
    INV_DB,  # [B·H] fp32
    sq_b, sq_s, sq_h, sq_n, sk_b, sk_s, sk_h, sk_n, sv_b, sv_s, sv_h, sv_n,
    so_b, so_s, so_h, so_n, sdo_b, sdo_s, sdo_h, sdo_n, sdq_b, sdq_s, sdq_h, sdq_n,
    sb_b, sb_h, sb_i, sb_j, sm_b, sm_s, sm_n,
    S, H, N, scale,
    HAS_MASK: tl.constexpr, EVEN_N: tl.constexpr, D: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, SP: tl.constexpr, PREC: tl.constexpr, INT: tl.constexpr,
):  # fmt: skip
    HAS_KEY_ADD: tl.constexpr = HAS_MASK or not EVEN_N
    pid_m = tl.program_id(0)
    b, h, s0, s1 = pba._program_rows(S, H, SP)
    pid_bh = tl.program_id(2).to(tl.int64)
    rows = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = tl.arange(0, BLOCK_N)
    offs_d = tl.arange(0, D)
    row_ok = rows < N
    lse_row = (b * S * H + h) * N
    inv = tl.load(INV_DB + pid_bh)
    k_off0, v_off0, mo0 = pba._kv_mask_offsets(b, s0, h, sk_b, sk_s, sk_h, sv_b, sv_s, sv_h, sm_b, sm_s)
    k_off1, v_off1, mo1 = pba._kv_mask_offsets(b, s1, h, sk_b, sk_s, sk_h, sv_b, sv_s, sv_h, sm_b, sm_s)
    q0, do0, lse0, delta0 = pba._dq_prologue(
        Q, OUT, DO, LSE, DELTA, b * sq_b + s0 * sq_s + h * sq_h, b * so_b + s0 * so_s + h * so_h,
        b * sdo_b + s0 * sdo_s + h * sdo_h, sq_n, so_n, sdo_n, lse_row + s0 * H * N, rows, offs_d, N,
        G, DOU, DG, 0, 0, 0, 0, 0, 0, True, False,
    )  # fmt: skip
    dq0 = tl.zeros([BLOCK_M, D], tl.float32)
    ka0_nxt = pba._key_add(MASK, mo0, sm_n, offs_n, N, HAS_MASK)
    if SP == 2:
        q1, do1, lse1, delta1 = pba._dq_prologue(
            Q, OUT, DO, LSE, DELTA, b * sq_b + s1 * sq_s + h * sq_h, b * so_b + s1 * so_s + h * so_h,
            b * sdo_b + s1 * sdo_s + h * sdo_h, sq_n, so_n, sdo_n, lse_row + s1 * H * N, rows, offs_d, N,
            G, DOU, DG, 0, 0, 0, 0, 0, 0, s0 + 1 < S, False,
        )  # fmt: skip
        dq1 = tl.zeros([BLOCK_M, D], tl.float32)
        ka1_nxt = pba._key_add(MASK, mo1, sm_n, offs_n, N, HAS_MASK)
        w1 = (s0 + 1 < S).to(tl.float32)
    bias_rows = BIAS + b * sb_b + h * sb_h + rows[:, None] * sb_i
    db_rows = DBI + pid_bh * N * N + rows[:, None] * N
    for start_n in range(0, N, BLOCK_N):
        cols = start_n + offs_n
        bias = pba._bias_tile(bias_rows, sb_j, row_ok, cols, N, EVEN_N)
        ka0 = ka0_nxt
        ka0_nxt = pba._key_add(MASK, mo0, sm_n, cols + BLOCK_N, N, HAS_MASK)
        dq0, ds = _dq_step_ds(dq0, q0, do0, lse0, delta0, K, V, k_off0, v_off0, sk_n, sv_n, cols, offs_d, N,
                              bias, ka0, scale, HAS_KEY_ADD, EVEN_N, PREC)  # fmt: skip
        if SP == 2:
            ka1 = ka1_nxt
            ka1_nxt = pba._key_add(MASK, mo1, sm_n, cols + BLOCK_N, N, HAS_MASK)
            dq1, ds1 = _dq_step_ds(dq1, q1, do1, lse1, delta1, K, V, k_off1, v_off1, sk_n, sv_n, cols, offs_d,
                                   N, bias, ka1, scale, HAS_KEY_ADD, EVEN_N, PREC)  # fmt: skip
            ds += ds1 * w1
        _red(db_rows + cols[None, :], ds, inv, row_ok[:, None] & (cols < N)[None, :], EVEN_N, INT, tl.int64)
    dq_ptrs = rows[:, None] * sdq_n + offs_d[None, :]
    tl.store(DQ + b * sdq_b + s0 * sdq_s + h * sdq_h + dq_ptrs, (dq0 * scale).to(DQ.dtype.element_ty),
             mask=row_ok[:, None])  # fmt: skip
    if SP == 2:
        tl.store(DQ + b * sdq_b + s1 * sdq_s + h * sdq_h + dq_ptrs, (dq1 * scale).to(DQ.dtype.element_ty),
                 mask=row_ok[:, None] & (s0 + 1 < S))  # fmt: skip


# --------------------------------------------------------------------------------------------
# dk/dv (+ dq) + dbias
# --------------------------------------------------------------------------------------------


@triton.jit
def _dkv_step_ds(
    dk, dv, k, v, key_add, Q, DO, q_off, do_off, sq_n, sdo_n, LSE, DELTA, lse_off, rows, offs_d, N, bias_ft,
    scale, HAS_KEY_ADD: tl.constexpr, EVEN_N: tl.constexpr, PREC: tl.constexpr,
):  # fmt: skip
    if EVEN_N:
        q = tl.load(Q + q_off + rows[:, None] * sq_n + offs_d[None, :])
        do = tl.load(DO + do_off + rows[:, None] * sdo_n + offs_d[None, :])
        lse = tl.load(LSE + lse_off + rows)
        delta = tl.load(DELTA + lse_off + rows)
    else:
        row_ok = rows < N
        q = tl.load(Q + q_off + rows[:, None] * sq_n + offs_d[None, :], mask=row_ok[:, None], other=0.0)
        do = tl.load(DO + do_off + rows[:, None] * sdo_n + offs_d[None, :], mask=row_ok[:, None], other=0.0)
        lse, delta = pba._row_stats(LSE, DELTA, lse_off, rows, N)
    st = tl.dot(k, tl.trans(q), input_precision=PREC) * scale + bias_ft
    if HAS_KEY_ADD:
        st += key_add[:, None]
    pt = tl.math.exp2(st * _LOG2E - lse[None, :])
    dv += tl.dot(pt.to(do.dtype), do, input_precision=PREC)
    dpt = tl.dot(v, tl.trans(do), input_precision=PREC)
    dst = pt * (dpt - delta[None, :])
    dk += tl.dot(dst.to(q.dtype), q, input_precision=PREC)
    return dk, dv, dst


@triton.jit
def _dkv_db_kernel(
    Q, K, V, BIAS, MASK, DO, LSE, DELTA, DK, DV,
    DBT,  # [B·H, N(key), N(query)] int64 (INT) or fp32, zeroed
    DQI,  # [B, S, H, N, D] contiguous int32 (INT) or fp32, zeroed (WITH_DQ)
    INV_DB, INV_DQ,  # [B·H] fp32
    sq_b, sq_s, sq_h, sq_n, sk_b, sk_s, sk_h, sk_n, sv_b, sv_s, sv_h, sv_n,
    sdo_b, sdo_s, sdo_h, sdo_n, sdk_b, sdk_s, sdk_h, sdk_n, sdv_b, sdv_s, sdv_h, sdv_n,
    sb_b, sb_h, sb_i, sb_j, sm_b, sm_s, sm_n,
    S, H, N, scale,
    HAS_MASK: tl.constexpr, EVEN_N: tl.constexpr, D: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, SP: tl.constexpr, PREC: tl.constexpr, INT: tl.constexpr,
    WITH_DQ: tl.constexpr,
):  # fmt: skip
    HAS_KEY_ADD: tl.constexpr = HAS_MASK or not EVEN_N
    pid_n = tl.program_id(0)
    b, h, s0, s1 = pba._program_rows(S, H, SP)
    pid_bh = tl.program_id(2).to(tl.int64)
    cols = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    offs_m = tl.arange(0, BLOCK_M)
    offs_d = tl.arange(0, D)
    col_ok = cols < N
    lse_row = (b * S * H + h) * N
    lo0, lo1 = lse_row + s0 * H * N, lse_row + s1 * H * N
    q_off0, do_off0 = b * sq_b + s0 * sq_s + h * sq_h, b * sdo_b + s0 * sdo_s + h * sdo_h
    q_off1, do_off1 = b * sq_b + s1 * sq_s + h * sq_h, b * sdo_b + s1 * sdo_s + h * sdo_h
    inv_db = tl.load(INV_DB + pid_bh)
    inv_dq = tl.load(INV_DQ + pid_bh)
    k_off0, v_off0, mo0 = pba._kv_mask_offsets(b, s0, h, sk_b, sk_s, sk_h, sv_b, sv_s, sv_h, sm_b, sm_s)
    k0, v0 = pba._dkv_load(K, V, k_off0, v_off0, sk_n, sv_n, cols, offs_d, N)
    key_add0 = pba._key_add(MASK, mo0, sm_n, cols, N, HAS_MASK)
    dk0 = tl.zeros([BLOCK_N, D], tl.float32)
    dv0 = tl.zeros([BLOCK_N, D], tl.float32)
    dq_rows0 = DQI + ((b * S + s0) * H + h) * N * D + offs_d[None, :]
    if SP == 2:
        k_off1, v_off1, mo1 = pba._kv_mask_offsets(b, s1, h, sk_b, sk_s, sk_h, sv_b, sv_s, sv_h, sm_b, sm_s)
        k1, v1 = pba._dkv_load(K, V, k_off1, v_off1, sk_n, sv_n, cols, offs_d, N)
        key_add1 = pba._key_add(MASK, mo1, sm_n, cols, N, HAS_MASK)
        dk1 = tl.zeros([BLOCK_N, D], tl.float32)
        dv1 = tl.zeros([BLOCK_N, D], tl.float32)
        w1 = (s0 + 1 < S).to(tl.float32)
        dq_rows1 = DQI + ((b * S + s1) * H + h) * N * D + offs_d[None, :]
    bias_cols = BIAS + b * sb_b + h * sb_h + cols[:, None] * sb_j
    dbt_cols = DBT + pid_bh * N * N + cols[:, None] * N
    for start_m in range(0, N, BLOCK_M):
        rows = start_m + offs_m
        bias_ft = pba._bias_tile(bias_cols, sb_i, col_ok, rows, N, EVEN_N).to(tl.float32)
        dk0, dv0, dst = _dkv_step_ds(dk0, dv0, k0, v0, key_add0, Q, DO, q_off0, do_off0, sq_n, sdo_n, LSE,
                                     DELTA, lo0, rows, offs_d, N, bias_ft, scale, HAS_KEY_ADD, EVEN_N, PREC)  # fmt: skip
        if WITH_DQ:
            dqp = tl.dot(tl.trans(dst.to(k0.dtype)), k0, input_precision=PREC)  # [BLOCK_M, D]
            _red(dq_rows0 + rows[:, None] * D, dqp, inv_dq, (rows < N)[:, None], EVEN_N, INT, tl.int32)
        if SP == 2:
            dk1, dv1, dst1 = _dkv_step_ds(dk1, dv1, k1, v1, key_add1, Q, DO, q_off1, do_off1, sq_n, sdo_n, LSE,
                                          DELTA, lo1, rows, offs_d, N, bias_ft, scale, HAS_KEY_ADD, EVEN_N,
                                          PREC)  # fmt: skip
            if WITH_DQ:
                dqp1 = tl.dot(tl.trans(dst1.to(k1.dtype)), k1, input_precision=PREC)
                _red(dq_rows1 + rows[:, None] * D, dqp1, inv_dq, (rows < N)[:, None] & (s0 + 1 < S), False, INT,
                     tl.int32)  # fmt: skip
            dst += dst1 * w1
        _red(
            dbt_cols + rows[None, :],
            dst,
            inv_db,
            col_ok[:, None] & (rows < N)[None, :],
            EVEN_N,
            INT,
            tl.int64,
        )
    st_ok = col_ok[:, None]
    dk_ptrs = cols[:, None] * sdk_n + offs_d[None, :]
    dv_ptrs = cols[:, None] * sdv_n + offs_d[None, :]
    tl.store(
        DK + b * sdk_b + s0 * sdk_s + h * sdk_h + dk_ptrs, (dk0 * scale).to(DK.dtype.element_ty), mask=st_ok
    )
    tl.store(DV + b * sdv_b + s0 * sdv_s + h * sdv_h + dv_ptrs, dv0.to(DV.dtype.element_ty), mask=st_ok)
    if SP == 2:
        ok1 = st_ok & (s0 + 1 < S)
        tl.store(DK + b * sdk_b + s1 * sdk_s + h * sdk_h + dk_ptrs, (dk1 * scale).to(DK.dtype.element_ty),
                 mask=ok1)  # fmt: skip
        tl.store(DV + b * sdv_b + s1 * sdv_s + h * sdv_h + dv_ptrs, dv1.to(DV.dtype.element_ty), mask=ok1)


@triton.jit
def _to_float_kernel(X, Y, INV, total, per_bh, H, SH, TN, mult, BLOCK: tl.constexpr, MODE: tl.constexpr):
    """Y = X / INV[b·h] · mult (fixed point → Y's dtype), Y contiguous. MODE 0: X [B·H, per_bh];
    1: X [B·H, TN, TN] transposed on the way; 2: X [B, S, H, N, D] (per_bh = N·D, SH = S·H)."""
    offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    ok = offs < total
    src = offs
    if MODE == 2:  # noqa: SIM108 (a Triton constexpr branch)
        bh = (offs // (SH * per_bh)) * H + (offs // per_bh) % H
    else:
        bh = offs // per_bh
    if MODE == 1:
        r = offs % per_bh
        src = bh * per_bh + (r % TN) * TN + r // TN
    x = tl.load(X + src, mask=ok, other=0).to(tl.float32)
    inv = tl.load(INV + bh, mask=ok, other=1.0)
    tl.store(Y + offs, (x / inv * mult).to(Y.dtype.element_ty), mask=ok)


# --------------------------------------------------------------------------------------------
# backward variants
# --------------------------------------------------------------------------------------------


def _finish(x: torch.Tensor, inv: torch.Tensor, like: torch.Tensor, mult: float, mode: int,
            integer: bool = True) -> torch.Tensor:  # fmt: skip
    """Fixed point (or an fp32 atomic buffer) → a contiguous tensor like ``like`` (see _to_float_kernel)."""
    y = torch.empty(like.shape, dtype=like.dtype, device=like.device)
    if not integer:
        inv = torch.ones_like(inv)
    if mode == 2:
        _, s, h, n, d = like.shape
        ints = (y.numel(), n * d, h, s * h, 2)
    else:
        n = like.shape[-1]
        ints = (y.numel(), n * n, 2, 2, n)
    block = 1024
    pba._launch(_to_float_kernel, (triton.cdiv(y.numel(), block), 1, 1), (x, y, inv), ints, mult, (block, mode),
                4, 1)  # fmt: skip
    return y


def backward_dq_db(do, q, k, v, bias, mask, out, lse, scale, cfg, integer=True):  # type: ignore[no-untyped-def]
    a = pba.prepare_backward(do, q, k, v, bias, mask, out, lse, scale)
    b, s, h, n, d = q.shape
    config = pba.default_config(d, q.dtype, q.device)
    inv_db, _, _ = grids(a, with_delta=False)
    dbi = torch.zeros((b * h, n, n), device=q.device, dtype=torch.int64 if integer else torch.float32)
    pba._launch(
        _dq_db_kernel, (triton.cdiv(n, cfg.block_m), triton.cdiv(s, cfg.sp), b * h),
        (a.q, a.k, a.v, a.bias, a.mask, a.out, a.do, a.lse, a.delta, a.dq, a.q, a.q, a.q, dbi, inv_db),
        (*a.q.stride()[:4], *a.k.stride()[:4], *a.v.stride()[:4], *a.out.stride()[:4], *a.do.stride()[:4],
         *a.dq.stride()[:4], *a.bias.stride(), *a.mask_strides, s, h, n),
        a.scale,
        (a.has_mask, pba._even(n, cfg.block_m, cfg.block_n), d, cfg.block_m, cfg.block_n, cfg.sp,
         pba._prec(q.dtype), integer),
        cfg.num_warps, cfg.num_stages,
    )  # fmt: skip
    db = _finish(dbi, inv_db, a.bias, 1.0, 0, integer=integer)
    pba.launch_dkv(a, config.dkv, config.dkv_bias_copy)
    return a.dq, a.dk, a.dv, db


def backward_dkv_db(do, q, k, v, bias, mask, out, lse, scale, cfg, integer=True, with_dq=False):  # type: ignore[no-untyped-def]
    a = pba.prepare_backward(do, q, k, v, bias, mask, out, lse, scale)
    b, s, h, n, d = q.shape
    config = pba.default_config(d, q.dtype, q.device)
    if with_dq:
        inv_db, inv_dq, _ = grids(a, with_delta=True)
        dqi = torch.zeros((b, s, h, n, d), device=q.device, dtype=torch.int32 if integer else torch.float32)
    else:
        pba.launch_dq(a, config.dq)
        inv_db, inv_dq, _ = grids(a, with_delta=False)
        dqi = a.q  # unused
    a.dk, a.dv = pba._empty_like_layout(a.k), pba._empty_like_layout(a.v)
    bias_t = a.bias
    if bias_t.stride(-2) != 1:
        bias_t = bias_t.transpose(-1, -2).contiguous().transpose(-1, -2)
    dbt = torch.zeros((b * h, n, n), device=q.device, dtype=torch.int64 if integer else torch.float32)
    pba._launch(
        _dkv_db_kernel, (triton.cdiv(n, cfg.block_n), triton.cdiv(s, cfg.sp), b * h),
        (a.q, a.k, a.v, bias_t, a.mask, a.do, a.lse, a.delta, a.dk, a.dv, dbt, dqi, inv_db, inv_dq),
        (*a.q.stride()[:4], *a.k.stride()[:4], *a.v.stride()[:4], *a.do.stride()[:4], *a.dk.stride()[:4],
         *a.dv.stride()[:4], *bias_t.stride(), *a.mask_strides, s, h, n),
        a.scale,
        (a.has_mask, pba._even(n, cfg.block_m, cfg.block_n), d, cfg.block_m, cfg.block_n, cfg.sp,
         pba._prec(q.dtype), integer, with_dq),
        cfg.num_warps, cfg.num_stages,
    )  # fmt: skip
    db = _finish(dbt, inv_db, a.bias, 1.0, 1, integer=integer)
    if with_dq:  # noqa: SIM108
        dq = _finish(dqi, inv_dq, a.q, a.scale, 2, integer=integer)
    else:
        dq = a.dq
    return dq, a.dk, a.dv, db


VARIANTS = {
    "dq+db": lambda *x, cfg: backward_dq_db(*x, cfg=cfg),
    "dq+db/f32": lambda *x, cfg: backward_dq_db(*x, cfg=cfg, integer=False),
    "dkv+db": lambda *x, cfg: backward_dkv_db(*x, cfg=cfg),
    "dkv+db/f32": lambda *x, cfg: backward_dkv_db(*x, cfg=cfg, integer=False),
    "dkv+dq+db": lambda *x, cfg: backward_dkv_db(*x, cfg=cfg, with_dq=True),
    "dkv+dq+db/f32": lambda *x, cfg: backward_dkv_db(*x, cfg=cfg, integer=False, with_dq=True),
}


def _inputs(b, s, h, n, d, dtype, device, seed=0, masked=False):  # type: ignore[no-untyped-def]
    g = torch.Generator(device="cpu").manual_seed(seed)
    q, k, v, do = (torch.randn(b, s, h, n, d, generator=g).to(device, dtype) for _ in range(4))
    bias = torch.randn(b, h, n, n, generator=g).to(device, dtype)
    mask = None
    if masked:
        mask = torch.rand(b, s, n, generator=g) > 0.2
        mask[..., 0] = True
        mask = mask.to(device)
    return q, k, v, bias, mask, do


def _rel(x: torch.Tensor, y: torch.Tensor) -> float:
    return ((x.float() - y.float()).abs().max() / y.float().abs().max().clamp_min(1e-30)).item()


def check() -> None:
    """Interpreter: every variant's four gradients against the shipped kernels' (fp32, fp16), and the
    integer variants bitwise repeatable."""
    assert os.environ.get("TRITON_INTERPRET") == "1", "run with TRITON_INTERPRET=1"
    scale = 32**-0.5
    for dtype in (torch.float32, torch.float16):
        for (b, s, h, n, d), masked in [((1, 3, 2, 37, 16), False), ((2, 5, 2, 33, 16), True),
                                        ((1, 4, 1, 64, 32), True)]:  # fmt: skip
            q, k, v, bias, mask, do = _inputs(b, s, h, n, d, dtype, "cpu", masked=masked)
            out, lse = pba.pair_bias_attention_forward(q, k, v, bias, mask, scale)
            ref = pba.pair_bias_attention_backward(do, q, k, v, bias, mask, out, lse, scale)
            for sp in (1, 2):
                cfg = pba.KernelConfig(16, 16, 1, 1, sp)
                for name, fn in VARIANTS.items():
                    got = fn(do, q, k, v, bias, mask, out, lse, scale, cfg=cfg)
                    tol = 1e-5 if dtype == torch.float32 else 2e-3
                    for g_name, x, y in zip(("dq", "dk", "dv", "dbias"), got, ref, strict=True):
                        err = _rel(x, y)
                        assert err < tol, (name, dtype, (b, s, h, n, d), masked, sp, g_name, err)
                    if "f32" not in name:
                        again = fn(do, q, k, v, bias, mask, out, lse, scale, cfg=cfg)
                        assert all(torch.equal(x, y) for x, y in zip(got, again, strict=True)), name
            print("ok", dtype, (b, s, h, n, d), "masked" if masked else "", flush=True)


def _time(fn, reps: int = 20) -> float:  # type: ignore[no-untyped-def]
    from triton.testing import do_bench

    return float(do_bench(fn, warmup=10, rep=reps * 10, return_mode="median"))


def ab(out_path: str) -> None:
    """H200: same-run timings of the shipped backward against each variant and tile; errors vs the
    shipped gradients and (N = 384) vs fp32; bitwise repeatability; extra peak memory."""
    dev = torch.device("cuda")
    scale = 32**-0.5
    results: dict[str, object] = {"started": time.strftime("%Y-%m-%dT%H:%M:%S"), "rows": []}
    rows: list[dict[str, object]] = results["rows"]  # type: ignore[assignment]
    shipped = pba.default_config(32, torch.bfloat16, dev)
    tiles = {
        "dq+db": [shipped.dq, pba.KernelConfig(64, 64, 4, 3, 2), pba.KernelConfig(128, 32, 8, 3, 2),
                  pba.KernelConfig(64, 32, 4, 3, 1)],
        "dkv+db": [shipped.dkv, pba.KernelConfig(64, 64, 4, 3, 2), pba.KernelConfig(32, 128, 8, 3, 2)],
        "dkv+dq+db": [shipped.dkv, pba.KernelConfig(64, 64, 4, 3, 2), pba.KernelConfig(32, 128, 8, 3, 2),
                      pba.KernelConfig(64, 64, 8, 3, 2)],
    }  # fmt: skip
    for n in (384, 768, 1024):
        q, k, v, bias, _, do = _inputs(1, n, 4, n, 32, torch.bfloat16, dev)
        out, lse = pba.pair_bias_attention_forward(q, k, v, bias, None, scale)
        args = (do, q, k, v, bias, None, out, lse, scale)
        ref = pba.pair_bias_attention_backward(*args)
        ref32 = None
        if n == 384:
            qf, kf, vf, bf = (t.float().requires_grad_() for t in (q, k, v, bias))
            o = torch.softmax(torch.einsum("bshid,bshjd->bshij", qf, kf) * scale + bf[:, None], -1)
            torch.einsum("bshij,bshjd->bshid", o, vf).backward(do.float())
            ref32 = (qf.grad, kf.grad, vf.grad, bf.grad)
            del o

        def shipped_bwd(args=args) -> None:  # type: ignore[no-untyped-def]
            pba.pair_bias_attention_backward(*args)

        t_fwd = _time(lambda args=args: pba.pair_bias_attention_forward(*args[1:5], None, scale))
        rows.append({"n": n, "variant": "shipped", "fwd_ms": t_fwd, "backward_ms": _time(shipped_bwd)})
        torch.cuda.reset_peak_memory_stats()
        base = torch.cuda.memory_allocated()
        shipped_bwd()
        rows[-1]["peak_extra_MiB"] = (torch.cuda.max_memory_allocated() - base) / 2**20
        a = pba.prepare_backward(*args)
        rows[-1]["grids_ms"] = _time(lambda a=a: grids(a, True))
        print(rows[-1], flush=True)
        for family, cfgs in tiles.items():
            for cfg in cfgs:
                for suffix in ("", "/f32"):
                    name = family + suffix
                    fn = VARIANTS[name]
                    row: dict[str, object] = {"n": n, "variant": name, "cfg": str(cfg)}
                    try:
                        got = fn(*args, cfg=cfg)
                        again = fn(*args, cfg=cfg)
                    except Exception as exc:  # a tile that does not compile or launch: record it
                        row["error"] = repr(exc)[:400]
                        rows.append(row)
                        print(row, flush=True)
                        continue
                    for g_name, x, y in zip(("dq", "dk", "dv", "dbias"), got, ref, strict=True):
                        row[f"{g_name}_rel_vs_shipped"] = _rel(x, y)
                    row["bitwise_repeatable"] = all(
                        torch.equal(x, y) for x, y in zip(got, again, strict=True)
                    )
                    if ref32 is not None:
                        for g_name, x, y, z in zip(("dq", "dk", "dv", "dbias"), got, ref, ref32, strict=True):
                            row[f"{g_name}_err"] = _rel(x, z)
                            row[f"{g_name}_err_shipped"] = _rel(y, z)
                    row["backward_ms"] = _time(lambda fn=fn, cfg=cfg, args=args: fn(*args, cfg=cfg))
                    torch.cuda.reset_peak_memory_stats()
                    base = torch.cuda.memory_allocated()
                    fn(*args, cfg=cfg)
                    row["peak_extra_MiB"] = (torch.cuda.max_memory_allocated() - base) / 2**20
                    rows.append(row)
                    print(row, flush=True)
                    Path(out_path).write_text(json.dumps(results, indent=1))
        rows.append({"n": n, "variant": "shipped (repeat)", "backward_ms": _time(shipped_bwd)})
        print(rows[-1], flush=True)
        Path(out_path).write_text(json.dumps(results, indent=1))
    results["finished"] = time.strftime("%Y-%m-%dT%H:%M:%S")
    Path(out_path).write_text(json.dumps(results, indent=1))


def sass() -> None:
    """CPU: compile the variants for sm_90 (the JIT's specialisation, N = 768) and count their loops."""
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from sass import compile_kernel, loop_mix, ptxas_warnings, sass_of  # benchmarks/dev/sass.py

    bf, f32, i64, i32 = torch.bfloat16, torch.float32, torch.int64, torch.int32
    n = s = 768
    h, d = 4, 32
    q_str, bias_str, bias_t = (
        (s * h * n * d, h * n * d, n * d, d),
        (h * n * n, n * n, n, 1),
        (h * n * n, n * n, 1, n),
    )

    def show(name: str, ck) -> None:  # type: ignore[no-untyped-def]
        text, regs, local = sass_of(ck)
        ops, body = loop_mix(text)
        red = sum(v for k, v in ops.items() if k.startswith(("RED", "ATOM")))
        print(f"{name}: {regs} regs, {local} B local, loop {body} instructions ({red} RED/ATOM, "
              f"{ops['F2I.S64.TRUNC']} F2I.S64, {ops['MUFU.EX2']} MUFU.EX2)", ptxas_warnings(ck))  # fmt: skip

    for integer in (True, False):
        for cfg in (pba.KernelConfig(64, 32, 4, 3, 2), pba.KernelConfig(64, 64, 4, 3, 2)):
            ck = compile_kernel(_dq_db_kernel, [bf] * 7 + [f32, f32] + [bf] * 4 + [i64 if integer else f32, f32],
                                (*q_str * 6, *bias_str, 0, 0, 0, s, h, n), 0.1,
                                (False, True, d, cfg.block_m, cfg.block_n, cfg.sp, "tf32", integer),
                                cfg.num_warps, cfg.num_stages)  # fmt: skip
            show(f"dq+db{'' if integer else '/f32'} {cfg}", ck)
        for with_dq in (False, True):
            for cfg in (pba.KernelConfig(32, 64, 4, 3, 2), pba.KernelConfig(64, 64, 4, 3, 2)):
                dq_t = (i32 if integer else f32) if with_dq else bf
                ck = compile_kernel(_dkv_db_kernel, [bf] * 6 + [f32, f32, bf, bf, i64 if integer else f32, dq_t, f32, f32],
                                    (*q_str * 6, *bias_t, 0, 0, 0, s, h, n), 0.1,
                                    (False, True, d, cfg.block_m, cfg.block_n, cfg.sp, "tf32", integer, with_dq),
                                    cfg.num_warps, cfg.num_stages)  # fmt: skip
                show(f"dkv+{'dq+' if with_dq else ''}db{'' if integer else '/f32'} {cfg}", ck)


if __name__ == "__main__":
    help_exit(__doc__)
    if sys.argv[1] == "check":
        check()
    elif sys.argv[1] == "sass":
        sass()
    elif sys.argv[1] == "ab":
        ab(sys.argv[2])
    else:
        raise SystemExit(__doc__)
