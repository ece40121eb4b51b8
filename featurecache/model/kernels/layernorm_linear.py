"""Fused ``Linear(LayerNorm(x))`` with an optional SwiGLU epilogue, forward and backward.

The LayerNorm is applied while the GEMM's A operand is loaded (row statistics in fp32, the
whole row of C ≤ 512 channels in registers), so the normalised activations never reach memory.
With ``swiglu`` each program computes the two matching output tiles ``a`` (column j) and ``b``
(column j + O/2) and stores only ``silu(a) * b``: the ``[M, O]`` pre-activation is never stored.
Nothing but the input is saved for backward; statistics and pre-activations are recomputed.

Kernels:

* ``_fwd_kernel``: per (row block, output column block).
* ``_bwd_dx_kernel``: per row block, loop over output column blocks: dLN = dU·W, then the
  LayerNorm backward -> dx; per-block partial sums of dγ, dβ.
* weight gradient (default, ``LayerNormLinearConfig.dw_library``): the dx kernel also stores dU
  ``[M, O]`` and LN(x) ``[M, C]`` in the weight's dtype, and dW = dUᵀ·LN(x) is one library GEMM
  (cuBLAS on a GPU: 4.01 -> 3.03 ms for the N = 768 transition on an H200, +0.9 GB transient).
* ``_bwd_dw_kernel`` (``dw_library=False``): per (output column block, row split), loop over the
  split's row blocks: dW = dUᵀ·LN(x) and dbias accumulated in registers; fp32 partials per split.

Partials are reduced with one ``sum`` in a fixed order: no atomics, deterministic gradients.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import triton
import triton.language as tl

from featurecache.errors import KernelShapeError
from featurecache.model.kernels.autograd import first_order_only
from featurecache.model.kernels.grid import check_devices
from featurecache.model.kernels.launch import ConfigOverrides
from featurecache.model.kernels.launch import dot_precision as _prec
from featurecache.model.kernels.swiglu import swiglu_bwd_tile, swiglu_fwd_tile, use_fast_sigmoid

MAX_CHANNELS = 512


@triton.jit
def _load_rows(X, rows, offs_c, M, C, sx_m):
    """x rows [BLOCK_M, CP] in x's dtype, 0 outside [M, C]."""
    ok = (rows < M)[:, None] & (offs_c < C)[None, :]
    return tl.load(X + rows[:, None] * sx_m + offs_c[None, :], mask=ok, other=0.0)


@triton.jit
def _normalize(x, LNW, LNB, offs_c, C, eps):
    """LayerNorm of loaded rows: returns (LN(x), x̂, rstd) in fp32; pad columns are 0."""
    col_ok = offs_c < C
    x = x.to(tl.float32)
    mean = tl.sum(x, 1) / C
    xc = tl.where(col_ok[None, :], x - mean[:, None], 0.0)
    rstd = 1.0 / tl.sqrt(tl.sum(xc * xc, 1) / C + eps)
    xhat = xc * rstd[:, None]
    w = tl.load(LNW + offs_c, mask=col_ok, other=0.0).to(tl.float32)
    b = tl.load(LNB + offs_c, mask=col_ok, other=0.0).to(tl.float32)
    return xhat * w[None, :] + b[None, :], xhat, rstd


@triton.jit
def _layernorm_rows(X, LNW, LNB, rows, offs_c, M, C, sx_m, eps):
    """Load x rows [BLOCK_M, CP] and normalise: returns (LN(x), x̂, rstd) in fp32; pad columns are 0."""
    return _normalize(_load_rows(X, rows, offs_c, M, C, sx_m), LNW, LNB, offs_c, C, eps)


@triton.jit
def _dy_tile(DY, rows, outs, M, OH, sdy_m):
    ok = (rows < M)[:, None] & (outs < OH)[None, :]
    return tl.load(DY + rows[:, None] * sdy_m + outs[None, :], mask=ok, other=0.0)


@triton.jit
def _fwd_kernel(
    X,  # [M, C]
    LNW, LNB,  # [C]
    W,  # [O, C] (nn.Linear layout); O = 2·OH with SWIGLU else OH
    BIAS,  # [O] (unused without HAS_BIAS)
    Y,  # [M, OH]
    M, C, OH, sx_m, sw_o, sy_m, cols_per_prog, eps,
    HAS_BIAS: tl.constexpr, SWIGLU: tl.constexpr, CP: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, PREC: tl.constexpr, FAST_SIGMOID: tl.constexpr,
):  # fmt: skip
    """One row block × ``cols_per_prog`` output columns: the LayerNorm is done once, then a loop
    over the column blocks (weights stream from L2)."""
    rows = tl.program_id(0).to(tl.int64) * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_c = tl.arange(0, CP)
    offs_n = tl.arange(0, BLOCK_N)
    xln, _, _ = _layernorm_rows(X, LNW, LNB, rows, offs_c, M, C, sx_m, eps)
    a_op = xln.to(W.dtype.element_ty)
    col0 = tl.program_id(1) * cols_per_prog
    for start in range(col0, tl.minimum(col0 + cols_per_prog, OH), BLOCK_N):
        outs = start + offs_n
        out_ok = outs < OH
        w_mask = out_ok[:, None] & (offs_c < C)[None, :]
        wa = tl.load(W + outs[:, None] * sw_o + offs_c[None, :], mask=w_mask, other=0.0)
        u = tl.dot(a_op, tl.trans(wa), input_precision=PREC)
        if HAS_BIAS:
            u += tl.load(BIAS + outs, mask=out_ok, other=0.0).to(tl.float32)[None, :]
        if SWIGLU:
            wb = tl.load(W + (outs + OH)[:, None] * sw_o + offs_c[None, :], mask=w_mask, other=0.0)
            g = tl.dot(a_op, tl.trans(wb), input_precision=PREC)
            if HAS_BIAS:
                g += tl.load(BIAS + OH + outs, mask=out_ok, other=0.0).to(tl.float32)[None, :]
            u = swiglu_fwd_tile(u, g, FAST_SIGMOID)
        tl.store(Y + rows[:, None] * sy_m + outs[None, :], u.to(Y.dtype.element_ty),
                 mask=(rows < M)[:, None] & out_ok[None, :])  # fmt: skip


@triton.jit
def _dy_to_du(a_op, dy, W, BIAS, outs, offs_c, C, OH, sw_o,
              HAS_BIAS: tl.constexpr, SWIGLU: tl.constexpr, PREC: tl.constexpr, FAST_SIGMOID: tl.constexpr):  # fmt: skip
    """For one (row block, output block) and its loaded dy: gradient w.r.t. the GEMM outputs,
    and the weight tiles. Returns (du_a, du_b, wa, wb); du_b/wb only meaningful with SWIGLU."""
    out_ok = outs < OH
    w_mask = out_ok[:, None] & (offs_c < C)[None, :]
    wa = tl.load(W + outs[:, None] * sw_o + offs_c[None, :], mask=w_mask, other=0.0)
    if SWIGLU:
        wb = tl.load(W + (outs + OH)[:, None] * sw_o + offs_c[None, :], mask=w_mask, other=0.0)
        a = tl.dot(a_op, tl.trans(wa), input_precision=PREC)
        g = tl.dot(a_op, tl.trans(wb), input_precision=PREC)
        if HAS_BIAS:
            a += tl.load(BIAS + outs, mask=out_ok, other=0.0).to(tl.float32)[None, :]
            g += tl.load(BIAS + OH + outs, mask=out_ok, other=0.0).to(tl.float32)[None, :]
        du_a, du_b = swiglu_bwd_tile(a, g, dy.to(tl.float32), FAST_SIGMOID)
    else:
        wb = wa
        du_a = dy.to(tl.float32)
        du_b = du_a
    return du_a, du_b, wa, wb


@triton.jit
def _bwd_dx_kernel(
    X,  # [M, C]
    LNW, LNB,  # [C]
    W,  # [O, C]
    BIAS,  # [O]
    DY,  # [M, OH]
    DX,  # [M, C]
    DLNW_PART, DLNB_PART,  # [cdiv(M, BLOCK_M), C] fp32
    DU,  # [M, O] in W's dtype: gradient w.r.t. the GEMM outputs (written with STORE_DU)
    XLN,  # [M, C] in W's dtype: LN(x), the GEMM's A operand (written with STORE_DU)
    M, C, OH, sx_m, sw_o, sdy_m, sdx_m, sdu_m, sxln_m, eps,
    HAS_BIAS: tl.constexpr, SWIGLU: tl.constexpr, CP: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, PREC: tl.constexpr, STORE_DU: tl.constexpr,
    FAST_SIGMOID: tl.constexpr,
):  # fmt: skip
    pid = tl.program_id(0).to(tl.int64)
    rows = pid * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_c = tl.arange(0, CP)
    offs_n = tl.arange(0, BLOCK_N)
    row_ok = rows < M
    col_ok = offs_c < C
    xln, xhat, rstd = _layernorm_rows(X, LNW, LNB, rows, offs_c, M, C, sx_m, eps)
    a_op = xln.to(W.dtype.element_ty)
    if STORE_DU:
        tl.store(XLN + rows[:, None] * sxln_m + offs_c[None, :], a_op, mask=row_ok[:, None] & col_ok[None, :])
    dxln = tl.zeros([BLOCK_M, CP], tl.float32)
    dy_nxt = _dy_tile(DY, rows, offs_n, M, OH, sdy_m)  # prefetched one block ahead (not a dot operand)
    for start in range(0, OH, BLOCK_N):
        outs = start + offs_n
        dy = dy_nxt
        dy_nxt = _dy_tile(DY, rows, outs + BLOCK_N, M, OH, sdy_m)
        du_a, du_b, wa, wb = _dy_to_du(a_op, dy, W, BIAS, outs, offs_c, C, OH, sw_o, HAS_BIAS, SWIGLU, PREC,
                                       FAST_SIGMOID)  # fmt: skip
        du_a = du_a.to(W.dtype.element_ty)
        du_b = du_b.to(W.dtype.element_ty)
        # dU·W into a fresh tile, then one add: with dLN as the wgmma's loop-carried accumulator ptxas
        # serialises the loop's wgmmas (C7515); 1.55 -> 1.42 ms at rows = 768² (KERNEL_NOTES.md, run 32)
        t = tl.dot(du_a, wa, input_precision=PREC)
        if SWIGLU:
            t = tl.dot(du_b, wb, t, input_precision=PREC)
        dxln = dxln + t
        if SWIGLU and STORE_DU:  # without SwiGLU dU is dy itself
            du_ok = row_ok[:, None] & (outs < OH)[None, :]
            tl.store(DU + rows[:, None] * sdu_m + outs[None, :], du_a, mask=du_ok)
            tl.store(DU + rows[:, None] * sdu_m + (outs + OH)[None, :], du_b, mask=du_ok)
    dxln = tl.where(row_ok[:, None], dxln, 0.0)
    w = tl.load(LNW + offs_c, mask=col_ok, other=0.0).to(tl.float32)
    g = dxln * w[None, :]
    c1 = tl.sum(g * xhat, 1) / C
    c2 = tl.sum(g, 1) / C
    dx = (g - xhat * c1[:, None] - c2[:, None]) * rstd[:, None]
    tl.store(DX + rows[:, None] * sdx_m + offs_c[None, :], dx.to(DX.dtype.element_ty),
             mask=row_ok[:, None] & col_ok[None, :])  # fmt: skip
    tl.store(DLNW_PART + pid * C + offs_c, tl.sum(dxln * xhat, 0), mask=col_ok)
    tl.store(DLNB_PART + pid * C + offs_c, tl.sum(dxln, 0), mask=col_ok)


@triton.jit
def _bwd_dw_kernel(
    X,  # [M, C]
    LNW, LNB,  # [C]
    W,  # [O, C]
    BIAS,  # [O]
    DY,  # [M, OH]
    DW_PART,  # [R, O, C] fp32
    DB_PART,  # [R, O] fp32
    M, C, OH, sx_m, sw_o, sdy_m, ROWS_PER_SPLIT, eps,
    HAS_BIAS: tl.constexpr, SWIGLU: tl.constexpr, CP: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, PREC: tl.constexpr, FAST_SIGMOID: tl.constexpr,
):  # fmt: skip
    outs = tl.program_id(0) * BLOCK_N + tl.arange(0, BLOCK_N)
    pid_r = tl.program_id(1).to(tl.int64)
    offs_c = tl.arange(0, CP)
    offs_m = tl.arange(0, BLOCK_M)
    out_ok = outs < OH
    dwa = tl.zeros([BLOCK_N, CP], tl.float32)
    dba = tl.zeros([BLOCK_N], tl.float32)
    if SWIGLU:
        dwb = tl.zeros([BLOCK_N, CP], tl.float32)
        dbb = tl.zeros([BLOCK_N], tl.float32)
    r_start = pid_r * ROWS_PER_SPLIT
    r_end = tl.minimum(r_start + ROWS_PER_SPLIT, M)
    # x and dy rows are prefetched one block ahead (they feed the dots only after elementwise work)
    x_nxt = _load_rows(X, r_start + offs_m, offs_c, r_end, C, sx_m)
    dy_nxt = _dy_tile(DY, r_start + offs_m, outs, r_end, OH, sdy_m)
    for start in range(r_start, r_end, BLOCK_M):
        x, dy = x_nxt, dy_nxt
        x_nxt = _load_rows(X, start + BLOCK_M + offs_m, offs_c, r_end, C, sx_m)
        dy_nxt = _dy_tile(DY, start + BLOCK_M + offs_m, outs, r_end, OH, sdy_m)
        xln, _, _ = _normalize(x, LNW, LNB, offs_c, C, eps)
        a_op = xln.to(W.dtype.element_ty)
        du_a, du_b, _, _ = _dy_to_du(a_op, dy, W, BIAS, outs, offs_c, C, OH, sw_o, HAS_BIAS, SWIGLU, PREC,
                                     FAST_SIGMOID)  # fmt: skip
        dwa += tl.dot(tl.trans(du_a.to(W.dtype.element_ty)), a_op, input_precision=PREC)
        dba += tl.sum(du_a, 0)
        if SWIGLU:
            dwb += tl.dot(tl.trans(du_b.to(W.dtype.element_ty)), a_op, input_precision=PREC)
            dbb += tl.sum(du_b, 0)
    o_total = OH * (2 if SWIGLU else 1)
    w_mask = out_ok[:, None] & (offs_c < C)[None, :]
    part = DW_PART + pid_r * o_total * C
    tl.store(part + outs[:, None] * C + offs_c[None, :], dwa, mask=w_mask)
    tl.store(DB_PART + pid_r * o_total + outs, dba, mask=out_ok)
    if SWIGLU:
        tl.store(part + (outs + OH)[:, None] * C + offs_c[None, :], dwb, mask=w_mask)
        tl.store(DB_PART + pid_r * o_total + OH + outs, dbb, mask=out_ok)


# --------------------------------------------------------------------------------------------
# launchers
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class GemmConfig:
    block_m: int
    block_n: int
    num_warps: int = 4
    num_stages: int = 2
    #: forward only: output column blocks per program (0 = all of them)
    col_blocks: int = 1
    #: SwiGLU's sigmoid by the hardware tanh (bf16/fp16 weights on a GPU; see ``swiglu._sigmoid``)
    fast_sigmoid: bool = True


@dataclass(frozen=True)
class LayerNormLinearConfig:
    fwd: GemmConfig
    dx: GemmConfig
    dw: GemmConfig
    #: the weight-gradient grid aims at this many programs (rows are split to get there)
    dw_target_programs: int = 264
    #: weight gradient by a library GEMM (``dUᵀ·LN(x)``, cuBLAS on a GPU) from dU and LN(x) that the
    #: dx kernel writes in the weight's dtype (+[M, O] + [M, C] transient), instead of ``_bwd_dw_kernel``
    dw_library: bool = True


_OVERRIDES: ConfigOverrides[LayerNormLinearConfig] = ConfigOverrides()


def set_default_config(channels: int, dtype: torch.dtype, config: LayerNormLinearConfig | None) -> None:
    """Use ``config`` on CUDA for this (input channels, GEMM dtype) from now on (None: built-in)."""
    _OVERRIDES.set(channels, dtype, config)


def default_config(channels: int, dtype: torch.dtype, device: torch.device) -> LayerNormLinearConfig:
    """Tiles per (channels, dtype); tuned on an H200 (see KERNEL_NOTES.md)."""
    if (override := _OVERRIDES.get(channels, dtype, device)) is not None:
        return override
    if device.type != "cuda":
        c = GemmConfig(16, 32, 1, 1)
        return LayerNormLinearConfig(c, c, c, dw_target_programs=4)
    if dtype == torch.float32:
        c = GemmConfig(32, 32, 4, 2)
        return LayerNormLinearConfig(c, c, c)
    if channels > 256:  # a whole row of up to 512 channels per operand tile: keep shared memory small
        c = GemmConfig(32, 32, 4, 1)
        return LayerNormLinearConfig(c, c, c)
    return LayerNormLinearConfig(  # H200 sweeps 3-4 (rows = 768², C = 128, O = 1024, SwiGLU)
        fwd=GemmConfig(128, 32, 8, 3, col_blocks=0),  # 8 warps since the fast sigmoid (run 32)
        dx=GemmConfig(64, 32, 4, 3),
        dw=GemmConfig(32, 64, 4, 2),
        dw_target_programs=264,
    )


def _check(
    x: torch.Tensor,
    ln_w: torch.Tensor,
    ln_b: torch.Tensor,
    w: torch.Tensor,
    b: torch.Tensor | None,
    swiglu: bool,
) -> None:
    check_devices(
        "layernorm_linear", "layernorm_linear_ref",
        {"x": x, "ln_weight": ln_w, "ln_bias": ln_b, "weight": w, "bias": b},
    )  # fmt: skip
    c = x.shape[-1]
    if c > MAX_CHANNELS or c == 0:
        raise KernelShapeError(
            f"layernorm_linear supports 1..{MAX_CHANNELS} input channels; x is {tuple(x.shape)}"
        )
    if ln_w.shape != (c,) or ln_b.shape != (c,):
        raise KernelShapeError(
            f"LayerNorm weight/bias must be [{c}]; got {tuple(ln_w.shape)}, {tuple(ln_b.shape)}"
        )
    if w.dim() != 2 or w.shape[1] != c:
        raise KernelShapeError(f"weight must be [O, {c}]; got {tuple(w.shape)} for x {tuple(x.shape)}")
    if swiglu and w.shape[0] % 2:
        raise KernelShapeError(f"swiglu needs an even number of outputs; weight is {tuple(w.shape)}")
    if b is not None and b.shape != (w.shape[0],):
        raise KernelShapeError(f"bias must be [{w.shape[0]}]; got {tuple(b.shape)}")
    floats = (torch.float32, torch.float16, torch.bfloat16)
    if w.dtype not in floats or x.dtype not in floats:
        raise KernelShapeError(f"x and weight must be fp32/fp16/bf16; got {x.dtype}, {w.dtype}")


def _rows(t: torch.Tensor) -> torch.Tensor:
    t2 = t.reshape(-1, t.shape[-1])
    return t2 if t2.stride(-1) == 1 else t2.contiguous()


def _cp(c: int) -> int:
    """The channel tile: the whole row of C channels, padded to a power of two (≥ 16)."""
    return max(16, triton.next_power_of_2(c))


def layernorm_linear_forward(
    x: torch.Tensor,
    ln_weight: torch.Tensor,
    ln_bias: torch.Tensor,
    weight: torch.Tensor,
    bias: torch.Tensor | None,
    eps: float,
    swiglu: bool,
    config: LayerNormLinearConfig | None = None,
) -> torch.Tensor:
    """``[..., C] -> [..., O]`` (or ``[..., O/2]`` with swiglu) in the weight's dtype (the GEMM's)."""
    _check(x, ln_weight, ln_bias, weight, bias, swiglu)
    x2 = _rows(x)
    w = weight if weight.stride(-1) == 1 else weight.contiguous()
    m, c = x2.shape
    oh = w.shape[0] // 2 if swiglu else w.shape[0]
    cfg = (config or default_config(c, w.dtype, x.device)).fwd
    y = torch.empty((m, oh), device=x.device, dtype=w.dtype)
    n_col_blocks = triton.cdiv(oh, cfg.block_n)
    per_prog = n_col_blocks if cfg.col_blocks <= 0 else min(cfg.col_blocks, n_col_blocks)
    if m:
        _fwd_kernel[(triton.cdiv(m, cfg.block_m), triton.cdiv(n_col_blocks, per_prog))](
            x2, ln_weight, ln_bias, w, w if bias is None else bias, y,
            m, c, oh, x2.stride(0), w.stride(0), y.stride(0), per_prog * cfg.block_n, eps,
            HAS_BIAS=bias is not None, SWIGLU=swiglu, CP=_cp(c),
            BLOCK_M=cfg.block_m, BLOCK_N=cfg.block_n, PREC=_prec(w.dtype),
            FAST_SIGMOID=use_fast_sigmoid(cfg.fast_sigmoid, w),
            num_warps=cfg.num_warps, num_stages=cfg.num_stages,
        )  # fmt: skip
    return y.reshape(*x.shape[:-1], oh)


@dataclass
class BackwardInputs:
    """Checked 2-D operands of the backward kernels."""

    x: torch.Tensor  # [M, C]
    ln_weight: torch.Tensor
    ln_bias: torch.Tensor
    w: torch.Tensor  # [O, C]
    bias: torch.Tensor | None
    dy: torch.Tensor  # [M, OH] in w's dtype
    eps: float
    swiglu: bool

    @property
    def out_half(self) -> int:
        return self.w.shape[0] // 2 if self.swiglu else self.w.shape[0]


def prepare_backward(
    dy: torch.Tensor,
    x: torch.Tensor,
    ln_weight: torch.Tensor,
    ln_bias: torch.Tensor,
    weight: torch.Tensor,
    bias: torch.Tensor | None,
    eps: float,
    swiglu: bool,
) -> BackwardInputs:
    _check(x, ln_weight, ln_bias, weight, bias, swiglu)
    x2 = _rows(x)
    w = weight if weight.stride(-1) == 1 else weight.contiguous()
    oh = w.shape[0] // 2 if swiglu else w.shape[0]
    dy2 = _rows(dy.to(w.dtype))
    if dy2.shape != (x2.shape[0], oh):
        raise KernelShapeError(f"dy must be [..., {oh}] matching x {tuple(x.shape)}; got {tuple(dy.shape)}")
    return BackwardInputs(x2, ln_weight, ln_bias, w, bias, dy2, eps, swiglu)


def launch_dx(
    a: BackwardInputs, cfg: GemmConfig, store_du: bool = False
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor | None, torch.Tensor | None]:
    """dx ``[M, C]`` (x's dtype), the fp32 dγ, dβ ``[C]`` and, with ``store_du``, dU ``[M, O]``
    (the gradient w.r.t. the GEMM outputs; ``a.dy`` itself without SwiGLU) and LN(x) ``[M, C]``,
    both in the weight's dtype (else None, None)."""
    m, c = a.x.shape
    n_row_blocks = max(1, triton.cdiv(m, cfg.block_m))
    dev, wdt = a.x.device, a.w.dtype
    dx = torch.empty((m, c), device=dev, dtype=a.x.dtype)
    dlnw_part = torch.empty((n_row_blocks, c), device=dev, dtype=torch.float32)
    dlnb_part = torch.empty((n_row_blocks, c), device=dev, dtype=torch.float32)
    du = xln = None
    if store_du:
        du = torch.empty((m, a.w.shape[0]), device=dev, dtype=wdt) if a.swiglu else a.dy
        xln = torch.empty((m, c), device=dev, dtype=wdt)
    if m == 0:
        return dx, dlnw_part.zero_().sum(0), dlnb_part.zero_().sum(0), du, xln
    du_arg = du if du is not None else a.w
    xln_arg = xln if xln is not None else a.w
    _bwd_dx_kernel[(n_row_blocks,)](
        a.x, a.ln_weight, a.ln_bias, a.w, a.w if a.bias is None else a.bias, a.dy, dx, dlnw_part, dlnb_part,
        du_arg, xln_arg,
        m, c, a.out_half, a.x.stride(0), a.w.stride(0), a.dy.stride(0), dx.stride(0), du_arg.stride(0),
        xln_arg.stride(0), a.eps,
        HAS_BIAS=a.bias is not None, SWIGLU=a.swiglu, CP=_cp(c),
        BLOCK_M=cfg.block_m, BLOCK_N=cfg.block_n, PREC=_prec(wdt), STORE_DU=store_du,
        FAST_SIGMOID=use_fast_sigmoid(cfg.fast_sigmoid, a.w),
        num_warps=cfg.num_warps, num_stages=cfg.num_stages,
    )  # fmt: skip
    return dx, dlnw_part.sum(0), dlnb_part.sum(0), du, xln


def library_dw(
    du: torch.Tensor, xln: torch.Tensor, with_bias: bool
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """dW ``[O, C]`` = dUᵀ·LN(x) (one library GEMM, fp32 accumulation, the weight's dtype) and the
    fp32 dbias ``[O]`` = Σ_rows dU (None without a bias). Deterministic (no split-K atomics)."""
    dw = torch.matmul(du.t(), xln)
    db = torch.sum(du, dim=0, dtype=torch.float32) if with_bias else None
    return dw, db


def launch_dw(a: BackwardInputs, cfg: GemmConfig, target_programs: int) -> tuple[torch.Tensor, torch.Tensor]:
    """fp32 dW ``[O, C]`` and dbias ``[O]``: rows are split into as few groups as give
    ``target_programs`` programs; fp32 partials per group, reduced by one ordered sum."""
    m, c = a.x.shape
    o, oh = a.w.shape[0], a.out_half
    n_out_blocks = triton.cdiv(oh, cfg.block_n)
    row_blocks = max(1, triton.cdiv(m, cfg.block_m))
    splits = max(1, min(row_blocks, triton.cdiv(target_programs, n_out_blocks)))
    rows_per_split = triton.cdiv(row_blocks, splits) * cfg.block_m
    splits = max(1, triton.cdiv(m, rows_per_split))
    dw_part = torch.empty((splits, o, c), device=a.x.device, dtype=torch.float32)
    db_part = torch.empty((splits, o), device=a.x.device, dtype=torch.float32)
    if m == 0:
        return dw_part.zero_().sum(0), db_part.zero_().sum(0)
    _bwd_dw_kernel[(n_out_blocks, splits)](
        a.x, a.ln_weight, a.ln_bias, a.w, a.w if a.bias is None else a.bias, a.dy, dw_part, db_part,
        m, c, oh, a.x.stride(0), a.w.stride(0), a.dy.stride(0), rows_per_split, a.eps,
        HAS_BIAS=a.bias is not None, SWIGLU=a.swiglu, CP=_cp(c),
        BLOCK_M=cfg.block_m, BLOCK_N=cfg.block_n, PREC=_prec(a.w.dtype),
        FAST_SIGMOID=use_fast_sigmoid(cfg.fast_sigmoid, a.w),
        num_warps=cfg.num_warps, num_stages=cfg.num_stages,
    )  # fmt: skip
    return dw_part.sum(0), db_part.sum(0)


def layernorm_linear_backward(
    dy: torch.Tensor,
    x: torch.Tensor,
    ln_weight: torch.Tensor,
    ln_bias: torch.Tensor,
    weight: torch.Tensor,
    bias: torch.Tensor | None,
    eps: float,
    swiglu: bool,
    config: LayerNormLinearConfig | None = None,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor | None]:
    """Returns dx, dln_weight, dln_bias, dweight, dbias (None without bias), each in its input's dtype."""
    a = prepare_backward(dy, x, ln_weight, ln_bias, weight, bias, eps, swiglu)
    config = config or default_config(a.x.shape[1], a.w.dtype, a.x.device)
    if config.dw_library:
        dx, dlnw, dlnb, du, xln = launch_dx(a, config.dx, store_du=True)
        assert du is not None and xln is not None
        dw, db_or_none = library_dw(du, xln, bias is not None)
        del du, xln
        db = dw.new_empty((0,)) if db_or_none is None else db_or_none
    else:
        dx, dlnw, dlnb, _, _ = launch_dx(a, config.dx)
        dw, db = launch_dw(a, config.dw, config.dw_target_programs)
    return (
        dx.reshape(x.shape), dlnw.to(ln_weight.dtype), dlnb.to(ln_bias.dtype), dw.to(weight.dtype),
        None if bias is None else db.to(bias.dtype),
    )  # fmt: skip


# --------------------------------------------------------------------------------------------
# torch.library registration and autograd
# --------------------------------------------------------------------------------------------


@torch.library.custom_op(
    "featurecache::layernorm_linear",
    mutates_args=(),
    schema="(Tensor x, Tensor ln_weight, Tensor ln_bias, Tensor weight, Tensor? bias, float eps, bool swiglu) -> Tensor",
)
def _op(
    x: torch.Tensor,
    ln_weight: torch.Tensor,
    ln_bias: torch.Tensor,
    weight: torch.Tensor,
    bias: torch.Tensor | None,
    eps: float,
    swiglu: bool,
) -> torch.Tensor:
    return layernorm_linear_forward(x, ln_weight, ln_bias, weight, bias, eps, swiglu)


@_op.register_fake
def _fake(x, ln_weight, ln_bias, weight, bias, eps, swiglu):  # type: ignore[no-untyped-def]
    o = weight.shape[0] // 2 if swiglu else weight.shape[0]
    return x.new_empty((*x.shape[:-1], o), dtype=weight.dtype)


@torch.library.custom_op(
    "featurecache::layernorm_linear_backward",
    mutates_args=(),
    schema=(
        "(Tensor dy, Tensor x, Tensor ln_weight, Tensor ln_bias, Tensor weight, Tensor? bias, float eps, "
        "bool swiglu) -> (Tensor, Tensor, Tensor, Tensor, Tensor)"
    ),
)
def _backward_op(
    dy: torch.Tensor,
    x: torch.Tensor,
    ln_weight: torch.Tensor,
    ln_bias: torch.Tensor,
    weight: torch.Tensor,
    bias: torch.Tensor | None,
    eps: float,
    swiglu: bool,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    dx, dlnw, dlnb, dw, db = layernorm_linear_backward(dy, x, ln_weight, ln_bias, weight, bias, eps, swiglu)
    return dx, dlnw, dlnb, dw, (db if db is not None else weight.new_empty((0,)))


@_backward_op.register_fake
def _backward_fake(dy, x, ln_weight, ln_bias, weight, bias, eps, swiglu):  # type: ignore[no-untyped-def]
    # contiguous, as the launchers allocate them (empty_like would keep a transposed x's strides)
    db = bias.new_empty(bias.shape) if bias is not None else weight.new_empty((0,))
    return (*(t.new_empty(t.shape) for t in (x, ln_weight, ln_bias, weight)), db)


def _setup_context(ctx, inputs, output):  # type: ignore[no-untyped-def]
    x, ln_weight, ln_bias, weight, bias, eps, swiglu = inputs
    ctx.save_for_backward(x, ln_weight, ln_bias, weight, bias)
    ctx.eps = eps
    ctx.swiglu = swiglu


def _backward(ctx, dy):  # type: ignore[no-untyped-def]
    x, ln_weight, ln_bias, weight, bias = ctx.saved_tensors
    dx, dlnw, dlnb, dw, db = torch.ops.featurecache.layernorm_linear_backward(
        dy, x, ln_weight, ln_bias, weight, bias, ctx.eps, ctx.swiglu
    )
    return dx, dlnw, dlnb, dw, (db if bias is not None else None), None, None


_op.register_autograd(_backward, setup_context=_setup_context)


class LayerNormLinearFunction(torch.autograd.Function):
    """The eager autograd path (same launchers as the registered ops, without the custom-op
    dispatch); under ``torch.compile`` the registered op is used."""

    @staticmethod
    def forward(  # type: ignore[override]
        ctx: torch.autograd.function.FunctionCtx,
        x: torch.Tensor,
        ln_weight: torch.Tensor,
        ln_bias: torch.Tensor,
        weight: torch.Tensor,
        bias: torch.Tensor | None,
        eps: float,
        swiglu: bool,
    ) -> torch.Tensor:
        ctx.save_for_backward(x, ln_weight, ln_bias, weight, bias)  # type: ignore[arg-type]  # None is allowed
        ctx.eps, ctx.swiglu = eps, swiglu  # type: ignore[attr-defined]
        return layernorm_linear_forward(x, ln_weight, ln_bias, weight, bias, eps, swiglu)

    @staticmethod
    @first_order_only(
        "layernorm_linear", "layernorm_linear_ref"
    )  # no double backward: raise rather than drop the term
    def backward(ctx, dy):  # type: ignore[no-untyped-def, override]
        x, ln_weight, ln_bias, weight, bias = ctx.saved_tensors
        dx, dlnw, dlnb, dw, db = layernorm_linear_backward(
            dy, x, ln_weight, ln_bias, weight, bias, ctx.eps, ctx.swiglu
        )
        return dx, dlnw, dlnb, dw, db, None, None


def layernorm_linear(
    x: torch.Tensor,
    ln_weight: torch.Tensor,
    ln_bias: torch.Tensor,
    weight: torch.Tensor,
    bias: torch.Tensor | None = None,
    eps: float = 1e-5,
    swiglu: bool = False,
) -> torch.Tensor:
    """Fused ``Linear(LayerNorm(x))`` (+ SwiGLU epilogue); differentiable in every tensor.

    x: ``[..., C]`` (C ≤ 512; fp32, fp16 or bf16, as the weight: it is normalised in fp32 and cast
    to the weight's dtype for the GEMM; fp64 is refused: :func:`layernorm_linear_ref` takes it);
    ln_weight, ln_bias: ``[C]``; weight: ``[O, C]``; bias: ``[O]`` or None.
    Returns ``[..., O]``, or ``[..., O/2]`` = ``silu(u[:O/2]) * u[O/2:]``, in the weight's dtype.
    """
    if torch.compiler.is_compiling():
        return torch.ops.featurecache.layernorm_linear(
            x, ln_weight, ln_bias, weight, bias, float(eps), bool(swiglu)
        )
    result: torch.Tensor = LayerNormLinearFunction.apply(
        x, ln_weight, ln_bias, weight, bias, float(eps), bool(swiglu)
    )
    return result
