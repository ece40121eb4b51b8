"""The training optimizer (:class:`featurecache.model.train.EagerAdamW`, what ``make_optimizer``
returns) is torch's AdamW without the wrappers that import ``torch._dynamo`` (~1.2 s of CPU in
each ``featurecache train`` process): a training process that does not compile never imports it,
and the updates, the optimizer state and its ``state_dict`` are torch.optim.AdamW's, bit for bit."""

from __future__ import annotations

import subprocess
import sys

import pytest
import torch

from featurecache.model.train import EagerAdamW, make_optimizer

#: training steps of the reference loop (train_step: zero_grad, backward, clipping, step; a small
#: model: the optimizer is under test, not the trunk), then a checkpoint's round trip of the optimizer
_NO_DYNAMO = """
import sys
import torch
from featurecache.model.train import make_optimizer, train_step

torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(6, 5), torch.nn.Tanh(), torch.nn.Linear(5, 3))
opt = make_optimizer(model, 1e-3)
batch = {"x": torch.randn(4, 6)}
for _ in range(2):
    train_step(model, opt, lambda b: model(b["x"]).square().mean(), batch)
make_optimizer(model, 1e-3).load_state_dict(opt.state_dict())
assert opt.state, "no optimizer state: no step ran"
print("torch._dynamo imported:", "torch._dynamo" in sys.modules)
"""


def test_a_training_step_does_not_import_dynamo() -> None:
    """In a fresh process, as ``featurecache train`` runs it (the xdist worker may have imported
    dynamo already)."""
    done = subprocess.run([sys.executable, "-c", _NO_DYNAMO], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.strip().splitlines()[-1] == "torch._dynamo imported: False", done.stdout


def _model() -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(6, 5), torch.nn.Tanh(), torch.nn.Linear(5, 3))


def _steps(model: torch.nn.Module, opt: torch.optim.Optimizer, seed: int, n: int) -> list[torch.Tensor]:
    gen = torch.Generator().manual_seed(seed)
    losses = []
    for _ in range(n):
        opt.zero_grad(set_to_none=True)
        loss = model(torch.randn(4, 6, generator=gen)).square().mean()
        loss.backward()
        opt.step()
        losses.append(loss.detach())
    return losses


def _same_state(a: dict, b: dict) -> None:  # type: ignore[type-arg]
    assert a["param_groups"] == b["param_groups"]
    assert a["state"].keys() == b["state"].keys()
    for k in a["state"]:
        assert a["state"][k].keys() == b["state"][k].keys()
        for name, value in a["state"][k].items():
            assert torch.equal(value, b["state"][k][name]), (k, name)


@pytest.mark.parametrize("impl", [{"foreach": False}, {"foreach": True}, {"fused": True}],
                         ids=["single-tensor", "foreach", "fused"])  # fmt: skip
def test_the_updates_and_state_are_torchs_adamw_bit_for_bit(impl: dict[str, bool]) -> None:
    """Six steps with weight decay, a state_dict round trip into a new optimizer, three more: the
    parameters, the losses and the state equal torch.optim.AdamW's exactly. Each of AdamW's three
    implementations (RF2 of session 28: the GPU trains with the fused one, ``make_optimizer``)."""
    runs = []
    for cls in (torch.optim.AdamW, EagerAdamW):
        model = _model()
        opt = cls(model.parameters(), lr=3e-2, weight_decay=0.1, **impl)
        losses = _steps(model, opt, seed=1, n=6)
        state = opt.state_dict()
        again = cls(model.parameters(), lr=3e-2, weight_decay=0.1, **impl)
        again.load_state_dict(state)
        losses += _steps(model, again, seed=2, n=3)
        runs.append((losses, [p.detach().clone() for p in model.parameters()], state, again.state_dict()))
    (l0, p0, s0, t0), (l1, p1, s1, t1) = runs
    assert all(torch.equal(a, b) for a, b in zip(l0, l1, strict=True))
    assert all(torch.equal(a, b) for a, b in zip(p0, p1, strict=True))
    _same_state(s0, s1)
    _same_state(t0, t1)
    assert not torch.equal(p0[0], _model()[0].weight)  # the steps changed the parameters
    assert isinstance(make_optimizer(_model(), 1e-3), EagerAdamW)


def test_a_step_leaves_grad_mode_as_it_was_and_does_not_record_the_update() -> None:
    model = _model()
    opt = make_optimizer(model, 1e-2)
    model(torch.randn(2, 6)).sum().backward()
    with torch.enable_grad():
        opt.step()
        assert torch.is_grad_enabled()
    with torch.no_grad():
        opt.step()
        assert not torch.is_grad_enabled()
    assert all(p.grad_fn is None for p in model.parameters())
