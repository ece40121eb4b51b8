"""Pure-torch references of every fused op: the CPU path of the model and the tests' oracle.

Each function computes exactly what its Triton counterpart computes (same masking rules, same
parameterisation), in the dtype of its inputs; pass float64 inputs to get a high-precision
reference. Shapes use: B batch, S the batched axis (pair rows or MSA rows), H heads, N tokens,
D head dim, C channels.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F


def pair_bias_attention_ref(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    bias: torch.Tensor,
    mask: torch.Tensor | None = None,
    scale: float | None = None,
    key_mask: torch.Tensor | None = None,
    row_mask: torch.Tensor | None = None,
) -> torch.Tensor:
    """``softmax(q·kᵀ·scale + bias + mask) · v`` with the bias broadcast over S.

    ``key_mask`` ``[B, N]`` and ``row_mask`` ``[B, S]`` are the factorised form of a padding mask:
    they are combined with ``mask`` as ``mask & row_mask[:, :, None] & key_mask[:, None, :]``.

    q, k, v: ``[B, S, H, N, D]`` float; bias: ``[B, H, N, N]`` (query i, key j); mask: ``[B, S, N]``
    bool key mask (True = real key) or None. Masked keys get −inf, i.e. exactly zero weight, as do
    keys whose bias is −inf; a query row whose keys are all masked or −inf has no defined softmax
    and outputs zeros (and passes no gradient), which is what the kernel does too. Returns
    ``[B, S, H, N, D]`` in q's dtype.
    """
    d = q.shape[-1]
    scale = d**-0.5 if scale is None else scale
    if key_mask is not None or row_mask is not None:
        b, s_, _, n, _ = q.shape
        full = torch.ones(b, s_, n, dtype=torch.bool, device=q.device) if mask is None else mask
        if key_mask is not None:
            full = full & key_mask[:, None, :]
        if row_mask is not None:
            full = full & row_mask[:, :, None]
        mask = full
    s = torch.einsum("bshid,bshjd->bshij", q, k) * scale + bias[:, None]
    if mask is not None:
        s = s.masked_fill(~mask[:, :, None, None, :], float("-inf"))
    # Shift by a finite row max (rows whose keys are all masked or −inf have max −inf): masked and
    # −inf terms become exp(−inf) = 0 and such a row sums to 0 (clamped: p = 0, no NaN).
    if s.shape[-1] == 0:  # no keys (N = 0): an empty output
        return torch.einsum("bshij,bshjd->bshid", s, v)
    m = s.detach().amax(dim=-1, keepdim=True).clamp_min(torch.finfo(s.dtype).min)
    e = torch.exp(s - m)
    p = e / e.sum(dim=-1, keepdim=True).clamp_min(torch.finfo(s.dtype).tiny)
    return torch.einsum("bshij,bshjd->bshid", p, v)


def layernorm_linear_ref(
    x: torch.Tensor,
    ln_weight: torch.Tensor,
    ln_bias: torch.Tensor,
    weight: torch.Tensor,
    bias: torch.Tensor | None = None,
    eps: float = 1e-5,
    swiglu: bool = False,
) -> torch.Tensor:
    """``Linear(LayerNorm(x))``, optionally followed by SwiGLU over the two output halves.

    x: ``[..., C]``; ln_weight, ln_bias: ``[C]``; weight: ``[O, C]``; bias: ``[O]`` or None.
    With ``swiglu`` the output ``u = [a | b]`` (O even) becomes ``silu(a) * b`` of width O/2.
    LayerNorm statistics are computed in float32 and the normalised input is cast to the weight's
    dtype for the matmul, as the kernel does.
    """
    xn = F.layer_norm(x.float(), (x.shape[-1],), ln_weight.float(), ln_bias.float(), eps)
    u = F.linear(xn.to(weight.dtype), weight, bias)
    return swiglu_ref(u) if swiglu else u


def swiglu_ref(u: torch.Tensor) -> torch.Tensor:
    """``silu(a) * b`` where ``u = [a | b]`` on the last axis: ``[..., 2F] -> [..., F]``."""
    a, b = u.chunk(2, dim=-1)
    return F.silu(a) * b


def transition_ref(
    x: torch.Tensor,
    ln_weight: torch.Tensor,
    ln_bias: torch.Tensor,
    w1: torch.Tensor,
    w2: torch.Tensor,
    eps: float = 1e-5,
) -> torch.Tensor:
    """AF3 transition: ``Linear(n·c → c)(SwiGLU(Linear(c → 2·n·c)(LayerNorm(x))))``, no linear biases.

    x: ``[..., C]``; w1: ``[2·F, C]``; w2: ``[C, F]``. Returns ``[..., C]``.
    """
    h = layernorm_linear_ref(x, ln_weight, ln_bias, w1, None, eps, swiglu=True)
    return F.linear(h, w2)
