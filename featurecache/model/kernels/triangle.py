"""The core of AF3 triangle attention as one op over its projection: gated pair-bias attention.

``p [B, N, N, W]`` is the output of the triangle attention's LayerNorm+Linear: its columns hold
q, k, v and the gate logits (each ``H·D`` wide, head-major) and then the ``H`` bias heads (then
unused padding up to W). The op returns ``sigmoid(gate) ∘ softmax(q·kᵀ·scale + bias + mask)·v`` as
``[B, N, N, H·D]``, the input of the output projection; its backward returns ``dp``, one tensor
shaped like ``p``.

Why one op instead of five slices, a ``sigmoid``, the attention and a multiply (run 50,
KERNEL_NOTES.md):

* The gate is applied in the forward kernel's epilogue. The backward needs no ungated output:
  δ = rowsum(dO'∘O') of the attention's own output O' and gradient dO' = dO∘σ(g) equals
  rowsum(dO∘O) of the gated ones, and the gate's gradient dO∘O'∘σ'(g) is dO∘O∘(1 − σ(g)). The dq
  kernel computes both in its prologue and writes dO' for the dk/dv and bias kernels. So autograd
  saves one ``[B, N, N, H·D]`` tensor (the gated output, which the output projection saves anyway)
  instead of three (σ(g), the attention output, their product), and four elementwise kernels go.
* The backward kernels write dq, dk, dv and the gate's gradient straight into column slices of
  ``dp`` (and the bias gradient into its columns), so no ``cat`` assembles the projection's
  gradient from five pieces (3.2 ms per training step at crop 768, run 47).

The starting-node form is native: S is the first token axis, the bias of query j and key k is
``p[b, j, k, 4·H·D + h]``. The ending node is this op on the projection of ``zᵀ``, which is the
transpose of the projection of ``z``: pass ``p.transpose(1, 2)``, a view. The kernels take any
strides, and the output and ``dp`` follow p's memory order, so the ending node transposes nothing
(neither z before its LayerNorm nor the output before the residual add).
"""

from __future__ import annotations

import torch

from featurecache.errors import KernelShapeError
from featurecache.model.kernels.autograd import first_order_only
from featurecache.model.kernels.grid import check_devices
from featurecache.model.kernels.pair_bias_attention import (
    SUPPORTED_HEAD_DIMS,
    _prepare_backward,
    _run_backward,
    pair_bias_attention_forward,
)
from featurecache.model.kernels.reference import pair_bias_attention_ref

Views = tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]


def width(n_heads: int, head_dim: int) -> int:
    """The columns the op reads: q, k, v, gate (``H·D`` each) and ``H`` bias heads."""
    return 4 * n_heads * head_dim + n_heads


def _check(
    p: torch.Tensor,
    n_heads: int,
    head_dim: int,
    key_mask: torch.Tensor | None = None,
    row_mask: torch.Tensor | None = None,
) -> None:
    check_devices(
        "triangle_attention_core",
        "triangle_attention_core_ref",
        {"p": p, "key_mask": key_mask, "row_mask": row_mask},
    )
    if p.dim() != 4 or p.shape[1] != p.shape[2]:
        raise KernelShapeError(f"the projection must be [B, N, N, W]; got {tuple(p.shape)}")
    if head_dim not in SUPPORTED_HEAD_DIMS:
        raise KernelShapeError(f"head dim {head_dim} not supported (one of {SUPPORTED_HEAD_DIMS})")
    if n_heads < 1 or p.shape[-1] < width(n_heads, head_dim):
        raise KernelShapeError(
            f"the projection has {p.shape[-1]} columns; {n_heads} heads of {head_dim} need "
            f"{width(n_heads, head_dim)} (q, k, v, gate, bias heads)"
        )
    if p.dtype not in (torch.float32, torch.float16, torch.bfloat16) or p.stride(-1) != 1:
        raise KernelShapeError(f"the projection must be float with a contiguous last axis; got {p.dtype}")


def _heads(p: torch.Tensor, n_heads: int, head_dim: int) -> list[torch.Tensor]:
    """q, k, v, gate as ``[B, S, H, N, D]`` views of p's column groups."""
    hd = n_heads * head_dim
    return [_split_heads(p[..., i * hd : (i + 1) * hd], n_heads) for i in range(4)]


def split(p: torch.Tensor, n_heads: int, head_dim: int) -> Views:
    """q, k, v, gate as ``[B, S, H, N, D]`` views of p, and the bias as a contiguous ``[B, H, N, N]``."""
    hd = n_heads * head_dim
    q, k, v, g = _heads(p, n_heads, head_dim)
    return q, k, v, g, p[..., 4 * hd : 4 * hd + n_heads].permute(0, 3, 1, 2).contiguous()


def _empty_like_p(p: torch.Tensor, channels: int) -> torch.Tensor:
    """An uninitialised ``[B, S, N, channels]`` in p's memory order of its first three axes
    (``[B, N, S, ·]`` in memory for a transposed p), p's dtype."""
    order = sorted(range(3), key=lambda i: -p.stride()[i])
    stride, step = [0, 0, 0, 1], channels
    for i in reversed(order):
        stride[i] = step
        step *= p.shape[i]
    # empty_strided, not a permuted buffer: an op's output that is a view costs the custom-op
    # machinery under torch.compile (run 54)
    return torch.empty_strided((*p.shape[:3], channels), stride, dtype=p.dtype, device=p.device)


def _merge_heads(o: torch.Tensor) -> torch.Tensor:
    """``[B, S, H, N, D] -> [B, S, N, H·D]`` (a view when o is laid out as ``[B, S, N, H, D]``)."""
    b, s, h, n, d = o.shape
    return o.permute(0, 1, 3, 2, 4).reshape(b, s, n, h * d)


def _split_heads(t: torch.Tensor, n_heads: int) -> torch.Tensor:
    return t.unflatten(-1, (n_heads, -1)).permute(0, 1, 3, 2, 4)


def core_forward(
    p: torch.Tensor,
    n_heads: int,
    head_dim: int,
    scale: float,
    key_mask: torch.Tensor | None,
    row_mask: torch.Tensor | None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """(gated output ``[B, N, N, H·D]``, lse ``[B, N, H, N]``)."""
    q, k, v, g, bias = split(p, n_heads, head_dim)
    out = _empty_like_p(p, n_heads * head_dim)  # in p's memory order: the ending node's is zᵀ's
    _, lse = pair_bias_attention_forward(
        q, k, v, bias, None, scale, None, key_mask, row_mask, gate=g, out=_split_heads(out, n_heads)
    )
    return out, lse


def core_backward(
    dout: torch.Tensor,
    p: torch.Tensor,
    out: torch.Tensor,
    lse: torch.Tensor,
    n_heads: int,
    head_dim: int,
    scale: float,
    key_mask: torch.Tensor | None,
) -> torch.Tensor:
    """dp, shaped like p: dq, dk, dv and the gate's gradient written by the kernels into its
    column slices, the bias gradient copied into the bias columns, zeros in the padding."""
    hd, h = n_heads * head_dim, n_heads
    q, k, v, g, bias = split(p, n_heads, head_dim)
    dp = _empty_like_p(p, p.shape[-1])  # p's layout: a transposed p gets a transposed dp (no copy)
    dq, dk, dv, dg = _heads(dp, n_heads, head_dim)
    a = _prepare_backward(
        _split_heads(dout, h), q, k, v, bias, None, _split_heads(out, h), lse, scale, key_mask,
        one_buffer=False, gate=g, grads=(dq, dk, dv, dg),
    )  # fmt: skip
    _, _, _, dbias = _run_backward(a, None)
    assert dbias is not None
    dp[..., 4 * hd : 4 * hd + h].copy_(dbias.permute(0, 2, 3, 1))
    if p.shape[-1] > 4 * hd + h:
        dp[..., 4 * hd + h :].zero_()
    return dp


# --------------------------------------------------------------------------------------------
# torch.library registration (torch.compile, opcheck) and the eager autograd path
# --------------------------------------------------------------------------------------------


@torch.library.custom_op(
    "featurecache::triangle_attention_core",
    mutates_args=(),
    schema=(
        "(Tensor p, int n_heads, int head_dim, float scale, Tensor? key_mask, Tensor? row_mask) "
        "-> (Tensor, Tensor)"
    ),
)
def _core_op(
    p: torch.Tensor,
    n_heads: int,
    head_dim: int,
    scale: float,
    key_mask: torch.Tensor | None,
    row_mask: torch.Tensor | None,
) -> tuple[torch.Tensor, torch.Tensor]:
    return core_forward(p, n_heads, head_dim, scale, key_mask, row_mask)


@_core_op.register_fake
def _core_fake(p, n_heads, head_dim, scale, key_mask, row_mask):  # type: ignore[no-untyped-def]
    b, s, n, _ = p.shape  # the layouts core_forward returns (the output in p's memory order)
    return _empty_like_p(p, n_heads * head_dim), p.new_empty((b, s, n_heads, n), dtype=torch.float32)


@torch.library.custom_op(
    "featurecache::triangle_attention_core_backward",
    mutates_args=(),
    schema=(
        "(Tensor dout, Tensor p, Tensor out, Tensor lse, int n_heads, int head_dim, float scale, "
        "Tensor? key_mask) -> Tensor"
    ),
)
def _core_backward_op(
    dout: torch.Tensor,
    p: torch.Tensor,
    out: torch.Tensor,
    lse: torch.Tensor,
    n_heads: int,
    head_dim: int,
    scale: float,
    key_mask: torch.Tensor | None,
) -> torch.Tensor:
    return core_backward(dout, p, out, lse, n_heads, head_dim, scale, key_mask)


@_core_backward_op.register_fake
def _core_backward_fake(dout, p, out, lse, n_heads, head_dim, scale, key_mask):  # type: ignore[no-untyped-def]
    return _empty_like_p(p, p.shape[-1])


def _setup_context(ctx, inputs, output):  # type: ignore[no-untyped-def]
    p, n_heads, head_dim, scale, key_mask, _row_mask = inputs
    out, lse = output
    ctx.save_for_backward(p, out, lse, key_mask)
    ctx.meta = (n_heads, head_dim, scale)


def _backward(ctx, dout, dlse):  # type: ignore[no-untyped-def]
    p, out, lse, key_mask = ctx.saved_tensors
    n_heads, head_dim, scale = ctx.meta
    dp = torch.ops.featurecache.triangle_attention_core_backward(
        dout, p, out, lse, n_heads, head_dim, scale, key_mask
    )
    return dp, None, None, None, None, None


_core_op.register_autograd(_backward, setup_context=_setup_context)


class TriangleAttentionCoreFunction(torch.autograd.Function):
    """The eager path: the same launchers without the custom-op dispatch (as
    :class:`~featurecache.model.kernels.pair_bias_attention.PairBiasAttentionFunction`)."""

    @staticmethod
    def forward(  # type: ignore[override]
        ctx: torch.autograd.function.FunctionCtx,
        p: torch.Tensor,
        n_heads: int,
        head_dim: int,
        scale: float,
        key_mask: torch.Tensor | None,
        row_mask: torch.Tensor | None,
    ) -> torch.Tensor:
        out, lse = core_forward(p, n_heads, head_dim, scale, key_mask, row_mask)
        ctx.save_for_backward(p, out, lse, key_mask)  # type: ignore[arg-type]  # None is allowed
        ctx.meta = (n_heads, head_dim, scale)  # type: ignore[attr-defined]
        return out

    @staticmethod
    @first_order_only(
        "triangle_attention_core", "triangle_attention_core_ref"
    )  # no double backward: raise rather than drop the term
    def backward(ctx, dout):  # type: ignore[no-untyped-def, override]
        p, out, lse, key_mask = ctx.saved_tensors
        n_heads, head_dim, scale = ctx.meta
        dp = core_backward(dout, p, out, lse, n_heads, head_dim, scale, key_mask)
        return dp, None, None, None, None, None


def triangle_attention_core(
    p: torch.Tensor,
    n_heads: int,
    head_dim: int,
    *,
    key_mask: torch.Tensor | None = None,
    row_mask: torch.Tensor | None = None,
    scale: float | None = None,
) -> torch.Tensor:
    """Gated pair-bias attention over one projection ``p [B, N, N, W]`` (module docstring):
    ``[B, N, N, H·D]`` in p's dtype; differentiable in p. ``key_mask [B, N]`` masks keys (token
    k), ``row_mask [B, N]`` whole rows (token i), as in :func:`pair_bias_attention`."""
    _check(p, n_heads, head_dim, key_mask, row_mask)
    scale = head_dim**-0.5 if scale is None else float(scale)
    if torch.compiler.is_compiling():
        out, _ = torch.ops.featurecache.triangle_attention_core(
            p, n_heads, head_dim, scale, key_mask, row_mask
        )
        return out
    result: torch.Tensor = TriangleAttentionCoreFunction.apply(
        p, n_heads, head_dim, scale, key_mask, row_mask
    )
    return result


def triangle_attention_core_ref(
    p: torch.Tensor,
    n_heads: int,
    head_dim: int,
    *,
    key_mask: torch.Tensor | None = None,
    row_mask: torch.Tensor | None = None,
    scale: float | None = None,
) -> torch.Tensor:
    """The pure-torch reference of :func:`triangle_attention_core` (the model's CPU path, the tests'
    oracle): the same column split, :func:`pair_bias_attention_ref` and ``sigmoid(gate) *``."""
    q, k, v, g, bias = split(p, n_heads, head_dim)
    o = pair_bias_attention_ref(q, k, v, bias, None, scale, key_mask=key_mask, row_mask=row_mask)
    return _merge_heads(torch.sigmoid(g) * o)
