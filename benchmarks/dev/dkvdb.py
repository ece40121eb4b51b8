"""Session 19 experiment: the bias gradient folded into the dk/dv pass (three exponential passes).

The shipped backward recomputes P in three kernels (dq, dk/dv, dbias). Here one kernel per
(key block, S group, b·h) loops over its group's S rows in pairs (outer) and the query blocks
(inner): dk, dv of the pair stay in registers over the inner loop, as in ``_bwd_dkv_kernel``, and
the pair's two dSᵀ tiles are summed and read-modify-written into the group's fp32 partial of the
(transposed) bias gradient. Each partial tile is owned by exactly one program, which visits it in
a fixed order: deterministic, no atomics. Groups are reduced by one ordered sum, as in
``launch_dbias``. KERNEL_NOTES.md, "Session 19".

    python benchmarks/dev/dkvdb.py check                  # CPU: TRITON_INTERPRET=1 vs the shipped kernels
    python benchmarks/dev/dkvdb.py ab OUT.json            # H200: correctness + same-run timings
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

import torch
import triton
import triton.language as tl

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from benchmarks.dev.devcli import help_exit
from featurecache.model.kernels import pair_bias_attention as pba
from featurecache.model.kernels.grid import dbias_groups

_LOG2E = pba._LOG2E


@triton.jit
def _dkvdb_step(
    dk, dv, k, v, key_add, Q, DO, q_off, do_off, sq_n, sdo_n, LSE, DELTA, lse_off, rows, offs_d, N, bias_ft,
    scale, HAS_KEY_ADD: tl.constexpr, EVEN_N: tl.constexpr, PREC: tl.constexpr,
):  # fmt: skip
    """``pba._dkv_step`` that also returns the dSᵀ tile [key, query]."""
    if EVEN_N:
        q = tl.load(Q + q_off + rows[:, None] * sq_n + offs_d[None, :])
        do = tl.load(DO + do_off + rows[:, None] * sdo_n + offs_d[None, :])
        lse = tl.load(LSE + lse_off + rows)
        delta = tl.load(DELTA + lse_off + rows)
    else:
        row_ok = rows < N
        q = tl.load(Q + q_off + rows[:, None] * sq_n + offs_d[None, :], mask=row_ok[:, None], other=0.0)
        do = tl.load(DO + do_off + rows[:, None] * sdo_n + offs_d[None, :], mask=row_ok[:, None], other=0.0)
        lse, delta = pba._row_stats(LSE, DELTA, lse_off, rows, N)
    st = tl.dot(k, tl.trans(q), input_precision=PREC) * scale + bias_ft
    if HAS_KEY_ADD:
        st += key_add[:, None]
    pt = tl.math.exp2(st * _LOG2E - lse[None, :])
    dv += tl.dot(pt.to(do.dtype), do, input_precision=PREC)
    dpt = tl.dot(v, tl.trans(do), input_precision=PREC)
    dst = pt * (dpt - delta[None, :])
    dk += tl.dot(dst.to(q.dtype), q, input_precision=PREC)
    return dk, dv, dst


@triton.jit
def _bwd_dkvdb_kernel(
    Q, K, V, BIAS, MASK, DO, LSE, DELTA, DK, DV,
    DBT,  # [G, B·H, N, N] fp32 zeros: partial bias gradients, transposed ([key, query])
    sq_b, sq_s, sq_h, sq_n, sk_b, sk_s, sk_h, sk_n, sv_b, sv_s, sv_h, sv_n,
    sdo_b, sdo_s, sdo_h, sdo_n, sdk_b, sdk_s, sdk_h, sdk_n, sdv_b, sdv_s, sdv_h, sdv_n,
    sb_b, sb_h, sb_i, sb_j, sm_b, sm_s, sm_n,
    S, H, N, S_PER_GROUP, scale,
    HAS_MASK: tl.constexpr, EVEN_N: tl.constexpr, D: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, PREC: tl.constexpr,
):  # fmt: skip
    HAS_KEY_ADD: tl.constexpr = HAS_MASK or not EVEN_N
    pid_n = tl.program_id(0)
    pid_g = tl.program_id(1).to(tl.int64)
    pid_bh = tl.program_id(2).to(tl.int64)
    b = pid_bh // H
    h = pid_bh % H
    cols = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    offs_m = tl.arange(0, BLOCK_M)
    offs_d = tl.arange(0, D)
    col_ok = cols < N
    lse_row = (b * S * H + h) * N
    bias_cols = BIAS + b * sb_b + h * sb_h + cols[:, None] * sb_j
    dbt_cols = DBT + (pid_g * tl.num_programs(2) + pid_bh) * N * N + cols[:, None] * N
    s_start = pid_g * S_PER_GROUP
    s_end = tl.minimum(s_start + S_PER_GROUP, S)
    st_ok = col_ok[:, None]
    dk_ptrs = cols[:, None] * sdk_n + offs_d[None, :]
    dv_ptrs = cols[:, None] * sdv_n + offs_d[None, :]
    for s0 in range(s_start, s_end, 2):
        s1 = tl.minimum(s0 + 1, S - 1)
        w1 = (s0 + 1 < s_end).to(tl.float32)  # the pair's second row counts (odd group: it is a repeat)
        lo0, lo1 = lse_row + s0 * H * N, lse_row + s1 * H * N
        q_off0, do_off0 = b * sq_b + s0 * sq_s + h * sq_h, b * sdo_b + s0 * sdo_s + h * sdo_h
        q_off1, do_off1 = b * sq_b + s1 * sq_s + h * sq_h, b * sdo_b + s1 * sdo_s + h * sdo_h
        k_off0, v_off0, mo0 = pba._kv_mask_offsets(b, s0, h, sk_b, sk_s, sk_h, sv_b, sv_s, sv_h, sm_b, sm_s)
        k0, v0 = pba._dkv_load(K, V, k_off0, v_off0, sk_n, sv_n, cols, offs_d, N)
        key_add0 = pba._key_add(MASK, mo0, sm_n, cols, N, HAS_MASK)
        k_off1, v_off1, mo1 = pba._kv_mask_offsets(b, s1, h, sk_b, sk_s, sk_h, sv_b, sv_s, sv_h, sm_b, sm_s)
        k1, v1 = pba._dkv_load(K, V, k_off1, v_off1, sk_n, sv_n, cols, offs_d, N)
        key_add1 = pba._key_add(MASK, mo1, sm_n, cols, N, HAS_MASK)
        dk0 = tl.zeros([BLOCK_N, D], tl.float32)
        dv0 = tl.zeros([BLOCK_N, D], tl.float32)
        dk1 = tl.zeros([BLOCK_N, D], tl.float32)
        dv1 = tl.zeros([BLOCK_N, D], tl.float32)
        tl.debug_barrier()  # the previous pair's partial stores before this pair's (prefetched) loads
        for start_m in range(0, N, BLOCK_M):
            rows = start_m + offs_m
            bias_ft = pba._bias_tile(bias_cols, sb_i, col_ok, rows, N, EVEN_N).to(tl.float32)
            dk0, dv0, dst0 = _dkvdb_step(dk0, dv0, k0, v0, key_add0, Q, DO, q_off0, do_off0, sq_n, sdo_n, LSE,
                                         DELTA, lo0, rows, offs_d, N, bias_ft, scale, HAS_KEY_ADD, EVEN_N, PREC)  # fmt: skip
            dk1, dv1, dst1 = _dkvdb_step(dk1, dv1, k1, v1, key_add1, Q, DO, q_off1, do_off1, sq_n, sdo_n, LSE,
                                         DELTA, lo1, rows, offs_d, N, bias_ft, scale, HAS_KEY_ADD, EVEN_N, PREC)  # fmt: skip
            p = dbt_cols + rows[None, :]
            if EVEN_N:
                tl.store(p, tl.load(p) + (dst0 + dst1 * w1))
            else:
                ok = col_ok[:, None] & (rows < N)[None, :]
                tl.store(p, tl.load(p, mask=ok, other=0.0) + (dst0 + dst1 * w1), mask=ok)
        tl.store(DK + b * sdk_b + s0 * sdk_s + h * sdk_h + dk_ptrs, (dk0 * scale).to(DK.dtype.element_ty),
                 mask=st_ok)  # fmt: skip
        tl.store(DV + b * sdv_b + s0 * sdv_s + h * sdv_h + dv_ptrs, dv0.to(DV.dtype.element_ty), mask=st_ok)
        ok1 = st_ok & (s0 + 1 < s_end)
        tl.store(DK + b * sdk_b + s1 * sdk_s + h * sdk_h + dk_ptrs, (dk1 * scale).to(DK.dtype.element_ty),
                 mask=ok1)  # fmt: skip
        tl.store(DV + b * sdv_b + s1 * sdv_s + h * sdv_h + dv_ptrs, dv1.to(DV.dtype.element_ty), mask=ok1)


def launch_dkvdb(a: pba.BackwardInputs, c: pba.KernelConfig, target_programs: int) -> torch.Tensor:
    """dk, dv into ``a.dk``, ``a.dv`` and the bias gradient (returned, bias's dtype), one kernel."""
    b, s, h, n, d = a.q.shape
    a.dk, a.dv = pba._empty_like_layout(a.k), pba._empty_like_layout(a.v)
    bias = a.bias
    if bias.stride(-2) != 1:
        bias = bias.transpose(-1, -2).contiguous().transpose(-1, -2)
    n_blocks = triton.cdiv(n, c.block_n)
    groups, per_group = dbias_groups(s, n_blocks * b * h, target_programs)
    if per_group % 2 and groups > 1:  # pairs must not straddle groups
        per_group += 1
        groups = triton.cdiv(s, per_group)
    dbt = torch.zeros((groups, b * h, n, n), device=a.q.device, dtype=torch.float32)
    pba._launch(
        _bwd_dkvdb_kernel, (n_blocks, groups, b * h),
        (a.q, a.k, a.v, bias, a.mask, a.do, a.lse, a.delta, a.dk, a.dv, dbt),
        (*a.q.stride()[:4], *a.k.stride()[:4], *a.v.stride()[:4], *a.do.stride()[:4], *a.dk.stride()[:4],
         *a.dv.stride()[:4], *bias.stride(), *a.mask_strides, s, h, n, per_group),
        a.scale,
        (a.has_mask, pba._even(n, c.block_m, c.block_n), d, c.block_m, c.block_n, pba._prec(a.q.dtype)),
        c.num_warps, c.num_stages,
    )  # fmt: skip
    db = dbt[0] if groups == 1 else dbt.sum(dim=0)
    return db.view(b, h, n, n).transpose(-1, -2).to(a.bias.dtype)


def backward_fused(
    do, q, k, v, bias, mask, out, lse, scale, cfg: pba.KernelConfig, target: int, key_mask=None
):  # type: ignore[no-untyped-def]
    a = pba.prepare_backward(do, q, k, v, bias, mask, out, lse, scale, key_mask)
    config = pba.default_config(q.shape[-1], q.dtype, q.device)
    pba.launch_dq(a, config.dq)
    db = launch_dkvdb(a, cfg, target)
    return a.dq, a.dk, a.dv, db


def _inputs(b, s, h, n, d, dtype, device, seed=0, masked=False):  # type: ignore[no-untyped-def]
    g = torch.Generator(device="cpu").manual_seed(seed)
    q, k, v, do = (torch.randn(b, s, h, n, d, generator=g).to(device, dtype) for _ in range(4))
    bias = torch.randn(b, h, n, n, generator=g).to(device, dtype)
    mask = None
    if masked:
        mask = torch.rand(b, s, n, generator=g) > 0.2
        mask[..., 0] = True
        mask = mask.to(device)
    return q, k, v, bias, mask, do


def check() -> None:
    """Interpreter: the fused kernel's dk, dv, dbias against the shipped kernels' (float32, fp16)."""
    assert os.environ.get("TRITON_INTERPRET") == "1", "run with TRITON_INTERPRET=1"
    scale = 32**-0.5
    for dtype in (torch.float32, torch.float16):
        for (b, s, h, n, d), masked, target in [
            ((1, 3, 2, 37, 16), False, 1),
            ((1, 5, 1, 64, 32), True, 4),
            ((2, 4, 2, 33, 16), True, 3),
            ((1, 7, 1, 32, 16), False, 100),
        ]:
            q, k, v, bias, mask, do = _inputs(b, s, h, n, d, dtype, "cpu", masked=masked)
            out, lse = pba.pair_bias_attention_forward(q, k, v, bias, mask, scale)
            ref = pba.pair_bias_attention_backward(do, q, k, v, bias, mask, out, lse, scale)
            c = pba.KernelConfig(16, 16, 1, 1, 2)
            got = backward_fused(do, q, k, v, bias, mask, out, lse, scale, c, target)
            got2 = backward_fused(do, q, k, v, bias, mask, out, lse, scale, c, target)
            for name, x, y in zip(("dq", "dk", "dv", "dbias"), got, ref, strict=True):
                err = ((x.float() - y.float()).abs().max() / y.float().abs().max().clamp_min(1e-30)).item()
                tol = 1e-5 if dtype == torch.float32 else 2e-3
                assert err < tol, (dtype, (b, s, h, n, d), masked, target, name, err)
            assert torch.equal(got[3], got2[3]), "bias gradient not bitwise repeatable"
            print("ok", dtype, (b, s, h, n, d), "masked" if masked else "", "target", target)


def _time(fn, reps: int = 20) -> float:  # type: ignore[no-untyped-def]
    from triton.testing import do_bench

    return float(do_bench(fn, warmup=10, rep=reps * 10, return_mode="median"))


def _run_n(n, rows, shipped, variants, targets, scale, dev, out_path, results):  # type: ignore[no-untyped-def]
    q, k, v, bias, _, do = _inputs(1, n, 4, n, 32, torch.bfloat16, dev)
    out, lse = pba.pair_bias_attention_forward(q, k, v, bias, None, scale)
    ref = pba.pair_bias_attention_backward(do, q, k, v, bias, None, out, lse, scale)
    # fp32 reference of the bias gradient at N = 384 (errors of both against it)
    if n == 384:
        qf, kf, vf, bf = (t.float().requires_grad_() for t in (q, k, v, bias))
        o = torch.softmax(torch.einsum("bshid,bshjd->bshij", qf, kf) * scale + bf[:, None], -1)
        y = torch.einsum("bshij,bshjd->bshid", o, vf)
        y.backward(do.float())
        db32 = bf.grad
    a = pba.prepare_backward(do, q, k, v, bias, None, out, lse, scale)
    pba.launch_dq(a, shipped.dq)
    t_dkv = _time(lambda: pba.launch_dkv(a, shipped.dkv, shipped.dkv_bias_copy))
    t_db = _time(lambda: pba.launch_dbias(a, shipped.dbias, max(shipped.dbias_target_programs, 264)))
    t_bwd = _time(lambda: pba.pair_bias_attention_backward(do, q, k, v, bias, None, out, lse, scale))
    rows.append({"n": n, "variant": "shipped", "dkv_ms": t_dkv, "dbias_ms": t_db, "dkv_plus_dbias_ms": t_dkv + t_db,
                 "backward_ms": t_bwd})  # fmt: skip
    print(rows[-1], flush=True)
    for c in variants:
        for target in targets:
            try:
                got = backward_fused(do, q, k, v, bias, None, out, lse, scale, c, target)
                got2 = backward_fused(do, q, k, v, bias, None, out, lse, scale, c, target)
            except Exception as exc:  # a config that does not compile: record it
                rows.append({"n": n, "variant": str(c), "target": target, "error": repr(exc)[:300]})
                print(rows[-1], flush=True)
                continue
            row: dict[str, object] = {"n": n, "variant": str(c), "target": target}
            row["dk_equal"] = bool(torch.equal(got[1], ref[1]))
            row["dv_equal"] = bool(torch.equal(got[2], ref[2]))
            row["dbias_rel_diff"] = float(
                (got[3].float() - ref[3].float()).abs().max() / ref[3].float().abs().max()
            )
            row["dbias_repeatable"] = bool(torch.equal(got[3], got2[3]))
            if n == 384:
                nrm = db32.abs().max()
                row["dbias_err_fused"] = float((got[3].float() - db32).abs().max() / nrm)
                row["dbias_err_shipped"] = float((ref[3].float() - db32).abs().max() / nrm)
            a2 = pba.prepare_backward(do, q, k, v, bias, None, out, lse, scale)
            pba.launch_dq(a2, shipped.dq)
            row["fused_ms"] = _time(lambda a2=a2, c=c, target=target: launch_dkvdb(a2, c, target))
            row["backward_ms"] = _time(
                lambda c=c, target=target: backward_fused(do, q, k, v, bias, None, out, lse, scale, c, target)
            )
            torch.cuda.reset_peak_memory_stats()
            base = torch.cuda.memory_allocated()
            backward_fused(do, q, k, v, bias, None, out, lse, scale, c, target)
            row["peak_extra_MiB"] = (torch.cuda.max_memory_allocated() - base) / 2**20
            rows.append(row)
            print(row, flush=True)
    torch.cuda.reset_peak_memory_stats()
    base = torch.cuda.memory_allocated()
    pba.pair_bias_attention_backward(do, q, k, v, bias, None, out, lse, scale)
    rows.append(
        {
            "n": n,
            "variant": "shipped",
            "peak_extra_MiB": (torch.cuda.max_memory_allocated() - base) / 2**20,
        }
    )
    # the shipped three kernels again (drift check)
    a = pba.prepare_backward(do, q, k, v, bias, None, out, lse, scale)
    pba.launch_dq(a, shipped.dq)
    t_dkv = _time(lambda: pba.launch_dkv(a, shipped.dkv, shipped.dkv_bias_copy))
    t_db = _time(lambda: pba.launch_dbias(a, shipped.dbias, max(shipped.dbias_target_programs, 264)))
    rows.append({"n": n, "variant": "shipped (repeat)", "dkv_ms": t_dkv, "dbias_ms": t_db,
                 "dkv_plus_dbias_ms": t_dkv + t_db})  # fmt: skip
    print(rows[-1], flush=True)
    Path(out_path).write_text(json.dumps(results, indent=1))


def ab(out_path: str) -> None:
    """H200: same-run timings of dq + dk/dv + dbias (shipped) against dq + the fused kernel."""
    dev = torch.device("cuda")
    scale = 32**-0.5
    results: dict[str, object] = {"started": time.strftime("%Y-%m-%dT%H:%M:%S"), "rows": []}
    rows: list[dict[str, object]] = results["rows"]  # type: ignore[assignment]
    shipped = pba.default_config(32, torch.bfloat16, dev)
    variants = [
        pba.KernelConfig(32, 64, 4, 3, 2),
        pba.KernelConfig(64, 64, 4, 3, 2),
        pba.KernelConfig(32, 64, 4, 2, 2),
        pba.KernelConfig(64, 32, 4, 3, 2),
        pba.KernelConfig(32, 32, 4, 3, 2),
        pba.KernelConfig(64, 64, 8, 3, 2),
        pba.KernelConfig(32, 128, 8, 3, 2),
    ]
    targets = [264, 528, 1056]
    for n in (384, 768, 1024):
        _run_n(n, rows, shipped, variants, targets, scale, dev, out_path, results)
    Path(out_path).write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    help_exit(__doc__)
    if sys.argv[1] == "check":
        check()
    else:
        ab(sys.argv[2])
