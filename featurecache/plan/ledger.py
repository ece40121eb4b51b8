"""The byte ledger the memory model replays a training step on, and the sizes it is given.

:class:`Ledger` counts references like Python/autograd do: a tensor's bytes leave when its last
reference (a local, or a save for the backward) goes. :class:`Shapes` holds the step's sizes, the
kernel mode, the precision and the Triton tile sizes that set the backward's partial buffers.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass, field

from featurecache.model.config import ModelConfig
from featurecache.model.kernels.grid import TRANSITION_BWD_CHUNK_BYTES

#: streaming multiprocessors of the target GPU (H100/H200: 132); the attention backward aims at
#: ≥ 2 programs per SM when it splits the bias gradient into fp32 partials
GPU_SMS = 132


@dataclass(frozen=True)
class KernelTiles:
    """Tile sizes that set the size of the Triton backward kernels' fp32 partial buffers
    (LayerNorm-weight partials per row block, weight-gradient partials per row split, bias-gradient
    partials per S group). :meth:`current` reads them from the kernel modules when importable."""

    ln_dx_block_m: int = 64
    ln_dw_block_m: int = 32
    ln_dw_block_n: int = 64
    ln_dw_target_programs: int = 264
    attn_dbias_block_m: int = 64
    attn_dbias_block_n: int = 64
    attn_dbias_target_programs: int = 1056
    #: the LayerNorm-Linear weight gradient by cuBLAS from dU and LN(x) (written by the dx kernel)
    ln_dw_library: bool = True
    #: the attention dk/dv kernel reads a transposed copy of the bias (allocated after the bias gradient)
    attn_dkv_bias_copy: bool = True
    #: the two-kernel transition: its backward's row block (LayerNorm-weight partials) and the
    #: largest channel count it takes (above it: LayerNorm-Linear + a library Linear)
    tr_bwd_block_m: int = 64
    tr_max_channels: int = 256
    #: the transition backward's h/dU/LN(x) buffers per row chunk (kernels/transition.py)
    tr_bwd_chunk_bytes: int | None = TRANSITION_BWD_CHUNK_BYTES

    @classmethod
    @functools.cache
    def current(cls, cfg: ModelConfig) -> KernelTiles:
        """The CUDA bf16 tiles the model's kernels use for ``cfg`` (defaults if torch/Triton are absent)."""
        try:
            import torch

            from featurecache.model.kernels import layernorm_linear as lnl
            from featurecache.model.kernels import pair_bias_attention as pba
            from featurecache.model.kernels import transition as tr
        except (ImportError, RuntimeError):  # planning must not need the GPU stack
            return cls()
        cuda = torch.device("cuda")
        ln = lnl.default_config(cfg.c_pair, torch.bfloat16, cuda)
        at = pba.default_config(cfg.head_dim, torch.bfloat16, cuda)
        trc = tr.default_config(cfg.c_pair, torch.bfloat16, cuda)
        return cls(
            ln_dx_block_m=ln.dx.block_m, ln_dw_block_m=ln.dw.block_m, ln_dw_block_n=ln.dw.block_n,
            ln_dw_target_programs=ln.dw_target_programs, attn_dbias_block_m=at.dbias.block_m,
            attn_dbias_block_n=at.dbias.block_n, attn_dbias_target_programs=at.dbias_target_programs,
            ln_dw_library=ln.dw_library, attn_dkv_bias_copy=at.dkv_bias_copy,
            tr_bwd_block_m=trc.bwd.block_m, tr_max_channels=tr.MAX_CHANNELS, tr_bwd_chunk_bytes=trc.bwd_chunk_bytes,
        )  # fmt: skip


#: bytes per element of the batch dtypes (client/schema.py)
@dataclass(frozen=True)
class Precision:
    """``compute``: bytes per element of GEMM outputs / activations (2 = bf16 autocast, 4 = fp32);
    ``exp_fp32``: autocast runs ``exp``/``sum`` in fp32 (CUDA's autocast op list)."""

    compute: int = 2
    exp_fp32: bool = True

    @classmethod
    def cuda_bf16(cls) -> Precision:
        return cls(2, True)

    @classmethod
    def fp32(cls) -> Precision:
        return cls(4, False)

    @property
    def exp(self) -> int:
        return 4 if self.exp_fp32 else self.compute


@dataclass
class Ledger:
    """Reference-counted byte ledger: ``new`` a tensor (one reference), ``ref`` it when autograd
    saves it, ``drop`` references; a tensor's bytes leave when its last reference goes."""

    live: int = 0
    peak: int = 0
    peak_phase: str = ""
    phase: str = ""
    _size: dict[int, int] = field(default_factory=dict)
    _refs: dict[int, int] = field(default_factory=dict)
    _next: int = 0

    def new(self, nbytes: float) -> int:
        h = self._next
        self._next += 1
        self._size[h] = int(nbytes)
        self._refs[h] = 1
        self.live += int(nbytes)
        if self.live > self.peak:
            self.peak, self.peak_phase = self.live, self.phase
        return h

    def ref(self, h: int) -> int:
        self._refs[h] += 1
        return h

    def drop(self, *handles: int | None) -> None:
        for h in handles:
            if h is None:
                continue
            self._refs[h] -= 1
            if self._refs[h] == 0:
                self.live -= self._size.pop(h)
                del self._refs[h]

    def temp(self, nbytes: float) -> None:
        """A temporary that exists only inside one op."""
        self.drop(self.new(nbytes))


Backward = Callable[[int], int]


@dataclass(frozen=True)
class Shapes:
    """Sizes of one step: B samples, N tokens (padded crop), M MSA rows."""

    cfg: ModelConfig
    B: int
    N: int
    M: int
    fused: bool
    prec: Precision
    tiles: KernelTiles = KernelTiles()

    @property
    def a(self) -> int:
        return self.prec.compute

    @property
    def pair(self) -> int:  # elements of one [B, N, N] plane
        return self.B * self.N * self.N

    @property
    def tok(self) -> int:
        return self.B * self.N
