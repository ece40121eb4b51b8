"""Host-side pieces the kernel launchers share (pure Python over torch; no Triton, no kernel code):
tile configurations set at run time, and the ``tl.dot`` input precision of a GEMM dtype."""

from __future__ import annotations

from typing import Generic, TypeVar

import torch

Config = TypeVar("Config")


class ConfigOverrides(Generic[Config]):
    """Tile configurations that replace a kernel's built-in ones on CUDA, per (size, dtype): the
    size is what the kernel's defaults are tuned by (channels, head dim). Benchmarks and tuning
    sweeps set them (each kernel module's ``set_default_config``)."""

    def __init__(self) -> None:
        self._by_key: dict[tuple[int, torch.dtype], Config] = {}

    def set(self, size: int, dtype: torch.dtype, config: Config | None) -> None:
        """Use ``config`` on CUDA for (``size``, ``dtype``) from now on (None: the built-in one)."""
        if config is None:
            self._by_key.pop((size, dtype), None)
        else:
            self._by_key[(size, dtype)] = config

    def get(self, size: int, dtype: torch.dtype, device: torch.device) -> Config | None:
        """The configuration set for (``size``, ``dtype``) when ``device`` is CUDA, else None."""
        return self._by_key.get((size, dtype)) if device.type == "cuda" else None


def dot_precision(dtype: torch.dtype) -> str:
    """``tl.dot``'s ``input_precision`` (the kernels' ``PREC``) for a GEMM in ``dtype``: ``"ieee"``
    for fp32 (no TF32 rounding of fp32 operands), else ``"tf32"``."""
    return "ieee" if dtype == torch.float32 else "tf32"
