"""Counting the bytes of live tensors of a real CPU step, independently of the planner.

:class:`LiveBytes` is a ``TorchDispatchMode``: after every aten op it registers the storages of the
op's outputs (weakly) and drops the ones that died, so ``peak`` is the largest sum of live storage
bytes seen at an op boundary. Storages passed in ``exclude`` (parameters, gradients, the batch)
are not counted. Ops run inside custom ops (the Triton kernels) are not visible to it, which is
why the tests compare it with the reference kernels only.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import torch
from torch.multiprocessing.reductions import StorageWeakRef
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten


class LiveBytes(TorchDispatchMode):
    def __init__(self, exclude: Iterable[torch.Tensor] = ()) -> None:
        super().__init__()
        self._exclude = {t.untyped_storage()._cdata for t in exclude}
        self._refs: dict[int, tuple[StorageWeakRef, int]] = {}
        self.live = 0
        self.peak = 0

    def _sweep(self) -> None:
        dead = [k for k, (ref, _) in self._refs.items() if ref.expired()]
        for k in dead:
            self.live -= self._refs.pop(k)[1]

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        self._sweep()
        out = func(*args, **(kwargs or {}))
        for t in tree_flatten(out)[0]:
            if not isinstance(t, torch.Tensor):
                continue
            st = t.untyped_storage()
            key = st._cdata
            if key in self._exclude or (key in self._refs and not self._refs[key][0].expired()):
                continue
            self._refs[key] = (StorageWeakRef(st), st.nbytes())
            self.live += st.nbytes()
        self.peak = max(self.peak, self.live)
        return out
