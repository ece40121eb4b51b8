"""Dev experiment (run 33; session 7's run-26 kernels, commit 041f9b9, with run 32's two changes):
the whole AF3 transition ``LN → Linear(c, 2·n·c) → SwiGLU → Linear(n·c, c)`` (no biases) as two
kernels, forward and backward.

``layernorm_linear`` fuses the first three steps and leaves the second Linear to cuBLAS, so the
hidden activation ``h = silu(a)·b`` ``[M, n·c]`` goes through memory four times (the forward
writes it, the second Linear reads it, its backward writes ``dh`` and the dx kernel reads it):
at N = 768 (M = 768², c = 128, n = 4) that is 2.4 GB of traffic, ~0.6 ms at 4 TB/s. Here:

* ``_fwd_kernel``: per row block, LN(x) once, then a loop over hidden column blocks: a, b (K = c),
  h = silu(a)·b in registers, y += h·W2ᵀ (K = the block) accumulated in fp32; only y is stored.
* ``_bwd_kernel``: per row block, LN(x) and dy once, loop over hidden column blocks: recompute a, b,
  dh = dy·W2 (K = c), store h (for dW2) and dU = ∂(silu(a)·b) (for dW1), dLN += dU·W1; then the
  LayerNorm backward -> dx, with per-block partial sums of dγ, dβ.
* dW1 = dUᵀ·LN(x) and dW2 = dyᵀ·h: library GEMMs (cuBLAS on a GPU; deterministic).

Channels up to 256 (the fp32 y / dLN accumulators hold a whole row block of c); the module falls
back to ``layernorm_linear`` + Linear above that.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import triton
import triton.language as tl

from featurecache.errors import KernelShapeError
from featurecache.model.kernels.grid import interpreting
from featurecache.model.kernels.layernorm_linear import _layernorm_rows, _prec
from featurecache.model.kernels.swiglu import swiglu_bwd_tile, swiglu_fwd_tile

MAX_CHANNELS = 256


@triton.jit
def _w1_tiles(W1, hs, offs_c, C, NH, sw1_o):
    """W1 rows of the a half (hs) and the b half (NH + hs): two [BLOCK_N, CP] tiles."""
    ok = (hs < NH)[:, None] & (offs_c < C)[None, :]
    wa = tl.load(W1 + hs[:, None] * sw1_o + offs_c[None, :], mask=ok, other=0.0)
    wb = tl.load(W1 + (hs + NH)[:, None] * sw1_o + offs_c[None, :], mask=ok, other=0.0)
    return wa, wb


@triton.jit
def _w2_tile(W2, hs, offs_c, C, NH, sw2_o):
    """W2[:, hs] as a [CP, BLOCK_N] tile (W2 is [C, NH], nn.Linear layout)."""
    ok = (offs_c < C)[:, None] & (hs < NH)[None, :]
    return tl.load(W2 + offs_c[:, None] * sw2_o + hs[None, :], mask=ok, other=0.0)


@triton.jit
def _fwd_kernel(
    X,  # [M, C]
    LNW, LNB,  # [C]
    W1,  # [2·NH, C]
    W2,  # [C, NH]
    Y,  # [M, C] in W1's dtype
    M, C, NH, sx_m, sw1_o, sw2_o, sy_m, eps,
    CP: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, PREC: tl.constexpr, FAST: tl.constexpr,
    SPLIT: tl.constexpr,
):  # fmt: skip
    rows = tl.program_id(0).to(tl.int64) * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_c = tl.arange(0, CP)
    offs_n = tl.arange(0, BLOCK_N)
    xln, _, _ = _layernorm_rows(X, LNW, LNB, rows, offs_c, M, C, sx_m, eps)
    a_op = xln.to(W1.dtype.element_ty)
    y = tl.zeros([BLOCK_M, CP], tl.float32)
    for start in range(0, NH, BLOCK_N):
        hs = start + offs_n
        wa, wb = _w1_tiles(W1, hs, offs_c, C, NH, sw1_o)
        a = tl.dot(a_op, tl.trans(wa), input_precision=PREC)
        b = tl.dot(a_op, tl.trans(wb), input_precision=PREC)
        h = swiglu_fwd_tile(a, b, FAST).to(W1.dtype.element_ty)
        if SPLIT:
            y = tl.inline_asm_elementwise("add.f32 $0, $1, $2;", "=r,r,r",
                                          [y, tl.dot(h, tl.trans(_w2_tile(W2, hs, offs_c, C, NH, sw2_o)), input_precision=PREC)],
                                          dtype=tl.float32, is_pure=True, pack=1)  # fmt: skip
        else:
            y += tl.dot(h, tl.trans(_w2_tile(W2, hs, offs_c, C, NH, sw2_o)), input_precision=PREC)
    tl.store(Y + rows[:, None] * sy_m + offs_c[None, :], y.to(Y.dtype.element_ty),
             mask=(rows < M)[:, None] & (offs_c < C)[None, :])  # fmt: skip


@triton.jit
def _bwd_kernel(
    X,  # [M, C]
    LNW, LNB,  # [C]
    W1,  # [2·NH, C]
    W2,  # [C, NH]
    DY,  # [M, C] in W1's dtype
    DX,  # [M, C] in x's dtype
    DLNW_PART, DLNB_PART,  # [cdiv(M, BLOCK_M), C] fp32
    H,  # [M, NH] in W1's dtype: silu(a)·b (for dW2)
    DU,  # [M, 2·NH] in W1's dtype: ∂/∂(a, b) (for dW1)
    XLN,  # [M, C] in W1's dtype: LN(x) (for dW1)
    M, C, NH, sx_m, sw1_o, sw2_o, sdy_m, sdx_m, sh_m, sdu_m, sxln_m, eps,
    CP: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, PREC: tl.constexpr, FAST: tl.constexpr,
    SPLIT: tl.constexpr,
):  # fmt: skip
    pid = tl.program_id(0).to(tl.int64)
    rows = pid * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_c = tl.arange(0, CP)
    offs_n = tl.arange(0, BLOCK_N)
    row_ok = rows < M
    col_ok = offs_c < C
    rc_ok = row_ok[:, None] & col_ok[None, :]
    xln, _, _ = _layernorm_rows(X, LNW, LNB, rows, offs_c, M, C, sx_m, eps)
    a_op = xln.to(W1.dtype.element_ty)
    tl.store(XLN + rows[:, None] * sxln_m + offs_c[None, :], a_op, mask=rc_ok)
    dy = tl.load(DY + rows[:, None] * sdy_m + offs_c[None, :], mask=rc_ok, other=0.0)
    dxln = tl.zeros([BLOCK_M, CP], tl.float32)
    for start in range(0, NH, BLOCK_N):
        hs = start + offs_n
        wa, wb = _w1_tiles(W1, hs, offs_c, C, NH, sw1_o)
        a = tl.dot(a_op, tl.trans(wa), input_precision=PREC)
        b = tl.dot(a_op, tl.trans(wb), input_precision=PREC)
        dh = tl.dot(dy, _w2_tile(W2, hs, offs_c, C, NH, sw2_o), input_precision=PREC)
        st_ok = row_ok[:, None] & (hs < NH)[None, :]
        tl.store(
            H + rows[:, None] * sh_m + hs[None, :],
            swiglu_fwd_tile(a, b, FAST).to(H.dtype.element_ty),
            mask=st_ok,
        )
        du_a, du_b = swiglu_bwd_tile(a, b, dh, FAST)
        du_a = du_a.to(W1.dtype.element_ty)
        du_b = du_b.to(W1.dtype.element_ty)
        tl.store(DU + rows[:, None] * sdu_m + hs[None, :], du_a, mask=st_ok)
        tl.store(DU + rows[:, None] * sdu_m + (hs + NH)[None, :], du_b, mask=st_ok)
        if SPLIT:
            dxln = dxln + tl.dot(du_b, wb, tl.dot(du_a, wa, input_precision=PREC), input_precision=PREC)
        else:
            dxln += tl.dot(du_a, wa, input_precision=PREC)
            dxln += tl.dot(du_b, wb, input_precision=PREC)
    # the LayerNorm backward; x̂ and rstd recomputed (x is in L2) rather than kept through the loop
    _, xhat, rstd = _layernorm_rows(X, LNW, LNB, rows, offs_c, M, C, sx_m, eps)
    dxln = tl.where(row_ok[:, None], dxln, 0.0)
    w = tl.load(LNW + offs_c, mask=col_ok, other=0.0).to(tl.float32)
    g = dxln * w[None, :]
    c1 = tl.sum(g * xhat, 1) / C
    c2 = tl.sum(g, 1) / C
    dx = (g - xhat * c1[:, None] - c2[:, None]) * rstd[:, None]
    tl.store(DX + rows[:, None] * sdx_m + offs_c[None, :], dx.to(DX.dtype.element_ty), mask=rc_ok)
    tl.store(DLNW_PART + pid * C + offs_c, tl.sum(dxln * xhat, 0), mask=col_ok)
    tl.store(DLNB_PART + pid * C + offs_c, tl.sum(dxln, 0), mask=col_ok)


# --------------------------------------------------------------------------------------------
# launchers
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class TileConfig:
    block_m: int
    block_n: int
    num_warps: int = 4
    num_stages: int = 2
    fast: bool = True
    split: bool = True


def _fast(cfg: TileConfig, w: torch.Tensor) -> bool:
    return cfg.fast and w.is_cuda and w.dtype != torch.float32 and not interpreting()


@dataclass(frozen=True)
class TransitionConfig:
    fwd: TileConfig
    bwd: TileConfig


_OVERRIDES: dict[tuple[int, torch.dtype], TransitionConfig] = {}


def set_default_config(channels: int, dtype: torch.dtype, config: TransitionConfig | None) -> None:
    """Use ``config`` on CUDA for this (channels, GEMM dtype) from now on (None: built-in)."""
    if config is None:
        _OVERRIDES.pop((channels, dtype), None)
    else:
        _OVERRIDES[(channels, dtype)] = config


def default_config(channels: int, dtype: torch.dtype, device: torch.device) -> TransitionConfig:
    if device.type == "cuda" and (channels, dtype) in _OVERRIDES:
        return _OVERRIDES[(channels, dtype)]
    if device.type != "cuda":  # Triton interpreter: small tiles keep numpy fast
        c = TileConfig(16, 32, 1, 1)
        return TransitionConfig(c, c)
    if dtype == torch.float32 or channels > 128:
        c = TileConfig(32, 32, 4, 2)
        return TransitionConfig(c, c)
    return TransitionConfig(fwd=TileConfig(64, 64, 4, 3), bwd=TileConfig(64, 32, 4, 3))


def supported(x: torch.Tensor, w1: torch.Tensor, w2: torch.Tensor) -> bool:
    """Shapes this op takes (else use layernorm_linear + a Linear)."""
    c = x.shape[-1]
    return (
        0 < c <= MAX_CHANNELS
        and w1.dim() == 2
        and w1.shape[1] == c
        and w1.shape[0] % 2 == 0
        and (tuple(w2.shape) == (c, w1.shape[0] // 2))
    )


def _check(
    x: torch.Tensor, ln_w: torch.Tensor, ln_b: torch.Tensor, w1: torch.Tensor, w2: torch.Tensor
) -> None:
    c = x.shape[-1]
    if not supported(x, w1, w2):
        raise KernelShapeError(
            f"transition needs x [..., C ≤ {MAX_CHANNELS}], w1 [2·H, C], w2 [C, H]; got x {tuple(x.shape)}, "
            f"w1 {tuple(w1.shape)}, w2 {tuple(w2.shape)}"
        )
    if ln_w.shape != (c,) or ln_b.shape != (c,):
        raise KernelShapeError(
            f"LayerNorm weight/bias must be [{c}]; got {tuple(ln_w.shape)}, {tuple(ln_b.shape)}"
        )
    floats = (torch.float32, torch.float16, torch.bfloat16)
    if x.dtype not in floats or w1.dtype not in floats or w2.dtype != w1.dtype:
        raise KernelShapeError(
            f"x, w1, w2 must be fp32/fp16/bf16 (w1, w2 alike); got {x.dtype}, {w1.dtype}, {w2.dtype}"
        )


def _rows(t: torch.Tensor) -> torch.Tensor:
    t2 = t.reshape(-1, t.shape[-1])
    return t2 if t2.stride(-1) == 1 else t2.contiguous()


def _cp(c: int) -> int:
    return max(16, triton.next_power_of_2(c))


def transition_forward(
    x: torch.Tensor,
    ln_weight: torch.Tensor,
    ln_bias: torch.Tensor,
    w1: torch.Tensor,
    w2: torch.Tensor,
    eps: float,
    config: TransitionConfig | None = None,
) -> torch.Tensor:
    """``[..., C] -> [..., C]`` in the weights' dtype."""
    _check(x, ln_weight, ln_bias, w1, w2)
    x2, w1, w2 = _rows(x), _rows(w1), _rows(w2)
    m, c = x2.shape
    cfg = (config or default_config(c, w1.dtype, x.device)).fwd
    y = torch.empty((m, c), device=x.device, dtype=w1.dtype)
    if m:
        _fwd_kernel[(triton.cdiv(m, cfg.block_m),)](
            x2, ln_weight, ln_bias, w1, w2, y, m, c, w2.shape[1], x2.stride(0), w1.stride(0), w2.stride(0),
            y.stride(0), eps, CP=_cp(c), BLOCK_M=cfg.block_m, BLOCK_N=cfg.block_n, PREC=_prec(w1.dtype),
            FAST=_fast(cfg, w1), SPLIT=cfg.split and not interpreting(),
            num_warps=cfg.num_warps, num_stages=cfg.num_stages,
        )  # fmt: skip
    return y.reshape((*x.shape[:-1], c))


def transition_backward(
    dy: torch.Tensor,
    x: torch.Tensor,
    ln_weight: torch.Tensor,
    ln_bias: torch.Tensor,
    w1: torch.Tensor,
    w2: torch.Tensor,
    eps: float,
    config: TransitionConfig | None = None,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """dx, dln_weight, dln_bias, dw1, dw2, each in its input's dtype."""
    _check(x, ln_weight, ln_bias, w1, w2)
    x2, w1c, w2c = _rows(x), _rows(w1), _rows(w2)
    m, c = x2.shape
    nh = w2c.shape[1]
    wdt, dev = w1c.dtype, x.device
    dy2 = _rows(dy.to(wdt))
    if dy2.shape != (m, c):
        raise KernelShapeError(f"dy must be shaped like x {tuple(x.shape)}; got {tuple(dy.shape)}")
    cfg = (config or default_config(c, wdt, dev)).bwd
    blocks = max(1, triton.cdiv(m, cfg.block_m))
    dx = torch.empty((m, c), device=dev, dtype=x.dtype)
    dlnw_part = torch.zeros((blocks, c), device=dev, dtype=torch.float32)
    dlnb_part = torch.zeros((blocks, c), device=dev, dtype=torch.float32)
    h = torch.empty((m, nh), device=dev, dtype=wdt)
    du = torch.empty((m, 2 * nh), device=dev, dtype=wdt)
    xln = torch.empty((m, c), device=dev, dtype=wdt)
    if m:
        _bwd_kernel[(blocks,)](
            x2, ln_weight, ln_bias, w1c, w2c, dy2, dx, dlnw_part, dlnb_part, h, du, xln,
            m, c, nh, x2.stride(0), w1c.stride(0), w2c.stride(0), dy2.stride(0), dx.stride(0), h.stride(0),
            du.stride(0), xln.stride(0), eps,
            CP=_cp(c), BLOCK_M=cfg.block_m, BLOCK_N=cfg.block_n, PREC=_prec(wdt), FAST=_fast(cfg, w1c), SPLIT=cfg.split,
            num_warps=cfg.num_warps, num_stages=cfg.num_stages,
        )  # fmt: skip
    dw1 = torch.matmul(du.t(), xln)
    del du, xln
    dw2 = torch.matmul(dy2.t(), h)
    return (
        dx.reshape(x.shape), dlnw_part.sum(0).to(ln_weight.dtype), dlnb_part.sum(0).to(ln_bias.dtype),
        dw1.to(w1.dtype), dw2.to(w2.dtype),
    )  # fmt: skip


class TransitionFunction(torch.autograd.Function):
    """Autograd over the two kernels; saves only the inputs (everything else is recomputed)."""

    @staticmethod
    def forward(  # type: ignore[override]
        ctx: torch.autograd.function.FunctionCtx,
        x: torch.Tensor,
        ln_weight: torch.Tensor,
        ln_bias: torch.Tensor,
        w1: torch.Tensor,
        w2: torch.Tensor,
        eps: float,
    ) -> torch.Tensor:
        ctx.save_for_backward(x, ln_weight, ln_bias, w1, w2)
        ctx.eps = eps  # type: ignore[attr-defined]
        return transition_forward(x, ln_weight, ln_bias, w1, w2, eps)

    @staticmethod
    def backward(ctx, dy):  # type: ignore[no-untyped-def, override]
        x, ln_weight, ln_bias, w1, w2 = ctx.saved_tensors
        return (*transition_backward(dy, x, ln_weight, ln_bias, w1, w2, ctx.eps), None)


def transition(
    x: torch.Tensor,
    ln_weight: torch.Tensor,
    ln_bias: torch.Tensor,
    w1: torch.Tensor,
    w2: torch.Tensor,
    eps: float = 1e-5,
) -> torch.Tensor:
    """``Linear(W2)(SwiGLU(Linear(W1)(LayerNorm(x))))`` without biases; differentiable in every tensor.

    x: ``[..., C]`` (C ≤ 256); ln_weight, ln_bias: ``[C]``; w1: ``[2·H, C]`` (the a half first, as
    ``swiglu`` splits); w2: ``[C, H]``. Returns ``[..., C]`` in the weights' dtype.
    """
    result: torch.Tensor = TransitionFunction.apply(x, ln_weight, ln_bias, w1, w2, float(eps))
    return result
