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

import math
from collections.abc import Callable
from dataclasses import dataclass, field

from featurecache.model.config import ModelConfig

#: cuBLAS + cuBLASLt workspaces (allocated through PyTorch's caching allocator on the first GEMM,
#: so ``max_memory_allocated`` includes them): the one constant of the model, not fitted.
CUDA_WORKSPACE_BYTES = 64 * 2**20

#: Triton LayerNorm+Linear backward: rows per program of the dx kernel (per-block LN-weight
#: partials) and the weight-gradient grid target (fp32 partials); pair-bias attention dbias grid.
_LN_DX_BLOCK_M = 64
_LN_DW_TARGET_PROGRAMS = 264
_LN_DW_BLOCK_N = 64
_ATTN_DBIAS_TILE = 64
_ATTN_DBIAS_TARGET_PROGRAMS = 264

#: bytes per element of the batch dtypes (client/schema.py)
_DTYPE_BYTES = {"int64": 8, "float32": 4, "bool": 1}


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

    @property
    def a(self) -> int:
        return self.prec.compute

    @property
    def pair(self) -> int:  # elements of one [B, N, N] plane
        return self.B * self.N * self.N

    @property
    def tok(self) -> int:
        return self.B * self.N


def _pad8(n: int) -> int:
    return -(-n // 8) * 8


# ----------------------------------------------------------------------------------- LN + Linear
def _ln_linear(
    L: Ledger, d: Shapes, x: int, rows: int, c: int, o: int, *, xb: int, swiglu: bool = False,
    contiguous: bool = True,
) -> tuple[int, Backward]:  # fmt: skip
    """``LayerNormLinear``: x ``[rows, c]`` (xb bytes) -> ``[rows, o]`` (``o/2`` with SwiGLU)."""
    a = d.a
    oh = o // 2 if swiglu else o
    if d.fused:
        if not contiguous:  # _rows(x): reshape of a transposed view copies
            L.temp(rows * c * xb)
        y = L.new(rows * oh * a)
        L.ref(x)  # saved: x only (LN statistics are recomputed)

        def bwd_fused(dy: int) -> int:
            t = L.new(rows * c * xb) if not contiguous else None
            dx = L.new(rows * c * xb)
            ln_parts = L.new(2 * math.ceil(rows / _LN_DX_BLOCK_M) * c * 4)
            splits = max(
                1,
                min(math.ceil(rows / 32), math.ceil(_LN_DW_TARGET_PROGRAMS / math.ceil(oh / _LN_DW_BLOCK_N))),
            )
            L.temp(splits * o * c * 4)  # fp32 weight-gradient partials
            L.drop(ln_parts, t, dy, x)
            return dx

        return y, bwd_fused

    # reference: autocast off inside; LN in fp32, the matmul in the weight's (compute) dtype
    xf = L.ref(x) if xb == 4 else L.new(rows * c * 4)  # x.float(), saved by layer_norm
    if not contiguous:
        L.temp(rows * c * 4)  # layer_norm's expect_contiguous copy
    xn = L.new(rows * c * 4)
    stats = L.new(2 * rows * 4)  # mean, rstd (saved)
    xn_c = L.ref(xn) if a == 4 else L.new(rows * c * a)  # saved by linear
    L.drop(xn)
    u = L.new(rows * o * a)
    silu = None
    if swiglu:
        silu = L.new(rows * oh * a)  # silu(a) saves a (a view of u); mul saves silu(a) and b
        y = L.new(rows * oh * a)
    else:
        y = u

    def bwd_ref(dy: int) -> int:
        du: int = dy
        if swiglu:
            d_silu, d_b = L.new(rows * oh * a), L.new(rows * oh * a)
            L.drop(dy, silu)
            d_a = L.new(rows * oh * a)  # silu_backward
            L.drop(d_silu)
            du = L.new(rows * o * a)  # chunk backward = cat
            L.drop(d_a, d_b, u)
        dxn_c = L.new(rows * c * a)
        L.drop(du, xn_c)
        dxn = dxn_c
        if a != 4:
            dxn = L.new(rows * c * 4)
            L.drop(dxn_c)
        t = L.new(rows * c * 4) if not contiguous else None
        dxf = L.new(rows * c * 4)
        L.drop(t, dxn, stats, xf)
        if xb != 4:
            dx = L.new(rows * c * xb)
            L.drop(dxf)
            return dx
        return dxf

    return y, bwd_ref


# ----------------------------------------------------------------------------------- attention
def _attention(
    L: Ledger, d: Shapes, proj: int, bias: int, *, s: int, h: int, dh: int, rows: int
) -> tuple[int, Callable[[int], tuple[int, int, int, int]]]:
    """Pair-bias attention over q, k, v views of ``proj``: ``[B, S, H, N, D]`` with ``rows = B·S·N``
    query rows; bias ``[B, H, N, N]``. Returns (out handle, backward(d_out) -> dq, dk, dv, dbias)."""
    a, B, N = d.a, d.B, d.N
    qkv = rows * h * dh * a  # one of q, k, v
    scores = B * s * h * N * N  # elements of [B, S, H, N, N]
    bias_b = B * h * N * N * a
    if d.fused:
        out = L.ref(L.new(qkv))  # one reference for the caller, one saved by the op
        lse = L.new(B * s * h * N * 4)
        L.ref(proj)
        L.ref(bias)

        def bwd_fused(dout: int) -> tuple[int, int, int, int]:
            delta = L.new(B * s * h * N * 4)
            dq, dk, dv = L.new(qkv), L.new(qkv), L.new(qkv)
            tiles = math.ceil(N / _ATTN_DBIAS_TILE) ** 2
            groups = max(1, min(s, math.ceil(_ATTN_DBIAS_TARGET_PROGRAMS / (tiles * B * h))))
            groups = math.ceil(s / math.ceil(s / groups))
            if groups == 1:
                dbias = L.new(bias_b)
            else:
                part = L.new(groups * B * h * N * N * 4)
                total = L.new(B * h * N * N * 4)
                L.drop(part)
                dbias = L.new(bias_b)
                L.drop(total)
            L.drop(delta, dout, out, lse, proj, bias)
            return dq, dk, dv, dbias

        return out, bwd_fused

    # torch reference (pair_bias_attention_ref), under autocast when it is on
    e_b = d.prec.exp
    q_c, k_c = L.new(qkv), L.new(qkv)  # einsum's contiguous operand copies (saved by bmm)
    key_mask = L.new(B * s * N)  # ~mask (saved by masked_fill)
    sc = L.new(scores * a)
    sc2 = L.new(scores * a)  # * scale
    L.drop(sc)
    sc3 = L.new(scores * a)  # + bias
    L.drop(sc2)
    masked = L.new(scores * a)  # masked_fill
    L.drop(sc3)
    shifted = L.new(scores * a)  # s - m
    cast = L.new(scores * 4) if e_b != a else None  # autocast: exp runs in fp32
    e = L.new(scores * e_b)  # saved (exp output, div's numerator)
    L.drop(cast, shifted)
    p = L.new(scores * e_b)
    p_c = L.new(scores * a) if e_b != a else L.ref(p)  # autocast copy of p, saved by bmm
    v_c = L.new(qkv)
    out = L.new(qkv)
    L.drop(masked, p)

    def bwd_ref(dout: int) -> tuple[int, int, int, int]:
        do_c = L.new(qkv)  # einsum reshapes the permuted grad
        dv = L.new(qkv)
        dp_c = L.new(scores * a)
        L.drop(do_c, dout, p_c, v_c)
        dp = dp_c
        if e_b != a:
            dp = L.new(scores * e_b)
            L.drop(dp_c)
        # div backward: grad/other, then -grad * (self/other) / other (three temporaries)
        de = L.new(scores * e_b)
        t1, t2, t3 = L.new(scores * e_b), L.new(scores * e_b), L.new(scores * e_b)
        L.drop(t1, t2)
        L.temp(scores * e_b)
        L.drop(t3, dp)
        de2 = L.new(scores * e_b)  # + expanded grad of the row sum (out of place)
        L.drop(de)
        dx = L.new(scores * e_b)  # exp backward
        L.drop(de2, e)
        if e_b != a:
            dx_c = L.new(scores * a)
            L.drop(dx)
            dx = dx_c
        dm = L.new(scores * a)  # masked_fill backward
        L.drop(dx, key_mask)
        dbias = L.new(bias_b)  # sum over S
        ds = L.new(scores * a)  # * scale
        L.drop(dm)
        dq, dk = L.new(qkv), L.new(qkv)
        L.drop(ds, q_c, k_c)
        return dq, dk, dv, dbias

    return out, bwd_ref


# ----------------------------------------------------------------------------- trunk modules
def _triangle_attention(L: Ledger, d: Shapes, z: int, starting: bool) -> tuple[int, Backward]:
    """``z = z + TriangleAttention(z)`` on the fp32 pair stream ``[B, N, N, c]``."""
    cfg, a, E = d.cfg, d.a, d.pair
    c, h, dh = cfg.c_pair, cfg.n_heads, cfg.head_dim
    hd = h * dh
    width = 4 * hd + _pad8(h)
    L.phase = f"triangle attention ({'start' if starting else 'end'})"
    proj, ln_bwd = _ln_linear(L, d, z, E, c, width, xb=4, contiguous=starting)
    gate = L.new(E * hd * a)  # sigmoid output, saved
    bias = L.new(E * h * a)  # contiguous [B, H, N, N]
    o, attn_bwd = _attention(L, d, proj, bias, s=d.N, h=h, dh=dh, rows=E)
    if not d.fused:  # the einsum output [B,S,H,N,D] is permuted: reshape copies
        o_r = L.new(E * hd * a)
        L.drop(o)
        o = o_r
    go = L.new(E * hd * a)  # gate * o (saves gate and o)
    out = L.new(E * c * a)  # linear (saves go)
    L.drop(proj, bias)
    z_new = L.new(E * c * 4)
    L.drop(out)

    def bwd(g: int) -> int:
        L.phase = f"triangle attention ({'start' if starting else 'end'}) backward"
        g_out = L.new(E * c * a) if a != 4 else L.ref(g)
        d_go = L.new(E * hd * a)
        L.drop(g_out, go)
        d_gate, d_o = L.new(E * hd * a), L.new(E * hd * a)
        L.drop(d_go, o)  # the mul's saved o (the fused op holds its own reference)
        dq, dk, dv, dbias = attn_bwd(d_o)
        # five slices of the projection: slice_backward allocates the full width for each, and
        # autograd accumulates them out of place
        acc = None
        pieces: list[tuple[int, bool]] = [
            (dbias, False),
            (d_gate, True),
            (dv, False),
            (dk, False),
            (dq, False),
        ]
        n_clones = 0 if d.fused else 2  # q, k grads from bmm need a reshape copy
        for i, (piece, is_gate) in enumerate(pieces):
            if is_gate:
                pre = L.new(E * hd * a)  # sigmoid_backward
                L.drop(piece, gate)
                piece = pre
            if i >= len(pieces) - n_clones:
                cl = L.new(E * hd * a)
                L.drop(piece)
                piece = cl
            full = L.new(E * width * a)
            L.drop(piece)
            if acc is None:
                acc = full
            else:
                s = L.new(E * width * a)
                L.drop(acc, full)
                acc = s
        assert acc is not None
        dx = ln_bwd(acc)
        total = L.new(E * c * 4)
        L.drop(dx, g)
        return total

    return z_new, bwd


def _transition(L: Ledger, d: Shapes, x: int, rows: int, c: int, xb: int, name: str) -> tuple[int, Backward]:
    """``x = x + Transition(x)``: LN → Linear(c, 2nc) → SwiGLU → Linear(nc, c); x ``[rows, c]``."""
    a, n = d.a, d.cfg.transition_n
    L.phase = name
    h, ln_bwd = _ln_linear(L, d, x, rows, c, 2 * n * c, xb=xb, swiglu=True)
    out = L.new(rows * c * a)  # linear (saves h)
    x_new = L.new(rows * c * max(xb, a))
    L.drop(out)

    def bwd(g: int) -> int:
        L.phase = f"{name} backward"
        g_out = L.new(rows * c * a) if a != xb else L.ref(g)
        dh = L.new(rows * n * c * a)
        L.drop(g_out, h)
        dx = ln_bwd(dh)
        total = L.new(rows * c * xb)
        L.drop(dx, g)
        return total

    return x_new, bwd


def _single_attention(L: Ledger, d: Shapes, s: int, z: int) -> tuple[int, Backward, Backward]:
    """``s = s + SingleAttentionWithPairBias(s, z)``. Returns (s, backward for s, backward that
    yields the grad for z given the grad of the bias)."""
    cfg, a, E, T = d.cfg, d.a, d.pair, d.tok
    cs, cp, h = cfg.c_token, cfg.c_pair, cfg.n_heads_single
    L.phase = "single attention with pair bias"
    p, proj_bwd = _ln_linear(L, d, s, T, cs, 4 * cs, xb=a)
    gate = L.new(T * cs * a)
    yb, pb_bwd = _ln_linear(L, d, z, E, cp, _pad8(h), xb=4)
    bias = L.new(E * h * a)
    L.drop(yb)
    o_r, attn_bwd = _attention(L, d, p, bias, s=1, h=h, dh=cs // h, rows=T)
    if not d.fused:  # the einsum output is [B,1,H,N,D]: permute + reshape copies
        o = o_r
        o_r = L.new(T * cs * a)
        L.drop(o)
    go = L.new(T * cs * a)
    out = L.new(T * cs * a)
    L.drop(p, bias)
    s_new = L.new(T * cs * a)
    L.drop(out)
    grads: dict[str, int] = {}

    def bwd_s(g: int) -> int:
        L.phase = "single attention with pair bias backward"
        d_go = L.new(T * cs * a)
        L.drop(go)
        d_gate, d_o = L.new(T * cs * a), L.new(T * cs * a)
        L.drop(d_go, o_r)
        dq, dk, dv, dbias = attn_bwd(d_o)
        grads["bias"] = dbias
        acc = None
        for piece in (d_gate, dv, dk, dq):
            full = L.new(T * 4 * cs * a)
            L.drop(piece)
            if acc is None:
                acc = full
            else:
                t = L.new(T * 4 * cs * a)
                L.drop(acc, full)
                acc = t
        L.drop(gate)
        assert acc is not None
        dx = proj_bwd(acc)
        total = L.new(T * cs * a)
        L.drop(dx, g)
        return total

    def bwd_z(g_z: int) -> int:
        full = L.new(E * _pad8(h) * a)  # slice_backward of the bias columns
        L.drop(grads.pop("bias"))
        dz = pb_bwd(full)
        total = L.new(E * cp * 4)
        L.drop(dz, g_z)
        return total

    return s_new, bwd_s, bwd_z


def _pairformer_block(
    L: Ledger, d: Shapes, s: int, z: int
) -> tuple[int, int, Callable[[int, int], tuple[int, int]]]:
    cfg, a, E, T = d.cfg, d.a, d.pair, d.tok
    cp, cs = cfg.c_pair, cfg.c_token
    z0 = z
    z, tri_s = _triangle_attention(L, d, z0, True)
    L.drop(z0)  # the caller's reference; the projection keeps it saved
    z1 = z
    z, tri_e = _triangle_attention(L, d, z, False)
    L.drop(z1)
    z2 = z
    z, trans_z = _transition(L, d, z, E, cp, 4, "pair transition")
    L.drop(z2)
    z3 = z
    s0 = s
    s, att_s, att_z = _single_attention(L, d, s, z)
    L.drop(s0)
    s1 = s
    s, trans_s = _transition(L, d, s, T, cs, a, "single transition")
    L.drop(s1)
    L.phase = "single to pair"
    ab = L.new(T * 2 * cp * a)  # Linear(s) (saves s)
    L.ref(s)
    tmp = L.new(E * cp * 4)
    z4 = L.new(E * cp * 4)
    L.drop(tmp, z3, ab)

    def bwd(gs: int, gz: int) -> tuple[int, int]:
        L.phase = "single to pair backward"
        red = L.new(T * 2 * cp * 4)  # the broadcast grads summed to [B, N, c] (fp32), then cast
        d_ab = L.new(T * 2 * cp * a)
        L.drop(red)
        ds = L.new(T * cs * a)
        L.drop(d_ab, s)
        gs2 = L.new(T * cs * a)
        L.drop(ds, gs)
        gs3 = trans_s(gs2)
        gs4 = att_s(gs3)
        gz3 = att_z(gz)
        gz2 = trans_z(gz3)
        gz1 = tri_e(gz2)
        gz0 = tri_s(gz1)
        return gs4, gz0

    return s, z4, bwd


def _embedding(L: Ledger, d: Shapes) -> tuple[int, int, Callable[[int, int], None]]:
    cfg, a, E, T, B, M, N = d.cfg, d.a, d.pair, d.tok, d.B, d.M, d.N
    cp, cs, k = cfg.c_pair, cfg.c_token, cfg.msa_classes
    nf = 3 * k + 3
    L.phase = "input embedding"
    mask_f = L.new(B * M * N * 4)
    L.temp(B * M * N * 8)  # msa.transpose().clamp() for scatter_add_
    counts = L.new(T * k * 4)
    L.temp(B * M * N * 4)  # has_deletion * msa_mask
    L.temp(B * M * N * 4)
    f = L.new(T * nf * 4)
    L.drop(mask_f, counts)
    saved_in = [L.new(T * nf * a) if a != 4 else L.ref(f) for _ in range(3)]  # linear inputs
    s = L.new(T * cs * a)
    zi, zj = L.new(T * cp * a), L.new(T * cp * a)
    zb = L.new(E * cp * a)
    L.drop(zi, zj, f)
    same_chain, same_ent = L.new(E), L.new(E)
    idx = []
    for _ in range(2):  # d_res, d_chain: (x - y + r).clamp() then where(): int64 chain
        t1 = L.new(E * 8)
        t2 = L.new(E * 8)
        L.drop(t1)
        t3 = L.new(E * 8)
        L.drop(t2)
        idx.append(L.new(E * 8))
        L.drop(t3)
    rr = L.new(E * cp * 4)  # fp32 embedding tables promote z to fp32
    t = L.new(E * cp * 4)
    L.drop(rr)
    rc = L.new(E * cp * 4)
    z = L.new(E * cp * 4)
    L.drop(t, rc, zb)
    feats = []
    for _ in range(2):  # same_entity, token_bonds: x.float() (saved) * parameter
        fl = L.new(E * 4)
        prod = L.new(E * cp * 4)
        z_new = L.new(E * cp * 4)
        L.drop(prod, z)
        z = z_new
        feats.append(fl)
    L.drop(same_chain, same_ent)

    def bwd(gs: int, gz: int) -> None:
        L.phase = "input embedding backward"
        for fl in feats:
            L.temp(E * cp * 4)  # grad * feature, summed into the parameter's grad
            L.drop(fl)
        for i in idx:  # embedding backward: index sort + counts
            L.temp(3 * E * 8)
            L.drop(i)
        g16 = L.new(E * cp * a) if a != 4 else None
        L.temp(T * cp * 4 * 2)
        L.drop(g16, gz)
        L.drop(*saved_in, gs)

    return s, z, bwd


def _distogram_loss(L: Ledger, d: Shapes, z: int) -> Callable[[], int]:
    cfg, a, E = d.cfg, d.a, d.pair
    bins, cp = cfg.distogram_bins, cfg.c_pair
    L.phase = "distogram head + loss"
    z_c = L.new(E * cp * a) if a != 4 else L.ref(z)  # linear input (saved)
    lg16 = L.new(E * bins * a)
    lg = L.new(E * bins * 4) if a != 4 else L.ref(lg16)
    L.drop(lg16)
    logits = L.new(E * bins * 4)  # logits + logits^T
    L.drop(lg, z)
    dist = L.new(E * 4)  # cdist
    target = L.new(E * 8)  # bucketize (saved by nll_loss)
    L.drop(dist)
    pair = L.new(E)
    L.temp(2 * E)  # eye, ~eye
    ls = L.new(E * bins * 4)  # log_softmax (saved output)
    L.drop(logits)
    ce = L.new(E * 4)
    w = L.new(E * 4)
    L.temp(E * 4)  # ce * w
    L.drop(pair)

    def bwd() -> int:
        L.phase = "distogram head + loss backward"
        d_ce = L.new(E * 4)
        L.drop(ce, w)
        d_ls = L.new(E * bins * 4)  # nll_loss backward
        L.drop(d_ce, target)
        d_l = L.new(E * bins * 4)  # log_softmax backward
        L.drop(d_ls, ls)
        d_lg = L.new(E * bins * 4)  # d + dᵀ accumulated out of place
        L.drop(d_l)
        if a != 4:
            d16 = L.new(E * bins * a)
            L.drop(d_lg)
            d_lg = d16
        d_zc = L.new(E * cp * a)
        L.drop(d_lg, z_c)
        if a != 4:
            g = L.new(E * cp * 4)
            L.drop(d_zc)
            return g
        return d_zc

    return bwd


# ------------------------------------------------------------------------------------- public
def parameter_count(cfg: ModelConfig) -> int:
    """Number of parameters of :class:`featurecache.model.trunk.Trunk` with ``cfg`` (exact)."""
    cs, cp, h, hd = cfg.c_token, cfg.c_pair, cfg.n_heads, cfg.n_heads * cfg.head_dim
    n, k, hs = cfg.transition_n, cfg.msa_classes, cfg.n_heads_single
    nf = 3 * k + 3

    def lnl(c: int, o: int) -> int:
        return 2 * c + o * c

    tri = lnl(cp, 4 * hd + _pad8(h)) + hd * cp
    trans = lambda c: lnl(c, 2 * n * c) + n * c * c  # noqa: E731
    single = lnl(cs, 4 * cs) + lnl(cp, _pad8(hs)) + cs * cs
    block = 2 * tri + trans(cp) + single + trans(cs) + cs * 2 * cp
    embed = (
        (nf * cs + cs)
        + 2 * nf * cp
        + (2 * cfg.relpos_max + 2) * cp
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

    @property
    def state_bytes(self) -> int:
        return self.parameter_bytes + self.gradient_bytes + self.optimizer_bytes + self.weight_copy_bytes


def estimate_step(
    cfg: ModelConfig,
    n_tokens: int,
    msa_rows: int = 1,
    batch_size: int = 1,
    *,
    fused: bool = True,
    precision: Precision | None = None,
    overhead_bytes: int = CUDA_WORKSPACE_BYTES,
) -> MemoryEstimate:
    """Predict ``max_memory_allocated`` of one step (forward + backward + AdamW) of the trunk.

    ``n_tokens``: padded token count N of the batch; ``msa_rows``: MSA rows M; the state term
    counts fp32 parameters, gradients and AdamW's two moments.
    """
    prec = precision or Precision.cuda_bf16()
    d = Shapes(cfg, int(batch_size), max(1, int(n_tokens)), max(1, int(msa_rows)), fused, prec)
    L = Ledger()
    pair_mask = L.new(d.pair)  # token_mask[:, :, None] & token_mask[:, None, :]
    s, z, embed_bwd = _embedding(L, d)
    block_bwds = []
    for _ in range(cfg.n_blocks):
        s, z, bwd = _pairformer_block(L, d, s, z)
        block_bwds.append(bwd)
    L.drop(s)  # the last single representation feeds nothing after the trunk
    head_bwd = _distogram_loss(L, d, z)
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
