"""Session 23 experiment: the bias gradient folded into another backward pass, deterministically,
through fp32 atomic adds into partials that only one program ever touches.

Session 21 (``fixed_atomics.py``) measured the fold of the bias gradient into the dq pass with fp32
atomics into one shared [B·H, N, N] buffer: the backward went 3.99 → 3.54 ms at N = 768, but the
order in which programs of different S rows add into an element is not fixed, so the result is not
deterministic. Its integer grid was deterministic and cost +2.5 ms (scalar 64-bit reds).

Here each program owns a slice of S (a group of S rows, looped over inside the program) and adds its
rows' dS into its group's own fp32 partial [G, B·H, N, N]; no other program writes there. Two adds to
one address by one thread are applied in program order (PTX memory model, "sequential consistency
per location": morally strong operations on one location cannot be ordered against program order),
so every element of a partial is ((0 + x₀) + x₁) + … in the loop's order: bitwise deterministic.
The adds are fire-and-forget reds (no load, no layout conversion: what made sessions 12 and 19's
read-modify-written partials slow), and the partials are reduced by one ordered ``sum``.

Variants (B = 1, H = 4, D = 32, bf16; against the shipped dq + dbias + dk/dv):

* ``dq+dbo``: dq kernel over (query block, S group, b·h), S pairs looped inside; shipped dk/dv after.
* ``dkv+dbo``: the same in the dk/dv kernel (transposed partial); shipped dq before.
* ``dq+db/f32``: session 21's shared-buffer fold (nondeterministic) as the reference of what a fold
  can give.

    TRITON_INTERPRET=1 python benchmarks/dev/owned_reds.py check   # CPU: vs the shipped kernels
    python benchmarks/dev/owned_reds.py sass                        # CPU: sm_90 SASS of the variants
    python benchmarks/dev/owned_reds.py ab OUT.json                 # H200: correctness + timings
    ncu --profile-from-start off --metrics ... python benchmarks/dev/owned_reds.py profile  # H200: L2
"""

from __future__ import annotations

import json
import math
import os
import sys
import time
from pathlib import Path

import torch
import triton
import triton.language as tl

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import fixed_atomics as fa  # benchmarks/dev/fixed_atomics.py (session 21)

from benchmarks.dev.devcli import help_exit
from featurecache.model.kernels import pair_bias_attention as pba
from featurecache.model.kernels.grid import interpreting


def owned_groups(s: int, programs_per_group: int, target_programs: int, sp: int) -> tuple[int, int]:
    """(groups, S rows per group): as few groups as give ``target_programs`` programs, each group a
    multiple of ``sp`` rows."""
    groups = max(1, min(math.ceil(s / sp), math.ceil(target_programs / programs_per_group)))
    per_group = math.ceil(math.ceil(s / groups) / sp) * sp
    return math.ceil(s / per_group), per_group


@triton.jit
def _opaque_zero(x):
    """0, computed from x so that the compiler cannot see it (inline asm)."""
    y = tl.inline_asm_elementwise(
        "mov.b32 $0, $1;", "=r,r", [x.to(tl.int32)], dtype=tl.int32, is_pure=True, pack=1
    )
    return y - x.to(tl.int32)


@triton.jit
def _dq_dbo_kernel(
    Q, K, V, BIAS, MASK, OUT, DO, LSE, DELTA, DQ,
    DBP,  # [G, B·H, N, N] fp32, zeroed: group g's partial, written only by group g's programs
    sq_b, sq_s, sq_h, sq_n, sk_b, sk_s, sk_h, sk_n, sv_b, sv_s, sv_h, sv_n,
    so_b, so_s, so_h, so_n, sdo_b, sdo_s, sdo_h, sdo_n, sdq_b, sdq_s, sdq_h, sdq_n,
    sb_b, sb_h, sb_i, sb_j, sm_b, sm_s, sm_n,
    S, H, N, S_PER_GROUP, scale,
    HAS_MASK: tl.constexpr, EVEN_N: tl.constexpr, D: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, SP: tl.constexpr, PREC: tl.constexpr,
    LAUNDER: tl.constexpr,
):  # fmt: skip
    HAS_KEY_ADD: tl.constexpr = HAS_MASK or not EVEN_N
    pid_m = tl.program_id(0)
    g = tl.program_id(1).to(tl.int64)
    pid_bh = tl.program_id(2).to(tl.int64)
    b = pid_bh // H
    h = pid_bh % H
    rows = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = tl.arange(0, BLOCK_N)
    offs_d = tl.arange(0, D)
    row_ok = rows < N
    lse_row = (b * S * H + h) * N
    bias_rows = BIAS + b * sb_b + h * sb_h + rows[:, None] * sb_i
    db_rows = DBP + (g * tl.num_programs(2) + pid_bh) * N * N + rows[:, None] * N
    dq_ptrs = rows[:, None] * sdq_n + offs_d[None, :]
    s_start = g * S_PER_GROUP
    s_end = tl.minimum(s_start + S_PER_GROUP, S)
    for s0 in tl.range(s_start, s_end, SP, num_stages=1):
        s1 = tl.minimum(s0 + 1, S - 1)
        if LAUNDER:  # loop-variant zero: keeps LLVM from hoisting the tile offsets out of the S loop
            rows = pid_m * BLOCK_M + tl.arange(0, BLOCK_M) + _opaque_zero(s0)
        k_off0, v_off0, mo0 = pba._kv_mask_offsets(b, s0, h, sk_b, sk_s, sk_h, sv_b, sv_s, sv_h, sm_b, sm_s)
        q0, do0, lse0, delta0 = pba._dq_prologue(
            Q, OUT, DO, LSE, DELTA, b * sq_b + s0 * sq_s + h * sq_h, b * so_b + s0 * so_s + h * so_h,
            b * sdo_b + s0 * sdo_s + h * sdo_h, sq_n, so_n, sdo_n, lse_row + s0 * H * N, rows, offs_d, N,
            Q, Q, Q, 0, 0, 0, 0, 0, 0, True, False,
        )  # fmt: skip
        dq0 = tl.zeros([BLOCK_M, D], tl.float32)
        ka0_nxt = pba._key_add(MASK, mo0, sm_n, offs_n, N, HAS_MASK)
        if SP == 2:
            k_off1, v_off1, mo1 = pba._kv_mask_offsets(
                b, s1, h, sk_b, sk_s, sk_h, sv_b, sv_s, sv_h, sm_b, sm_s
            )
            q1, do1, lse1, delta1 = pba._dq_prologue(
                Q, OUT, DO, LSE, DELTA, b * sq_b + s1 * sq_s + h * sq_h, b * so_b + s1 * so_s + h * so_h,
                b * sdo_b + s1 * sdo_s + h * sdo_h, sq_n, so_n, sdo_n, lse_row + s1 * H * N, rows, offs_d, N,
                Q, Q, Q, 0, 0, 0, 0, 0, 0, s0 + 1 < S, False,
            )  # fmt: skip
            dq1 = tl.zeros([BLOCK_M, D], tl.float32)
            ka1_nxt = pba._key_add(MASK, mo1, sm_n, offs_n, N, HAS_MASK)
            w1 = (s0 + 1 < S).to(tl.float32)
        for start_n in range(0, N, BLOCK_N):
            cols = start_n + offs_n
            bias = pba._bias_tile(bias_rows, sb_j, row_ok, cols, N, EVEN_N)
            ka0 = ka0_nxt
            ka0_nxt = pba._key_add(MASK, mo0, sm_n, cols + BLOCK_N, N, HAS_MASK)
            dq0, ds = fa._dq_step_ds(dq0, q0, do0, lse0, delta0, K, V, k_off0, v_off0, sk_n, sv_n, cols, offs_d,
                                     N, bias, ka0, scale, HAS_KEY_ADD, EVEN_N, PREC)  # fmt: skip
            if SP == 2:
                ka1 = ka1_nxt
                ka1_nxt = pba._key_add(MASK, mo1, sm_n, cols + BLOCK_N, N, HAS_MASK)
                dq1, ds1 = fa._dq_step_ds(dq1, q1, do1, lse1, delta1, K, V, k_off1, v_off1, sk_n, sv_n, cols,
                                          offs_d, N, bias, ka1, scale, HAS_KEY_ADD, EVEN_N, PREC)  # fmt: skip
                ds += ds1 * w1
            fa._red(db_rows + cols[None, :], ds, 1.0, row_ok[:, None] & (cols < N)[None, :], EVEN_N, False,
                    tl.int64)  # fmt: skip
        dq_ptrs = rows[:, None] * sdq_n + offs_d[None, :]
        tl.store(DQ + b * sdq_b + s0 * sdq_s + h * sdq_h + dq_ptrs, (dq0 * scale).to(DQ.dtype.element_ty),
                 mask=row_ok[:, None])  # fmt: skip
        if SP == 2:
            tl.store(DQ + b * sdq_b + s1 * sdq_s + h * sdq_h + dq_ptrs, (dq1 * scale).to(DQ.dtype.element_ty),
                     mask=row_ok[:, None] & (s0 + 1 < S))  # fmt: skip


@triton.jit
def _dkv_dbo_kernel(
    Q, K, V, BIAS, MASK, DO, LSE, DELTA, DK, DV,
    DBP,  # [G, B·H, N(key), N(query)] fp32, zeroed: group g's transposed partial
    sq_b, sq_s, sq_h, sq_n, sk_b, sk_s, sk_h, sk_n, sv_b, sv_s, sv_h, sv_n,
    sdo_b, sdo_s, sdo_h, sdo_n, sdk_b, sdk_s, sdk_h, sdk_n, sdv_b, sdv_s, sdv_h, sdv_n,
    sb_b, sb_h, sb_i, sb_j, sm_b, sm_s, sm_n,
    S, H, N, S_PER_GROUP, scale,
    HAS_MASK: tl.constexpr, EVEN_N: tl.constexpr, D: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, SP: tl.constexpr, PREC: tl.constexpr,
):  # fmt: skip
    HAS_KEY_ADD: tl.constexpr = HAS_MASK or not EVEN_N
    pid_n = tl.program_id(0)
    g = tl.program_id(1).to(tl.int64)
    pid_bh = tl.program_id(2).to(tl.int64)
    b = pid_bh // H
    h = pid_bh % H
    cols = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    offs_m = tl.arange(0, BLOCK_M)
    offs_d = tl.arange(0, D)
    col_ok = cols < N
    lse_row = (b * S * H + h) * N
    bias_cols = BIAS + b * sb_b + h * sb_h + cols[:, None] * sb_j
    dbt_cols = DBP + (g * tl.num_programs(2) + pid_bh) * N * N + cols[:, None] * N
    st_ok = col_ok[:, None]
    dk_ptrs = cols[:, None] * sdk_n + offs_d[None, :]
    dv_ptrs = cols[:, None] * sdv_n + offs_d[None, :]
    s_start = g * S_PER_GROUP
    s_end = tl.minimum(s_start + S_PER_GROUP, S)
    for s0 in range(s_start, s_end, SP):
        s1 = tl.minimum(s0 + 1, S - 1)
        lo0, lo1 = lse_row + s0 * H * N, lse_row + s1 * H * N
        q_off0, do_off0 = b * sq_b + s0 * sq_s + h * sq_h, b * sdo_b + s0 * sdo_s + h * sdo_h
        q_off1, do_off1 = b * sq_b + s1 * sq_s + h * sq_h, b * sdo_b + s1 * sdo_s + h * sdo_h
        k_off0, v_off0, mo0 = pba._kv_mask_offsets(b, s0, h, sk_b, sk_s, sk_h, sv_b, sv_s, sv_h, sm_b, sm_s)
        k0, v0 = pba._dkv_load(K, V, k_off0, v_off0, sk_n, sv_n, cols, offs_d, N)
        key_add0 = pba._key_add(MASK, mo0, sm_n, cols, N, HAS_MASK)
        dk0 = tl.zeros([BLOCK_N, D], tl.float32)
        dv0 = tl.zeros([BLOCK_N, D], tl.float32)
        if SP == 2:
            k_off1, v_off1, mo1 = pba._kv_mask_offsets(
                b, s1, h, sk_b, sk_s, sk_h, sv_b, sv_s, sv_h, sm_b, sm_s
            )
            k1, v1 = pba._dkv_load(K, V, k_off1, v_off1, sk_n, sv_n, cols, offs_d, N)
            key_add1 = pba._key_add(MASK, mo1, sm_n, cols, N, HAS_MASK)
            dk1 = tl.zeros([BLOCK_N, D], tl.float32)
            dv1 = tl.zeros([BLOCK_N, D], tl.float32)
            w1 = (s0 + 1 < S).to(tl.float32)
        for start_m in range(0, N, BLOCK_M):
            rows = start_m + offs_m
            bias_ft = pba._bias_tile(bias_cols, sb_i, col_ok, rows, N, EVEN_N).to(tl.float32)
            dk0, dv0, dst = fa._dkv_step_ds(dk0, dv0, k0, v0, key_add0, Q, DO, q_off0, do_off0, sq_n, sdo_n, LSE,
                                            DELTA, lo0, rows, offs_d, N, bias_ft, scale, HAS_KEY_ADD, EVEN_N,
                                            PREC)  # fmt: skip
            if SP == 2:
                dk1, dv1, dst1 = fa._dkv_step_ds(dk1, dv1, k1, v1, key_add1, Q, DO, q_off1, do_off1, sq_n, sdo_n,
                                                 LSE, DELTA, lo1, rows, offs_d, N, bias_ft, scale, HAS_KEY_ADD,
                                                 EVEN_N, PREC)  # fmt: skip
                dst += dst1 * w1
            fa._red(dbt_cols + rows[None, :], dst, 1.0, col_ok[:, None] & (rows < N)[None, :], EVEN_N, False,
                    tl.int64)  # fmt: skip
        tl.store(DK + b * sdk_b + s0 * sdk_s + h * sdk_h + dk_ptrs, (dk0 * scale).to(DK.dtype.element_ty),
                 mask=st_ok)  # fmt: skip
        tl.store(DV + b * sdv_b + s0 * sdv_s + h * sdv_h + dv_ptrs, dv0.to(DV.dtype.element_ty), mask=st_ok)
        if SP == 2:
            ok1 = st_ok & (s0 + 1 < S)
            tl.store(DK + b * sdk_b + s1 * sdk_s + h * sdk_h + dk_ptrs, (dk1 * scale).to(DK.dtype.element_ty),
                     mask=ok1)  # fmt: skip
            tl.store(DV + b * sdv_b + s1 * sdv_s + h * sdv_h + dv_ptrs, dv1.to(DV.dtype.element_ty), mask=ok1)


_CACHE: dict[tuple, object] = {}


def _go(kernel, grid, tensors, ints, scale, constexprs, num_warps, num_stages, maxnreg=None):  # type: ignore[no-untyped-def]
    """pba._launch with a register cap (``maxnreg``): the same launch cache (a compiled kernel's
    ``run`` after the first call), so host time matches the shipped kernels'."""
    if maxnreg is None or interpreting():
        pba._launch(kernel, grid, tensors, ints, scale, constexprs, num_warps, num_stages)
        return
    dev = torch.cuda.current_device()
    key = (kernel, dev, constexprs, num_warps, num_stages, maxnreg, ints,
           *[(t.dtype, t.data_ptr() & 15 == 0) for t in tensors])  # fmt: skip
    ck = _CACHE.get(key)
    if ck is not None:
        ck.run(grid[0], grid[1], grid[2], triton.runtime.driver.active.get_current_stream(dev),  # type: ignore[attr-defined]
               ck.function, ck.packed_metadata, None, None, None, *tensors, *ints, scale, *constexprs)  # type: ignore[attr-defined]  # fmt: skip
        return
    names = kernel.arg_names[len(tensors) + len(ints) + 1 :]
    _CACHE[key] = kernel[grid](*tensors, *ints, scale, **dict(zip(names, constexprs, strict=True)),
                               num_warps=num_warps, num_stages=num_stages, maxnreg=maxnreg)  # fmt: skip


def backward_dq_dbo(do, q, k, v, bias, mask, out, lse, scale, cfg, target=1056, launder=True, maxnreg=None):  # type: ignore[no-untyped-def]
    a = pba.prepare_backward(do, q, k, v, bias, mask, out, lse, scale)
    b, s, h, n, d = q.shape
    config = pba.default_config(d, q.dtype, q.device)
    groups, per_group = owned_groups(s, triton.cdiv(n, cfg.block_m) * b * h, target, cfg.sp)
    dbp = torch.zeros((groups, b * h, n, n), device=q.device, dtype=torch.float32)
    _go(
        _dq_dbo_kernel, (triton.cdiv(n, cfg.block_m), groups, b * h),
        (a.q, a.k, a.v, a.bias, a.mask, a.out, a.do, a.lse, a.delta, a.dq, dbp),
        (*a.q.stride()[:4], *a.k.stride()[:4], *a.v.stride()[:4], *a.out.stride()[:4], *a.do.stride()[:4],
         *a.dq.stride()[:4], *a.bias.stride(), *a.mask_strides, s, h, n, per_group),
        a.scale,
        (a.has_mask, pba._even(n, cfg.block_m, cfg.block_n), d, cfg.block_m, cfg.block_n, cfg.sp,
         pba._prec(q.dtype), launder and not interpreting()),
        cfg.num_warps, cfg.num_stages, maxnreg,
    )  # fmt: skip
    db = (dbp[0] if groups == 1 else dbp.sum(dim=0)).view(b, h, n, n).to(a.bias.dtype)
    del dbp
    pba.launch_dkv(a, config.dkv, config.dkv_bias_copy)
    return a.dq, a.dk, a.dv, db


def backward_dkv_dbo(do, q, k, v, bias, mask, out, lse, scale, cfg, target=1056, maxnreg=None):  # type: ignore[no-untyped-def]
    a = pba.prepare_backward(do, q, k, v, bias, mask, out, lse, scale)
    b, s, h, n, d = q.shape
    config = pba.default_config(d, q.dtype, q.device)
    pba.launch_dq(a, config.dq)
    a.dk, a.dv = pba._empty_like_layout(a.k), pba._empty_like_layout(a.v)
    bias_t = a.bias
    if bias_t.stride(-2) != 1:
        bias_t = bias_t.transpose(-1, -2).contiguous().transpose(-1, -2)
    groups, per_group = owned_groups(s, triton.cdiv(n, cfg.block_n) * b * h, target, cfg.sp)
    dbp = torch.zeros((groups, b * h, n, n), device=q.device, dtype=torch.float32)
    _go(
        _dkv_dbo_kernel, (triton.cdiv(n, cfg.block_n), groups, b * h),
        (a.q, a.k, a.v, bias_t, a.mask, a.do, a.lse, a.delta, a.dk, a.dv, dbp),
        (*a.q.stride()[:4], *a.k.stride()[:4], *a.v.stride()[:4], *a.do.stride()[:4], *a.dk.stride()[:4],
         *a.dv.stride()[:4], *bias_t.stride(), *a.mask_strides, s, h, n, per_group),
        a.scale,
        (a.has_mask, pba._even(n, cfg.block_m, cfg.block_n), d, cfg.block_m, cfg.block_n, cfg.sp,
         pba._prec(q.dtype)),
        cfg.num_warps, cfg.num_stages, maxnreg,
    )  # fmt: skip
    dbt = dbp[0] if groups == 1 else dbp.sum(dim=0)
    db = dbt.transpose(-1, -2).reshape(b, h, n, n).to(a.bias.dtype)
    return a.dq, a.dk, a.dv, db


VARIANTS = {
    "dq+dbo": backward_dq_dbo,
    "dkv+dbo": backward_dkv_dbo,
}


def check() -> None:
    """Interpreter: both variants' four gradients against the shipped kernels' (fp32, fp16; odd S,
    masks, SP 1 and 2, several group counts), and bitwise repeatable."""
    assert os.environ.get("TRITON_INTERPRET") == "1", "run with TRITON_INTERPRET=1"
    scale = 32**-0.5
    for dtype in (torch.float32, torch.float16):
        for (b, s, h, n, d), masked in [((1, 3, 2, 37, 16), False), ((2, 5, 2, 33, 16), True),
                                        ((1, 7, 1, 64, 32), True)]:  # fmt: skip
            q, k, v, bias, mask, do = fa._inputs(b, s, h, n, d, dtype, "cpu", masked=masked)
            out, lse = pba.pair_bias_attention_forward(q, k, v, bias, mask, scale)
            ref = pba.pair_bias_attention_backward(do, q, k, v, bias, mask, out, lse, scale)
            for sp in (1, 2):
                cfg = pba.KernelConfig(16, 16, 1, 1, sp)
                for target in (1, 8, 10_000):  # one group, some, one S step per group
                    for name, fn in VARIANTS.items():
                        got = fn(do, q, k, v, bias, mask, out, lse, scale, cfg=cfg, target=target)
                        tol = 1e-5 if dtype == torch.float32 else 2e-3
                        for g_name, x, y in zip(("dq", "dk", "dv", "dbias"), got, ref, strict=True):
                            err = fa._rel(x, y)
                            assert err < tol, (name, dtype, (b, s, h, n, d), masked, sp, target, g_name, err)
                        again = fn(do, q, k, v, bias, mask, out, lse, scale, cfg=cfg, target=target)
                        assert all(torch.equal(x, y) for x, y in zip(got, again, strict=True)), name
            print("ok", dtype, (b, s, h, n, d), "masked" if masked else "", flush=True)


def ab(out_path: str) -> None:
    """H200: same-run timings of the shipped backward against each variant, tile and group target;
    errors vs the shipped gradients and (N = 384) vs fp32; bitwise repeatability over 3 calls; extra
    peak memory."""
    dev = torch.device("cuda")
    scale = 32**-0.5
    results: dict[str, object] = {"started": time.strftime("%Y-%m-%dT%H:%M:%S"), "rows": []}
    rows: list[dict[str, object]] = results["rows"]  # type: ignore[assignment]
    shipped = pba.default_config(32, torch.bfloat16, dev)
    results["shipped_config"] = str(shipped)
    kc = pba.KernelConfig
    plan = {  # (tiles, group target, register cap)
        "dq+dbo": [(shipped.dq, t, r) for t in (528, 1056, 2112) for r in (None, 168, 128)]
        + [
            (kc(64, 64, 4, 3, 2), 1056, None),
            (kc(128, 32, 8, 3, 2), 1056, None),
            (kc(64, 32, 4, 3, 1), 1056, 128),
        ],
        "dkv+dbo": [(shipped.dkv, t, r) for t in (528, 1056) for r in (None, 168)]
        + [(kc(64, 64, 4, 3, 2), 1056, None)],
    }

    def record(row: dict[str, object]) -> None:
        rows.append(row)
        print(row, flush=True)
        Path(out_path).write_text(json.dumps(results, indent=1))

    for n in (384, 768, 1024):
        q, k, v, bias, _, do = fa._inputs(1, n, 4, n, 32, torch.bfloat16, dev)
        out, lse = pba.pair_bias_attention_forward(q, k, v, bias, None, scale)
        args = (do, q, k, v, bias, None, out, lse, scale)
        ref = pba.pair_bias_attention_backward(*args)
        ref32 = None
        if n == 384:
            qf, kf, vf, bf = (t.float().requires_grad_() for t in (q, k, v, bias))
            o = torch.softmax(torch.einsum("bshid,bshjd->bshij", qf, kf) * scale + bf[:, None], -1)
            torch.einsum("bshij,bshjd->bshid", o, vf).backward(do.float())
            ref32 = (qf.grad, kf.grad, vf.grad, bf.grad)
            del o

        def shipped_bwd(args=args) -> None:  # type: ignore[no-untyped-def]
            pba.pair_bias_attention_backward(*args)

        row: dict[str, object] = {"n": n, "variant": "shipped", "backward_ms": fa._time(shipped_bwd)}
        torch.cuda.reset_peak_memory_stats()
        base = torch.cuda.memory_allocated()
        shipped_bwd()
        row["peak_extra_MiB"] = (torch.cuda.max_memory_allocated() - base) / 2**20
        record(row)
        candidates = [(name, cfg, t, r) for name, pl in plan.items() for cfg, t, r in pl]
        candidates.append(("dq+db/f32", shipped.dq, 0, None))
        for name, cfg, target, maxnreg in candidates:
            row = {"n": n, "variant": name, "cfg": str(cfg), "target": target, "maxnreg": maxnreg}
            if name == "dq+db/f32":
                fn = lambda *x, cfg=cfg: fa.VARIANTS["dq+db/f32"](*x, cfg=cfg)  # noqa: E731
            else:
                fn = lambda *x, cfg=cfg, name=name, target=target, maxnreg=maxnreg: VARIANTS[name](  # noqa: E731
                    *x, cfg=cfg, target=target, maxnreg=maxnreg
                )
            try:
                got = fn(*args)
                again = [fn(*args) for _ in range(2)]
            except Exception as exc:  # a tile that does not compile or launch: record it
                row["error"] = repr(exc)[:400]
                record(row)
                continue
            for g_name, x, y in zip(("dq", "dk", "dv", "dbias"), got, ref, strict=True):
                row[f"{g_name}_rel_vs_shipped"] = fa._rel(x, y)
            row["bitwise_repeatable"] = all(
                torch.equal(x, y) for rep in again for x, y in zip(got, rep, strict=True)
            )
            if ref32 is not None:
                for g_name, x, y, z in zip(("dq", "dk", "dv", "dbias"), got, ref, ref32, strict=True):
                    row[f"{g_name}_err"] = fa._rel(x, z)
                    row[f"{g_name}_err_shipped"] = fa._rel(y, z)
            row["backward_ms"] = fa._time(lambda fn=fn, args=args: fn(*args))
            torch.cuda.reset_peak_memory_stats()
            base = torch.cuda.memory_allocated()
            fn(*args)
            row["peak_extra_MiB"] = (torch.cuda.max_memory_allocated() - base) / 2**20
            record(row)
        record({"n": n, "variant": "shipped (repeat)", "backward_ms": fa._time(shipped_bwd)})
    results["finished"] = time.strftime("%Y-%m-%dT%H:%M:%S")
    Path(out_path).write_text(json.dumps(results, indent=1))
    print("\n| N | variant | cfg | target | maxnreg | backward ms | peak extra MiB | repeatable |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- |")
    for r in rows:
        print(f"| {r['n']} | {r['variant']} | {r.get('cfg', '')} | {r.get('target', '')} | {r.get('maxnreg', '')} | "
              f"{r.get('backward_ms', r.get('error', ''))} | {r.get('peak_extra_MiB', '')} | "
              f"{r.get('bitwise_repeatable', '')} |")  # fmt: skip


def sass() -> None:
    """CPU: compile the variants for sm_90 (the JIT's specialisation, N = 768) and count their loops."""
    from sass import compile_kernel, loop_mix, ptxas_warnings, sass_of  # benchmarks/dev/sass.py

    bf, f32 = torch.bfloat16, torch.float32
    n = s = 768
    h, d = 4, 32
    q_str, bias_str, bias_t = (
        (s * h * n * d, h * n * d, n * d, d),
        (h * n * n, n * n, n, 1),
        (h * n * n, n * n, 1, n),
    )

    def show(name: str, ck) -> None:  # type: ignore[no-untyped-def]
        text, regs, local = sass_of(ck)
        ops, body = loop_mix(text)
        red = sum(v for k, v in ops.items() if k.startswith(("RED", "ATOM")))
        print(f"{name}: {regs} regs, {local} B local, loop {body} instructions ({red} RED/ATOM, "
              f"{ops['MUFU.EX2']} MUFU.EX2)", ptxas_warnings(ck))  # fmt: skip

    for cfg, launder in (
        (pba.KernelConfig(64, 32, 4, 3, 2), False),
        (pba.KernelConfig(64, 32, 4, 3, 2), True),
        (pba.KernelConfig(64, 64, 4, 3, 2), True),
    ):
        ck = compile_kernel(_dq_dbo_kernel, [bf] * 7 + [f32, f32, bf, f32],
                            (*q_str * 6, *bias_str, 0, 0, 0, s, h, n, 64), 0.1,
                            (False, True, d, cfg.block_m, cfg.block_n, cfg.sp, "tf32", launder),
                            cfg.num_warps, cfg.num_stages)  # fmt: skip
        show(f"dq+dbo {cfg} launder={launder}", ck)
    for cfg in (pba.KernelConfig(32, 64, 4, 3, 2), pba.KernelConfig(64, 64, 4, 3, 2)):
        ck = compile_kernel(_dkv_dbo_kernel, [bf] * 6 + [f32, f32, bf, bf, f32],
                            (*q_str * 6, *bias_t, 0, 0, 0, s, h, n, 64), 0.1,
                            (False, True, d, cfg.block_m, cfg.block_n, cfg.sp, "tf32"),
                            cfg.num_warps, cfg.num_stages)  # fmt: skip
        show(f"dkv+dbo {cfg}", ck)


def profile() -> None:
    """H200, under ``ncu --profile-from-start off``: the shipped backward, dq+dbo (64×64, target
    1056) and session 21's shared-buffer dq+db/f32 once each at N = 768, after a warm-up, between
    cudaProfilerStart/Stop (the L2 hit rate and DRAM bytes of the folded kernels' reds)."""
    dev = torch.device("cuda")
    scale = 32**-0.5
    q, k, v, bias, _, do = fa._inputs(1, 768, 4, 768, 32, torch.bfloat16, dev)
    out, lse = pba.pair_bias_attention_forward(q, k, v, bias, None, scale)
    args = (do, q, k, v, bias, None, out, lse, scale)
    shipped = pba.default_config(32, torch.bfloat16, dev)
    runs = [
        lambda: pba.pair_bias_attention_backward(*args),
        lambda: backward_dq_dbo(*args, cfg=pba.KernelConfig(64, 64, 4, 3, 2), target=1056),
        lambda: fa.VARIANTS["dq+db/f32"](*args, cfg=shipped.dq),
    ]
    for fn in runs:
        fn()
    torch.cuda.synchronize()
    torch.cuda.cudart().cudaProfilerStart()
    for fn in runs:
        fn()
    torch.cuda.synchronize()
    torch.cuda.cudart().cudaProfilerStop()


if __name__ == "__main__":
    help_exit(__doc__)
    if sys.argv[1] == "check":
        check()
    elif sys.argv[1] == "sass":
        sass()
    elif sys.argv[1] == "ab":
        ab(sys.argv[2])
    elif sys.argv[1] == "profile":
        profile()
    else:
        raise SystemExit(__doc__)
