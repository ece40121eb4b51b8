"""Helpers of the model tests: error metric and naive float64 oracles written independently of
``featurecache.model.kernels.reference`` (loops and plain softmax, no shared code)."""

from __future__ import annotations

import os

import torch


def reinit_zeroed_linears(model: torch.nn.Module) -> int:
    """Give every linear of ``model`` whose weight is all zero nn.Linear's own init again; returns how
    many. The trunk zero-initialises its distogram head and its residual branches' output linears
    (AF2/AF3's "final" init: review R25c s43 #4), so at the start only the head has a non-zero
    gradient and every block is the identity: a test that compares two trunks' gradients, or needs
    the inputs to reach the logits, must first make them reach (the random state decides the values:
    seed it before)."""
    n = 0
    for module in model.modules():
        if isinstance(module, torch.nn.Linear) and not bool(module.weight.any()):
            module.reset_parameters()
            n += 1
    return n


INTERPRETING = os.environ.get("TRITON_INTERPRET") == "1"
#: where the non-GPU-marked kernel tests run: the CPU under the interpreter, else the GPU
KERNEL_DEVICE = torch.device("cpu" if INTERPRETING or not torch.cuda.is_available() else "cuda")

#: ‖kernel − fp64‖/‖fp64‖ allowed per input dtype (out and every gradient)
TOL = {torch.float32: 2e-5, torch.float16: 3e-3, torch.bfloat16: 2e-2}


def rel_err(a: torch.Tensor, b: torch.Tensor) -> float:
    """‖a − b‖ / ‖b‖ in float64 (any NaN/inf in a gives inf)."""
    a64, b64 = a.detach().double().cpu(), b.detach().double().cpu()
    if not torch.isfinite(a64).all():
        return float("inf")
    return float((a64 - b64).norm() / b64.norm().clamp_min(1e-30))


def naive_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    bias: torch.Tensor,
    mask: torch.Tensor | None,
    scale: float,
) -> torch.Tensor:
    """Loop over S with torch.softmax; rows without a real key give 0 (float64 recommended)."""
    outs = []
    for s in range(q.shape[1]):
        scores = torch.matmul(q[:, s], k[:, s].transpose(-1, -2)) * scale + bias  # [B, H, N, N]
        if mask is None:
            outs.append(torch.matmul(torch.softmax(scores, -1), v[:, s]))
            continue
        key_ok = mask[:, s][:, None, None, :]  # [B, 1, 1, N]
        any_key = key_ok.any(-1, keepdim=True)
        scores = torch.where(key_ok, scores, float("-inf"))
        scores = torch.where(any_key, scores, 0.0)  # keep softmax finite on empty rows
        p = torch.where(any_key, torch.softmax(scores, -1), 0.0)
        outs.append(torch.matmul(p, v[:, s]))
    return torch.stack(outs, 1)


def naive_layernorm_linear(
    x: torch.Tensor,
    ln_w: torch.Tensor,
    ln_b: torch.Tensor,
    w: torch.Tensor,
    b: torch.Tensor | None,
    eps: float,
    swiglu: bool,
) -> torch.Tensor:
    mu = x.mean(-1, keepdim=True)
    var = ((x - mu) ** 2).mean(-1, keepdim=True)
    xn = (x - mu) / torch.sqrt(var + eps) * ln_w + ln_b
    u = xn @ w.T + (0 if b is None else b)
    if not swiglu:
        return u
    f = u.shape[-1] // 2
    a, g = u[..., :f], u[..., f:]
    return a / (1 + torch.exp(-a)) * g


def assert_fake_layouts_match(op: torch._ops.OpOverload, args: tuple) -> None:  # type: ignore[type-arg]
    """The op's fake (meta) kernel gives every output the shape, dtype and strides the real kernel
    gives it. torch.compile trusts the fake: a stride it did not predict fails at run time
    ("expected ... stride", run 45 with z.transpose(1, 2) as a LayerNorm-Linear input)."""
    from torch._subclasses.fake_tensor import FakeTensorMode

    real = op(*args)
    with FakeTensorMode(allow_non_fake_inputs=False) as mode:
        fake_args = tuple(mode.from_tensor(a) if isinstance(a, torch.Tensor) else a for a in args)
        fake = op(*fake_args)
    real_t = real if isinstance(real, tuple | list) else (real,)
    fake_t = fake if isinstance(fake, tuple | list) else (fake,)
    assert len(real_t) == len(fake_t)
    for i, (r, f) in enumerate(zip(real_t, fake_t, strict=True)):
        assert (tuple(f.shape), f.dtype, f.stride()) == (tuple(r.shape), r.dtype, r.stride()), (op, i)
