"""Fused LayerNorm+Linear (+SwiGLU epilogue), standalone SwiGLU and the transition block vs
float64 oracles: output and every gradient (interpreter on CPU, compiled on a GPU)."""

from __future__ import annotations

import pytest
import torch

from featurecache.errors import KernelShapeError
from featurecache.model.kernels import layernorm_linear as lnl
from featurecache.model.kernels.reference import transition_ref
from featurecache.model.kernels.swiglu import swiglu
from featurecache.model.modules import Transition
from tests.model.util import KERNEL_DEVICE, TOL, assert_fake_layouts_match, naive_layernorm_linear, rel_err

F32, F16 = torch.float32, torch.float16


def small_config(dw_library: bool = True) -> lnl.LayerNormLinearConfig:
    warps = 4 if KERNEL_DEVICE.type == "cuda" else 1
    c = lnl.GemmConfig(16, 16, warps, 1)
    fwd = lnl.GemmConfig(16, 16, warps, 1, col_blocks=2)  # a program loops over two column blocks
    return lnl.LayerNormLinearConfig(fwd, c, c, dw_target_programs=6, dw_library=dw_library)


# (rows, C, O, swiglu, linear bias, dtype)
CASES = [
    (37, 24, 40, True, True, F32),  # odd rows, C not a power of two
    (19, 16, 16, False, False, F32),
    (50, 48, 64, True, False, F16),
    (33, 40, 24, False, True, F16),
    (1, 8, 6, True, False, F32),  # a single row, tiny C
]


@pytest.mark.parametrize("dw_library", [True, False], ids=["dw-library", "dw-kernel"])
@pytest.mark.parametrize(("m", "c", "o", "sw", "has_bias", "dtype"), CASES)
def test_matches_float64_oracle(
    m: int, c: int, o: int, sw: bool, has_bias: bool, dtype: torch.dtype, dw_library: bool
) -> None:
    g = torch.Generator().manual_seed(m * c)
    x = torch.randn(m, c, generator=g) * 2 + 0.5
    lw, lb = torch.randn(c, generator=g), torch.randn(c, generator=g)
    w = torch.randn(o, c, generator=g) / c**0.5
    b = torch.randn(o, generator=g) if has_bias else None
    dy = torch.randn(m, o // 2 if sw else o, generator=g)
    dev = KERNEL_DEVICE
    xd, lwd, lbd, wd = (t.to(dev, dtype) for t in (x, lw, lb, w))
    bd = None if b is None else b.to(dev, dtype)
    cfg = small_config(dw_library)
    y = lnl.layernorm_linear_forward(xd, lwd, lbd, wd, bd, eps=1e-5, swiglu=sw, config=cfg)
    grads = lnl.layernorm_linear_backward(
        dy.to(dev, dtype), xd, lwd, lbd, wd, bd, eps=1e-5, swiglu=sw, config=cfg
    )

    x64, lw64, lb64, w64 = (t.double().requires_grad_() for t in (x, lw, lb, w))
    b64 = None if b is None else b.double().requires_grad_()
    xs = [x64, lw64, lb64, w64, b64]
    want = naive_layernorm_linear(x64, lw64, lb64, w64, b64, eps=1e-5, swiglu=sw)
    want.backward(dy.double())
    assert y.dtype == dtype and rel_err(y, want) < TOL[dtype]
    for name, gk, xr in zip(("dx", "dln_w", "dln_b", "dw", "db"), grads, xs, strict=True):
        if xr is None:
            assert gk is None
            continue
        assert xr.grad is not None and gk is not None
        err = rel_err(gk, xr.grad)
        assert err < TOL[dtype], f"{name}: rel err {err:.2e}"


def test_fp32_input_with_half_weights() -> None:
    """The model's case: an fp32 residual stream normalised in fp32 feeding an fp16 GEMM."""
    dev = KERNEL_DEVICE
    x = torch.randn(21, 32, device=dev, requires_grad=True)
    lw = torch.randn(32, device=dev, requires_grad=True)
    lb = torch.randn(32, device=dev, requires_grad=True)
    w = (torch.randn(48, 32, device=dev) / 6).to(F16).requires_grad_()
    y = lnl.layernorm_linear(x, lw, lb, w, None, 1e-5, True)
    assert y.dtype == F16
    y.float().square().sum().backward()
    xs = [t.detach().double().requires_grad_() for t in (x, lw, lb, w)]
    want = naive_layernorm_linear(xs[0], xs[1], xs[2], xs[3], None, 1e-5, True)
    want.square().sum().backward()
    assert rel_err(y, want) < TOL[F16]
    for t, r in zip((x, lw, lb, w), xs, strict=True):
        assert t.grad is not None and r.grad is not None and rel_err(t.grad, r.grad) < TOL[F16]
    assert x.grad is not None and x.grad.dtype == F32


def test_weight_gradients_are_bitwise_deterministic() -> None:
    dev = KERNEL_DEVICE
    x = torch.randn(45, 16, device=dev)
    ln = torch.randn(16, device=dev), torch.randn(16, device=dev)
    w, b = torch.randn(32, 16, device=dev), torch.randn(32, device=dev)
    dy = torch.randn(45, 16, device=dev)
    for dw_library in (True, False):
        first = lnl.layernorm_linear_backward(dy, x, *ln, w, b, 1e-5, True, small_config(dw_library))
        second = lnl.layernorm_linear_backward(dy, x, *ln, w, b, 1e-5, True, small_config(dw_library))
        for a, c in zip(first, second, strict=True):
            assert a is not None and c is not None and torch.equal(a, c)


def test_swiglu_op_matches_oracle() -> None:
    u = torch.randn(3, 7, 2 * 37, device=KERNEL_DEVICE, dtype=F32, requires_grad=True)
    y = swiglu(u)
    dy = torch.randn_like(y)
    y.backward(dy)
    ur = u.detach().double().requires_grad_()
    a, g = ur[..., :37], ur[..., 37:]
    want = a * torch.sigmoid(a) * g
    want.backward(dy.double())
    assert y.shape == (3, 7, 37) and rel_err(y, want) < TOL[F32]
    assert u.grad is not None and ur.grad is not None and rel_err(u.grad, ur.grad) < TOL[F32]


def test_transition_module_fused_equals_reference() -> None:
    torch.manual_seed(0)
    fused = Transition(24, n=2, fused=True).to(KERNEL_DEVICE)
    ref = Transition(24, n=2, fused=False).to(KERNEL_DEVICE)
    ref.load_state_dict(fused.state_dict())
    x = torch.randn(2, 5, 7, 24, device=KERNEL_DEVICE)
    yf, yr = fused(x), ref(x)
    assert rel_err(yf, yr) < TOL[F32]
    yf.square().sum().backward()
    yr.square().sum().backward()
    for (name, pf), pr in zip(fused.named_parameters(), ref.parameters(), strict=True):
        assert pf.grad is not None and pr.grad is not None
        assert rel_err(pf.grad, pr.grad) < 1e-4, name
    direct = transition_ref(x, fused.ln_linear.ln_weight, fused.ln_linear.ln_bias, fused.ln_linear.weight,
                            fused.out.weight)  # fmt: skip
    assert rel_err(direct, yr) < 1e-6


def test_opcheck() -> None:
    dev = KERNEL_DEVICE
    args = (
        torch.randn(3, 5, 16, device=dev, requires_grad=True),
        torch.randn(16, device=dev, requires_grad=True),
        torch.randn(16, device=dev, requires_grad=True),
        torch.randn(32, 16, device=dev, requires_grad=True),
        torch.randn(32, device=dev, requires_grad=True),
        1e-5,
        True,
    )
    torch.library.opcheck(torch.ops.featurecache.layernorm_linear.default, args)
    # x as the trunk's ending-node triangle attention passes it: z.transpose(1, 2)
    xt = torch.randn(2, 3, 4, 16, device=dev).transpose(1, 2).requires_grad_()
    torch.library.opcheck(torch.ops.featurecache.layernorm_linear.default, (xt, *args[1:]))
    plain = tuple(a.detach() if isinstance(a, torch.Tensor) else a for a in (xt, *args[1:]))
    assert_fake_layouts_match(torch.ops.featurecache.layernorm_linear.default, plain)
    dy = torch.randn(2, 4, 3, 16, device=dev)
    assert_fake_layouts_match(torch.ops.featurecache.layernorm_linear_backward.default, (dy, *plain))
    u = torch.randn(4, 10, device=dev, requires_grad=True)
    torch.library.opcheck(torch.ops.featurecache.swiglu.default, (u,))


def test_bad_shapes_are_refused() -> None:
    x = torch.zeros(4, 16, device=KERNEL_DEVICE)
    ln = torch.ones(16, device=KERNEL_DEVICE), torch.zeros(16, device=KERNEL_DEVICE)
    with pytest.raises(KernelShapeError, match=r"\(8, 12\)"):
        lnl.layernorm_linear(x, *ln, torch.zeros(8, 12, device=KERNEL_DEVICE))
    with pytest.raises(KernelShapeError, match=r"\(7, 16\)"):
        lnl.layernorm_linear(x, *ln, torch.zeros(7, 16, device=KERNEL_DEVICE), swiglu=True)
