"""What the fused ops' ``torch.autograd.Function`` backwards share."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import torch


def first_order_only(op: str, reference: str) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Decorate an ``autograd.Function.backward`` whose kernels give first-order gradients only:
    a backward that builds a graph (``torch.autograd.grad(..., create_graph=True)``, e.g. for a
    gradient penalty) raises, naming ``op`` and the pure-torch ``reference`` that has the second
    order, instead of returning gradients that silently carry no graph.

    ``torch.autograd.function.once_differentiable`` alone raises only when the incoming gradient
    requires grad; after ``grad(out.sum(), x, create_graph=True)`` it does not, and the penalty's
    second-order term was silently zero (review R13 s39 M1). The backward still runs as
    ``once_differentiable`` (grad mode off inside)."""

    def wrap(backward: Callable[..., Any]) -> Callable[..., Any]:
        inner = torch.autograd.function.once_differentiable(backward)

        @functools.wraps(backward)
        def checked(ctx: Any, *grads: Any) -> Any:
            if torch.is_grad_enabled():  # the engine runs a backward in grad mode only for create_graph
                raise RuntimeError(
                    f"{op}: the fused kernels have no double backward (create_graph=True): use fused=False / "
                    f"{reference} where second-order gradients are needed"
                )
            return inner(ctx, *grads)

        return checked

    return wrap
