"""The triangle-attention core (gated pair-bias attention over one projection) vs a float64 oracle.

The oracle cuts the projection into q, k, v, gate and bias columns itself and runs the naive loop
attention of util.py, so it shares no code with the op or its torch reference. Compared: the gated
output and the whole projection gradient (q, k, v, gate and bias columns, zeros in the padding).
"""

from __future__ import annotations

import pytest
import torch

from featurecache.errors import KernelShapeError
from featurecache.model.kernels import triangle as tri
from tests.model.util import KERNEL_DEVICE, TOL, assert_fake_layouts_match, naive_attention, rel_err

F32, F16 = torch.float32, torch.float16


def oracle(
    p: torch.Tensor, h: int, d: int, token_mask: torch.Tensor | None, dout: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """(gated output [B, N, N, H·D], dp) in float64."""
    p64 = p.detach().cpu().double().requires_grad_()
    b, n, _, _ = p.shape
    hd = h * d
    cols = [p64[..., i * hd : (i + 1) * hd].reshape(b, n, n, h, d).transpose(2, 3) for i in range(4)]
    q, k, v, g = cols  # [B, S, H, N, D]
    bias = torch.stack([p64[..., 4 * hd + i] for i in range(h)], 1)  # [B, H, N (query), N (key)]
    mask = None
    if token_mask is not None:
        tm = token_mask.cpu()
        mask = tm[:, :, None] & tm[:, None, :]  # [B, S, N]: row s and key j both real
    o = naive_attention(q, k, v, bias, mask, d**-0.5)
    out = (1.0 / (1.0 + torch.exp(-g)) * o).transpose(2, 3).reshape(b, n, n, hd)
    out.backward(dout.detach().cpu().double())
    assert p64.grad is not None
    return out.detach(), p64.grad


def make(
    b: int, n: int, h: int, d: int, pad: int, dtype: torch.dtype, masked: bool, seed: int
) -> tuple[torch.Tensor, torch.Tensor | None, torch.Tensor]:
    gen = torch.Generator().manual_seed(seed)
    p = torch.randn(b, n, n, tri.width(h, d) + pad, generator=gen)
    tm = None
    if masked:
        tm = torch.ones(b, n, dtype=torch.bool)
        tm[:, n - 3 :] = False  # padded tokens
        if b > 1:
            tm[1, : n // 2] = False
    dout = torch.randn(b, n, n, h * d, generator=gen)
    dev = KERNEL_DEVICE
    return p.to(dev, dtype), (None if tm is None else tm.to(dev)), dout.to(dev, dtype)


# (B, N, H, D, padding columns, masked, transposed, dtype). Each case adds a layout or shape the
# others do not have; (1, 23, 1, 32, 15, masked, fp32) went: N spanning two tiles is 17 and 19's,
# D = 32 masked in fp32 the ending node's, H = 1 the first and last case's, an aligned padded width
# the trunk layout's.
CASES = [
    (1, 13, 1, 16, 0, False, False, F32),  # N prime, no padding columns
    (1, 17, 2, 32, 14, True, False, F16),  # the trunk's layout: width padded to a multiple of 16
    (2, 19, 2, 16, 3, True, False, F32),  # unaligned row stride (the launcher copies the views)
    (1, 16, 4, 64, 12, False, False, F16),  # N a multiple of the tile
    (2, 17, 2, 32, 14, True, True, F32),  # the ending node: p.transpose(1, 2), a view
    (1, 19, 1, 16, 3, False, True, F16),  # transposed and unaligned
]


@pytest.mark.parametrize(("b", "n", "h", "d", "pad", "masked", "transposed", "dtype"), CASES)
def test_matches_float64_oracle(
    b: int, n: int, h: int, d: int, pad: int, masked: bool, transposed: bool, dtype: torch.dtype
) -> None:
    p, tm, dout = make(b, n, h, d, pad, dtype, masked, seed=n + pad)
    x = p.clone().requires_grad_()
    view = x.transpose(1, 2) if transposed else x
    out = tri.triangle_attention_core(view, h, d, key_mask=tm, row_mask=tm)
    out.backward(dout)
    want_out, want_dp = oracle(p.transpose(1, 2) if transposed else p, h, d, tm, dout)
    assert x.grad is not None
    if transposed:
        want_dp = want_dp.transpose(1, 2)
        if p.shape[-1] % 16 == 0:  # aligned: output and gradient follow p's memory order (no copies)
            assert out.transpose(1, 2).is_contiguous() and x.grad.is_contiguous()
    assert out.shape == want_out.shape and out.dtype == dtype
    assert x.grad is not None and x.grad.shape == p.shape and x.grad.dtype == dtype
    assert rel_err(out, want_out) < TOL[dtype]
    hd = h * d
    parts = {"q": (0, hd), "k": (hd, 2 * hd), "v": (2 * hd, 3 * hd), "gate": (3 * hd, 4 * hd),
             "bias": (4 * hd, 4 * hd + h)}  # fmt: skip
    for name, (lo, hi) in parts.items():
        err = rel_err(x.grad[..., lo:hi], want_dp[..., lo:hi])
        assert err < TOL[dtype], f"d{name}: rel err {err:.2e} ≥ {TOL[dtype]:.0e}"
    assert torch.count_nonzero(x.grad[..., 4 * hd + h :]) == 0  # unused columns: zero gradient
    if tm is not None:  # padded rows output 0 and pass no gradient
        assert torch.count_nonzero(out[~tm]) == 0
        grad = x.grad.transpose(1, 2) if transposed else x.grad  # the op's [B, S, N, W]
        assert torch.count_nonzero(grad[~tm][..., : 3 * hd]) == 0


def test_reference_matches_oracle_and_gradient_is_bitwise_deterministic() -> None:
    p, tm, dout = make(1, 21, 2, 16, 6, F32, True, seed=3)
    ref_p = p.detach().cpu().double().requires_grad_()
    ref = tri.triangle_attention_core_ref(ref_p, 2, 16, key_mask=tm.cpu() if tm is not None else None,
                                          row_mask=tm.cpu() if tm is not None else None)  # fmt: skip
    ref.backward(dout.cpu().double())
    want_out, want_dp = oracle(p, 2, 16, tm, dout)
    assert rel_err(ref, want_out) < 1e-12 and ref_p.grad is not None and rel_err(ref_p.grad, want_dp) < 1e-12
    grads = []
    for _ in range(2):
        x = p.clone().requires_grad_()
        tri.triangle_attention_core(x, 2, 16, key_mask=tm, row_mask=tm).backward(dout)
        grads.append(x.grad)
    assert grads[0] is not None and grads[1] is not None and torch.equal(grads[0], grads[1])


def test_registered_op_matches_the_autograd_function() -> None:
    """torch.compile's path (the torch.library ops) gives the eager path's output and dp bit for
    bit; opcheck passes; the fakes predict every output's layout. N = 5 (2 real tokens, 3 padded):
    what is compared is the two paths' plumbing, not the numerics (the oracle cases above), and
    opcheck runs the op a dozen times under the interpreter, whose cost grows with N²."""
    p, tm, dout = make(1, 5, 2, 16, 14, F32, True, seed=4)
    results = []
    for use_op in (False, True):
        x = p.clone().requires_grad_()
        if use_op:
            out, _ = torch.ops.featurecache.triangle_attention_core(x, 2, 16, 0.25, tm, tm)
        else:
            out = tri.TriangleAttentionCoreFunction.apply(x, 2, 16, 0.25, tm, tm)
        out.backward(dout)
        results.append((out.detach(), x.grad))
    for a, b in zip(*results, strict=True):
        assert a is not None and b is not None and torch.equal(a, b)
    args = (p.clone().requires_grad_(), 2, 16, 0.25, tm, tm)
    torch.library.opcheck(torch.ops.featurecache.triangle_attention_core.default, args)
    for pp in (p, p.transpose(1, 2)):  # starting node; ending node (a transposed view)
        op = torch.ops.featurecache.triangle_attention_core.default
        assert_fake_layouts_match(op, (pp, 2, 16, 0.25, tm, tm))
        out, lse = op(pp, 2, 16, 0.25, tm, tm)
        assert_fake_layouts_match(
            torch.ops.featurecache.triangle_attention_core_backward.default,
            (dout, pp, out, lse, 2, 16, 0.25, tm),
        )


@pytest.mark.parametrize(
    ("shape", "h", "d", "match"),
    [
        ((1, 9, 8, 80), 1, 16, "must be \\[B, N, N, W\\]"),  # not square
        ((1, 9, 9, 64), 1, 16, "64 columns"),  # too narrow for q, k, v, gate and a bias head
        ((1, 9, 9, 200), 1, 24, "head dim 24"),
    ],
)
def test_bad_projections_are_refused(shape: tuple[int, ...], h: int, d: int, match: str) -> None:
    with pytest.raises(KernelShapeError, match=match):
        tri.triangle_attention_core(torch.zeros(shape, device=KERNEL_DEVICE), h, d)
