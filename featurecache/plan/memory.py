"""Analytic peak-memory model of one training step of the reference trunk (no forward pass).

The model replays, in bytes only, what :mod:`featurecache.model.trunk` allocates during one step
``loss = model.loss(batch); loss.backward()`` — every tensor a forward op creates, which of them
autograd saves for the backward, when Python drops the rest, and what each backward op allocates
and releases — on a small reference-counted byte ledger (:class:`Ledger`). The peak of the ledger
plus the parameters, gradients, AdamW state and the batch is the predicted
``torch.cuda.max_memory_allocated()`` of the step.

Sizes are exact functions of the architecture (``ModelConfig``), the crop ``N`` (tokens), the MSA
rows ``M``, the batch size ``B`` and the precision; nothing is fitted. The only constant is
:data:`CUDA_WORKSPACE_BYTES` (cuBLAS/cuBLASLt workspaces the caching allocator also counts).

What the two kernel modes change (``fused``):

* fused (Triton): LayerNorm+Linear saves only its input (statistics are recomputed in the
  backward); pair-bias attention saves q, k, v (views of the projection), the bias, its output and
  the fp32 log-sum-exp ``[B, S, H, N]`` — it never materialises the ``[B, S, H, N, N]`` scores.
* reference (torch): LayerNorm saves mean/rstd and Linear its normalised input; attention builds
  the scores, saves ``exp(scores)`` (fp32 under CUDA autocast, whose fp32 op list holds ``exp`` and
  ``sum``) and the bf16 probabilities, and its backward holds several score-sized temporaries
  (the ``div`` backward alone keeps five) — the N³ terms that dominate at large crops.

Precision: on CUDA the training loop runs the forward under ``torch.autocast(bfloat16)`` with fp32
weights, so GEMM outputs are bf16, the pair residual stream stays fp32 (the relative-position
embeddings are fp32 and promote it) and the single stream is bf16. :meth:`Precision.fp32` models
a run without autocast (the CPU path; what the tests compare against).
"""

from __future__ import annotations

from dataclasses import dataclass

from featurecache.model.config import ModelConfig, pad16
from featurecache.plan.ledger import KernelTiles, Ledger, Precision, Shapes
from featurecache.plan.modules import distogram_loss, embedding, pairformer_block

__all__ = [
    "CUDA_WORKSPACE_BYTES", "KernelTiles", "MemoryEstimate", "Precision", "batch_bytes", "estimate_step",
    "max_tokens_within", "parameter_count",
]  # fmt: skip

#: cuBLAS + cuBLASLt workspaces (allocated through PyTorch's caching allocator on the first GEMM,
#: so ``max_memory_allocated`` includes them): the one constant of the model, not fitted.
CUDA_WORKSPACE_BYTES = 64 * 2**20

_DTYPE_BYTES = {"int64": 8, "float32": 4, "bool": 1}


# ------------------------------------------------------------------------------------- public
def parameter_count(cfg: ModelConfig) -> int:
    """Number of parameters of :class:`featurecache.model.trunk.Trunk` with ``cfg`` (exact)."""
    cs, cp, h, hd = cfg.c_token, cfg.c_pair, cfg.n_heads, cfg.n_heads * cfg.head_dim
    n, k, hs = cfg.transition_n, cfg.msa_classes, cfg.n_heads_single
    nf = 3 * k + 3

    def lnl(c: int, o: int) -> int:
        return 2 * c + o * c

    tri = lnl(cp, 4 * hd + pad16(h)) + hd * cp
    trans = lambda c: lnl(c, 2 * n * c) + n * c * c  # noqa: E731
    single = lnl(cs, 4 * cs) + lnl(cp, pad16(hs)) + cs * cs
    block = 2 * tri + trans(cp) + single + trans(cs) + cs * 2 * cp
    embed = (
        (nf * cs + cs)
        + 2 * nf * cp
        + 2 * (2 * cfg.relpos_max + 2) * cp  # residue and token offsets
        + (2 * cfg.relchain_max + 2) * cp
        + 2 * cp
    )
    head = cp * cfg.distogram_bins + cfg.distogram_bins
    return embed + cfg.n_blocks * block + head


def batch_bytes(B: int, N: int, M: int) -> int:
    """Bytes of the model's inputs on the device (client/schema.py MODEL_INPUT_KEYS)."""
    from featurecache.client.schema import BATCH_SCHEMA, MODEL_INPUT_KEYS

    sizes = {"B": B, "N": N, "M": M}
    total = 0
    for key in MODEL_INPUT_KEYS:
        dtype, shape = BATCH_SCHEMA[key]
        n = 1
        for sym in shape.split():
            n *= int(sym) if sym.isdigit() else sizes[sym]
        total += n * _DTYPE_BYTES[dtype]
    return total


@dataclass(frozen=True)
class MemoryEstimate:
    """Predicted peak of one training step and its parts (bytes)."""

    peak_bytes: int
    activation_peak_bytes: int  # the ledger's peak (activations + transients)
    saved_bytes: int  # ledger at the end of the forward (what autograd holds + the logits)
    parameter_bytes: int  # fp32 parameters
    gradient_bytes: int  # fp32 gradients
    optimizer_bytes: int  # AdamW exp_avg + exp_avg_sq
    weight_copy_bytes: int  # compute-dtype copies of the weights saved by the GEMMs (autocast)
    batch_bytes: int
    overhead_bytes: int
    peak_phase: str


def estimate_step(
    cfg: ModelConfig,
    n_tokens: int,
    msa_rows: int = 1,
    batch_size: int = 1,
    *,
    fused: bool = True,
    precision: Precision | None = None,
    overhead_bytes: int = CUDA_WORKSPACE_BYTES,
    tiles: KernelTiles | None = None,
) -> MemoryEstimate:
    """Predict ``max_memory_allocated`` of one step (forward + backward + AdamW) of the trunk.

    ``n_tokens``: padded token count N of the batch; ``msa_rows``: MSA rows M; the state term
    counts fp32 parameters, gradients and AdamW's two moments. ``tiles``: the Triton tile sizes
    (default: read from the kernel modules, :meth:`KernelTiles.current`).
    """
    prec = precision or Precision.cuda_bf16()
    d = Shapes(
        cfg,
        int(batch_size),
        max(1, int(n_tokens)),
        max(1, int(msa_rows)),
        fused,
        prec,
        tiles or KernelTiles(),
    )
    L = Ledger()
    pair_mask = L.new(d.pair)  # token_mask[:, :, None] & token_mask[:, None, :]
    s, z, embed_bwd = embedding(L, d)
    block_bwds = []
    for _ in range(cfg.n_blocks):
        s, z, bwd = pairformer_block(L, d, s, z)
        block_bwds.append(bwd)
    L.drop(s)  # the last single representation feeds nothing after the trunk
    head_bwd = distogram_loss(L, d, z)
    saved = L.live
    gz = head_bwd()
    gs = L.new(d.tok * cfg.c_token * d.a)
    for bwd in reversed(block_bwds):
        gs, gz = bwd(gs, gz)
    embed_bwd(gs, gz)
    L.drop(pair_mask)
    n_params = parameter_count(cfg)
    copies = n_params * d.a if d.a != 4 else 0
    batch = batch_bytes(d.B, d.N, d.M)
    return MemoryEstimate(
        peak_bytes=L.peak + n_params * 16 + copies + batch + overhead_bytes,
        activation_peak_bytes=L.peak,
        saved_bytes=saved,
        parameter_bytes=n_params * 4,
        gradient_bytes=n_params * 4,
        optimizer_bytes=n_params * 8,
        weight_copy_bytes=copies,
        batch_bytes=batch,
        overhead_bytes=overhead_bytes,
        peak_phase=L.peak_phase,
    )


def max_tokens_within(
    budget_bytes: int,
    cfg: ModelConfig,
    msa_rows: int = 1,
    batch_size: int = 1,
    *,
    fused: bool = True,
    precision: Precision | None = None,
    upper: int = 8192,
) -> int:
    """The largest N (≤ ``upper``) whose predicted peak fits in ``budget_bytes`` (0 if none)."""

    def fits(n: int) -> bool:
        est = estimate_step(cfg, n, msa_rows, batch_size, fused=fused, precision=precision)
        return est.peak_bytes <= budget_bytes

    if not fits(1):
        return 0
    lo, hi = 1, upper
    if fits(hi):
        return hi
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if fits(mid):
            lo = mid
        else:
            hi = mid
    return lo
