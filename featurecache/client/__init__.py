"""The training client: sampler → fetch → crop → assemble, ready-first (see dataset.py).

Imports torch lazily: ``from featurecache.client import FeatureDataset`` pulls it in, the croppers
and the sampler do not need it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from featurecache.client.crop import (
    CROP_METHODS,
    DEFAULT_CROP_SIZE,
    DEFAULT_CROP_WEIGHTS,
    CropInput,
    Cropper,
    CropResult,
    crop_contiguous,
    crop_spatial,
    crop_spatial_interface,
    interface_tokens,
    snap_groups,
)
from featurecache.client.sampler import SampleKey, Sampler, SamplerFilter

if TYPE_CHECKING:
    from featurecache.client.assemble import collate
    from featurecache.client.dataset import FeatureDataset, FeatureLoader
    from featurecache.client.loader import LoaderStats, ReadyFirst

__all__ = [
    "CROP_METHODS",
    "DEFAULT_CROP_SIZE",
    "DEFAULT_CROP_WEIGHTS",
    "CropInput",
    "CropResult",
    "Cropper",
    "FeatureDataset",
    "FeatureLoader",
    "LoaderStats",
    "ReadyFirst",
    "SampleKey",
    "Sampler",
    "SamplerFilter",
    "collate",
    "crop_contiguous",
    "crop_spatial",
    "crop_spatial_interface",
    "interface_tokens",
    "snap_groups",
]

_LAZY = {
    "FeatureDataset": "featurecache.client.dataset",
    "FeatureLoader": "featurecache.client.dataset",
    "collate": "featurecache.client.assemble",
    "LoaderStats": "featurecache.client.loader",
    "ReadyFirst": "featurecache.client.loader",
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'featurecache.client' has no attribute {name!r}")
    import importlib

    return getattr(importlib.import_module(module), name)
