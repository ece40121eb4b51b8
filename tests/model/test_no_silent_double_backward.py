"""A gradient penalty through a fused op raises instead of silently dropping its second-order term.

The kernels give first-order gradients only. ``torch.autograd.function.once_differentiable`` raises
only when the incoming gradient itself requires grad; in the usual gradient-penalty pattern,
``g = grad(out.sum(), x, create_graph=True)`` then ``loss + λ‖g‖²``, it does not, so ``g`` came back
without a graph, ``loss.backward()`` ran, and ``x.grad`` lacked the penalty's term (review R13 s39
M1: off by up to 10.7 where the reference's gradient is at most 12). The pure-torch references have
the second order: the same pattern through them is the oracle that such a penalty is meaningful.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest
import torch

from featurecache.model.kernels.layernorm_linear import layernorm_linear
from featurecache.model.kernels.pair_bias_attention import pair_bias_attention
from featurecache.model.kernels.reference import layernorm_linear_ref, pair_bias_attention_ref, transition_ref
from featurecache.model.kernels.transition import transition
from featurecache.model.kernels.triangle import triangle_attention_core, triangle_attention_core_ref
from tests.model.conftest import KERNEL_DEVICE


def _penalised(f: Callable[[torch.Tensor], torch.Tensor], x: torch.Tensor) -> torch.Tensor:
    x = x.detach().clone().requires_grad_()
    out = f(x)
    (g,) = torch.autograd.grad(out.sum(), x, create_graph=True)
    (out.square().sum() + 10.0 * g.square().sum()).backward()
    assert x.grad is not None
    return x.grad


def _cases() -> dict[str, tuple[Callable, Callable, torch.Tensor]]:  # type: ignore[type-arg]
    g = torch.Generator().manual_seed(0)
    dev = KERNEL_DEVICE

    def r(*shape: int, s: float = 1.0) -> torch.Tensor:
        return (torch.randn(*shape, generator=g) * s).to(dev)

    k, bias = r(1, 2, 1, 6, 16), r(1, 1, 6, 6)
    w, w1, w2 = r(8, 16, s=0.3), r(128, 16, s=0.2), r(16, 64, s=0.2)
    one, zero = torch.ones(16, device=dev), torch.zeros(16, device=dev)
    return {
        "pair_bias_attention": (lambda q: pair_bias_attention(q, k, k, bias),
                                lambda q: pair_bias_attention_ref(q, k, k, bias), r(1, 2, 1, 6, 16)),
        "layernorm_linear": (lambda x: layernorm_linear(x, one, zero, w),
                             lambda x: layernorm_linear_ref(x, one, zero, w), r(3, 16)),
        "transition": (lambda x: transition(x, one, zero, w1, w2),
                       lambda x: transition_ref(x, one, zero, w1, w2), r(3, 16)),
        "triangle_attention_core": (lambda p: triangle_attention_core(p, 1, 16),
                                    lambda p: triangle_attention_core_ref(p, 1, 16), r(1, 5, 5, 4 * 16 + 16)),
    }  # fmt: skip


@pytest.mark.parametrize("op", list(_cases()))
def test_a_gradient_penalty_through_the_fused_op_raises(op: str) -> None:
    fused, ref, x = _cases()[op]
    # the reference's penalty has a second-order term: its gradient differs from the first-order one
    with_penalty = _penalised(ref, x)
    x1 = x.detach().clone().requires_grad_()
    ref(x1).square().sum().backward()
    assert x1.grad is not None and (with_penalty - x1.grad).abs().max() > 1e-3
    with pytest.raises(RuntimeError, match=rf"{op}: the fused kernels have no double backward"):
        _penalised(fused, x)
    # first-order gradients through the fused op are unchanged
    x2 = x.detach().clone().requires_grad_()
    fused(x2).square().sum().backward()
    assert x2.grad is not None
    torch.testing.assert_close(x2.grad, x1.grad, rtol=1e-4, atol=1e-5)
