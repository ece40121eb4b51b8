"""Fused pair-bias attention vs float64 oracles: output and every gradient, odd shapes, masks.

Runs the Triton kernels under the interpreter on the CPU (fp32/fp16; its bf16 dot is broken, so
bf16 lives in test_gpu.py), or compiled on the GPU when there is one.
"""

from __future__ import annotations

from typing import Any

import pytest
import torch

from featurecache.errors import KernelShapeError
from featurecache.model.kernels import pair_bias_attention as pba
from featurecache.model.kernels.grid import dbias_groups
from featurecache.model.kernels.reference import pair_bias_attention_ref
from tests.model.util import KERNEL_DEVICE, TOL, assert_fake_layouts_match, naive_attention, rel_err

F32, F16 = torch.float32, torch.float16


def small_config(sp: int, dbias_programs: int = 1, dkv_bias_copy: bool = True) -> pba.AttentionConfig:
    """16×16 tiles so that small N spans several blocks (ragged last block included)."""
    c = pba.KernelConfig(16, 16, num_warps=1, num_stages=1, sp=sp)
    if KERNEL_DEVICE.type == "cuda":
        c = pba.KernelConfig(16, 16, num_warps=4, num_stages=2, sp=sp)
    return pba.AttentionConfig(c, c, c, c, dbias_target_programs=dbias_programs, dkv_bias_copy=dkv_bias_copy)


def make_inputs(
    b: int, s: int, h: int, n: int, d: int, dtype: torch.dtype, masked: bool, seed: int = 0
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor | None]:
    g = torch.Generator().manual_seed(seed)
    q, k, v = (torch.randn(b, s, h, n, d, generator=g) for _ in range(3))
    bias = torch.randn(b, h, n, n, generator=g)
    mask = None
    if masked:
        mask = torch.rand(b, s, n, generator=g) > 0.3
        if b * s > 1:
            mask[0, 0, :] = False  # a row with no real key
    dev = KERNEL_DEVICE
    return (q.to(dev, dtype), k.to(dev, dtype), v.to(dev, dtype), bias.to(dev, dtype),
            None if mask is None else mask.to(dev))  # fmt: skip


def run_kernel(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, bias: torch.Tensor, mask: torch.Tensor | None,
    do: torch.Tensor, cfg: pba.AttentionConfig,
) -> tuple[torch.Tensor, ...]:  # fmt: skip
    scale = q.shape[-1] ** -0.5
    out, lse = pba.pair_bias_attention_forward(q, k, v, bias, mask, scale, cfg)
    grads = pba.pair_bias_attention_backward(do, q, k, v, bias, mask, out, lse, scale, cfg)
    return (out, *grads)


def oracle(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    bias: torch.Tensor,
    mask: torch.Tensor | None,
    do: torch.Tensor,
) -> tuple[torch.Tensor, ...]:
    xs = [t.detach().cpu().double().requires_grad_() for t in (q, k, v, bias)]
    out = naive_attention(
        xs[0], xs[1], xs[2], xs[3], None if mask is None else mask.cpu(), q.shape[-1] ** -0.5
    )
    out.backward(do.cpu().double())
    grads = [x.grad for x in xs]
    assert all(g is not None for g in grads)
    return (out, *[g for g in grads if g is not None])


# (B, S, H, N, D, masked, S rows per program, dtype)
CASES = [
    (1, 1, 1, 13, 16, False, 1, F32),  # S = 1, N prime
    (1, 1, 2, 17, 32, True, 1, F16),  # S = 1 masked
    (1, 3, 1, 23, 32, True, 2, F32),  # odd S with two rows per program, a fully masked row
    (2, 2, 1, 16, 64, False, 1, F16),  # N a multiple of the block (unmasked fast path)
    (1, 2, 2, 31, 64, True, 1, F32),
    (1, 3, 1, 37, 16, False, 2, F16),
    (1, 2, 1, 32, 32, True, 2, F16),  # N a multiple of the block, masked
    (1, 37, 1, 13, 16, True, 2, F32),  # S ≥ 16: dbias groups of 16 S rows, a ragged last group
]


#: every case runs with the dk/dv kernel reading a transposed copy of the bias (the default); these
#: also with it reading the bias through its own strides (dkv_bias_copy=False). The two differ only
#: in the strides of the bias tiles the dk/dv kernel loads (forward, dq and dbias are the same
#: launches), so the strided runs are the cases that vary what those loads see: S = 1 and S ≥ 16,
#: B = 2, H = 2, N ragged and a multiple of the block, masked and not, fp16 and fp32, D = 16, 32, 64
STRIDED = (1, 3, 4, 7)


def _oracle_params() -> list[Any]:
    params = []
    for i, case in enumerate(CASES):
        for copy in (True, False) if i in STRIDED else (True,):
            b, s, h, n, d, masked, sp, dtype = case
            name = f"{b}-{s}-{h}-{n}-{d}-{masked}-{sp}-{str(dtype).removeprefix('torch.')}"
            params.append(pytest.param(*case, copy, id=f"{name}-dkv-bias-{'copy' if copy else 'strided'}"))
    return params


@pytest.mark.parametrize(
    ("b", "s", "h", "n", "d", "masked", "sp", "dtype", "dkv_bias_copy"), _oracle_params()
)
def test_matches_float64_oracle(
    b: int, s: int, h: int, n: int, d: int, masked: bool, sp: int, dtype: torch.dtype, dkv_bias_copy: bool
) -> None:
    q, k, v, bias, mask = make_inputs(b, s, h, n, d, dtype, masked, seed=n)
    do = torch.randn(q.shape, generator=torch.Generator().manual_seed(1)).to(q.device, dtype)
    got = run_kernel(q, k, v, bias, mask, do, small_config(sp, dbias_programs=3, dkv_bias_copy=dkv_bias_copy))
    want = oracle(q, k, v, bias, mask, do)
    for name, g, w in zip(("out", "dq", "dk", "dv", "dbias"), got, want, strict=True):
        assert g.shape == w.shape and g.dtype == dtype, name
        err = rel_err(g, w)
        assert err < TOL[dtype], f"{name}: rel err {err:.2e} ≥ {TOL[dtype]:.0e}"


@pytest.mark.parametrize("target", [1, 3, 7, 64, 1056])
@pytest.mark.parametrize("programs_per_group", [1, 4, 16, 144, 576])
def test_dbias_groups_cover_s_in_multiples_of_16(target: int, programs_per_group: int) -> None:
    """Every S row is in exactly one group; when S ≥ 16 is split, a group has a multiple of 16 rows
    (an int the JIT specialises on, so all N share one compiled dbias kernel); no split when one
    group already gives the target number of programs."""
    for s in range(1, 800):
        groups, per = dbias_groups(s, programs_per_group, target)
        assert groups >= 1 and per >= 1
        assert (groups - 1) * per < s <= groups * per, (s, groups, per)
        if groups > 1 and s >= 16:
            assert per % 16 == 0, (s, per)
        if programs_per_group >= target:  # one group already fills the target: no split
            assert groups == 1


def test_public_op_autograd_and_reference_agree() -> None:
    """The registered op with autograd (default tiles) and the torch reference both match the oracle."""
    q, k, v, bias, mask = make_inputs(1, 2, 2, 29, 32, F32, masked=True, seed=5)
    xs = [t.clone().requires_grad_() for t in (q, k, v, bias)]
    out = pba.pair_bias_attention(xs[0], xs[1], xs[2], xs[3], mask)
    do = torch.randn_like(out)
    out.backward(do)
    want = oracle(q, k, v, bias, mask, do)
    assert rel_err(out, want[0]) < TOL[F32]
    for x, w in zip(xs, want[1:], strict=True):
        assert x.grad is not None and rel_err(x.grad, w) < TOL[F32]

    rs = [t.detach().cpu().double().requires_grad_() for t in (q, k, v, bias)]
    ref = pair_bias_attention_ref(rs[0], rs[1], rs[2], rs[3], mask.cpu() if mask is not None else None)
    ref.backward(do.cpu().double())
    assert rel_err(ref, want[0]) < 1e-12
    for x, w in zip(rs, want[1:], strict=True):
        assert x.grad is not None and rel_err(x.grad, w) < 1e-12


def test_bias_gradient_is_bitwise_deterministic() -> None:
    q, k, v, bias, mask = make_inputs(1, 5, 2, 21, 16, F32, masked=True, seed=7)
    do = torch.randn_like(q)
    cfg = small_config(1, dbias_programs=100)  # several S groups -> fp32 partials + a reduction
    first = run_kernel(q, k, v, bias, mask, do, cfg)
    second = run_kernel(q, k, v, bias, mask, do, cfg)
    for a, b in zip(first, second, strict=True):
        assert torch.equal(a, b)
    # and the grouping is a real split: one group gives the same sum up to rounding
    one_group = run_kernel(q, k, v, bias, mask, do, small_config(1, dbias_programs=1))
    assert rel_err(first[4], one_group[4]) < 1e-6


def test_masked_keys_get_zero_weight() -> None:
    """Junk in masked keys/values changes nothing, bit for bit; empty rows output 0."""
    q, k, v, bias, mask = make_inputs(1, 3, 1, 19, 16, F32, masked=True, seed=3)
    assert mask is not None
    junk = (~mask)[:, :, None, :, None]
    out_clean = pba.pair_bias_attention(q, k.masked_fill(junk, 0.0), v.masked_fill(junk, 0.0), bias, mask)
    out_junk = pba.pair_bias_attention(q, k.masked_fill(junk, 50.0), v.masked_fill(junk, 1e4), bias, mask)
    assert torch.equal(out_clean, out_junk)
    assert torch.count_nonzero(out_clean[0, 0]) == 0  # row s=0 has no real key


def test_padded_batch_matches_unpadded_sample() -> None:
    """A sample of 11 tokens padded to 19 (pair mask from the token mask) gives the same values and
    gradients on its real part as the same sample run unpadded."""
    n_real, n_pad, h, d = 11, 19, 2, 32
    q, k, v, bias, _ = make_inputs(1, n_pad, h, n_pad, d, F32, masked=False, seed=11)
    token_mask = torch.arange(n_pad, device=q.device) < n_real
    pair_mask = (token_mask[:, None] & token_mask[None, :])[None]  # [1, S=N, N]
    xs = [t.clone().requires_grad_() for t in (q, k, v, bias)]
    out = pba.pair_bias_attention(xs[0], xs[1], xs[2], xs[3], pair_mask)
    do = torch.randn_like(out)
    real = pair_mask[:, :, None, :, None]  # [1, S, 1, N, 1]: padded outputs do not reach the loss
    (out * real).backward(do)

    cut = [t[:, :n_real, :, :n_real].clone().requires_grad_() for t in (q, k, v)]
    bias_cut = bias[:, :, :n_real, :n_real].clone().requires_grad_()
    out_cut = pba.pair_bias_attention(cut[0], cut[1], cut[2], bias_cut)
    out_cut.backward(do[:, :n_real, :, :n_real])
    assert rel_err(out[:, :n_real, :, :n_real], out_cut) < 1e-6
    for x, c in zip(xs[:3], cut, strict=True):
        assert x.grad is not None and c.grad is not None
        assert rel_err(x.grad[:, :n_real, :, :n_real], c.grad) < 1e-6
        assert torch.count_nonzero(x.grad[:, n_real:]) == 0  # padded rows pass no gradient
    assert xs[3].grad is not None and bias_cut.grad is not None
    assert rel_err(xs[3].grad[:, :, :n_real, :n_real], bias_cut.grad) < 1e-6


def test_factorised_padding_mask_equals_general_mask() -> None:
    """key_mask/row_mask (folded into the bias / applied per row) == the same [B, S, N] mask."""
    b, s, h, n, d = 2, 5, 2, 23, 32
    q, k, v, bias, _ = make_inputs(b, s, h, n, d, F32, masked=False, seed=13)
    g = torch.Generator().manual_seed(4)
    key_mask = (torch.rand(b, n, generator=g) > 0.3).to(q.device)
    row_mask = (torch.rand(b, s, generator=g) > 0.3).to(q.device)
    row_mask[0, 0] = False
    full = key_mask[:, None, :] & row_mask[:, :, None]
    do = torch.randn_like(q)
    xs = [t.clone().requires_grad_() for t in (q, k, v, bias)]
    out = pba.pair_bias_attention(xs[0], xs[1], xs[2], xs[3], key_mask=key_mask, row_mask=row_mask)
    out.backward(do)
    want = oracle(q, k, v, bias, full, do)
    assert rel_err(out, want[0]) < TOL[F32]
    for x, w in zip(xs, want[1:], strict=True):
        assert x.grad is not None and rel_err(x.grad, w) < TOL[F32]
    assert torch.count_nonzero(out[0, 0]) == 0
    ref = pair_bias_attention_ref(q, k, v, bias, key_mask=key_mask, row_mask=row_mask)
    assert rel_err(ref, want[0]) < 1e-5


def test_opcheck() -> None:
    q, k, v, bias, mask = make_inputs(1, 2, 1, 9, 16, F32, masked=True, seed=2)
    args = (*[t.requires_grad_() for t in (q, k, v, bias)], mask, 0.25, None, None)
    torch.library.opcheck(torch.ops.featurecache.pair_bias_attention.default, args)
    key_mask = torch.tensor([[True] * 7 + [False] * 2], device=q.device)
    row_mask = torch.tensor([[True, False]], device=q.device)
    torch.library.opcheck(
        torch.ops.featurecache.pair_bias_attention.default, (q, k, v, bias, None, 0.25, key_mask, row_mask)
    )
    # the trunk's layouts: q, k, v views of one projection (aligned and not), the bias a permuted view
    for width in (3 * 16 + 8, 3 * 16 + 16):
        p = torch.randn(1, 2, 9, width, device=q.device)
        qkv = [p[..., i * 16 : (i + 1) * 16].unflatten(-1, (1, 16)).permute(0, 1, 3, 2, 4) for i in range(3)]
        bias_view = torch.randn(1, 9, 9, 1, device=q.device).permute(0, 3, 1, 2)
        xs = [t.requires_grad_() for t in (*qkv, bias_view)]
        torch.library.opcheck(
            torch.ops.featurecache.pair_bias_attention.default, (*xs, None, 0.25, key_mask, None)
        )
        plain = [t.detach() for t in xs]
        assert_fake_layouts_match(
            torch.ops.featurecache.pair_bias_attention.default, (*plain, None, 0.25, key_mask, None)
        )
        out, lse = torch.ops.featurecache.pair_bias_attention.default(*plain, None, 0.25, key_mask, None)
        dout = torch.randn(1, 2, 9, 1, 16, device=q.device).transpose(2, 3)  # not out's layout
        assert_fake_layouts_match(
            torch.ops.featurecache.pair_bias_attention_backward.default,
            (dout, *plain, None, out, lse, 0.25, key_mask),
        )


@pytest.mark.parametrize(
    "bad",
    [
        dict(d=24),  # head dim not supported
        dict(bias_shape=(1, 2, 9, 8)),
        dict(mask_dtype=torch.float32),
    ],
)
def test_bad_shapes_are_refused(bad: dict) -> None:
    d = bad.get("d", 16)
    q = torch.zeros(1, 2, 2, 9, d, device=KERNEL_DEVICE)
    bias = torch.zeros(bad.get("bias_shape", (1, 2, 9, 9)), device=KERNEL_DEVICE)
    mask = torch.ones(1, 2, 9, dtype=bad.get("mask_dtype", torch.bool), device=KERNEL_DEVICE)
    with pytest.raises(KernelShapeError, match=r"\(1, 2, "):  # the message prints the shapes
        pba.pair_bias_attention(q, q, q, bias, mask)


def test_autograd_function_and_registered_op_agree() -> None:
    """The eager torch.autograd.Function and the torch.library op (torch.compile's path) give
    identical outputs and gradients."""
    q, k, v, bias, _ = make_inputs(1, 2, 2, 19, 16, F32, masked=False, seed=21)
    key_mask = torch.arange(19, device=q.device)[None] < 15
    results = []
    for use_op in (False, True):
        xs = [t.clone().requires_grad_() for t in (q, k, v, bias)]
        if use_op:
            out, _ = torch.ops.featurecache.pair_bias_attention(*xs, None, 0.25, key_mask, None)
        else:
            out = pba.PairBiasAttentionFunction.apply(*xs, None, 0.25, key_mask, None)
        out.sum().backward()
        results.append([out.detach(), *[x.grad for x in xs]])
    for a, b in zip(*results, strict=True):
        assert a is not None and b is not None and torch.equal(a, b)


def test_views_with_unaligned_strides_are_copied_before_launch() -> None:
    """q, k, v as views of one [B, S, N, 4·H·D + 8] projection (row stride 264, not a multiple of
    16: the JIT then cannot vectorise tile loads) reach the kernels as aligned copies; views whose
    strides are multiples of 16 and contiguous tensors go through as they are. The result equals
    the contiguous inputs' bit for bit. (Two heads: the views' head axis is a stride inside the
    row, as with the trunk's four.)"""
    b, s, h, n, d = 1, 3, 2, 13, 32
    g = torch.Generator().manual_seed(5)
    for width, copied in ((4 * h * d + 8, True), (4 * h * d + 16, False)):
        p = torch.randn(b, s, n, width, generator=g).to(KERNEL_DEVICE)
        q, k, v = (
            p[..., i * h * d : (i + 1) * h * d].unflatten(-1, (h, d)).permute(0, 1, 3, 2, 4) for i in range(3)
        )
        got = pba._aligned(q)
        assert torch.equal(got, q)
        assert (got.data_ptr() != q.data_ptr()) == copied, width
        assert got.stride(-1) == 1 and all(st % 16 == 0 for st in got.stride()[:-1])
        dense_q = q.contiguous()
        assert pba._aligned(dense_q) is dense_q
        bias = torch.randn(b, h, n, n, generator=g).to(KERNEL_DEVICE)
        do = torch.randn(b, s, h, n, d, generator=g).to(KERNEL_DEVICE)
        cfg = small_config(sp=2)
        views = run_kernel(q, k, v, bias, None, do, cfg)
        dense = run_kernel(q.contiguous(), k.contiguous(), v.contiguous(), bias, None, do, cfg)
        for x, y in zip(views, dense, strict=True):
            assert torch.equal(x, y)


@pytest.mark.parametrize("use_op", [False, True])
def test_a_bias_without_grad_skips_the_bias_gradient_pass(
    use_op: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A constant bias (requires_grad False) gets no gradient and the backward does not run the
    bias-gradient pass (one of four exponential passes); dq, dk, dv are bitwise those of a
    backward that also differentiates the bias. Both the eager Function and the registered op
    (torch.compile's path)."""
    q, k, v, bias, _ = make_inputs(1, 3, 2, 19, 16, F32, masked=False, seed=23)
    key_mask = torch.arange(19, device=q.device)[None] < 16
    calls: list[int] = []
    launch = pba.launch_dbias

    def counted(*args, **kwargs):  # type: ignore[no-untyped-def]
        calls.append(1)
        return launch(*args, **kwargs)

    monkeypatch.setattr(pba, "launch_dbias", counted)
    grads = {}
    for bias_grad in (True, False):
        calls.clear()
        xs = [t.clone().requires_grad_() for t in (q, k, v)]
        b = bias.clone().requires_grad_(bias_grad)
        if use_op:
            out, _ = torch.ops.featurecache.pair_bias_attention(*xs, b, None, 0.25, key_mask, None)
        else:
            out = pba.PairBiasAttentionFunction.apply(*xs, b, None, 0.25, key_mask, None)
        out.sum().backward()
        assert len(calls) == int(bias_grad)
        assert (b.grad is not None) == bias_grad
        grads[bias_grad] = [x.grad for x in xs]
    for a, c in zip(grads[True], grads[False], strict=True):
        assert a is not None and c is not None and torch.equal(a, c)
