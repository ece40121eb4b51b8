"""Kernel tests run under Triton's interpreter when there is no GPU.

``TRITON_INTERPRET`` is read when ``@triton.jit`` decorates a kernel, i.e. when the kernel
modules are imported, so it is set here, before any test module of this directory imports them.
It is set only when CUDA is absent (on the H200 the same tests run the compiled kernels on the GPU)
and only affects functions decorated with ``triton.jit`` afterwards: packages that merely import
torch are unaffected.
"""

from __future__ import annotations

import os
import sys

import pytest
import torch

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")

INTERPRETING = os.environ.get("TRITON_INTERPRET") == "1"
#: where the non-GPU-marked kernel tests run: the CPU under the interpreter, else the GPU
KERNEL_DEVICE = torch.device("cpu" if INTERPRETING else "cuda")

_KERNEL_MODULES = (
    "featurecache.model.kernels.pair_bias_attention",
    "featurecache.model.kernels.layernorm_linear",
    "featurecache.model.kernels.swiglu",
    "featurecache.model.kernels.transition",
)


@pytest.fixture(scope="session", autouse=True)
def _kernels_match_mode() -> None:
    """Fail loudly if a kernel module was imported (compiled mode) before this conftest ran."""
    for name in _KERNEL_MODULES:
        mod = sys.modules.get(name)
        if mod is None or not INTERPRETING:
            continue
        kernels = [v for k, v in vars(mod).items() if k.endswith("_kernel")]
        bad = [type(k).__name__ for k in kernels if type(k).__name__ != "InterpretedFunction"]
        assert not bad, f"{name} was imported before TRITON_INTERPRET was set: {bad}"
