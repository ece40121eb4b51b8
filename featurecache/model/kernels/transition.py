"""The whole AF3 transition ``LN → Linear(c, 2·n·c) → SwiGLU → Linear(n·c, c)`` (no biases) as two
kernels, forward and backward.

``layernorm_linear`` + a library Linear sends the hidden activation ``h = silu(a)·b`` ``[M, n·c]``
through memory four times (the forward writes it, the second Linear reads it, its backward writes
``dh`` and the dx kernel reads it). Here:

* ``_fwd_kernel``: per row block, LN(x) once, then a loop over hidden column blocks: a, b (K = c),
  h = silu(a)·b in registers, y += h·W2ᵀ accumulated in fp32; only y is stored.
* ``_bwd_kernel``: per row block, LN(x) and dy once, loop over hidden column blocks: recompute a, b,
  dh = dy·W2 (K = c), store h (for dW2) and dU = ∂(silu(a)·b) (for dW1), dLN += dU·W1; then the
  LayerNorm backward -> dx, with per-block partial sums of dγ, dβ (one ordered sum: deterministic).
* dW1 = dUᵀ·LN(x) and dW2 = dyᵀ·h: library GEMMs (cuBLAS on a GPU; deterministic), run per row
  chunk of the backward (``grid.TRANSITION_BWD_CHUNK_BYTES``) into fp32 sums, so h, dU and LN(x) exist for one chunk.

Session 7 (run 26) built these and found them no faster than ``layernorm_linear`` + cuBLAS
(3.07 vs 3.03 ms at N = 768): the loops were bound by their epilogue (the sigmoid's IEEE division)
and by ptxas serialising the backward's wgmmas. With the sigmoid by ``tanh.approx`` and dLN
accumulated through a fresh tile (run 32), they are: 2.57 vs 2.83–2.86 ms (run 33, KERNEL_NOTES.md).

Channels up to 256 (the fp32 y / dLN accumulators hold a whole row block of c);
:class:`featurecache.model.modules.Transition` falls back to ``layernorm_linear`` + Linear above.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import triton
import triton.language as tl

from featurecache.errors import KernelShapeError
from featurecache.model.kernels.autograd import first_order_only
from featurecache.model.kernels.grid import TRANSITION_BWD_CHUNK_BYTES, check_devices, chunk_rows
from featurecache.model.kernels.launch import ConfigOverrides
from featurecache.model.kernels.launch import dot_precision as _prec
from featurecache.model.kernels.layernorm_linear import _cp, _layernorm_rows, _rows
from featurecache.model.kernels.swiglu import swiglu_bwd_tile, swiglu_fwd_tile, use_fast_sigmoid

MAX_CHANNELS = 256


@triton.jit
def _ab_tiles(a_op, W1, hs, offs_c, C, NH, sw1_o, PREC: tl.constexpr):
    """The pre-activations a = LN(x)·W1[hs]ᵀ and b = LN(x)·W1[NH + hs]ᵀ (fp32, [BLOCK_M, BLOCK_N])
    of the hidden columns hs, and the two W1 tiles ([BLOCK_N, CP]) they came from."""
    ok = (hs < NH)[:, None] & (offs_c < C)[None, :]
    wa = tl.load(W1 + hs[:, None] * sw1_o + offs_c[None, :], mask=ok, other=0.0)
    wb = tl.load(W1 + (hs + NH)[:, None] * sw1_o + offs_c[None, :], mask=ok, other=0.0)
    a = tl.dot(a_op, tl.trans(wa), input_precision=PREC)
    b = tl.dot(a_op, tl.trans(wb), input_precision=PREC)
    return a, b, wa, wb


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
):  # fmt: skip
    rows = tl.program_id(0).to(tl.int64) * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_c = tl.arange(0, CP)
    offs_n = tl.arange(0, BLOCK_N)
    xln, _, _ = _layernorm_rows(X, LNW, LNB, rows, offs_c, M, C, sx_m, eps)
    a_op = xln.to(W1.dtype.element_ty)
    y = tl.zeros([BLOCK_M, CP], tl.float32)
    for start in range(0, NH, BLOCK_N):
        hs = start + offs_n
        a, b, _wa, _wb = _ab_tiles(a_op, W1, hs, offs_c, C, NH, sw1_o, PREC)
        h = swiglu_fwd_tile(a, b, FAST).to(W1.dtype.element_ty)
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
        a, b, wa, wb = _ab_tiles(a_op, W1, hs, offs_c, C, NH, sw1_o, PREC)
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
        # dU·W1 into a fresh tile, then one add: with dLN as the loop-carried wgmma accumulator
        # ptxas serialises the loop's wgmmas (C7515): 2.23 -> 1.97 ms at N = 768 (run 33)
        dxln = dxln + tl.dot(du_b, wb, tl.dot(du_a, wa, input_precision=PREC), input_precision=PREC)
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
    #: SwiGLU's sigmoid by the hardware tanh (bf16/fp16 weights on a GPU; see ``swiglu._sigmoid``)
    fast_sigmoid: bool = True


@dataclass(frozen=True)
class TransitionConfig:
    fwd: TileConfig
    bwd: TileConfig
    #: the backward's h/dU/LN(x) buffers per row chunk (None: all rows at once)
    bwd_chunk_bytes: int | None = TRANSITION_BWD_CHUNK_BYTES


def _mm_f32(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """a @ b with an fp32 result (half-precision inputs keep cuBLAS's fp32 accumulation on a GPU)."""
    if a.is_cuda and a.dtype != torch.float32:
        return torch.mm(a, b, out_dtype=torch.float32)
    return torch.mm(a.float(), b.float())


_OVERRIDES: ConfigOverrides[TransitionConfig] = ConfigOverrides()


def set_default_config(channels: int, dtype: torch.dtype, config: TransitionConfig | None) -> None:
    """Use ``config`` on CUDA for this (channels, GEMM dtype) from now on (None: built-in)."""
    _OVERRIDES.set(channels, dtype, config)


def default_config(channels: int, dtype: torch.dtype, device: torch.device) -> TransitionConfig:
    if (override := _OVERRIDES.get(channels, dtype, device)) is not None:
        return override
    if device.type != "cuda":  # Triton interpreter: small tiles keep numpy fast
        c = TileConfig(16, 32, 1, 1)
        return TransitionConfig(c, c)
    if dtype == torch.float32 or channels > 128:
        c = TileConfig(32, 32, 4, 2)
        return TransitionConfig(c, c)
    # H200, run 33 (rows = 768², c = 128, n = 4, bf16): tile sweeps of 9 forward and 10 backward configs
    return TransitionConfig(fwd=TileConfig(128, 128, 8, 2), bwd=TileConfig(64, 32, 4, 3))


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
    check_devices(
        "transition", "transition_ref", {"x": x, "ln_weight": ln_w, "ln_bias": ln_b, "w1": w1, "w2": w2}
    )
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
            FAST=use_fast_sigmoid(cfg.fast_sigmoid, w1),
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
    tcfg = config or default_config(c, wdt, dev)
    cfg = tcfg.bwd
    blocks = max(1, triton.cdiv(m, cfg.block_m))
    dx = torch.empty((m, c), device=dev, dtype=x.dtype)
    dlnw_part = torch.zeros((blocks, c), device=dev, dtype=torch.float32)
    dlnb_part = torch.zeros((blocks, c), device=dev, dtype=torch.float32)
    step = chunk_rows(m, c, nh, w1c.element_size(), cfg.block_m, tcfg.bwd_chunk_bytes)
    # several chunks: dW1, dW2 summed in fp32 in chunk order; one chunk: the GEMMs straight into the
    # weights' dtype (fp32 accumulation inside; 2-5 % faster than fp32 output, run 43)
    mm = torch.matmul if step >= m else _mm_f32
    dw1: torch.Tensor | None = None
    dw2: torch.Tensor | None = None
    # one chunk's buffers, reused by every chunk (stream order keeps the GEMMs' reads before the
    # next chunk's writes)
    h = torch.empty((step, nh), device=dev, dtype=wdt)
    du = torch.empty((step, 2 * nh), device=dev, dtype=wdt)
    xln = torch.empty((step, c), device=dev, dtype=wdt)
    for r0 in range(0, m, step):
        mk = min(m, r0 + step) - r0
        xk, dyk, dxk, b0 = x2[r0 : r0 + mk], dy2[r0 : r0 + mk], dx[r0 : r0 + mk], r0 // cfg.block_m
        _bwd_kernel[(triton.cdiv(mk, cfg.block_m),)](
            xk, ln_weight, ln_bias, w1c, w2c, dyk, dxk, dlnw_part[b0:], dlnb_part[b0:], h, du, xln,
            mk, c, nh, xk.stride(0), w1c.stride(0), w2c.stride(0), dyk.stride(0), dxk.stride(0), h.stride(0),
            du.stride(0), xln.stride(0), eps,
            CP=_cp(c), BLOCK_M=cfg.block_m, BLOCK_N=cfg.block_n, PREC=_prec(wdt), FAST=use_fast_sigmoid(cfg.fast_sigmoid, w1c),
            num_warps=cfg.num_warps, num_stages=cfg.num_stages,
        )  # fmt: skip
        g1, g2 = mm(du[:mk].t(), xln[:mk]), mm(dyk.t(), h[:mk])
        if dw1 is None or dw2 is None:
            dw1, dw2 = g1, g2
        else:
            dw1 += g1
            dw2 += g2
    del h, du, xln
    if dw1 is None or dw2 is None:  # no rows
        dw1, dw2 = torch.zeros_like(w1c), torch.zeros_like(w2c)
    return (
        dx.reshape(x.shape), dlnw_part.sum(0).to(ln_weight.dtype), dlnb_part.sum(0).to(ln_bias.dtype),
        dw1.to(w1.dtype), dw2.to(w2.dtype),
    )  # fmt: skip


# --------------------------------------------------------------------------------------------
# torch.library registration and autograd
# --------------------------------------------------------------------------------------------


@torch.library.custom_op(
    "featurecache::transition",
    mutates_args=(),
    schema="(Tensor x, Tensor ln_weight, Tensor ln_bias, Tensor w1, Tensor w2, float eps) -> Tensor",
)
def _op(
    x: torch.Tensor,
    ln_weight: torch.Tensor,
    ln_bias: torch.Tensor,
    w1: torch.Tensor,
    w2: torch.Tensor,
    eps: float,
) -> torch.Tensor:
    return transition_forward(x, ln_weight, ln_bias, w1, w2, eps)


@_op.register_fake
def _fake(x, ln_weight, ln_bias, w1, w2, eps):  # type: ignore[no-untyped-def]
    return x.new_empty(x.shape, dtype=w1.dtype)


@torch.library.custom_op(
    "featurecache::transition_backward",
    mutates_args=(),
    schema=(
        "(Tensor dy, Tensor x, Tensor ln_weight, Tensor ln_bias, Tensor w1, Tensor w2, float eps) "
        "-> (Tensor, Tensor, Tensor, Tensor, Tensor)"
    ),
)
def _backward_op(
    dy: torch.Tensor,
    x: torch.Tensor,
    ln_weight: torch.Tensor,
    ln_bias: torch.Tensor,
    w1: torch.Tensor,
    w2: torch.Tensor,
    eps: float,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    return transition_backward(dy, x, ln_weight, ln_bias, w1, w2, eps)


@_backward_op.register_fake
def _backward_fake(dy, x, ln_weight, ln_bias, w1, w2, eps):  # type: ignore[no-untyped-def]
    # contiguous, as the launchers allocate them (empty_like would keep a transposed x's strides)
    return tuple(t.new_empty(t.shape) for t in (x, ln_weight, ln_bias, w1, w2))


def _setup_context(ctx, inputs, output):  # type: ignore[no-untyped-def]
    x, ln_weight, ln_bias, w1, w2, eps = inputs
    ctx.save_for_backward(x, ln_weight, ln_bias, w1, w2)
    ctx.eps = eps


def _backward(ctx, dy):  # type: ignore[no-untyped-def]
    x, ln_weight, ln_bias, w1, w2 = ctx.saved_tensors
    return (*torch.ops.featurecache.transition_backward(dy, x, ln_weight, ln_bias, w1, w2, ctx.eps), None)


_op.register_autograd(_backward, setup_context=_setup_context)


class TransitionFunction(torch.autograd.Function):
    """The eager autograd path (same launchers as the registered ops, without the custom-op
    dispatch); saves only the inputs (everything else is recomputed). Under ``torch.compile`` the
    registered op is used."""

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
    @first_order_only("transition", "transition_ref")  # no double backward: raise rather than drop the term
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

    x: ``[..., C]`` (C ≤ 256; fp32, fp16 or bf16, as the weights: normalised in fp32, cast to the
    weights' dtype for the GEMMs; fp64 is refused); ln_weight, ln_bias: ``[C]``; w1: ``[2·H, C]``
    (the a half first, as ``swiglu`` splits); w2: ``[C, H]``. Returns ``[..., C]`` in the weights' dtype.
    """
    if torch.compiler.is_compiling():
        return torch.ops.featurecache.transition(x, ln_weight, ln_bias, w1, w2, float(eps))
    result: torch.Tensor = TransitionFunction.apply(x, ln_weight, ln_bias, w1, w2, float(eps))
    return result
