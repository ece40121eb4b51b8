"""Defects a reviewer reproduced in the kernel library (session 18, task H3), one test (or a few)
per defect; each fails on the code before its fix. Expected values come from float64 oracles
written here or in ``tests/model/util.py`` (not from the package's reference alone).

Kernels run under Triton's interpreter on the CPU (fp32/fp16, small sizes), or compiled on the GPU.
"""

from __future__ import annotations

import pytest
import torch

from featurecache.errors import KernelShapeError
from featurecache.model import modules
from featurecache.model.kernels import layernorm_linear as lnl
from featurecache.model.kernels import pair_bias_attention as pba
from featurecache.model.kernels import swiglu as sw
from featurecache.model.kernels import transition as tr
from featurecache.model.kernels import triangle as tri
from tests.model.util import (
    KERNEL_DEVICE,
    TOL,
    assert_fake_layouts_match,
    naive_attention,
    naive_layernorm_linear,
    rel_err,
)

F32, F16 = torch.float32, torch.float16
DEV = KERNEL_DEVICE


def _randn(*shape: int, seed: int, dtype: torch.dtype = F32) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return torch.randn(*shape, generator=g).to(DEV, dtype)


def _oracle_grads(
    leaves: list[torch.Tensor], build: object, do: torch.Tensor
) -> tuple[torch.Tensor, list[torch.Tensor]]:
    """Float64 output and leaf gradients of ``build(*leaves64)`` (a callable giving the output)."""
    xs = [t.detach().cpu().double().requires_grad_() for t in leaves]
    out = build(*xs)  # type: ignore[operator]
    out.backward(do.detach().cpu().double())
    return out, [x.grad for x in xs]  # type: ignore[misc]


# ---------------------------------------------------------------------------------------------
# 1. expanded (stride-0) q, k, v
# ---------------------------------------------------------------------------------------------


def test_expanded_qkv_give_the_oracles_output_and_gradients() -> None:
    """k shared by all heads (expand over H), q broadcast over the batch (expand over B), v shared
    by all S rows (expand over S): output and the gradients of the unexpanded leaves match a
    float64 oracle (before: outputs/gradients allocated with a non-unit last stride, garbage)."""
    b, s, h, n, d = 2, 2, 2, 19, 16
    q1 = _randn(1, s, h, n, d, seed=1).requires_grad_()
    k1 = _randn(b, s, 1, n, d, seed=2).requires_grad_()
    v1 = _randn(b, 1, h, n, d, seed=3).requires_grad_()
    bias = _randn(b, h, n, n, seed=4).requires_grad_()
    do = _randn(b, s, h, n, d, seed=5)
    shape = (b, s, h, n, d)

    def build(q_, k_, v_, bias_):  # type: ignore[no-untyped-def]
        return naive_attention(q_.expand(shape), k_.expand(shape), v_.expand(shape), bias_, None, d**-0.5)

    ref, ref_grads = _oracle_grads([q1, k1, v1, bias], build, do)
    out = pba.pair_bias_attention(q1.expand(shape), k1.expand(shape), v1.expand(shape), bias)
    assert out.stride(-1) == 1
    out.backward(do)
    assert rel_err(out, ref) < TOL[F32]
    for name, leaf, want in zip("qkvb", (q1, k1, v1, bias), ref_grads, strict=True):
        assert leaf.grad is not None and rel_err(leaf.grad, want) < TOL[F32], name


def test_expanded_inputs_fake_layouts_match_and_outputs_keep_d_last() -> None:
    """The registered ops' fake kernels predict the layouts the real ones allocate for expanded
    inputs, and every output has D last and contiguous."""
    b, s, h, n, d = 2, 2, 2, 9, 16
    shape = (b, s, h, n, d)
    q = _randn(1, s, h, n, d, seed=6).expand(shape)
    k = _randn(b, s, 1, n, d, seed=7).expand(shape)
    v = _randn(b, s, h, n, d, seed=8)
    bias = _randn(1, h, n, n, seed=9).expand(b, h, n, n)  # bias expanded over B: read in place
    for t in (q, k):
        assert pba._empty_like_layout(t).stride(-1) == 1
    assert_fake_layouts_match(
        torch.ops.featurecache.pair_bias_attention.default, (q, k, v, bias, None, 0.25, None, None)
    )
    out, lse = torch.ops.featurecache.pair_bias_attention.default(q, k, v, bias, None, 0.25, None, None)
    assert out.stride(-1) == 1
    dout = _randn(b, s, h, n, d, seed=10)
    assert_fake_layouts_match(
        torch.ops.featurecache.pair_bias_attention_backward.default,
        (dout, q, k, v, bias, None, out, lse, 0.25, None),
    )


def _triangle_oracle(x: torch.Tensor, h: int, d: int) -> torch.Tensor:
    """Gated attention over x's column groups (q, k, v, gate, bias heads), written here (pass
    float64; differentiable)."""
    b, n, _, _ = x.shape
    hd = h * d
    q, k, v, g = (x[..., i * hd : (i + 1) * hd].reshape(b, n, n, h, d).transpose(2, 3) for i in range(4))
    bias = x[..., 4 * hd : 4 * hd + h].permute(0, 3, 1, 2)
    o = torch.sigmoid(g) * naive_attention(q, k, v, bias, None, d**-0.5)
    return o.transpose(2, 3).reshape(b, n, n, hd)


def test_triangle_core_on_an_expanded_projection_matches_the_oracle() -> None:
    """triangle_attention_core on a projection expanded over the batch (stride 0 on B) matches a
    float64 oracle, forward and the projection's gradient."""
    h, d, n = 1, 16, 9
    p1 = _randn(1, n, n, tri.width(h, d) + 3, seed=11).requires_grad_()
    p = p1.expand(2, n, n, p1.shape[-1])
    do = _randn(2, n, n, h * d, seed=12)
    ref, (ref_grad,) = _oracle_grads([p1], lambda x: _triangle_oracle(x.expand(p.shape), h, d), do)
    out = tri.triangle_attention_core(p, h, d)
    out.backward(do)
    assert out.stride(-1) == 1 and rel_err(out, ref) < TOL[F32]
    assert p1.grad is not None and rel_err(p1.grad, ref_grad) < TOL[F32]


# ---------------------------------------------------------------------------------------------
# 2. −inf in the bias without a mask
# ---------------------------------------------------------------------------------------------


def _inf_bias_oracle(q, k, v, bias):  # type: ignore[no-untyped-def]
    """Softmax attention where −inf bias entries weigh 0 and a row with every key −inf gives 0."""
    scores = torch.einsum("bshid,bshjd->bshij", q, k) * q.shape[-1] ** -0.5 + bias[:, None]
    any_key = torch.isfinite(scores).any(-1, keepdim=True)
    p = torch.where(any_key, torch.softmax(torch.where(any_key, scores, 0.0), -1), 0.0)
    return torch.einsum("bshij,bshjd->bshid", p, v)


def test_minus_inf_bias_without_mask_follows_softmax_and_gives_no_nan() -> None:
    """Keys 0..33 excluded by a −inf bias (the first 32-key block all −inf; AF3's 1e9·(mask − 1) in
    fp16 is −inf) and one query row with −inf at every key, no mask: output and gradients match a
    float64 oracle, the all-−inf row outputs 0 with lse +inf and passes no gradient (before: NaN)."""
    b, s, h, n, d = 1, 2, 1, 40, 16
    for dtype in (F32, F16):
        q, k, v = (_randn(b, s, h, n, d, seed=20 + i, dtype=dtype).requires_grad_() for i in range(3))
        bias0 = _randn(b, h, n, n, seed=23)
        bias0[..., :34] = float("-inf")
        bias0[:, :, 5, :] = float("-inf")  # query row 5: no key at all
        bias = bias0.to(dtype).requires_grad_()
        do = _randn(b, s, h, n, d, seed=24, dtype=dtype)
        ref, ref_grads = _oracle_grads([q, k, v, bias], _inf_bias_oracle, do)
        out = pba.pair_bias_attention(q, k, v, bias)
        out.backward(do)
        assert rel_err(out, ref) < TOL[dtype], dtype
        for name, leaf, want in zip("qkvb", (q, k, v, bias), ref_grads, strict=True):
            assert leaf.grad is not None and rel_err(leaf.grad, want) < TOL[dtype], (dtype, name)
        assert torch.equal(out[:, :, :, 5], torch.zeros_like(out[:, :, :, 5]))
        assert q.grad is not None and not q.grad[:, :, :, 5].any()
        _, lse = pba.pair_bias_attention_forward(q, k, v, bias, None, d**-0.5)
        assert torch.isinf(lse[:, :, :, 5]).all() and torch.isfinite(lse[:, :, :, :5]).all()


def test_reference_gives_zero_not_nan_for_an_all_minus_inf_row() -> None:
    """The package reference (the model's CPU path) follows the same rule as the kernel."""
    from featurecache.model.kernels.reference import pair_bias_attention_ref

    q, k, v = (torch.randn(1, 1, 1, 6, 16, dtype=torch.float64) for _ in range(3))
    bias = torch.randn(1, 1, 6, 6, dtype=torch.float64)
    bias[..., :3] = float("-inf")
    bias[:, :, 2, :] = float("-inf")
    out = pair_bias_attention_ref(q, k, v, bias)
    assert torch.allclose(out, _inf_bias_oracle(q, k, v, bias), rtol=1e-12, atol=1e-12)
    assert torch.equal(out[0, 0, 0, 2], torch.zeros(16, dtype=torch.float64))


# ---------------------------------------------------------------------------------------------
# 3. element offsets past 2**31
# ---------------------------------------------------------------------------------------------


def test_int64_offsets_are_chosen_from_the_largest_element_offset() -> None:
    """The trunk's ending-node q (a view of the transposed projection, row stride N·528) needs
    int64 tile offsets from N = 2017 on; shapes only (meta tensors, nothing allocated)."""
    for n, want in ((2016, False), (2017, True)):
        p = torch.empty(1, n, n, 528, device="meta", dtype=torch.bfloat16).transpose(1, 2)
        q = p[..., :128].unflatten(-1, (4, 32)).permute(0, 1, 3, 2, 4)
        assert pba._idx64(q) is want, n
    dense = torch.empty(1, 768, 4, 768, 32, device="meta", dtype=torch.bfloat16)
    assert pba._idx64(dense, dense.expand(4, -1, -1, -1, -1)) is False


def test_views_with_offsets_past_2_31_match_the_oracle() -> None:
    """q, k, v as views of one lazily allocated buffer with a row stride of 2**27 elements: row 16
    sits at element 2**31 (about 4 GiB of address space, a few pages touched). Output and every
    gradient match a float64 oracle (before: int32 tile offsets wrapped, segfault / corruption)."""
    b, s, h, n, d, st = 1, 1, 1, 17, 16, 2**27
    store = torch.empty((n - 1) * st + 3 * d, dtype=F16, device=DEV)  # virtual: never written in full
    q, k, v = (store.as_strided((b, s, h, n, d), (16, 16, 16, st, 1), i * d) for i in range(3))
    for i, t in enumerate((q, k, v)):
        t.copy_(_randn(b, s, h, n, d, seed=30 + i, dtype=F16))
    assert pba._aligned(q) is q and pba._idx64(q)  # read in place, on the int64 path
    bias = _randn(b, h, n, n, seed=33, dtype=F16)
    do = _randn(b, s, h, n, d, seed=34, dtype=F16)
    scale = d**-0.5
    ref, ref_grads = _oracle_grads(
        [q, k, v, bias], lambda q_, k_, v_, b_: naive_attention(q_, k_, v_, b_, None, scale), do
    )
    out, lse = pba.pair_bias_attention_forward(q, k, v, bias, None, scale)
    grads = pba.pair_bias_attention_backward(do, q, k, v, bias, None, out, lse, scale)
    assert rel_err(out, ref) < TOL[F16]
    for name, got, want in zip("qkvb", grads, ref_grads, strict=True):
        assert rel_err(got, want) < TOL[F16], name


# ---------------------------------------------------------------------------------------------
# 4. swiglu's backward fake layout
# ---------------------------------------------------------------------------------------------


def test_swiglu_fake_layouts_match_for_a_transposed_input() -> None:
    """swiglu_backward's fake kernel gives du the layout the real op returns (contiguous) for a
    transposed u, so opcheck passes and torch.compile's backward does not fail on a stride
    (before: empty_like(u) kept u's transposed strides)."""
    u = _randn(5, 3, 8, seed=40).transpose(0, 1)
    dy = _randn(3, 5, 4, seed=41)
    assert_fake_layouts_match(torch.ops.featurecache.swiglu_backward.default, (u, dy))
    torch.library.opcheck(torch.ops.featurecache.swiglu_backward.default, (u, dy))
    a, b = u.double().chunk(2, dim=-1)
    want = torch.cat([dy.double() * b * torch.sigmoid(a) * (1 + a * (1 - torch.sigmoid(a))),
                      dy.double() * a * torch.sigmoid(a)], -1)  # fmt: skip
    assert rel_err(sw.swiglu_backward(u, dy), want) < TOL[F32]


# ---------------------------------------------------------------------------------------------
# 5. tensors the kernels cannot run on
# ---------------------------------------------------------------------------------------------


def test_cpu_tensors_without_the_interpreter_are_refused_naming_the_argument(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Fused ops/modules on CPU tensors when Triton does not interpret: a KernelShapeError naming
    the argument and its device and pointing at fused=False / the reference (before: Triton's
    "0 active drivers" RuntimeError from the launch, or, with interpreted kernels, no error)."""
    monkeypatch.setenv("TRITON_INTERPRET", "0")
    q = torch.randn(1, 2, 1, 9, 16)
    calls = {
        "q": lambda: modules.PairBiasAttention()(q, q, q, torch.randn(1, 1, 9, 9)),
        "x": lambda: modules.LayerNormLinear(16, 8)(torch.randn(3, 16)),
        "x ": lambda: modules.Transition(16)(torch.randn(3, 16)),
        "u": lambda: modules.SwiGLU()(torch.randn(3, 16)),
        "p": lambda: tri.triangle_attention_core(torch.randn(1, 9, 9, tri.width(1, 16)), 1, 16),
    }
    for name, call in calls.items():
        with pytest.raises(KernelShapeError, match=rf"{name.strip()} is on cpu.*fused=False / \w+_ref"):
            call()


def test_tensors_on_two_devices_are_refused_naming_both() -> None:
    q = _randn(1, 2, 1, 9, 16, seed=50)
    bias = torch.empty(1, 1, 9, 9, device="meta")
    with pytest.raises(KernelShapeError, match=rf"bias is on meta but q on {q.device}"):
        pba.pair_bias_attention(q, q, q, bias)
    x = _randn(3, 16, seed=51)
    ln = torch.ones(16, device=DEV), torch.zeros(16, device=DEV)
    with pytest.raises(KernelShapeError, match=rf"weight is on meta but x on {x.device}"):
        lnl.layernorm_linear(x, *ln, torch.empty(8, 16, device="meta"))


# ---------------------------------------------------------------------------------------------
# 6. double backward on the eager autograd.Function path
# ---------------------------------------------------------------------------------------------


def test_double_backward_raises_instead_of_dropping_the_second_order_term() -> None:
    """A gradient penalty through a fused op raises (before: the gradient came back without a
    graph and the second-order term was silently missing from the penalty's gradient)."""
    q = _randn(1, 1, 1, 9, 16, seed=60).requires_grad_()
    p = _randn(1, 5, 5, tri.width(1, 16), seed=61).requires_grad_()
    x = _randn(3, 16, seed=62).requires_grad_()
    ln = torch.ones(16, device=DEV), torch.zeros(16, device=DEV)
    w1, w2 = _randn(16, 16, seed=63), _randn(16, 8, seed=64)
    calls = {
        "attention": (q, lambda: pba.pair_bias_attention(q, q, q, _randn(1, 1, 9, 9, seed=65))),
        "triangle": (p, lambda: tri.triangle_attention_core(p, 1, 16)),
        "layernorm_linear": (x, lambda: lnl.layernorm_linear(x, *ln, w1, None, 1e-5, True)),
        "transition": (x, lambda: tr.transition(x, *ln, w1, w2)),
    }
    for leaf, call in calls.values():
        # the backward that builds the graph raises (since review R13 s39 M1, also where the incoming
        # gradient carries no graph: tests/model/test_no_silent_double_backward.py)
        with pytest.raises(RuntimeError, match="no double backward"):
            torch.autograd.grad(call().square().sum(), leaf, create_graph=True)
        assert leaf.grad is None


# ---------------------------------------------------------------------------------------------
# 7. modules above the fused kernels' channel limit
# ---------------------------------------------------------------------------------------------


def test_modules_above_the_fused_channel_limit_fall_back_to_the_reference() -> None:
    """LayerNormLinear(600, ·) and Transition(600) with fused=True run (the reference path above
    512 channels) and match a float64 oracle, forward and gradients (before: KernelShapeError
    "supports 1..512 input channels" at the first forward)."""
    torch.manual_seed(70)
    c = 600
    m = modules.LayerNormLinear(c, 16, bias=True, swiglu=True).to(DEV)
    x = _randn(3, c, seed=71).requires_grad_()
    do = _randn(3, 8, seed=72)
    assert m.bias is not None
    params = [m.ln_weight, m.ln_bias, m.weight, m.bias]
    ref, ref_grads = _oracle_grads(
        [x, *params], lambda x_, lw, lb, w, b: naive_layernorm_linear(x_, lw, lb, w, b, 1e-5, True), do
    )
    y = m(x)
    y.backward(do)
    assert rel_err(y, ref) < TOL[F32]
    for t, want in zip([x, *params], ref_grads, strict=True):
        assert t.grad is not None and rel_err(t.grad, want) < 1e-4

    t_mod = modules.Transition(c, n=1).to(DEV)
    ln = t_mod.ln_linear
    xt = _randn(2, c, seed=73)

    def transition64(x_, lw, lb, w1, w2):  # type: ignore[no-untyped-def]
        return naive_layernorm_linear(x_, lw, lb, w1, None, 1e-5, True) @ w2.T

    want = transition64(
        *(t.detach().cpu().double() for t in (xt, ln.ln_weight, ln.ln_bias, ln.weight, t_mod.out.weight))
    )
    assert rel_err(t_mod(xt), want) < TOL[F32]


def test_modules_in_float64_run_the_reference() -> None:
    """LayerNormLinear and Transition (fused=True) on fp64 inputs and parameters run the reference
    path, in fp64, and match a float64 oracle (before: KernelShapeError "x and weight must be
    fp32/fp16/bf16" at the first forward; a review found it)."""
    torch.manual_seed(74)
    c = 16
    m = modules.LayerNormLinear(c, 8, swiglu=True).to(DEV).double()
    x = _randn(3, c, seed=75).double()
    want = naive_layernorm_linear(*(t.detach().cpu().double() for t in (x, m.ln_weight, m.ln_bias, m.weight)),
                                  None, 1e-5, True)  # fmt: skip
    y = m(x)
    assert y.dtype == torch.float64 and rel_err(y, want) < 1e-6  # LN statistics in fp32
    t_mod = modules.Transition(c, n=2).to(DEV).double()
    ln = t_mod.ln_linear
    y = t_mod(x)
    args = (t.detach().cpu().double() for t in (x, ln.ln_weight, ln.ln_bias, ln.weight))
    want = naive_layernorm_linear(*args, None, 1e-5, True) @ t_mod.out.weight.detach().cpu().double().T
    assert y.dtype == torch.float64 and rel_err(y, want) < 1e-6  # LN statistics in fp32


# ---------------------------------------------------------------------------------------------
# 8. empty inputs
# ---------------------------------------------------------------------------------------------


def test_attention_on_empty_inputs_returns_empty_outputs_and_zero_size_gradients() -> None:
    """N = 0, B = 0, S = 0 (the bias is then not empty: its gradient is zeros), as the other ops
    take M = 0 (before: KernelShapeError "empty input")."""
    from featurecache.model.kernels.reference import pair_bias_attention_ref

    for b, s, h, n in ((1, 2, 1, 0), (0, 2, 1, 5), (1, 0, 2, 5)):
        q, k, v = (torch.zeros(b, s, h, n, 16, device=DEV).requires_grad_() for _ in range(3))
        bias = torch.ones(b, h, n, n, device=DEV).requires_grad_()
        out = pba.pair_bias_attention(q, k, v, bias)
        assert out.shape == (b, s, h, n, 16)
        assert pair_bias_attention_ref(q, k, v, bias).shape == out.shape
        out.sum().backward()
        for t in (q, k, v, bias):
            assert t.grad is not None and t.grad.shape == t.shape and not t.grad.any()
        args = (q.detach(), k.detach(), v.detach(), bias.detach(), None, 0.25, None, None)
        assert_fake_layouts_match(torch.ops.featurecache.pair_bias_attention.default, args)


def test_triangle_core_on_an_empty_projection() -> None:
    """N = 0 and B = 0 projections give empty outputs and a zero-size dp (before: an error naming
    the internal [B, S, H, N, D] view's shape, not p's)."""
    for shape in ((1, 0, 0, tri.width(1, 16)), (0, 4, 4, tri.width(1, 16) + 3)):
        p = torch.zeros(shape, device=DEV).requires_grad_()
        out = tri.triangle_attention_core(p, 1, 16)
        assert out.shape == (*shape[:3], 16)
        out.sum().backward()
        assert p.grad is not None and p.grad.shape == p.shape


# ---------------------------------------------------------------------------------------------
# 9. swiglu's dtypes
# ---------------------------------------------------------------------------------------------


def test_swiglu_refuses_integer_and_float64_inputs_and_takes_the_half_types() -> None:
    """int32 was truncated and float64 computed in fp32, both silently; now a KernelShapeError naming
    the dtype, like the other ops. fp16 still matches a float64 formula."""
    for dtype in (torch.int32, torch.float64):
        with pytest.raises(KernelShapeError, match=rf"fp32/fp16/bf16.*{dtype}"):
            sw.swiglu(torch.ones(2, 8, dtype=dtype, device=DEV))
    u = _randn(4, 8, seed=90, dtype=F16)
    a, b = u.double().chunk(2, dim=-1)
    assert rel_err(sw.swiglu(u), a * torch.sigmoid(a) * b) < TOL[F16]
