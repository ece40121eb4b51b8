"""Byte-level replays of the trunk's modules (:mod:`featurecache.model.trunk`), forward and backward.

Each function mirrors one module of the model for one kernel mode: it records on the
:class:`~featurecache.plan.ledger.Ledger` every tensor the module's forward creates, keeps the ones
autograd saves, drops the rest where Python does, and returns a closure that replays the backward
(the gradients each op allocates, the saved tensors it releases). Units: bytes; ``E = B·N²`` pair
elements, ``T = B·N`` tokens, ``a`` bytes per compute-dtype element.
"""

from __future__ import annotations

import math
from collections.abc import Callable

from featurecache.model.config import pad16
from featurecache.model.kernels.grid import chunk_rows, dbias_groups
from featurecache.plan.ledger import GPU_SMS, Backward, Ledger, Shapes


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
            tl = d.tiles
            ln_parts = L.new(2 * math.ceil(rows / tl.ln_dx_block_m) * c * 4)
            if tl.ln_dw_library:  # dU [rows, o] (dy itself without SwiGLU) and LN(x) [rows, c] for cuBLAS
                L.temp(rows * ((o if swiglu else 0) + c) * a)
            else:
                row_blocks = math.ceil(rows / tl.ln_dw_block_m)
                per_split = math.ceil(tl.ln_dw_target_programs / math.ceil(oh / tl.ln_dw_block_n))
                splits = max(1, min(row_blocks, per_split))
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
def _fused_dbias(L: Ledger, d: Shapes, *, s: int, h: int) -> int:
    """The bias gradient of the fused attention backward (``launch_dbias``): S split into groups of
    fp32 partials summed in order when one group would not fill the GPU."""
    B, N, tl = d.B, d.N, d.tiles
    bias_b = B * h * N * N * d.a
    tiles = math.ceil(N / tl.attn_dbias_block_m) * math.ceil(N / tl.attn_dbias_block_n)
    target = max(tl.attn_dbias_target_programs, 2 * GPU_SMS)
    groups, _ = dbias_groups(s, tiles * B * h, target)
    if groups == 1:
        return L.new(bias_b)
    part = L.new(groups * B * h * N * N * 4)
    total = L.new(B * h * N * N * 4)
    L.drop(part)
    dbias = L.new(bias_b)
    L.drop(total)
    return dbias


def _fused_dkv_bias_copy(L: Ledger, d: Shapes, h: int) -> None:
    if d.tiles.attn_dkv_bias_copy:  # the dk/dv kernel's transposed bias, freed when it returns
        L.temp(d.B * h * d.N * d.N * d.a)


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
            # launch order (pair_bias_attention._run_backward): dq (+δ), the bias gradient, dk/dv
            delta = L.new(B * s * h * N * 4)
            dq = L.new(qkv)
            dbias = _fused_dbias(L, d, s=s, h=h)
            dk, dv = L.new(qkv), L.new(qkv)
            _fused_dkv_bias_copy(L, d, h)
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
    width = 4 * hd + pad16(h)
    L.phase = f"triangle attention ({'start' if starting else 'end'})"
    # fused: the ending node projects z itself and the attention reads the projection's transpose
    proj, ln_bwd = _ln_linear(L, d, z, E, c, width, xb=4, contiguous=starting or d.fused)
    if d.fused:
        return _triangle_core_fused(L, d, proj, ln_bwd, starting)
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
        # the projection's split: its backward is one cat of the five pieces (the bias piece first
        # widened to its padded columns by the slice's backward)
        pieces = [L.new(E * (width - 4 * hd) * a)]  # slice_backward of the bias heads
        L.drop(dbias)
        d_pre = L.new(E * hd * a)  # sigmoid_backward
        L.drop(d_gate, gate)
        pieces.append(d_pre)
        for i, piece in enumerate((dv, dk, dq)):
            if not d.fused and i >= 1:  # q, k grads from bmm need a reshape copy
                cl = L.new(E * hd * a)
                L.drop(piece)
                piece = cl
            pieces.append(piece)
        acc = L.new(E * width * a)
        L.drop(*pieces)
        dx = ln_bwd(acc)
        total = L.new(E * c * 4)
        L.drop(dx, g)
        return total

    return z_new, bwd


def _triangle_core_fused(
    L: Ledger, d: Shapes, proj: int, ln_bwd: Backward, starting: bool
) -> tuple[int, Backward]:
    """The fused path of :func:`_triangle_attention` after the projection: ``triangle_attention_core``
    (kernels/triangle.py) saves the projection, its gated output (which the output linear saves
    too) and lse; its backward writes the projection's gradient as one tensor."""
    cfg, a, E = d.cfg, d.a, d.pair
    c, h, hd = cfg.c_pair, cfg.n_heads, cfg.n_heads * cfg.head_dim
    width = 4 * hd + pad16(h)
    bias, masked = L.new(E * h * a), L.new(E * h * a)  # split()'s contiguous bias heads, masked_bias
    go = L.ref(L.new(E * hd * a))  # saved by the op and by the output linear
    lse = L.new(E * h * 4)
    L.drop(bias, masked)
    out = L.new(E * c * a)
    z_new = L.new(E * c * 4)
    L.drop(out)

    def bwd(g: int) -> int:
        L.phase = f"triangle attention ({'start' if starting else 'end'}) backward"
        g_out = L.new(E * c * a) if a != 4 else L.ref(g)
        d_go = L.new(E * hd * a)
        L.drop(g_out, go)
        # core_backward: bias heads and dp, then the launchers (masked bias, δ, the attention's own
        # output gradient from the dq kernel, the bias gradient, dk/dv into dp's columns)
        bias, dp, masked = L.new(E * h * a), L.new(E * width * a), L.new(E * h * a)
        delta, d_o = L.new(E * h * 4), L.new(E * hd * a)
        dbias = _fused_dbias(L, d, s=d.N, h=h)
        _fused_dkv_bias_copy(L, d, h)
        L.drop(bias, masked, delta, d_o, dbias, d_go, go, lse, proj)
        dx = ln_bwd(dp)
        total = L.new(E * c * 4)
        L.drop(dx, g)
        return total

    return z_new, bwd


def _transition(L: Ledger, d: Shapes, x: int, rows: int, c: int, xb: int, name: str) -> tuple[int, Backward]:
    """``x = x + Transition(x)``: LN → Linear(c, 2nc) → SwiGLU → Linear(nc, c); x ``[rows, c]``."""
    a, n = d.a, d.cfg.transition_n
    L.phase = name
    tl = d.tiles
    if d.fused and c <= tl.tr_max_channels:  # kernels/transition.py: two kernels, saves x only
        y = L.new(rows * c * a)
        L.ref(x)
        x_new = L.new(rows * c * max(xb, a))
        L.drop(y)

        def bwd_two_kernels(g: int) -> int:
            L.phase = f"{name} backward"
            g_out = L.new(rows * c * a) if a != xb else L.ref(g)  # dy in the weights' dtype
            dx = L.new(rows * c * xb)
            parts = L.new(2 * math.ceil(rows / tl.tr_bwd_block_m) * c * 4)  # dγ, dβ partials
            step = chunk_rows(rows, c, n * c, a, tl.tr_bwd_block_m, tl.tr_bwd_chunk_bytes)
            one = step >= rows
            dws = L.new((2 * n * c * c + c * n * c) * (a if one else 4))  # dW1, dW2 (fp32 sums over chunks)
            h = L.new(step * n * c * a)  # one chunk's h, dU, LN(x) (reused by every chunk)
            du = L.new(step * 2 * n * c * a)
            xln = L.new(step * c * a)
            if not one:
                L.temp(2 * n * c * c * 4)  # one chunk's fp32 dW1 product
            L.drop(h, du, xln)
            L.drop(g_out, parts, x)
            L.drop(dws)  # cast to the weights' dtype: parameter gradients, counted in the state
            total = L.new(rows * c * xb)
            L.drop(dx, g)
            return total

        return x_new, bwd_two_kernels
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
    yb, pb_bwd = _ln_linear(L, d, z, E, cp, pad16(h), xb=4)
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
        acc = L.new(T * 4 * cs * a)  # the split's backward: one cat
        L.drop(d_gate, dv, dk, dq)
        L.drop(gate)
        dx = proj_bwd(acc)
        total = L.new(T * cs * a)
        L.drop(dx, g)
        return total

    def bwd_z(g_z: int) -> int:
        full = L.new(E * pad16(h) * a)  # slice_backward of the bias columns
        L.drop(grads.pop("bias"))
        dz = pb_bwd(full)
        total = L.new(E * cp * 4)
        L.drop(dz, g_z)
        return total

    return s_new, bwd_s, bwd_z


def pairformer_block(
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


def embedding(L: Ledger, d: Shapes) -> tuple[int, int, Callable[[int, int], None]]:
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
    same_res = None
    for i in range(3):  # d_res, d_tok, d_chain: (x - y + r).clamp() then where(): int64 chain
        if i == 1:  # same residue (==) & same chain: one bool tensor kept to the end
            eq = L.new(E)
            same_res = L.new(E)
            L.drop(eq)
        t1 = L.new(E * 8)
        t2 = L.new(E * 8)
        L.drop(t1)
        t3 = L.new(E * 8)
        L.drop(t2)
        idx.append(L.new(E * 8))
        L.drop(t3)
    t = zb
    for _ in range(3):  # z + rel_res[d_res] + rel_token[d_tok] + rel_chain[d_chain], left to right
        rel = L.new(E * cp * 4)  # fp32 embedding tables promote z to fp32
        t_new = L.new(E * cp * 4)
        if t != zb:
            L.drop(t)
        L.drop(rel)
        t = t_new
    z = t
    L.drop(zb)
    feats = []
    for _ in range(2):  # same_entity, token_bonds: x.float() (saved) * parameter
        fl = L.new(E * 4)
        prod = L.new(E * cp * 4)
        z_new = L.new(E * cp * 4)
        L.drop(prod, z)
        z = z_new
        feats.append(fl)
    L.drop(same_chain, same_ent, same_res)

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


def distogram_loss(L: Ledger, d: Shapes, z: int) -> Callable[[], int]:
    cfg, a, E = d.cfg, d.a, d.pair
    bins, cp = cfg.distogram_bins, cfg.c_pair
    L.phase = "distogram head + loss"
    z_c = L.new(E * cp * a) if a != 4 else L.ref(z)  # linear input (saved)
    lg16 = L.new(E * bins * a)
    lg = L.new(E * bins * 4) if a != 4 else L.ref(lg16)
    L.drop(lg16)
    logits = L.new(E * bins * 4)  # logits + logits^T
    L.drop(lg, z)
    dist = L.new(E * 8)  # cdist, float64 (model.trunk.distogram_target)
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
