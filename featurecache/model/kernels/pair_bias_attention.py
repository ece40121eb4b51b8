"""Fused pair-bias attention (AF3 triangle attention / MSA row attention), forward and backward.

``out = softmax(q·kᵀ·scale + bias + mask) · v`` over q, k, v ``[B, S, H, N, D]``, a bias
``[B, H, N, N]`` shared by all S rows and a key mask ``[B, S, N]``. Flash-style: the
``[B, S, H, N, N]`` scores are never stored; the forward keeps the log-sum-exp per query row.

Kernels (all tiles in registers, fp32 accumulation, exp2 with log2(e) folded into the scale):

* ``_fwd_kernel``: one program per (query block, ``SP`` consecutive S rows, b·h); the bias tile is
  loaded once per key block and shared by the ``SP`` rows (bias traffic / SP).
* ``_bwd_dq_kernel``: per (query block, S rows, b·h): δ = rowsum(dO∘O), dq.
* ``_bwd_dkv_kernel``: per (key block, S rows, b·h), loop over query blocks: dk, dv.
* ``_bwd_dbias_kernel``: per (bias tile, S group, b·h), loop over the group's S rows: the bias
  gradient Σ_s dS_s accumulated in registers in a fixed order; groups (only as many as needed to
  fill the GPU) write fp32 partials that one ``sum`` reduces. No atomics: bitwise deterministic.

Masking: masked keys (and keys past N) get −inf, so their weight is exactly 0, as do keys whose
bias is −inf (softmax semantics). A query row with no key of finite score (every key masked, or a
−inf bias at every key) outputs 0 and gets lse = +inf, so it passes no gradient (the reference
does the same). Scores are scaled by log2(e) in fp32, so a finite bias below −FLT_MAX/log2(e)
(≈ −2.36e38, e.g. ``torch.finfo(torch.float32).min``) acts as −inf: a row with such a bias at
every key outputs 0 here, where the reference gives the uniform average of v. Rows with any key
above it are unaffected. Mask with −inf or a mask, or with a bias like −1e9.

The public entry point is :func:`pair_bias_attention`. Eagerly it runs
:class:`PairBiasAttentionFunction` (a ``torch.autograd.Function``); under ``torch.compile`` it
calls the ``featurecache::`` custom ops registered with ``torch.library`` (autograd via
``register_autograd``), which ``torch.library.opcheck`` tests and the compiler treats as opaque.
Both paths run the same launchers.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch
import triton
import triton.language as tl

from featurecache.errors import KernelShapeError
from featurecache.model.kernels.autograd import first_order_only
from featurecache.model.kernels.grid import check_devices, dbias_groups, interpreting
from featurecache.model.kernels.launch import ConfigOverrides
from featurecache.model.kernels.launch import dot_precision as _prec

log = logging.getLogger(__name__)

LOG2E = 1.4426950408889634
_LOG2E = tl.constexpr(LOG2E)  # what kernels see (compiled kernels only read constexpr globals)
#: the forward's running row max starts here (−FLT_MAX), not at −inf: a row whose keys so far all
#: score −inf (a −inf bias, masked keys) keeps a finite max, so exp2(s − m) is exp2(−inf) = 0, never
#: exp2(−inf + inf) = NaN, with no per-block guard
_M_FLOOR = tl.constexpr(-3.4028234663852886e38)
SUPPORTED_HEAD_DIMS = (16, 32, 64)


# --------------------------------------------------------------------------------------------
# kernels
#
# Scores are exponentiated with exp2. The forward works in log2 units (the bias tile is scaled by
# log2 e once and, with two S rows per program, shared by both); dq, dk/dv and dbias keep s in
# natural units (s·log2 e − lse is one FMA; dk/dv converts its bias tile to fp32 once for both S
# rows, dq and dbias keep it in the input dtype until used). Natural units in the forward were
# slower (run 27). Loads that feed a tl.dot are pipelined by Triton; the small vectors that
# do not (key mask; lse, δ in dbias) are prefetched one iteration ahead ("_nxt"). The dk/dv kernel
# sits at the register limit, so it prefetches nothing. Each choice was timed on the H200
# (KERNEL_NOTES.md).
# --------------------------------------------------------------------------------------------


@triton.jit
def _program_rows(S, H, SP: tl.constexpr):
    """(b, h, s0, s1) of a program over (·, S rows, b·h): its SP consecutive S rows start at s0;
    s1 = s0 + 1 is clamped to S − 1 (with SP == 2 and S odd the last program recomputes row S − 1
    and does not store it)."""
    pid_bh = tl.program_id(2).to(tl.int64)
    s0 = tl.program_id(1).to(tl.int64) * SP
    return pid_bh // H, pid_bh % H, s0, tl.minimum(s0 + 1, S - 1)


@triton.jit
def _kv_mask_offsets(b, s, h, sk_b, sk_s, sk_h, sv_b, sv_s, sv_h, sm_b, sm_s):
    """Offsets of one (b, s, h)'s K and V rows and of its key-mask row."""
    return b * sk_b + s * sk_s + h * sk_h, b * sv_b + s * sv_s + h * sv_h, b * sm_b + s * sm_s


@triton.jit
def _key_add(MASK, mask_off, sm_n, cols, N, HAS_MASK: tl.constexpr):
    """[BLOCK_N] fp32: 0 for a real key, −inf for a masked key or a column past N."""
    ok = cols < N
    if HAS_MASK:
        m = tl.load(MASK + mask_off + cols * sm_n, mask=ok, other=0)
        ok = ok & (m != 0)
    return tl.where(ok, 0.0, float("-inf"))


@triton.jit
def _bias_tile(bias_rows, s_col, row_ok, cols, N, EVEN_N: tl.constexpr):
    """Bias tile [rows, cols] in the input dtype (rows fixed by ``bias_rows``); 0 outside N×N."""
    if EVEN_N:
        return tl.load(bias_rows + cols[None, :] * s_col)
    return tl.load(bias_rows + cols[None, :] * s_col, mask=row_ok[:, None] & (cols < N)[None, :], other=0.0)


@triton.jit
def _row_stats(LSE, DELTA, off, rows, N):
    """lse (+inf past N: zero probability) and δ of some query rows of one (b, s, h)."""
    ok = rows < N
    return (tl.load(LSE + off + rows, mask=ok, other=float("inf")),
            tl.load(DELTA + off + rows, mask=ok, other=0.0))  # fmt: skip


@triton.jit
def _kv_tiles(K, V, k_off, v_off, sk_n, sv_n, cols, offs_d, N, EVEN_N: tl.constexpr):
    if EVEN_N:
        k = tl.load(K + k_off + cols[:, None] * sk_n + offs_d[None, :])
        v = tl.load(V + v_off + cols[:, None] * sv_n + offs_d[None, :])
    else:
        k = tl.load(K + k_off + cols[:, None] * sk_n + offs_d[None, :], mask=(cols < N)[:, None], other=0.0)
        v = tl.load(V + v_off + cols[:, None] * sv_n + offs_d[None, :], mask=(cols < N)[:, None], other=0.0)
    return k, v


@triton.jit
def _fwd_step(
    acc, m_i, l_i, q, K, V, k_off, v_off, sk_n, sv_n, cols, offs_d, N, bias2, key_add, qk_scale,
    HAS_KEY_ADD: tl.constexpr, EVEN_N: tl.constexpr, PREC: tl.constexpr,
):  # fmt: skip
    """One key block of the online softmax for one S row (log2 units: bias2 = bias·log2 e). m_i
    starts at −FLT_MAX (``_M_FLOOR``), so m_new is finite even when every score so far is −inf."""
    k, v = _kv_tiles(K, V, k_off, v_off, sk_n, sv_n, cols, offs_d, N, EVEN_N)
    s = tl.dot(q, tl.trans(k), input_precision=PREC) * qk_scale + bias2
    if HAS_KEY_ADD:
        s += key_add[None, :]
    m_new = tl.maximum(m_i, tl.max(s, 1))
    p = tl.math.exp2(s - m_new[:, None])
    alpha = tl.math.exp2(m_i - m_new)
    l_i = l_i * alpha + tl.sum(p, 1)
    acc = acc * alpha[:, None] + tl.dot(p.to(v.dtype), v, input_precision=PREC)
    return acc, m_new, l_i


@triton.jit
def _fwd_finish(
    acc, m_i, l_i, OUT, o_off, so_n, LSE, lse_off, rows, offs_d, N, store_ok, row_on, G, g_off, sg_n,
    GATED: tl.constexpr,
):  # fmt: skip
    empty = (l_i == 0.0) | (row_on == 0)  # no real key, or a masked-out row: output 0, lse +inf
    out = tl.where(empty[:, None], 0.0, acc / tl.where(empty, 1.0, l_i)[:, None])
    lse = tl.where(empty, float("inf"), m_i + tl.math.log2(tl.where(empty, 1.0, l_i)))
    row_ok = (rows < N) & store_ok
    if GATED:  # out = sigmoid(gate) * attention; exp2 + an approximate division: tl.sigmoid's IEEE
        # division made the forward 0.2 ms slower at N = 768, this 0.13 (run 52, KERNEL_NOTES.md)
        g = tl.load(G + g_off + rows[:, None] * sg_n + offs_d[None, :], mask=row_ok[:, None], other=0.0)
        out = tl.fdiv(out, 1.0 + tl.math.exp2(g.to(tl.float32) * -_LOG2E), ieee_rounding=False)
    tl.store(OUT + o_off + rows[:, None] * so_n + offs_d[None, :], out.to(OUT.dtype.element_ty),
             mask=row_ok[:, None])  # fmt: skip
    tl.store(LSE + lse_off + rows, lse, mask=row_ok)


@triton.jit
def _fwd_kernel(
    Q, K, V,  # [B, S, H, N, D] (last dim contiguous)
    BIAS,  # [B, H, N, N]
    MASK,  # [B, S, N] uint8 (1 = real key); unused without HAS_MASK
    ROW_MASK,  # [B, S] uint8 (0 = row masked out); unused without HAS_ROW_MASK
    OUT,  # [B, S, H, N, D], q's dtype
    LSE,  # [B, S, H, N] fp32, log2 units
    G,  # [B, S, H, N, D] gate logits (GATED: OUT = sigmoid(G) * attention); unused otherwise
    sq_b, sq_s, sq_h, sq_n, sk_b, sk_s, sk_h, sk_n, sv_b, sv_s, sv_h, sv_n,
    so_b, so_s, so_h, so_n, sb_b, sb_h, sb_i, sb_j, sm_b, sm_s, sm_n, sr_b, sr_s, sg_b, sg_s, sg_h, sg_n,
    S, H, N, scale,
    HAS_MASK: tl.constexpr, HAS_ROW_MASK: tl.constexpr, EVEN_N: tl.constexpr,
    D: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, SP: tl.constexpr, PREC: tl.constexpr,
    GATED: tl.constexpr, IDX64: tl.constexpr,
):  # fmt: skip
    HAS_KEY_ADD: tl.constexpr = HAS_MASK or not EVEN_N
    qk_scale = scale * _LOG2E
    pid_m = tl.program_id(0)
    b, h, s0, s1 = _program_rows(S, H, SP)

    rows = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = tl.arange(0, BLOCK_N)
    if IDX64:  # an element offset reaches 2**31: row/column tile offsets (rows · stride) in int64
        rows = rows.to(tl.int64)
        offs_n = offs_n.to(tl.int64)
    offs_d = tl.arange(0, D)
    row_ok = rows < N
    k_off0, v_off0, mo0 = _kv_mask_offsets(b, s0, h, sk_b, sk_s, sk_h, sv_b, sv_s, sv_h, sm_b, sm_s)
    k_off1, v_off1, mo1 = _kv_mask_offsets(b, s1, h, sk_b, sk_s, sk_h, sv_b, sv_s, sv_h, sm_b, sm_s)

    q0 = tl.load(Q + b * sq_b + s0 * sq_s + h * sq_h + rows[:, None] * sq_n + offs_d[None, :],
                 mask=row_ok[:, None], other=0.0)  # fmt: skip
    acc0 = tl.zeros([BLOCK_M, D], tl.float32)
    m0 = tl.full([BLOCK_M], _M_FLOOR, tl.float32)
    l0 = tl.zeros([BLOCK_M], tl.float32)
    ka0_nxt = _key_add(MASK, mo0, sm_n, offs_n, N, HAS_MASK)
    if SP == 2:
        q1 = tl.load(Q + b * sq_b + s1 * sq_s + h * sq_h + rows[:, None] * sq_n + offs_d[None, :],
                     mask=row_ok[:, None], other=0.0)  # fmt: skip
        acc1 = tl.zeros([BLOCK_M, D], tl.float32)
        m1 = tl.full([BLOCK_M], _M_FLOOR, tl.float32)
        l1 = tl.zeros([BLOCK_M], tl.float32)
        ka1_nxt = _key_add(MASK, mo1, sm_n, offs_n, N, HAS_MASK)

    bias_rows = BIAS + b * sb_b + h * sb_h + rows[:, None] * sb_i
    for start_n in range(0, N, BLOCK_N):
        cols = start_n + offs_n
        bias2 = _bias_tile(bias_rows, sb_j, row_ok, cols, N, EVEN_N).to(tl.float32) * _LOG2E
        ka0 = ka0_nxt
        ka0_nxt = _key_add(MASK, mo0, sm_n, cols + BLOCK_N, N, HAS_MASK)
        acc0, m0, l0 = _fwd_step(acc0, m0, l0, q0, K, V, k_off0, v_off0, sk_n, sv_n, cols, offs_d, N, bias2, ka0,
                                 qk_scale, HAS_KEY_ADD, EVEN_N, PREC)  # fmt: skip
        if SP == 2:
            ka1 = ka1_nxt
            ka1_nxt = _key_add(MASK, mo1, sm_n, cols + BLOCK_N, N, HAS_MASK)
            acc1, m1, l1 = _fwd_step(acc1, m1, l1, q1, K, V, k_off1, v_off1, sk_n, sv_n, cols, offs_d, N, bias2,
                                     ka1, qk_scale, HAS_KEY_ADD, EVEN_N, PREC)  # fmt: skip

    lse_row = (b * S * H + h) * N  # LSE is contiguous [B, S, H, N]
    on0 = tl.load(ROW_MASK + b * sr_b + s0 * sr_s) if HAS_ROW_MASK else 1
    _fwd_finish(acc0, m0, l0, OUT, b * so_b + s0 * so_s + h * so_h, so_n, LSE, lse_row + s0 * H * N,
                rows, offs_d, N, True, on0, G, b * sg_b + s0 * sg_s + h * sg_h, sg_n, GATED)  # fmt: skip
    if SP == 2:
        on1 = tl.load(ROW_MASK + b * sr_b + s1 * sr_s) if HAS_ROW_MASK else 1
        _fwd_finish(acc1, m1, l1, OUT, b * so_b + s1 * so_s + h * so_h, so_n, LSE, lse_row + s1 * H * N,
                    rows, offs_d, N, s0 + 1 < S, on1, G, b * sg_b + s1 * sg_s + h * sg_h, sg_n, GATED)  # fmt: skip


@triton.jit
def _dq_step(
    dq, q, do, lse, delta, K, V, k_off, v_off, sk_n, sv_n, cols, offs_d, N, bias, key_add, scale,
    HAS_KEY_ADD: tl.constexpr, EVEN_N: tl.constexpr, PREC: tl.constexpr,
):  # fmt: skip
    k, v = _kv_tiles(K, V, k_off, v_off, sk_n, sv_n, cols, offs_d, N, EVEN_N)
    s = tl.dot(q, tl.trans(k), input_precision=PREC) * scale + bias.to(tl.float32)
    if HAS_KEY_ADD:
        s += key_add[None, :]
    p = tl.math.exp2(s * _LOG2E - lse[:, None])
    dp = tl.dot(do, tl.trans(v), input_precision=PREC)
    ds = p * (dp - delta[:, None])
    dq += tl.dot(ds.to(k.dtype), k, input_precision=PREC)
    return dq


@triton.jit
def _dq_prologue(
    Q, OUT, DO, LSE, DELTA, q_off, o_off, do_off, sq_n, so_n, sdo_n, lse_off, rows, offs_d, N,
    G, DOU, DG, g_off, dou_off, dg_off, sg_n, sdou_n, sdg_n, store_ok, GATED: tl.constexpr,
):  # fmt: skip
    """Load q, dO and lse of one S row's query block; compute and store δ = rowsum(dO∘O).

    GATED (OUT = σ(g)∘O', DO its gradient): δ = rowsum(dO∘σ(g)∘O') = rowsum(DO∘OUT) all the same;
    the attention's own output gradient DO∘σ(g) is returned and stored to DOU (the dk/dv and bias
    kernels read it), and the gate's gradient DO∘O'∘σ'(g) = DO∘OUT∘(1 − σ(g)) to DG."""
    row_ok = rows < N
    q = tl.load(Q + q_off + rows[:, None] * sq_n + offs_d[None, :], mask=row_ok[:, None], other=0.0)
    do = tl.load(DO + do_off + rows[:, None] * sdo_n + offs_d[None, :], mask=row_ok[:, None], other=0.0)
    o = tl.load(OUT + o_off + rows[:, None] * so_n + offs_d[None, :], mask=row_ok[:, None], other=0.0)
    do_o = do.to(tl.float32) * o.to(tl.float32)
    delta = tl.sum(do_o, 1)
    if GATED:
        g = tl.load(G + g_off + rows[:, None] * sg_n + offs_d[None, :], mask=row_ok[:, None], other=0.0)
        sig = tl.fdiv(1.0, 1.0 + tl.math.exp2(g.to(tl.float32) * -_LOG2E), ieee_rounding=False)
        st = row_ok[:, None] & store_ok
        tl.store(DG + dg_off + rows[:, None] * sdg_n + offs_d[None, :], (do_o * (1.0 - sig)).to(DG.dtype.element_ty),
                 mask=st)  # fmt: skip
        dou_ptrs = DOU + dou_off + rows[:, None] * sdou_n + offs_d[None, :]
        tl.store(dou_ptrs, (do.to(tl.float32) * sig).to(do.dtype), mask=st)
        tl.debug_barrier()  # read back as the ungated kernel loads dO (keeps its registers: 128, not 138)
        do = tl.load(dou_ptrs, mask=row_ok[:, None], other=0.0)
    lse = tl.load(LSE + lse_off + rows, mask=row_ok, other=float("inf"))
    tl.store(DELTA + lse_off + rows, delta, mask=row_ok)
    return q, do, lse, delta


@triton.jit
def _bwd_dq_kernel(
    Q, K, V,  # [B, S, H, N, D]
    BIAS,  # [B, H, N, N]
    MASK,  # [B, S, N] uint8
    OUT, DO,  # [B, S, H, N, D]
    LSE, DELTA,  # [B, S, H, N] fp32 (DELTA written here)
    DQ,  # [B, S, H, N, D]
    G, DOU, DG,  # GATED: gate logits (in), the attention's output gradient and the gate's (out)
    sq_b, sq_s, sq_h, sq_n, sk_b, sk_s, sk_h, sk_n, sv_b, sv_s, sv_h, sv_n,
    so_b, so_s, so_h, so_n, sdo_b, sdo_s, sdo_h, sdo_n, sdq_b, sdq_s, sdq_h, sdq_n,
    sb_b, sb_h, sb_i, sb_j, sm_b, sm_s, sm_n,
    sg_b, sg_s, sg_h, sg_n, sdou_b, sdou_s, sdou_h, sdou_n, sdg_b, sdg_s, sdg_h, sdg_n,
    S, H, N, scale,
    HAS_MASK: tl.constexpr, EVEN_N: tl.constexpr, D: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, SP: tl.constexpr, PREC: tl.constexpr, GATED: tl.constexpr,
    IDX64: tl.constexpr,
):  # fmt: skip
    HAS_KEY_ADD: tl.constexpr = HAS_MASK or not EVEN_N
    pid_m = tl.program_id(0)
    b, h, s0, s1 = _program_rows(S, H, SP)
    rows = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = tl.arange(0, BLOCK_N)
    if IDX64:  # as in the forward
        rows = rows.to(tl.int64)
        offs_n = offs_n.to(tl.int64)
    offs_d = tl.arange(0, D)
    row_ok = rows < N
    lse_row = (b * S * H + h) * N
    k_off0, v_off0, mo0 = _kv_mask_offsets(b, s0, h, sk_b, sk_s, sk_h, sv_b, sv_s, sv_h, sm_b, sm_s)
    k_off1, v_off1, mo1 = _kv_mask_offsets(b, s1, h, sk_b, sk_s, sk_h, sv_b, sv_s, sv_h, sm_b, sm_s)

    q0, do0, lse0, delta0 = _dq_prologue(
        Q, OUT, DO, LSE, DELTA, b * sq_b + s0 * sq_s + h * sq_h, b * so_b + s0 * so_s + h * so_h,
        b * sdo_b + s0 * sdo_s + h * sdo_h, sq_n, so_n, sdo_n, lse_row + s0 * H * N, rows, offs_d, N,
        G, DOU, DG, b * sg_b + s0 * sg_s + h * sg_h, b * sdou_b + s0 * sdou_s + h * sdou_h,
        b * sdg_b + s0 * sdg_s + h * sdg_h, sg_n, sdou_n, sdg_n, True, GATED,
    )  # fmt: skip
    dq0 = tl.zeros([BLOCK_M, D], tl.float32)
    ka0_nxt = _key_add(MASK, mo0, sm_n, offs_n, N, HAS_MASK)
    if SP == 2:
        q1, do1, lse1, delta1 = _dq_prologue(
            Q, OUT, DO, LSE, DELTA, b * sq_b + s1 * sq_s + h * sq_h, b * so_b + s1 * so_s + h * so_h,
            b * sdo_b + s1 * sdo_s + h * sdo_h, sq_n, so_n, sdo_n, lse_row + s1 * H * N, rows, offs_d, N,
            G, DOU, DG, b * sg_b + s1 * sg_s + h * sg_h, b * sdou_b + s1 * sdou_s + h * sdou_h,
            b * sdg_b + s1 * sdg_s + h * sdg_h, sg_n, sdou_n, sdg_n, s0 + 1 < S, GATED,
        )  # fmt: skip
        dq1 = tl.zeros([BLOCK_M, D], tl.float32)
        ka1_nxt = _key_add(MASK, mo1, sm_n, offs_n, N, HAS_MASK)

    bias_rows = BIAS + b * sb_b + h * sb_h + rows[:, None] * sb_i
    for start_n in range(0, N, BLOCK_N):
        cols = start_n + offs_n
        bias = _bias_tile(bias_rows, sb_j, row_ok, cols, N, EVEN_N)
        ka0 = ka0_nxt
        ka0_nxt = _key_add(MASK, mo0, sm_n, cols + BLOCK_N, N, HAS_MASK)
        dq0 = _dq_step(dq0, q0, do0, lse0, delta0, K, V, k_off0, v_off0, sk_n, sv_n, cols, offs_d, N, bias, ka0,
                       scale, HAS_KEY_ADD, EVEN_N, PREC)  # fmt: skip
        if SP == 2:
            ka1 = ka1_nxt
            ka1_nxt = _key_add(MASK, mo1, sm_n, cols + BLOCK_N, N, HAS_MASK)
            dq1 = _dq_step(dq1, q1, do1, lse1, delta1, K, V, k_off1, v_off1, sk_n, sv_n, cols, offs_d, N, bias,
                           ka1, scale, HAS_KEY_ADD, EVEN_N, PREC)  # fmt: skip

    dq_ptrs = rows[:, None] * sdq_n + offs_d[None, :]
    tl.store(DQ + b * sdq_b + s0 * sdq_s + h * sdq_h + dq_ptrs, (dq0 * scale).to(DQ.dtype.element_ty),
             mask=row_ok[:, None])  # fmt: skip
    if SP == 2:
        tl.store(DQ + b * sdq_b + s1 * sdq_s + h * sdq_h + dq_ptrs, (dq1 * scale).to(DQ.dtype.element_ty),
                 mask=row_ok[:, None] & (s0 + 1 < S))  # fmt: skip


@triton.jit
def _dkv_step(
    dk, dv, k, v, key_add, Q, DO, q_off, do_off, sq_n, sdo_n, LSE, DELTA, lse_off, rows, offs_d, N, bias_ft,
    scale, HAS_KEY_ADD: tl.constexpr, EVEN_N: tl.constexpr, PREC: tl.constexpr,
):  # fmt: skip
    """One query block for one S row, in the transposed [key, query] domain. Natural units: the
    bias tile is converted to fp32 once for both S rows and exp2's argument is one FMA
    (KERNEL_NOTES.md, run 27: −2 to −4 % against log2 units)."""
    if EVEN_N:
        q = tl.load(Q + q_off + rows[:, None] * sq_n + offs_d[None, :])
        do = tl.load(DO + do_off + rows[:, None] * sdo_n + offs_d[None, :])
        lse = tl.load(LSE + lse_off + rows)
        delta = tl.load(DELTA + lse_off + rows)
    else:
        row_ok = rows < N
        q = tl.load(Q + q_off + rows[:, None] * sq_n + offs_d[None, :], mask=row_ok[:, None], other=0.0)
        do = tl.load(DO + do_off + rows[:, None] * sdo_n + offs_d[None, :], mask=row_ok[:, None], other=0.0)
        lse, delta = _row_stats(LSE, DELTA, lse_off, rows, N)
    st = tl.dot(k, tl.trans(q), input_precision=PREC) * scale + bias_ft
    if HAS_KEY_ADD:
        st += key_add[:, None]
    pt = tl.math.exp2(st * _LOG2E - lse[None, :])
    dv += tl.dot(pt.to(do.dtype), do, input_precision=PREC)
    dpt = tl.dot(v, tl.trans(do), input_precision=PREC)
    dst = pt * (dpt - delta[None, :])
    dk += tl.dot(dst.to(q.dtype), q, input_precision=PREC)
    return dk, dv


@triton.jit
def _dkv_load(K, V, k_off, v_off, sk_n, sv_n, cols, offs_d, N):
    col_ok = (cols < N)[:, None]
    k = tl.load(K + k_off + cols[:, None] * sk_n + offs_d[None, :], mask=col_ok, other=0.0)
    v = tl.load(V + v_off + cols[:, None] * sv_n + offs_d[None, :], mask=col_ok, other=0.0)
    return k, v


@triton.jit
def _bwd_dkv_kernel(
    Q, K, V,  # [B, S, H, N, D]
    BIAS,  # [B, H, N, N]
    MASK,  # [B, S, N] uint8
    DO,  # [B, S, H, N, D]
    LSE, DELTA,  # [B, S, H, N] fp32
    DK, DV,  # [B, S, H, N, D]
    sq_b, sq_s, sq_h, sq_n, sk_b, sk_s, sk_h, sk_n, sv_b, sv_s, sv_h, sv_n,
    sdo_b, sdo_s, sdo_h, sdo_n, sdk_b, sdk_s, sdk_h, sdk_n, sdv_b, sdv_s, sdv_h, sdv_n,
    sb_b, sb_h, sb_i, sb_j, sm_b, sm_s, sm_n,
    S, H, N, scale,
    HAS_MASK: tl.constexpr, EVEN_N: tl.constexpr, D: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, SP: tl.constexpr, PREC: tl.constexpr, IDX64: tl.constexpr,
):  # fmt: skip
    HAS_KEY_ADD: tl.constexpr = HAS_MASK or not EVEN_N
    pid_n = tl.program_id(0)
    b, h, s0, s1 = _program_rows(S, H, SP)
    cols = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    offs_m = tl.arange(0, BLOCK_M)
    if IDX64:  # as in the forward
        cols = cols.to(tl.int64)
        offs_m = offs_m.to(tl.int64)
    offs_d = tl.arange(0, D)
    col_ok = cols < N
    lse_row = (b * S * H + h) * N
    lo0, lo1 = lse_row + s0 * H * N, lse_row + s1 * H * N
    q_off0, do_off0 = b * sq_b + s0 * sq_s + h * sq_h, b * sdo_b + s0 * sdo_s + h * sdo_h
    q_off1, do_off1 = b * sq_b + s1 * sq_s + h * sq_h, b * sdo_b + s1 * sdo_s + h * sdo_h

    k_off0, v_off0, mo0 = _kv_mask_offsets(b, s0, h, sk_b, sk_s, sk_h, sv_b, sv_s, sv_h, sm_b, sm_s)
    k0, v0 = _dkv_load(K, V, k_off0, v_off0, sk_n, sv_n, cols, offs_d, N)
    key_add0 = _key_add(MASK, mo0, sm_n, cols, N, HAS_MASK)
    dk0 = tl.zeros([BLOCK_N, D], tl.float32)
    dv0 = tl.zeros([BLOCK_N, D], tl.float32)
    if SP == 2:
        k_off1, v_off1, mo1 = _kv_mask_offsets(b, s1, h, sk_b, sk_s, sk_h, sv_b, sv_s, sv_h, sm_b, sm_s)
        k1, v1 = _dkv_load(K, V, k_off1, v_off1, sk_n, sv_n, cols, offs_d, N)
        key_add1 = _key_add(MASK, mo1, sm_n, cols, N, HAS_MASK)
        dk1 = tl.zeros([BLOCK_N, D], tl.float32)
        dv1 = tl.zeros([BLOCK_N, D], tl.float32)

    bias_cols = BIAS + b * sb_b + h * sb_h + cols[:, None] * sb_j  # transposed tiles [key, query]
    for start_m in range(0, N, BLOCK_M):
        rows = start_m + offs_m
        bias_ft = _bias_tile(bias_cols, sb_i, col_ok, rows, N, EVEN_N).to(tl.float32)
        dk0, dv0 = _dkv_step(dk0, dv0, k0, v0, key_add0, Q, DO, q_off0, do_off0, sq_n, sdo_n, LSE, DELTA, lo0,
                             rows, offs_d, N, bias_ft, scale, HAS_KEY_ADD, EVEN_N, PREC)  # fmt: skip
        if SP == 2:
            dk1, dv1 = _dkv_step(dk1, dv1, k1, v1, key_add1, Q, DO, q_off1, do_off1, sq_n, sdo_n, LSE, DELTA,
                                 lo1, rows, offs_d, N, bias_ft, scale, HAS_KEY_ADD, EVEN_N, PREC)  # fmt: skip

    st_ok = col_ok[:, None]
    dk_ptrs = cols[:, None] * sdk_n + offs_d[None, :]
    dv_ptrs = cols[:, None] * sdv_n + offs_d[None, :]
    tl.store(
        DK + b * sdk_b + s0 * sdk_s + h * sdk_h + dk_ptrs,
        (dk0 * scale).to(DK.dtype.element_ty),
        mask=st_ok,
    )
    tl.store(DV + b * sdv_b + s0 * sdv_s + h * sdv_h + dv_ptrs, dv0.to(DV.dtype.element_ty), mask=st_ok)
    if SP == 2:
        ok1 = st_ok & (s0 + 1 < S)
        tl.store(DK + b * sdk_b + s1 * sdk_s + h * sdk_h + dk_ptrs, (dk1 * scale).to(DK.dtype.element_ty),
                 mask=ok1)  # fmt: skip
        tl.store(DV + b * sdv_b + s1 * sdv_s + h * sdv_h + dv_ptrs, dv1.to(DV.dtype.element_ty), mask=ok1)


@triton.jit
def _bwd_dbias_kernel(
    Q, K, V,  # [B, S, H, N, D]
    BIAS,  # [B, H, N, N]
    MASK,  # [B, S, N] uint8
    DO,  # [B, S, H, N, D]
    LSE, DELTA,  # [B, S, H, N] fp32
    DB,  # [G, B, H, N, N] (contiguous): fp32 partial sums, or the final gradient when G == 1
    sq_b, sq_s, sq_h, sq_n, sk_b, sk_s, sk_h, sk_n, sv_b, sv_s, sv_h, sv_n,
    sdo_b, sdo_s, sdo_h, sdo_n, sb_b, sb_h, sb_i, sb_j, sm_b, sm_s, sm_n,
    S, H, N, S_PER_GROUP, scale,
    HAS_MASK: tl.constexpr, EVEN_N: tl.constexpr, D: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, PREC: tl.constexpr, IDX64: tl.constexpr,
):  # fmt: skip
    HAS_KEY_ADD: tl.constexpr = HAS_MASK or not EVEN_N
    pid_t = tl.program_id(0)
    pid_g = tl.program_id(1).to(tl.int64)
    pid_bh = tl.program_id(2).to(tl.int64)
    b = pid_bh // H
    h = pid_bh % H
    n_blocks_n = tl.cdiv(N, BLOCK_N)
    rows = (pid_t // n_blocks_n) * BLOCK_M + tl.arange(0, BLOCK_M)
    cols = (pid_t % n_blocks_n) * BLOCK_N + tl.arange(0, BLOCK_N)
    if IDX64:  # as in the forward
        rows = rows.to(tl.int64)
        cols = cols.to(tl.int64)
    offs_d = tl.arange(0, D)
    row_ok = rows < N
    col_ok = cols < N
    bias = _bias_tile(BIAS + b * sb_b + h * sb_h + rows[:, None] * sb_i, sb_j, row_ok, cols, N, EVEN_N).to(
        tl.float32
    )

    acc = tl.zeros([BLOCK_M, BLOCK_N], tl.float32)
    s_start = pid_g * S_PER_GROUP
    s_end = tl.minimum(s_start + S_PER_GROUP, S)
    lse_nxt, dl_nxt = _row_stats(LSE, DELTA, ((b * S + s_start) * H + h) * N, rows, N)
    ka_nxt = _key_add(MASK, b * sm_b + s_start * sm_s, sm_n, cols, N, HAS_MASK)
    for s in range(s_start, s_end):
        lse, delta, key_add = lse_nxt, dl_nxt, ka_nxt
        s_nxt = tl.minimum(s + 1, S - 1)
        lse_nxt, dl_nxt = _row_stats(LSE, DELTA, ((b * S + s_nxt) * H + h) * N, rows, N)
        ka_nxt = _key_add(MASK, b * sm_b + s_nxt * sm_s, sm_n, cols, N, HAS_MASK)
        q_ptrs = Q + b * sq_b + s * sq_s + h * sq_h + rows[:, None] * sq_n + offs_d[None, :]
        do_ptrs = DO + b * sdo_b + s * sdo_s + h * sdo_h + rows[:, None] * sdo_n + offs_d[None, :]
        if EVEN_N:
            q = tl.load(q_ptrs)
            do = tl.load(do_ptrs)
        else:
            q = tl.load(q_ptrs, mask=row_ok[:, None], other=0.0)
            do = tl.load(do_ptrs, mask=row_ok[:, None], other=0.0)
        k, v = _kv_tiles(K, V, b * sk_b + s * sk_s + h * sk_h, b * sv_b + s * sv_s + h * sv_h, sk_n, sv_n, cols,
                         offs_d, N, EVEN_N)  # fmt: skip
        st = tl.dot(q, tl.trans(k), input_precision=PREC) * scale + bias
        if HAS_KEY_ADD:
            st += key_add[None, :]
        p = tl.math.exp2(st * _LOG2E - lse[:, None])
        dp = tl.dot(do, tl.trans(v), input_precision=PREC)
        acc += p * (dp - delta[:, None])

    db_ptrs = DB + ((pid_g * tl.num_programs(2) + pid_bh) * N + rows[:, None]) * N + cols[None, :]
    tl.store(db_ptrs, acc.to(DB.dtype.element_ty), mask=row_ok[:, None] & col_ok[None, :])


# --------------------------------------------------------------------------------------------
# launch configuration
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class KernelConfig:
    """Tile shape and launch parameters of one kernel.

    ``sp``: S rows per program (1 or 2; bias tiles are shared between them). ``block_m`` tiles
    queries, ``block_n`` keys.
    """

    block_m: int
    block_n: int
    num_warps: int = 4
    num_stages: int = 2
    sp: int = 1


@dataclass(frozen=True)
class AttentionConfig:
    fwd: KernelConfig
    dq: KernelConfig
    dkv: KernelConfig
    dbias: KernelConfig
    #: the bias-gradient grid aims at this many programs (S is split into groups to get there)
    dbias_target_programs: int = 264
    #: the dk/dv kernel reads its [key, query] bias tiles from a transposed copy of the bias (one
    #: [B, H, N, N] copy per backward), so the tile's fast axis is contiguous in memory and its
    #: move into the MMA layout needs no 16-bit transposition (KERNEL_NOTES.md, run 11)
    dkv_bias_copy: bool = True


_OVERRIDES: ConfigOverrides[AttentionConfig] = ConfigOverrides()


def set_default_config(head_dim: int, dtype: torch.dtype, config: AttentionConfig | None) -> None:
    """Use ``config`` on CUDA for this (head dim, dtype) from now on (None restores the built-in one)."""
    _OVERRIDES.set(head_dim, dtype, config)


def default_config(head_dim: int, dtype: torch.dtype, device: torch.device) -> AttentionConfig:
    """Tile configuration per (head dim, dtype); tuned on an H200 (see KERNEL_NOTES.md)."""
    if (override := _OVERRIDES.get(head_dim, dtype, device)) is not None:
        return override
    key = (head_dim, dtype, device.type)
    cached = _DEFAULTS.get(key)
    if cached is None:
        cached = _DEFAULTS[key] = _builtin_config(head_dim, dtype, device)
    return cached


_DEFAULTS: dict[tuple[int, torch.dtype, str], AttentionConfig] = {}


def _builtin_config(head_dim: int, dtype: torch.dtype, device: torch.device) -> AttentionConfig:
    if device.type != "cuda":  # Triton interpreter: small tiles keep numpy fast
        c = KernelConfig(32, 32, 1, 1, 1)
        return AttentionConfig(c, c, c, c, dbias_target_programs=8)
    if dtype == torch.float32:  # ieee fp32 dots run on the FMA units: small tiles
        c = KernelConfig(64, 32, 4, 2, 1)
        return AttentionConfig(c, c, KernelConfig(32, 64, 4, 2, 1), c)
    if head_dim == 64:
        return AttentionConfig(
            fwd=KernelConfig(128, 64, 8, 3, 1),
            dq=KernelConfig(64, 64, 4, 3, 1),
            dkv=KernelConfig(64, 64, 4, 3, 1),
            dbias=KernelConfig(64, 64, 4, 2, 1),
        )
    return (
        AttentionConfig(  # H200, per-kernel winners of sweeps 1-4 and run 11 (N = 768, H = 4, D = 32, bf16)
            fwd=KernelConfig(128, 64, 4, 3, 2),
            dq=KernelConfig(64, 32, 4, 3, 2),
            dkv=KernelConfig(32, 64, 4, 3, 2),  # with the transposed bias copy: 1.80 ms vs 1.89 at (64, 64)
            dbias=KernelConfig(64, 64, 4, 3, 1),
            dbias_target_programs=1056,
        )
    )


_SMS: dict[int, int] = {}


def _num_sms(device: torch.device) -> int:
    if device.type != "cuda":
        return 1
    idx = device.index if device.index is not None else torch.cuda.current_device()
    if idx not in _SMS:
        _SMS[idx] = torch.cuda.get_device_properties(idx).multi_processor_count
    return _SMS[idx]


# --------------------------------------------------------------------------------------------
# launch cache
#
# ``kernel[grid](...)`` costs ~90 µs of host time per launch on the H200 image (Triton 3.6): the
# binder specialises every one of ~40 arguments, builds the cache key and looks the kernel up.
# Everything it specialises on is a function of: the constexprs and launch options, each tensor's
# dtype and 16-byte alignment, and each int's value (== 1, divisible by 16, 32/64-bit). The first
# launch for such a key goes through Triton and returns its CompiledKernel; later launches with the
# same key call that kernel's launcher directly. N stays a runtime argument: a new N is a new key
# but no recompilation (Triton's own cache has the binary). Not used under the interpreter
# (TRITON_INTERPRET), off the GPU, with Triton launch hooks installed (profilers), or when the
# environment sets FEATURECACHE_FAST_LAUNCH=0.
# --------------------------------------------------------------------------------------------

_FAST_LAUNCH = os.environ.get("FEATURECACHE_FAST_LAUNCH", "1") != "0"
_LAUNCH_CACHE: dict[tuple[Any, ...], Any] = {}
_LAUNCH_CACHE_MAX = 4096
_CONSTEXPR_NAMES: dict[int, tuple[str, ...]] = {}


def set_fast_launch(enabled: bool) -> bool:
    """Turn the launch cache on or off (for A/B timing); returns the previous setting."""
    global _FAST_LAUNCH
    prev = _FAST_LAUNCH
    _FAST_LAUNCH = enabled
    return prev


def _hooks_active() -> bool:
    """True when Triton launch hooks are installed (a plain callable, or a non-empty hook chain)."""
    knobs = getattr(triton, "knobs", None)
    if knobs is None:  # Triton < 3.4: no knobs, no direct launch
        return True
    rt = knobs.runtime
    for hook in (rt.launch_enter_hook, rt.launch_exit_hook):
        if hook is not None and getattr(hook, "calls", True):
            return True
    return False


def _launch(
    kernel: Any,
    grid: tuple[int, int, int],
    tensors: Sequence[torch.Tensor],
    ints: tuple[int, ...],
    scale: float,
    constexprs: tuple[Any, ...],
    num_warps: int,
    num_stages: int,
) -> None:
    """``kernel[grid](*tensors, *ints, scale, <constexprs by name>, num_warps=, num_stages=)``,
    through the launch cache when possible. ``constexprs`` are the values of the kernel's remaining
    parameters, in declaration order."""
    fast = _FAST_LAUNCH and tensors[0].is_cuda and not interpreting()
    if fast:
        dev = torch.cuda.current_device()
        key = (kernel, dev, constexprs, num_warps, num_stages, ints,
               *[(t.dtype, t.data_ptr() & 15 == 0) for t in tensors])  # fmt: skip
        ck = _LAUNCH_CACHE.get(key)
        if ck is not None and not _hooks_active():
            try:
                ck.run(grid[0], grid[1], grid[2], triton.runtime.driver.active.get_current_stream(dev),
                       ck.function, ck.packed_metadata, None, None, None, *tensors, *ints, scale, *constexprs)  # fmt: skip
                return
            except TypeError as exc:  # a Triton whose launcher takes other arguments: use its own launch
                log.warning("launch cache disabled (%s: %s)", type(exc).__name__, exc)
                set_fast_launch(False)
                _LAUNCH_CACHE.clear()
                fast = False
    names = _CONSTEXPR_NAMES.get(id(kernel))
    if names is None:
        names = _CONSTEXPR_NAMES[id(kernel)] = tuple(kernel.arg_names[len(tensors) + len(ints) + 1 :])
    ck = kernel[grid](
        *tensors, *ints, scale, **dict(zip(names, constexprs, strict=True)), num_warps=num_warps,
        num_stages=num_stages,
    )  # fmt: skip
    if (
        fast
        and not getattr(kernel, "pre_run_hooks", None)
        and all(hasattr(ck, a) for a in ("run", "function", "packed_metadata"))
    ):
        if len(_LAUNCH_CACHE) >= _LAUNCH_CACHE_MAX:
            _LAUNCH_CACHE.clear()
        _LAUNCH_CACHE[key] = ck


# --------------------------------------------------------------------------------------------
# host launchers
# --------------------------------------------------------------------------------------------


def _check(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    bias: torch.Tensor,
    mask: torch.Tensor | None,
    key_mask: torch.Tensor | None = None,
    row_mask: torch.Tensor | None = None,
) -> None:
    check_devices(
        "pair_bias_attention", "pair_bias_attention_ref",
        {"q": q, "k": k, "v": v, "bias": bias, "mask": mask, "key_mask": key_mask, "row_mask": row_mask},
    )  # fmt: skip
    if q.dim() != 5 or q.shape != k.shape or q.shape != v.shape:
        raise KernelShapeError(
            f"q, k, v must all be [B, S, H, N, D]; got {tuple(q.shape)}, {tuple(k.shape)}, {tuple(v.shape)}"
        )
    b, s, h, n, d = q.shape
    if d not in SUPPORTED_HEAD_DIMS:
        raise KernelShapeError(
            f"head dim {d} not supported (one of {SUPPORTED_HEAD_DIMS}); q is {tuple(q.shape)}"
        )
    if tuple(bias.shape) != (b, h, n, n):
        raise KernelShapeError(f"bias must be [B, H, N, N] = {(b, h, n, n)}; got {tuple(bias.shape)}")
    if mask is not None and (tuple(mask.shape) != (b, s, n) or mask.dtype != torch.bool):
        raise KernelShapeError(
            f"mask must be bool [B, S, N] = {(b, s, n)}; got {mask.dtype} {tuple(mask.shape)}"
        )
    if (
        q.dtype not in (torch.float32, torch.float16, torch.bfloat16)
        or k.dtype != q.dtype
        or v.dtype != q.dtype
    ):
        raise KernelShapeError(f"q, k, v must share one float dtype; got {q.dtype}, {k.dtype}, {v.dtype}")
    if not bias.is_floating_point():
        raise KernelShapeError(f"bias must be floating point; got {bias.dtype}")
    if key_mask is not None and (tuple(key_mask.shape) != (b, n) or key_mask.dtype != torch.bool):
        raise KernelShapeError(
            f"key_mask must be bool [B, N] = {(b, n)}; got {key_mask.dtype} {tuple(key_mask.shape)}"
        )
    if row_mask is not None and (tuple(row_mask.shape) != (b, s) or row_mask.dtype != torch.bool):
        raise KernelShapeError(
            f"row_mask must be bool [B, S] = {(b, s)}; got {row_mask.dtype} {tuple(row_mask.shape)}"
        )


def masked_bias(bias: torch.Tensor, key_mask: torch.Tensor | None) -> torch.Tensor:
    """The bias with −inf at masked keys: a key mask shared by all S rows costs one [B, H, N, N]
    pass here instead of a load and an add per score in every kernel."""
    if key_mask is None:
        return bias
    return bias.masked_fill(~key_mask[:, None, None, :], float("-inf"))


def _aligned(t: torch.Tensor) -> torch.Tensor:
    """t itself when its last axis is contiguous and every other stride is a multiple of 16
    elements, else a contiguous copy. The JIT specialises integer arguments on divisibility by
    16; a stride that is not (a [B, S, N, 4·H·D + 8] projection seen as q, k, v: row stride 520)
    turns every tile load into 2-byte scalar loads, 2-3x slower passes (run 45), which costs far
    more than one copy."""
    if t.stride(-1) == 1 and all(st % 16 == 0 for st in t.stride()[:-1]):
        return t
    return torch.empty(t.shape, dtype=t.dtype, device=t.device).copy_(t)


def _empty_like_layout(t: torch.Tensor) -> torch.Tensor:
    """An uninitialised dense tensor shaped like t whose memory follows t's axis order (by stride),
    so a q that is a [B, S, N, H, D] buffer seen as [B, S, H, N, D] gets an output laid out the same
    way. The last axis (D) stays last and contiguous whatever t's strides (the kernels store rows of
    D contiguous elements); an expanded axis (stride 0, e.g. k shared by all heads) goes outermost."""
    if t.is_contiguous():
        return torch.empty(t.shape, dtype=t.dtype, device=t.device)
    strides, shape = t.stride(), t.shape
    lead = sorted(range(t.dim() - 1), key=lambda i: (strides[i] != 0 or shape[i] == 1, -strides[i]))
    order = [*lead, t.dim() - 1]
    buf = torch.empty([t.shape[i] for i in order], dtype=t.dtype, device=t.device)
    return buf.permute([order.index(i) for i in range(t.dim())])


def _mask_args(mask: torch.Tensor | None, like: torch.Tensor) -> tuple[torch.Tensor, tuple[int, int, int]]:
    if mask is None:
        return like, (0, 0, 0)
    m = mask.view(torch.uint8)
    return m, (m.stride(0), m.stride(1), m.stride(2))


def _even(n: int, *blocks: int) -> bool:
    return all(n % blk == 0 for blk in blocks)


#: the kernels compute tile offsets (row · stride) in int32 unless IDX64
_INT32_OFFSETS = 2**31


def _idx64(*tensors: torch.Tensor) -> bool:
    """IDX64 of a launch: True when some tensor's largest element offset Σ (size − 1)·|stride|
    reaches 2**31 (e.g. the trunk's ending-node q, k, v, row stride N·528, at N ≥ 2017), so the
    kernels form their row/column offsets in int64; a host-side check of shapes and strides only
    (no device sync). Below that the int32 offsets are exact and the compiled code is unchanged.
    A tensor whose storage holds fewer than 2**31 elements cannot reach it (checked first: ~0.5 µs
    per tensor against ~3 for the sum over its axes)."""
    for t in tensors:
        if t.untyped_storage().nbytes() < _INT32_OFFSETS * t.element_size():
            continue
        if (
            sum((n - 1) * abs(st) for n, st in zip(t.shape, t.stride(), strict=True) if n > 1)
            >= _INT32_OFFSETS
        ):
            return True
    return False


def pair_bias_attention_forward(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    bias: torch.Tensor,
    mask: torch.Tensor | None,
    scale: float,
    config: AttentionConfig | None = None,
    key_mask: torch.Tensor | None = None,
    row_mask: torch.Tensor | None = None,
    gate: torch.Tensor | None = None,
    out: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Launch the forward kernel. Returns ``out`` ``[B, S, H, N, D]`` (q's dtype and layout) and
    ``lse`` ``[B, S, H, N]`` fp32 (log2 units, +inf for rows without a real key).

    ``key_mask`` ``[B, N]`` / ``row_mask`` ``[B, S]`` (bool) are the cheap form of a mask that
    factorises as ``mask[b, s, j] = row_mask[b, s] & key_mask[b, j]`` (padding). ``gate`` (q's
    shape and dtype, checked by the caller): ``out`` is ``sigmoid(gate) * attention`` instead.
    ``out``: where to write it (q's shape and dtype, last axis contiguous); allocated like q if None."""
    _check(q, k, v, bias, mask, key_mask, row_mask)
    bias = masked_bias(bias, key_mask)
    q, k, v = _aligned(q), _aligned(k), _aligned(v)
    b, s, h, n, d = q.shape
    cfg = (config or default_config(d, q.dtype, q.device)).fwd
    out = _empty_like_layout(q) if out is None else out
    lse = torch.empty((b, s, h, n), device=q.device, dtype=torch.float32)
    if q.numel() == 0:  # B, S, H or N is 0: nothing to compute (no launch over an empty grid)
        return out, lse
    m, m_strides = _mask_args(mask, q)
    rm = q if row_mask is None else row_mask.view(torch.uint8)
    rm_strides = (0, 0) if row_mask is None else (rm.stride(0), rm.stride(1))
    g = q if gate is None else _aligned(gate)
    _launch(
        _fwd_kernel, (triton.cdiv(n, cfg.block_m), triton.cdiv(s, cfg.sp), b * h),
        (q, k, v, bias, m, rm, out, lse, g),
        (*q.stride()[:4], *k.stride()[:4], *v.stride()[:4], *out.stride()[:4], *bias.stride(), *m_strides,
         *rm_strides, *g.stride()[:4], s, h, n),
        scale,
        # HAS_MASK, HAS_ROW_MASK, EVEN_N, D, BLOCK_M, BLOCK_N, SP, PREC, GATED, IDX64
        (mask is not None, row_mask is not None, _even(n, cfg.block_m, cfg.block_n), d,
         cfg.block_m, cfg.block_n, cfg.sp, _prec(q.dtype), gate is not None, _idx64(q, k, v, bias, m, out, g)),
        cfg.num_warps, cfg.num_stages,
    )  # fmt: skip
    return out, lse


@dataclass
class BackwardInputs:
    """Checked, last-axis-contiguous operands of the backward kernels and their outputs."""

    q: torch.Tensor
    k: torch.Tensor
    v: torch.Tensor
    bias: torch.Tensor
    mask: torch.Tensor  # uint8 view of the bool mask (q when there is none)
    mask_strides: tuple[int, int, int]
    has_mask: bool
    do: torch.Tensor
    out: torch.Tensor
    lse: torch.Tensor
    delta: torch.Tensor
    dq: torch.Tensor
    #: allocated by :func:`launch_dkv` (after the bias gradient's fp32 partials are freed)
    dk: torch.Tensor | None
    dv: torch.Tensor | None
    scale: float
    #: dk, dv as two slices of one allocation (q, k, v contiguous and all three gradients wanted)
    one_buffer: bool = False
    #: gated attention (``out = sigmoid(gate) * attention``): the gate logits, and its gradient
    #: (written by :func:`launch_dq`, which also replaces ``do`` by the attention's own gradient)
    gate: torch.Tensor | None = None
    dgate: torch.Tensor | None = None


def prepare_backward(
    do: torch.Tensor,
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    bias: torch.Tensor,
    mask: torch.Tensor | None,
    out: torch.Tensor,
    lse: torch.Tensor,
    scale: float,
    key_mask: torch.Tensor | None = None,
) -> BackwardInputs:
    _check(q, k, v, bias, mask, key_mask)
    if do.shape != q.shape or out.shape != q.shape:
        raise KernelShapeError(
            f"dout {tuple(do.shape)} and out {tuple(out.shape)} must match q {tuple(q.shape)}"
        )
    return _prepare_backward(do, q, k, v, bias, mask, out, lse, scale, key_mask, one_buffer=False)


def _prepare_backward(
    do: torch.Tensor,
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    bias: torch.Tensor,
    mask: torch.Tensor | None,
    out: torch.Tensor,
    lse: torch.Tensor,
    scale: float,
    key_mask: torch.Tensor | None,
    one_buffer: bool,
    gate: torch.Tensor | None = None,
    grads: tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor | None] | None = None,
) -> BackwardInputs:
    """:func:`prepare_backward` without the checks (the autograd path checked in the forward).
    ``one_buffer`` (all three gradients wanted, q, k, v contiguous): dk and dv are slices of one
    allocation (one allocator call instead of two; each keeps the whole buffer alive). ``gate``:
    the forward was gated (``out`` is ``sigmoid(gate) * attention``, ``do`` its gradient).
    ``grads``: where to write dq, dk, dv (and the gate's gradient), e.g. column slices of one
    projection's gradient; by default they are allocated like q, k, v (and gate)."""
    bias = masked_bias(bias, key_mask)
    q, k, v = _aligned(q), _aligned(k), _aligned(v)
    m, m_strides = _mask_args(mask, q)
    lse = lse.contiguous()
    dq, dk, dv, dg = grads if grads is not None else (_empty_like_layout(q), None, None, None)
    if gate is not None:
        gate = _aligned(gate)
        if dg is None:
            dg = _empty_like_layout(gate)
    return BackwardInputs(
        q=q, k=k, v=v, bias=bias, mask=m, mask_strides=m_strides, has_mask=mask is not None,
        do=_aligned(do.to(q.dtype)), out=_aligned(out), lse=lse, delta=torch.empty_like(lse),
        dq=dq, dk=dk, dv=dv, scale=scale, gate=gate, dgate=dg,
        one_buffer=one_buffer and q.is_contiguous() and k.is_contiguous() and v.is_contiguous(),
    )  # fmt: skip


def launch_dq(a: BackwardInputs, c: KernelConfig) -> None:
    """δ = rowsum(dO∘O) into ``a.delta`` and dq into ``a.dq`` (run before the other two). Gated:
    also the gate's gradient into ``a.dgate``, and ``a.do`` becomes the attention's own output
    gradient dO∘sigmoid(gate) (a new contiguous buffer the kernel writes), which the other two read."""
    b, s, h, n, d = a.q.shape
    g = dou = dg = a.q
    if a.gate is not None:
        assert a.dgate is not None
        g, dg, dou = a.gate, a.dgate, torch.empty(a.q.shape, dtype=a.q.dtype, device=a.q.device)
    _launch(
        _bwd_dq_kernel, (triton.cdiv(n, c.block_m), triton.cdiv(s, c.sp), b * h),
        (a.q, a.k, a.v, a.bias, a.mask, a.out, a.do, a.lse, a.delta, a.dq, g, dou, dg),
        (*a.q.stride()[:4], *a.k.stride()[:4], *a.v.stride()[:4], *a.out.stride()[:4], *a.do.stride()[:4],
         *a.dq.stride()[:4], *a.bias.stride(), *a.mask_strides, *g.stride()[:4], *dou.stride()[:4],
         *dg.stride()[:4], s, h, n),
        a.scale,
        # HAS_MASK, EVEN_N, D, BLOCK_M, BLOCK_N, SP, PREC, GATED, IDX64
        (a.has_mask, _even(n, c.block_m, c.block_n), d, c.block_m, c.block_n, c.sp, _prec(a.q.dtype),
         a.gate is not None, _idx64(a.q, a.k, a.v, a.bias, a.mask, a.out, a.do, a.dq, g, dou, dg)),
        c.num_warps, c.num_stages,
    )  # fmt: skip
    if a.gate is not None:
        a.do = dou


def launch_dkv(a: BackwardInputs, c: KernelConfig, bias_copy: bool = False) -> None:
    """dk, dv into ``a.dk``, ``a.dv`` (allocated on the first call; needs ``a.delta``). ``bias_copy``:
    read the bias from a transposed copy (same values, query axis contiguous;
    ``AttentionConfig.dkv_bias_copy``)."""
    b, s, h, n, d = a.q.shape
    if a.dk is None or a.dv is None:
        if a.one_buffer:
            a.dk, a.dv = torch.empty((2, *a.k.shape), dtype=a.k.dtype, device=a.k.device).unbind(0)
        else:
            a.dk, a.dv = _empty_like_layout(a.k), _empty_like_layout(a.v)
    bias = a.bias
    if bias_copy and bias.stride(-2) != 1:
        bias = bias.transpose(-1, -2).contiguous().transpose(-1, -2)
    _launch(
        _bwd_dkv_kernel, (triton.cdiv(n, c.block_n), triton.cdiv(s, c.sp), b * h),
        (a.q, a.k, a.v, bias, a.mask, a.do, a.lse, a.delta, a.dk, a.dv),
        (*a.q.stride()[:4], *a.k.stride()[:4], *a.v.stride()[:4], *a.do.stride()[:4], *a.dk.stride()[:4],
         *a.dv.stride()[:4], *bias.stride(), *a.mask_strides, s, h, n),
        a.scale,
        # HAS_MASK, EVEN_N, D, BLOCK_M, BLOCK_N, SP, PREC, IDX64
        (a.has_mask, _even(n, c.block_m, c.block_n), d, c.block_m, c.block_n, c.sp, _prec(a.q.dtype),
         _idx64(a.q, a.k, a.v, bias, a.mask, a.do, a.dk, a.dv)),
        c.num_warps, c.num_stages,
    )  # fmt: skip


def launch_dbias(a: BackwardInputs, c: KernelConfig, target_programs: int) -> torch.Tensor:
    """The bias gradient (bias's dtype; needs ``a.delta``): S is split into as few groups as give
    ``target_programs`` programs; groups write fp32 partials reduced by one ordered sum."""
    b, s, h, n, d = a.q.shape
    n_tiles = triton.cdiv(n, c.block_m) * triton.cdiv(n, c.block_n)
    groups, per_group = dbias_groups(s, n_tiles * b * h, target_programs)
    db = torch.empty(
        (groups, b, h, n, n), device=a.q.device, dtype=a.bias.dtype if groups == 1 else torch.float32
    )
    _launch(
        _bwd_dbias_kernel, (n_tiles, groups, b * h),
        (a.q, a.k, a.v, a.bias, a.mask, a.do, a.lse, a.delta, db),
        (*a.q.stride()[:4], *a.k.stride()[:4], *a.v.stride()[:4], *a.do.stride()[:4], *a.bias.stride(),
         *a.mask_strides, s, h, n, per_group),
        a.scale,
        # HAS_MASK, EVEN_N, D, BLOCK_M, BLOCK_N, PREC, IDX64
        (a.has_mask, _even(n, c.block_m, c.block_n), d, c.block_m, c.block_n, _prec(a.q.dtype),
         _idx64(a.q, a.k, a.v, a.bias, a.mask, a.do)),
        c.num_warps, c.num_stages,
    )  # fmt: skip
    return db[0] if groups == 1 else db.sum(dim=0).to(a.bias.dtype)


def pair_bias_attention_backward(
    do: torch.Tensor,
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    bias: torch.Tensor,
    mask: torch.Tensor | None,
    out: torch.Tensor,
    lse: torch.Tensor,
    scale: float,
    config: AttentionConfig | None = None,
    key_mask: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """Launch the three backward kernels. Returns dq, dk, dv (like q, k, v) and dbias (bias's
    dtype; 0 at masked keys). A row mask needs nothing here: its rows have lse = +inf."""
    a = prepare_backward(do, q, k, v, bias, mask, out, lse, scale, key_mask)
    dq, dk, dv, dbias = _run_backward(a, config)
    assert dbias is not None
    return dq, dk, dv, dbias


def _run_backward(
    a: BackwardInputs, config: AttentionConfig | None, bias_grad: bool = True
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor | None]:
    """dq (+δ), then the bias gradient, then dk/dv: dk and dv are allocated only after the bias
    gradient's fp32 partials are freed, so the two never coexist (lower peak memory).

    ``bias_grad=False`` skips the bias-gradient pass (one of the four exponential passes, about a
    fifth of the fwd+bwd time) and returns None for it: a bias that is a constant, not a parameter's
    function, needs none."""
    if a.q.numel() == 0:  # empty q, k, v: zero-size gradients, a zero bias gradient (S = 0 keeps a bias)
        if a.dk is None or a.dv is None:
            a.dk, a.dv = _empty_like_layout(a.k), _empty_like_layout(a.v)
        zero = torch.zeros(a.bias.shape, dtype=a.bias.dtype, device=a.bias.device) if bias_grad else None
        return a.dq, a.dk, a.dv, zero
    config = config or default_config(a.q.shape[-1], a.q.dtype, a.q.device)
    launch_dq(a, config.dq)
    dbias = None
    if bias_grad:
        target = max(config.dbias_target_programs, 2 * _num_sms(a.q.device))
        dbias = launch_dbias(a, config.dbias, target)
    launch_dkv(a, config.dkv, config.dkv_bias_copy)
    assert a.dk is not None and a.dv is not None
    return a.dq, a.dk, a.dv, dbias


# --------------------------------------------------------------------------------------------
# torch.library registration and autograd
# --------------------------------------------------------------------------------------------


@torch.library.custom_op(
    "featurecache::pair_bias_attention",
    mutates_args=(),
    schema=(
        "(Tensor q, Tensor k, Tensor v, Tensor bias, Tensor? mask, float scale, Tensor? key_mask, "
        "Tensor? row_mask) -> (Tensor, Tensor)"
    ),
)
def _attention_op(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    bias: torch.Tensor,
    mask: torch.Tensor | None,
    scale: float,
    key_mask: torch.Tensor | None,
    row_mask: torch.Tensor | None,
) -> tuple[torch.Tensor, torch.Tensor]:
    return pair_bias_attention_forward(q, k, v, bias, mask, scale, None, key_mask, row_mask)


@_attention_op.register_fake
def _attention_fake(q, k, v, bias, mask, scale, key_mask, row_mask):  # type: ignore[no-untyped-def]
    b, s, h, n, _ = q.shape  # the layouts pair_bias_attention_forward allocates
    return _empty_like_layout(_aligned(q)), q.new_empty((b, s, h, n), dtype=torch.float32)


@torch.library.custom_op(
    "featurecache::pair_bias_attention_backward",
    mutates_args=(),
    schema=(
        "(Tensor dout, Tensor q, Tensor k, Tensor v, Tensor bias, Tensor? mask, Tensor out, Tensor lse, "
        "float scale, Tensor? key_mask, bool bias_grad=True) -> (Tensor, Tensor, Tensor, Tensor)"
    ),
)
def _attention_backward_op(
    dout: torch.Tensor,
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    bias: torch.Tensor,
    mask: torch.Tensor | None,
    out: torch.Tensor,
    lse: torch.Tensor,
    scale: float,
    key_mask: torch.Tensor | None,
    bias_grad: bool = True,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """dq, dk, dv and the bias gradient; with ``bias_grad=False`` the last is a 0-element tensor
    (an op must return a tensor) and its pass is skipped."""
    a = prepare_backward(dout, q, k, v, bias, mask, out, lse, scale, key_mask)
    dq, dk, dv, dbias = _run_backward(a, None, bias_grad)
    return dq, dk, dv, bias.new_empty((0,)) if dbias is None else dbias


@_attention_backward_op.register_fake
def _attention_backward_fake(dout, q, k, v, bias, mask, out, lse, scale, key_mask, bias_grad=True):  # type: ignore[no-untyped-def]
    # the layouts prepare_backward / launch_dkv / launch_dbias allocate
    dq, dk, dv = (_empty_like_layout(_aligned(t)) for t in (q, k, v))
    return dq, dk, dv, bias.new_empty(bias.shape if bias_grad else (0,))


def _setup_context(ctx, inputs, output):  # type: ignore[no-untyped-def]
    q, k, v, bias, mask, scale, key_mask, _row_mask = inputs
    out, lse = output
    ctx.save_for_backward(q, k, v, bias, mask, out, lse, key_mask)
    ctx.scale = scale


def _backward(ctx, dout, dlse):  # type: ignore[no-untyped-def]
    q, k, v, bias, mask, out, lse, key_mask = ctx.saved_tensors
    bias_grad = ctx.needs_input_grad[3]
    dq, dk, dv, dbias = torch.ops.featurecache.pair_bias_attention_backward(
        dout, q, k, v, bias, mask, out, lse, ctx.scale, key_mask, bias_grad
    )
    return dq, dk, dv, dbias if bias_grad else None, None, None, None, None


_attention_op.register_autograd(_backward, setup_context=_setup_context)


class PairBiasAttentionFunction(torch.autograd.Function):
    """The eager autograd path: the same launchers as the registered ops, without the custom-op
    dispatch (about 0.4 ms of host time per forward+backward on the H200 image, measured at N = 64;
    see KERNEL_NOTES.md). Under ``torch.compile`` the registered op is used instead."""

    @staticmethod
    def forward(  # type: ignore[override]
        ctx: torch.autograd.function.FunctionCtx,
        q: torch.Tensor,
        k: torch.Tensor,
        v: torch.Tensor,
        bias: torch.Tensor,
        mask: torch.Tensor | None,
        scale: float,
        key_mask: torch.Tensor | None,
        row_mask: torch.Tensor | None,
    ) -> torch.Tensor:
        out, lse = pair_bias_attention_forward(q, k, v, bias, mask, scale, None, key_mask, row_mask)
        ctx.save_for_backward(q, k, v, bias, mask, out, lse, key_mask)  # type: ignore[arg-type]  # None is allowed
        ctx.scale = scale  # type: ignore[attr-defined]
        return out

    @staticmethod
    @first_order_only(
        "pair_bias_attention", "pair_bias_attention_ref"
    )  # no double backward: raise rather than drop the term
    def backward(ctx, dout):  # type: ignore[no-untyped-def, override]
        q, k, v, bias, mask, out, lse, key_mask = ctx.saved_tensors
        # inputs were checked by the forward; dout has out's shape (autograd guarantees it)
        one = all(ctx.needs_input_grad[:3])
        a = _prepare_backward(dout, q, k, v, bias, mask, out, lse, ctx.scale, key_mask, one_buffer=one)
        dq, dk, dv, dbias = _run_backward(a, None, bias_grad=ctx.needs_input_grad[3])
        return dq, dk, dv, dbias, None, None, None, None


def pair_bias_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    bias: torch.Tensor,
    mask: torch.Tensor | None = None,
    scale: float | None = None,
    *,
    key_mask: torch.Tensor | None = None,
    row_mask: torch.Tensor | None = None,
) -> torch.Tensor:
    """Fused ``softmax(q·kᵀ·scale + bias + mask)·v``; differentiable in q, k, v and bias. A bias
    that does not require grad costs no bias-gradient pass in the backward.

    q, k, v: ``[B, S, H, N, D]`` (fp32/fp16/bf16, D ∈ {16, 32, 64}; any strides with a
    contiguous last axis); bias: ``[B, H, N, N]``; mask: bool ``[B, S, N]`` key mask or None;
    scale defaults to ``D**-0.5``. Returns ``[B, S, H, N, D]`` in q's dtype.

    A −inf bias entry gives its key weight 0, as a masked key; a query row whose every key is
    masked or −inf outputs 0 and passes no gradient (no NaN), as the reference does.

    Padding masks factorise: ``key_mask`` ``[B, N]`` (keys, shared by all S rows) and ``row_mask``
    ``[B, S]`` mean ``mask[b, s, j] = row_mask[b, s] & key_mask[b, j]`` (combined with ``mask``
    when both are given) and cost almost nothing, unlike a general ``mask``.
    """
    scale = q.shape[-1] ** -0.5 if scale is None else float(scale)
    if torch.compiler.is_compiling():
        out, _ = torch.ops.featurecache.pair_bias_attention(q, k, v, bias, mask, scale, key_mask, row_mask)
        return out
    result: torch.Tensor = PairBiasAttentionFunction.apply(q, k, v, bias, mask, scale, key_mask, row_mask)
    return result
