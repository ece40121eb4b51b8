"""SwiGLU ``silu(a) * b`` over ``u = [a | b]``: jit helpers shared with the GEMM epilogue of
:mod:`layernorm_linear`, and a standalone elementwise op (forward and backward) for inputs that
did not come out of that GEMM.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from featurecache.errors import KernelShapeError
from featurecache.model.kernels.grid import check_devices, interpreting


def use_fast_sigmoid(enabled: bool, weight: torch.Tensor) -> bool:
    """The ``FAST`` flag of :func:`_sigmoid` for a GEMM with this weight: only when enabled, compiled
    (not interpreted) and in half precision (fp32 keeps the IEEE sigmoid)."""
    return enabled and weight.is_cuda and weight.dtype != torch.float32 and not interpreting()


@triton.jit
def _sigmoid(a, FAST: tl.constexpr):
    """σ(a) of an fp32 tile. ``FAST``: ½ + ½·tanh(a/2) with the hardware ``tanh.approx.f32`` (absolute
    error ≤ 2.5e-4, three instructions) instead of 1/(1 + e^−a) with an IEEE division (about ten:
    the range checks of ``div.rn``); compiled kernels only (the interpreter has no inline asm)."""
    if FAST:
        t = tl.inline_asm_elementwise(
            "tanh.approx.f32 $0, $1;", "=r,r", [a * 0.5], dtype=tl.float32, is_pure=True, pack=1
        )
        return t * 0.5 + 0.5
    return tl.sigmoid(a)


@triton.jit
def swiglu_fwd_tile(a, b, FAST: tl.constexpr):
    """fp32 tiles a, b -> silu(a) * b (fp32); ``FAST`` as in :func:`_sigmoid`."""
    return a * _sigmoid(a, FAST) * b


@triton.jit
def swiglu_bwd_tile(a, b, dy, FAST: tl.constexpr):
    """fp32 tiles -> (da, db) of y = silu(a) * b given dy; ``FAST`` as in :func:`_sigmoid`."""
    sig = _sigmoid(a, FAST)
    silu = a * sig
    da = dy * b * sig * (1.0 + a * (1.0 - sig))
    db = dy * silu
    return da, db


@triton.jit
def _tile_ab(U, M, F, su_m, BLOCK_M: tl.constexpr, BLOCK_F: tl.constexpr):
    """This program's rows and columns of U [M, 2F], their mask and the fp32 halves a = U[:, :F],
    b = U[:, F:] (0 outside)."""
    rows = tl.program_id(0).to(tl.int64) * BLOCK_M + tl.arange(0, BLOCK_M)
    cols = tl.program_id(1) * BLOCK_F + tl.arange(0, BLOCK_F)
    ok = (rows < M)[:, None] & (cols < F)[None, :]
    base = U + rows[:, None] * su_m + cols[None, :]
    a = tl.load(base, mask=ok, other=0.0).to(tl.float32)
    b = tl.load(base + F, mask=ok, other=0.0).to(tl.float32)
    return rows, cols, ok, a, b


@triton.jit
def _swiglu_fwd_kernel(
    U,  # [M, 2F]
    Y,  # [M, F]
    M, F, su_m, sy_m,
    BLOCK_M: tl.constexpr, BLOCK_F: tl.constexpr,
):  # fmt: skip
    rows, cols, ok, a, b = _tile_ab(U, M, F, su_m, BLOCK_M, BLOCK_F)
    tl.store(
        Y + rows[:, None] * sy_m + cols[None, :], swiglu_fwd_tile(a, b, False).to(Y.dtype.element_ty), mask=ok
    )


@triton.jit
def _swiglu_bwd_kernel(
    U,  # [M, 2F]
    DY,  # [M, F]
    DU,  # [M, 2F]
    M, F, su_m, sdy_m, sdu_m,
    BLOCK_M: tl.constexpr, BLOCK_F: tl.constexpr,
):  # fmt: skip
    rows, cols, ok, a, b = _tile_ab(U, M, F, su_m, BLOCK_M, BLOCK_F)
    dy = tl.load(DY + rows[:, None] * sdy_m + cols[None, :], mask=ok, other=0.0).to(tl.float32)
    da, db = swiglu_bwd_tile(a, b, dy, False)
    out = DU + rows[:, None] * sdu_m + cols[None, :]
    tl.store(out, da.to(DU.dtype.element_ty), mask=ok)
    tl.store(out + F, db.to(DU.dtype.element_ty), mask=ok)


def _blocks(f: int) -> tuple[int, int]:
    block_f = min(128, triton.next_power_of_2(f))
    return max(1, 4096 // block_f), block_f


_FLOATS = (torch.float32, torch.float16, torch.bfloat16)


def _check(u: torch.Tensor, dy: torch.Tensor | None = None) -> None:
    """Device and dtype checks (the kernels compute in fp32 and store u's dtype: an integer u would
    be truncated, a float64 one silently computed in fp32)."""
    check_devices("swiglu", "swiglu_ref", {"u": u, "dy": dy})
    if u.dtype not in _FLOATS or (dy is not None and dy.dtype not in _FLOATS):
        got = u.dtype if dy is None else f"u {u.dtype}, dy {dy.dtype}"
        raise KernelShapeError(f"swiglu needs fp32/fp16/bf16 tensors; got {got} (swiglu_ref takes any float)")


def _flat(u: torch.Tensor) -> torch.Tensor:
    if u.dim() == 0 or u.shape[-1] % 2:
        raise KernelShapeError(f"swiglu needs an even last axis; got {tuple(u.shape)}")
    u2 = u.reshape(-1, u.shape[-1])
    return u2 if u2.stride(-1) == 1 else u2.contiguous()


def swiglu_forward(u: torch.Tensor) -> torch.Tensor:
    """``[..., 2F] -> [..., F]``, u's dtype."""
    _check(u)
    u2 = _flat(u)
    m, f = u2.shape[0], u2.shape[1] // 2
    y = torch.empty((m, f), device=u.device, dtype=u.dtype)
    bm, bf = _blocks(f)
    if m:
        _swiglu_fwd_kernel[(triton.cdiv(m, bm), triton.cdiv(f, bf))](
            u2, y, m, f, u2.stride(0), y.stride(0), BLOCK_M=bm, BLOCK_F=bf
        )
    return y.reshape(*u.shape[:-1], f)


def swiglu_backward(u: torch.Tensor, dy: torch.Tensor) -> torch.Tensor:
    """Gradient of :func:`swiglu_forward` w.r.t. u: ``[..., 2F]``."""
    _check(u, dy)
    u2 = _flat(u)
    m, f = u2.shape[0], u2.shape[1] // 2
    dy2 = dy.reshape(m, f)
    dy2 = dy2 if dy2.stride(-1) == 1 else dy2.contiguous()
    du = torch.empty((m, 2 * f), device=u.device, dtype=u.dtype)
    bm, bf = _blocks(f)
    if m:
        _swiglu_bwd_kernel[(triton.cdiv(m, bm), triton.cdiv(f, bf))](
            u2, dy2, du, m, f, u2.stride(0), dy2.stride(0), du.stride(0), BLOCK_M=bm, BLOCK_F=bf
        )
    return du.reshape(u.shape)


@torch.library.custom_op("featurecache::swiglu", mutates_args=(), schema="(Tensor u) -> Tensor")
def _swiglu_op(u: torch.Tensor) -> torch.Tensor:
    return swiglu_forward(u)


@_swiglu_op.register_fake
def _swiglu_fake(u):  # type: ignore[no-untyped-def]
    return u.new_empty((*u.shape[:-1], u.shape[-1] // 2))


@torch.library.custom_op(
    "featurecache::swiglu_backward", mutates_args=(), schema="(Tensor u, Tensor dy) -> Tensor"
)
def _swiglu_backward_op(u: torch.Tensor, dy: torch.Tensor) -> torch.Tensor:
    return swiglu_backward(u, dy)


@_swiglu_backward_op.register_fake
def _swiglu_backward_fake(u, dy):  # type: ignore[no-untyped-def]
    # contiguous, as swiglu_backward allocates it (empty_like would keep a transposed u's strides)
    return u.new_empty(u.shape)


def _setup_context(ctx, inputs, output):  # type: ignore[no-untyped-def]
    (u,) = inputs
    ctx.save_for_backward(u)


def _backward(ctx, dy):  # type: ignore[no-untyped-def]
    (u,) = ctx.saved_tensors
    return torch.ops.featurecache.swiglu_backward(u, dy)


_swiglu_op.register_autograd(_backward, setup_context=_setup_context)


def swiglu(u: torch.Tensor) -> torch.Tensor:
    """Fused ``silu(a) * b`` for ``u = [a | b]``: ``[..., 2F] -> [..., F]``; differentiable."""
    return torch.ops.featurecache.swiglu(u)
