"""Thin ``nn.Module`` wrappers of the fused ops; each runs the Triton kernel (``fused=True``) or the
pure-torch reference (``fused=False``, e.g. on CPU).

Under ``torch.autocast`` the GEMMs run in the autocast dtype: the modules cast their weights to it
before calling a kernel (the kernels take no mixed operand dtypes), the residual stream may stay fp32.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from featurecache.errors import KernelShapeError
from featurecache.model.kernels.layernorm_linear import MAX_CHANNELS as LNL_MAX_CHANNELS
from featurecache.model.kernels.layernorm_linear import layernorm_linear
from featurecache.model.kernels.pair_bias_attention import pair_bias_attention
from featurecache.model.kernels.reference import (
    layernorm_linear_ref,
    pair_bias_attention_ref,
    swiglu_ref,
)
from featurecache.model.kernels.swiglu import swiglu
from featurecache.model.kernels.transition import supported as transition_supported
from featurecache.model.kernels.transition import transition

#: the dtypes the Triton kernels take; another (fp64) runs the pure-torch reference
KERNEL_FLOATS = (torch.float32, torch.float16, torch.bfloat16)


def _kernel_dtypes(x: torch.Tensor, dt: torch.dtype) -> bool:
    return x.dtype in KERNEL_FLOATS and dt in KERNEL_FLOATS


def compute_dtype(x: torch.Tensor) -> torch.dtype:
    """The dtype GEMMs run in: autocast's when it is on for x's device, else x's."""
    if torch.is_autocast_enabled(x.device.type):
        return torch.get_autocast_dtype(x.device.type)
    return x.dtype


class PairBiasAttention(nn.Module):
    """``softmax(q·kᵀ/√d + bias + mask)·v`` (no parameters); shapes as :func:`pair_bias_attention`."""

    def __init__(self, fused: bool = True) -> None:
        super().__init__()
        self.fused = fused

    def forward(
        self,
        q: torch.Tensor,
        k: torch.Tensor,
        v: torch.Tensor,
        bias: torch.Tensor,
        mask: torch.Tensor | None = None,
        key_mask: torch.Tensor | None = None,
        row_mask: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """mask ``[B, S, N]``; or the factorised padding mask: key_mask ``[B, N]``, row_mask ``[B, S]``."""
        if self.fused:
            return pair_bias_attention(q, k, v, bias, mask, key_mask=key_mask, row_mask=row_mask)
        return pair_bias_attention_ref(q, k, v, bias, mask, key_mask=key_mask, row_mask=row_mask)


def _check_channels(module: str, x: torch.Tensor, channels: int) -> None:
    """Refuse an input whose last dimension is not the module's channels, naming the input (the
    kernels' own check named the LayerNorm weights, torch's LayerNorm its ``normalized_shape``:
    review R13 s39 L2)."""
    if x.dim() == 0 or x.shape[-1] != channels:
        raise KernelShapeError(
            f"{module}: x must be [..., {channels}] (the module's channels); got {tuple(x.shape)}"
        )


class LayerNormLinear(nn.Module):
    """``Linear(LayerNorm(x))`` (+ SwiGLU over the output halves): ``[..., C] -> [..., O]`` or ``O/2``.
    Fused: one kernel for C ≤ 512 (``layernorm_linear.MAX_CHANNELS``, a whole row in registers) in
    fp32/fp16/bf16; above that, or in another dtype (fp64), the pure-torch reference runs (same
    parameters, same results up to rounding)."""

    def __init__(
        self, in_features: int, out_features: int, bias: bool = False, swiglu: bool = False,
        eps: float = 1e-5, fused: bool = True,
    ) -> None:  # fmt: skip
        super().__init__()
        self.ln_weight = nn.Parameter(torch.ones(in_features))
        self.ln_bias = nn.Parameter(torch.zeros(in_features))
        self.weight = nn.Parameter(torch.empty(out_features, in_features))
        self.bias = nn.Parameter(torch.zeros(out_features)) if bias else None
        nn.init.kaiming_uniform_(self.weight, a=5**0.5)  # nn.Linear's init
        self.swiglu, self.eps, self.fused = swiglu, eps, fused

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        _check_channels(type(self).__name__, x, self.weight.shape[1])
        dt = compute_dtype(x)
        w = self.weight.to(dt)
        b = None if self.bias is None else self.bias.to(dt)
        if self.fused and x.shape[-1] <= LNL_MAX_CHANNELS and _kernel_dtypes(x, dt):
            return layernorm_linear(x, self.ln_weight, self.ln_bias, w, b, self.eps, self.swiglu)
        with torch.autocast(x.device.type, enabled=False):
            return layernorm_linear_ref(x, self.ln_weight, self.ln_bias, w, b, self.eps, self.swiglu)


class SwiGLU(nn.Module):
    """``silu(a) * b`` over ``[a | b]``: ``[..., 2F] -> [..., F]``."""

    def __init__(self, fused: bool = True) -> None:
        super().__init__()
        self.fused = fused

    def forward(self, u: torch.Tensor) -> torch.Tensor:
        return swiglu(u) if self.fused else swiglu_ref(u)


class Transition(nn.Module):
    """AF3 transition ``LN → Linear(c, 2·n·c) → SwiGLU → Linear(n·c, c)`` (no biases).
    ``[..., c] -> [..., c]`` in the compute dtype. Fused: the whole block is two kernels (forward,
    backward; :mod:`~featurecache.model.kernels.transition`) for c ≤ 256, else LN, the first GEMM and
    SwiGLU are one fused kernel followed by a library Linear (c ≤ 512; above, or in fp64,
    :class:`LayerNormLinear`'s reference path and a library Linear)."""

    def __init__(self, c: int, n: int = 4, eps: float = 1e-5, fused: bool = True) -> None:
        super().__init__()
        self.ln_linear = LayerNormLinear(c, 2 * n * c, bias=False, swiglu=True, eps=eps, fused=fused)
        self.out = nn.Linear(n * c, c, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        ln = self.ln_linear
        _check_channels(type(self).__name__, x, ln.weight.shape[1])
        dt = compute_dtype(x)
        if ln.fused and transition_supported(x, ln.weight, self.out.weight) and _kernel_dtypes(x, dt):
            return transition(x, ln.ln_weight, ln.ln_bias, ln.weight.to(dt), self.out.weight.to(dt), ln.eps)
        h = self.ln_linear(x)
        return F.linear(h, self.out.weight.to(h.dtype))
