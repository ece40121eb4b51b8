"""The two-kernel AF3 transition (LN → Linear → SwiGLU → Linear) vs a float64 oracle: output and
every gradient (interpreter on CPU, compiled on a GPU), determinism, opcheck, refusals, and the
module's fallback for channels the kernels do not take."""

from __future__ import annotations

from typing import Any

import pytest
import torch

from featurecache.errors import KernelShapeError
from featurecache.model.kernels import grid
from featurecache.model.kernels import transition as tr
from featurecache.model.modules import LayerNormLinear, Transition
from tests.model.util import KERNEL_DEVICE, TOL, assert_fake_layouts_match, naive_layernorm_linear, rel_err

F32, F16 = torch.float32, torch.float16


def small_config(chunk_bytes: int | None = None) -> tr.TransitionConfig:
    """16-row tiles; ``chunk_bytes``: the backward's row chunks (None: one chunk)."""
    warps = 4 if KERNEL_DEVICE.type == "cuda" else 1
    c = tr.TileConfig(16, 16, warps, 1)
    return tr.TransitionConfig(c, c, bwd_chunk_bytes=chunk_bytes)


#: with these the backward runs the rows in several chunks (16-row multiples) and a shorter last one:
#: 37 rows of C = 24, H = 40 in fp32 are 576 B per row -> chunks of 16, 16, 5 rows
SMALL_CHUNK = 4096


def oracle(
    x: torch.Tensor, lw: torch.Tensor, lb: torch.Tensor, w1: torch.Tensor, w2: torch.Tensor
) -> torch.Tensor:
    return naive_layernorm_linear(x, lw, lb, w1, None, 1e-5, True) @ w2.T


# (leading shape, C, hidden H, dtype)
CASES = [
    ((37,), 24, 40, F32),  # odd rows, C not a power of two, H not a multiple of the block
    ((3, 7), 16, 64, F32),  # 3-D input
    ((50,), 48, 24, F16),
    ((1,), 8, 12, F32),  # a single row, tiny C
]


@pytest.mark.parametrize("chunk_bytes", [None, SMALL_CHUNK])
@pytest.mark.parametrize(("lead", "c", "h", "dtype"), CASES)
def test_matches_float64_oracle(
    lead: tuple[int, ...], c: int, h: int, dtype: torch.dtype, chunk_bytes: int | None
) -> None:
    g = torch.Generator().manual_seed(c * h)
    x = torch.randn(*lead, c, generator=g) * 2 + 0.5
    lw, lb = torch.randn(c, generator=g), torch.randn(c, generator=g)
    w1 = torch.randn(2 * h, c, generator=g) / c**0.5
    w2 = torch.randn(c, h, generator=g) / h**0.5
    dy = torch.randn(*lead, c, generator=g)
    dev, cfg = KERNEL_DEVICE, small_config(chunk_bytes)
    xd, lwd, lbd, w1d, w2d = (t.to(dev, dtype) for t in (x, lw, lb, w1, w2))
    y = tr.transition_forward(xd, lwd, lbd, w1d, w2d, 1e-5, cfg)
    grads = tr.transition_backward(dy.to(dev, dtype), xd, lwd, lbd, w1d, w2d, 1e-5, cfg)

    xs = [t.double().requires_grad_() for t in (x, lw, lb, w1, w2)]
    want = oracle(*xs)
    want.backward(dy.double())
    assert y.dtype == dtype and y.shape == x.shape and rel_err(y, want) < TOL[dtype]
    for name, gk, xr in zip(("dx", "dln_w", "dln_b", "dw1", "dw2"), grads, xs, strict=True):
        assert xr.grad is not None and gk.shape == xr.shape and gk.dtype == dtype
        err = rel_err(gk, xr.grad)
        assert err < TOL[dtype], f"{name}: rel err {err:.2e}"


def test_fp32_input_with_half_weights() -> None:
    """The model's case: an fp32 residual stream normalised in fp32 feeding fp16 GEMMs."""
    dev = KERNEL_DEVICE
    x = torch.randn(21, 32, device=dev, requires_grad=True)
    lw = torch.randn(32, device=dev, requires_grad=True)
    lb = torch.randn(32, device=dev, requires_grad=True)
    w1 = (torch.randn(96, 32, device=dev) / 6).to(F16).requires_grad_()
    w2 = (torch.randn(32, 48, device=dev) / 7).to(F16).requires_grad_()
    y = tr.transition(x, lw, lb, w1, w2)
    assert y.dtype == F16
    y.float().square().sum().backward()
    xs = [t.detach().double().requires_grad_() for t in (x, lw, lb, w1, w2)]
    want = oracle(*xs)
    want.square().sum().backward()
    assert rel_err(y, want) < TOL[F16]
    for t, r in zip((x, lw, lb, w1, w2), xs, strict=True):
        assert t.grad is not None and r.grad is not None and rel_err(t.grad, r.grad) < TOL[F16]
    assert x.grad is not None and x.grad.dtype == F32


@pytest.mark.parametrize("chunk_bytes", [None, SMALL_CHUNK])
def test_backward_is_bitwise_deterministic(chunk_bytes: int | None) -> None:
    dev = KERNEL_DEVICE
    x = torch.randn(45, 16, device=dev)
    ln = torch.randn(16, device=dev), torch.randn(16, device=dev)
    w1, w2 = torch.randn(64, 16, device=dev), torch.randn(16, 32, device=dev)
    dy = torch.randn(45, 16, device=dev)
    first = tr.transition_backward(dy, x, *ln, w1, w2, 1e-5, small_config(chunk_bytes))
    second = tr.transition_backward(dy, x, *ln, w1, w2, 1e-5, small_config(chunk_bytes))
    for a, b in zip(first, second, strict=True):
        assert torch.equal(a, b)


@pytest.mark.parametrize(("rows", "c", "h", "itemsize", "block", "budget"),
                         [(37, 24, 40, 4, 16, 4096), (768 * 768, 128, 512, 2, 64, 512 << 20),
                          (100, 8, 8, 2, 16, 10), (1000, 16, 32, 2, 64, 1 << 30), (5, 8, 8, 2, 16, 64)])  # fmt: skip
def test_chunk_rows_cover_the_rows_within_the_budget(
    rows: int, c: int, h: int, itemsize: int, block: int, budget: int
) -> None:
    step = grid.chunk_rows(rows, c, h, itemsize, block, budget)
    per_row = (3 * h + c) * itemsize
    assert 1 <= step <= rows
    # whole row blocks (the LayerNorm partials are indexed by block) unless one chunk takes all rows
    assert step % block == 0 or step == rows
    # within the budget, unless a single row block is already over it
    assert step * per_row <= budget or step <= block
    # no more chunks than the budget needs (one more at most, from the rounding to row blocks)
    assert -(-rows // step) <= -(-rows * per_row // budget) + 1
    assert grid.chunk_rows(rows, c, h, itemsize, block, None) == rows


def test_opcheck() -> None:
    dev = KERNEL_DEVICE
    args = (
        torch.randn(3, 5, 16, device=dev, requires_grad=True),
        torch.randn(16, device=dev, requires_grad=True),
        torch.randn(16, device=dev, requires_grad=True),
        torch.randn(32, 16, device=dev, requires_grad=True),
        torch.randn(16, 16, device=dev, requires_grad=True),
        1e-5,
    )
    torch.library.opcheck(torch.ops.featurecache.transition.default, args)
    xt = torch.randn(2, 3, 4, 16, device=dev).transpose(1, 2).requires_grad_()  # not contiguous
    torch.library.opcheck(torch.ops.featurecache.transition.default, (xt, *args[1:]))
    plain = tuple(a.detach() if isinstance(a, torch.Tensor) else a for a in (xt, *args[1:]))
    assert_fake_layouts_match(torch.ops.featurecache.transition.default, plain)
    dy = torch.randn(2, 4, 3, 16, device=dev).transpose(1, 2)
    assert_fake_layouts_match(torch.ops.featurecache.transition_backward.default, (dy, *plain))


def test_bad_shapes_are_refused() -> None:
    dev = KERNEL_DEVICE
    x = torch.zeros(4, 16, device=dev)
    ln = torch.ones(16, device=dev), torch.zeros(16, device=dev)
    with pytest.raises(KernelShapeError, match=r"w2 \(16, 8\)"):  # w2 must be [C, H] = (16, 16)
        tr.transition(x, *ln, torch.zeros(32, 16, device=dev), torch.zeros(16, 8, device=dev))
    big = torch.zeros(2, 264, device=dev)
    with pytest.raises(KernelShapeError, match=r"C ≤ 256.*\(2, 264\)"):
        tr.transition(big, torch.ones(264, device=dev), torch.zeros(264, device=dev),
                      torch.zeros(8, 264, device=dev), torch.zeros(264, 4, device=dev))  # fmt: skip
    with pytest.raises(KernelShapeError, match=r"\[16\]"):
        tr.transition(x, torch.ones(8, device=dev), ln[1], torch.zeros(32, 16, device=dev),
                      torch.zeros(16, 16, device=dev))  # fmt: skip


def test_module_falls_back_above_256_channels() -> None:
    """c = 264: the fused module runs LayerNorm-Linear + a Linear and still matches the reference."""
    torch.manual_seed(1)
    fused = Transition(264, n=1, fused=True).to(KERNEL_DEVICE)
    ref = Transition(264, n=1, fused=False).to(KERNEL_DEVICE)
    ref.load_state_dict(fused.state_dict())
    x = torch.randn(5, 264, device=KERNEL_DEVICE)
    yf, yr = fused(x), ref(x)
    assert rel_err(yf, yr) < TOL[F32]
    yf.sum().backward()
    yr.sum().backward()
    for (name, pf), pr in zip(fused.named_parameters(), ref.parameters(), strict=True):
        assert pf.grad is not None and pr.grad is not None and rel_err(pf.grad, pr.grad) < 1e-4, name


@pytest.mark.parametrize("fused", [True, False])
@pytest.mark.parametrize("make", [lambda f: Transition(16, fused=f), lambda f: LayerNormLinear(16, 8, fused=f)],
                         ids=["Transition", "LayerNormLinear"])  # fmt: skip
def test_a_module_names_the_input_whose_channels_are_wrong(make: Any, fused: bool) -> None:
    # review R13 s39 L2: the message named the LayerNorm weights ("LayerNorm weight/bias must be [12]")
    # or, unfused, torch's normalized_shape; the input is what is wrong
    module = make(fused).to(KERNEL_DEVICE)
    x = torch.randn(3, 12, device=KERNEL_DEVICE)
    with pytest.raises(KernelShapeError, match=r"x must be \[\.\.\., 16\].*got \(3, 12\)"):
        module(x)
