"""GPU checks of the compiled kernels (bf16, N up to 768): ``pytest -m gpu tests/model``.

Each error is ‖kernel − fp32 oracle‖/‖oracle‖ and is also compared with torch's own error at the
same dtype (the eager reference run in that dtype); both are recorded as junit properties.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
import torch

from featurecache.client.schema import MODEL_INPUT_KEYS
from featurecache.model.batches import synthetic_batch
from featurecache.model.config import ModelConfig
from featurecache.model.kernels import layernorm_linear as lnl
from featurecache.model.kernels import pair_bias_attention as pba
from featurecache.model.kernels import transition as tr
from featurecache.model.kernels import triangle as tri
from featurecache.model.kernels.reference import layernorm_linear_ref, pair_bias_attention_ref, transition_ref
from featurecache.model.trunk import Trunk
from tests.model.util import TOL, naive_attention, reinit_zeroed_linears, rel_err

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU"),
]
BF16, F16, F32 = torch.bfloat16, torch.float16, torch.float32
Record = Callable[[str, object], None]


def _inputs(b: int, s: int, h: int, n: int, d: int, dtype: torch.dtype, masked: bool, seed: int):  # type: ignore[no-untyped-def]
    g = torch.Generator(device="cuda").manual_seed(seed)
    q, k, v = (torch.randn(b, s, h, n, d, device="cuda", generator=g).to(dtype) for _ in range(3))
    bias = torch.randn(b, h, n, n, device="cuda", generator=g).to(dtype)
    mask = None
    if masked:
        n_real = n - n // 7  # a padded batch: the last tokens are padding
        tok = torch.arange(n, device="cuda") < n_real
        mask = (tok[:, None] & tok[None, :])[None].expand(b, n, n)[:, :s].contiguous()
        mask &= torch.rand(b, s, n, device="cuda", generator=g) > 0.1
    do = torch.randn(b, s, h, n, d, device="cuda", generator=g).to(dtype)
    return q, k, v, bias, mask, do


def _check_vs_oracle(record_property: Record, names, got, want, torch_own, dtype: torch.dtype) -> None:  # type: ignore[no-untyped-def]
    """Each kernel result within TOL of the fp32 oracle and, below fp32, within 3× (+1e-3) of
    torch's own error at that dtype; both errors recorded as junit properties."""
    for name, g, w, t in zip(names, got, want, torch_own, strict=True):
        err, terr = rel_err(g, w), rel_err(t, w)
        record_property(f"{name}_err", f"{err:.3e}")
        record_property(f"{name}_torch_err", f"{terr:.3e}")
        assert err < TOL[dtype], f"{name}: {err:.2e}"
        if dtype != F32:
            assert err < 3 * terr + 1e-3, f"{name}: kernel {err:.2e} vs torch's own {terr:.2e}"


def _grads(fn, q, k, v, bias, mask, do):  # type: ignore[no-untyped-def]
    xs = [t.detach().clone().requires_grad_() for t in (q, k, v, bias)]
    out = fn(*xs, mask)
    return (out, *torch.autograd.grad(out, xs, do.to(out.dtype)))


@pytest.mark.parametrize(
    ("s", "n", "d", "masked", "dtype"),
    [
        (1, 37, 32, True, BF16),
        (64, 127, 16, False, BF16),
        (32, 257, 64, True, BF16),
        (384, 384, 32, True, BF16),
        (768, 768, 32, False, BF16),
        (768, 768, 32, True, BF16),
        (48, 200, 32, True, F16),
        (16, 129, 64, True, F32),
    ],
)
def test_attention_matches_fp32_oracle(
    s: int, n: int, d: int, masked: bool, dtype: torch.dtype, record_property: Record
) -> None:
    q, k, v, bias, mask, do = _inputs(1, s, 4, n, d, dtype, masked, seed=n + s)
    got = _grads(pba.pair_bias_attention, q, k, v, bias, mask, do)
    scale = d**-0.5
    want = _grads(
        lambda q_, k_, v_, b_, m_: naive_attention(q_, k_, v_, b_, m_, scale),
        q.float(),
        k.float(),
        v.float(),
        bias.float(),
        mask,
        do.float(),
    )
    torch_own = _grads(pair_bias_attention_ref, q, k, v, bias, mask, do)
    _check_vs_oracle(record_property, ("out", "dq", "dk", "dv", "dbias"), got, want, torch_own, dtype)


@pytest.mark.parametrize(("n", "masked"), [(131, True), (384, True), (768, False), (768, True)])
def test_triangle_core_bf16(n: int, masked: bool, record_property: Record) -> None:
    """The trunk's gated attention over one projection (H = 4, D = 32, width padded to 528) vs
    the fp32 oracle: output and the projection's gradient, column group by column group; the
    gradient bitwise repeatable."""
    h, d = 4, 32
    hd = h * d
    g = torch.Generator(device="cuda").manual_seed(n)
    p = torch.randn(1, n, n, 4 * hd + 16, device="cuda", generator=g).to(BF16)
    dout = torch.randn(1, n, n, hd, device="cuda", generator=g).to(BF16)
    tm = (torch.arange(n, device="cuda") < n - n // 7)[None] if masked else None

    def run(fn, x):  # type: ignore[no-untyped-def]
        x = x.detach().clone().requires_grad_()
        out = fn(x, h, d, key_mask=tm, row_mask=tm)
        (dp,) = torch.autograd.grad(out, [x], dout.to(out.dtype))
        return out, dp

    got, again = run(tri.triangle_attention_core, p), run(tri.triangle_attention_core, p)
    assert torch.equal(got[1], again[1])
    want = run(tri.triangle_attention_core_ref, p.float())
    torch_own = run(tri.triangle_attention_core_ref, p)
    cols = {"q": (0, hd), "k": (hd, 2 * hd), "v": (2 * hd, 3 * hd), "gate": (3 * hd, 4 * hd),
            "bias": (4 * hd, 4 * hd + h)}  # fmt: skip
    names, gs, ws, ts = ["out"], [got[0]], [want[0]], [torch_own[0]]
    for name, (lo, hi) in cols.items():
        names.append(f"d{name}")
        gs.append(got[1][..., lo:hi])
        ws.append(want[1][..., lo:hi])
        ts.append(torch_own[1][..., lo:hi])
    _check_vs_oracle(record_property, names, gs, ws, ts, BF16)
    assert torch.count_nonzero(got[1][..., 4 * hd + h :]) == 0


def test_attention_is_bitwise_deterministic_on_gpu() -> None:
    q, k, v, bias, mask, do = _inputs(1, 384, 4, 384, 32, BF16, True, seed=1)
    first = _grads(pba.pair_bias_attention, q, k, v, bias, mask, do)
    second = _grads(pba.pair_bias_attention, q, k, v, bias, mask, do)
    for a, b in zip(first, second, strict=True):
        assert torch.equal(a, b)


def test_launch_cache_matches_triton_launch_bitwise() -> None:
    """The launch cache (direct calls of the compiled kernel) gives the same bits as Triton's own
    launch, across N (a new key per shape), masks, and a q that is not 16-byte aligned (a different
    specialisation that the cache key must tell apart from the aligned one)."""
    prev = pba.set_fast_launch(True)
    try:
        for n, masked in ((131, True), (384, False), (384, True), (200, False)):
            q, k, v, bias, mask, do = _inputs(1, 6, 4, n, 32, BF16, masked, seed=n)
            buf = torch.empty(q.numel() + 1, device="cuda", dtype=BF16)
            q_odd = buf[1:].view_as(q).copy_(q)
            assert q_odd.data_ptr() % 16 != 0
            for qq in (q, q_odd, q):
                runs = []
                for fast in (False, True, True):  # Triton's launch; cache filled; cache hit
                    pba.set_fast_launch(fast)
                    runs.append(_grads(pba.pair_bias_attention, qq, k, v, bias, mask, do))
                for a, b, c in zip(*runs, strict=True):
                    assert torch.equal(a, b) and torch.equal(a, c)
        assert pba._LAUNCH_CACHE, "the fast path was never taken"
    finally:
        pba.set_fast_launch(prev)


@pytest.mark.parametrize("d", [16, 32, 64])
@pytest.mark.parametrize("dtype", [F32, F16, BF16])
def test_default_tiles_every_head_dim_and_dtype(d: int, dtype: torch.dtype) -> None:
    q, k, v, bias, mask, do = _inputs(2, 5, 2, 131, d, dtype, True, seed=d)
    got = _grads(pba.pair_bias_attention, q, k, v, bias, mask, do)
    want = _grads(
        lambda q_, k_, v_, b_, m_: naive_attention(q_, k_, v_, b_, m_, d**-0.5),
        q.float(),
        k.float(),
        v.float(),
        bias.float(),
        mask,
        do.float(),
    )
    for name, g, w in zip(("out", "dq", "dk", "dv", "dbias"), got, want, strict=True):
        assert rel_err(g, w) < TOL[dtype], name


@pytest.mark.parametrize(
    ("m", "c", "o", "sw"), [(50_000, 128, 1024, True), (3001, 128, 520, False), (777, 384, 1536, True)]
)
def test_layernorm_linear_bf16(m: int, c: int, o: int, sw: bool, record_property: Record) -> None:
    g = torch.Generator(device="cuda").manual_seed(m)
    x = torch.randn(m, c, device="cuda", generator=g)
    lw, lb = (
        1 + 0.1 * torch.randn(c, device="cuda", generator=g),
        0.1 * torch.randn(c, device="cuda", generator=g),
    )
    w = torch.randn(o, c, device="cuda", generator=g) / c**0.5
    dy = torch.randn(m, o // 2 if sw else o, device="cuda", generator=g)

    def run(fn, dtype):  # type: ignore[no-untyped-def]
        xs = [x.clone().requires_grad_(), lw.clone().requires_grad_(), lb.clone().requires_grad_(),
              w.to(dtype).requires_grad_()]  # fmt: skip
        y = fn(*xs, None, 1e-5, sw)
        return (y, *torch.autograd.grad(y, xs, dy.to(y.dtype)))

    got = run(lnl.layernorm_linear, BF16)
    want = run(layernorm_linear_ref, F32)
    torch_own = run(layernorm_linear_ref, BF16)
    _check_vs_oracle(record_property, ("y", "dx", "dln_w", "dln_b", "dw"), got, want, torch_own, BF16)


@pytest.mark.parametrize(("m", "c", "h"), [(50_000, 128, 512), (3001, 64, 100), (777, 256, 512)])
def test_transition_bf16(m: int, c: int, h: int, record_property: Record) -> None:
    g = torch.Generator(device="cuda").manual_seed(m)
    x = torch.randn(m, c, device="cuda", generator=g)
    lw = 1 + 0.1 * torch.randn(c, device="cuda", generator=g)
    lb = 0.1 * torch.randn(c, device="cuda", generator=g)
    w1 = torch.randn(2 * h, c, device="cuda", generator=g) / c**0.5
    w2 = torch.randn(c, h, device="cuda", generator=g) / h**0.5
    dy = torch.randn(m, c, device="cuda", generator=g)

    def run(fn, dtype):  # type: ignore[no-untyped-def]
        xs = [x.clone().requires_grad_(), lw.clone().requires_grad_(), lb.clone().requires_grad_(),
              w1.to(dtype).requires_grad_(), w2.to(dtype).requires_grad_()]  # fmt: skip
        y = fn(*xs)
        return (y, *torch.autograd.grad(y, xs, dy.to(y.dtype)))

    got = run(tr.transition, BF16)
    want = run(transition_ref, F32)
    torch_own = run(transition_ref, BF16)
    _check_vs_oracle(record_property, ("y", "dx", "dln_w", "dln_b", "dw1", "dw2"), got, want, torch_own, BF16)


def test_trunk_fused_matches_reference_under_autocast(record_property: Record) -> None:
    cfg = ModelConfig(n_blocks=2)
    torch.manual_seed(0)
    fused = Trunk(cfg, fused=True).cuda()
    # the head and the residual outputs start at zero: else only the head's gradients would compare
    assert reinit_zeroed_linears(fused) == 6 * cfg.n_blocks + 1
    ref = Trunk(cfg, fused=False).cuda()
    ref.load_state_dict(fused.state_dict())
    raw = synthetic_batch(np.random.default_rng(0), 2, 96, msa_rows=16, full=False)
    batch = {k: raw[k].cuda() for k in MODEL_INPUT_KEYS}
    with torch.autocast("cuda", dtype=BF16):
        lf, lr = fused.loss(batch), ref.loss(batch)
    lf.backward()
    lr.backward()
    record_property("loss_fused", float(lf.detach()))
    record_property("loss_reference", float(lr.detach()))
    assert abs(float(lf.detach()) - float(lr.detach())) < 1e-2 * abs(float(lr.detach()))
    gf = torch.cat([p.grad.flatten() for p in fused.parameters() if p.grad is not None])
    gr = torch.cat([p.grad.flatten() for p in ref.parameters() if p.grad is not None])
    record_property("grad_rel_err", f"{rel_err(gf, gr):.3e}")
    assert rel_err(gf, gr) < 5e-2
    blocks = torch.cat([p.grad.flatten() for n, p in ref.named_parameters() if n.startswith("blocks.")])
    assert float(blocks.norm()) > 1e-3 * float(gr.norm())  # the blocks' gradients are compared, not zeros


def test_cuda_graph_steps_match_eager_steps(record_property: Record) -> None:
    """Five steps over batches of two padded lengths (so two graphs, recorded mid-run) give the
    eager steps' losses and parameters bitwise: the warm-up steps that recording needs leave no
    trace (five steps move the parameters by ``moved``, so a leaked one could not hide)."""
    from featurecache.model.batches import pad_tokens
    from featurecache.model.train import GraphedSteps, make_optimizer, train_step

    cfg = ModelConfig(n_blocks=2)
    rng = np.random.default_rng(3)
    batches = []
    for n in (200, 100, 230, 90, 250):  # padded to 256, 128, 256, 128, 256
        raw = synthetic_batch(rng, 1, n, msa_rows=16, full=True)
        batches.append(pad_tokens({k: raw[k].cuda() for k in MODEL_INPUT_KEYS}, 128, cap=256))

    def train(graphs: bool) -> tuple[list[float], torch.Tensor, torch.Tensor, int]:
        torch.manual_seed(0)
        model = Trunk(cfg, fused=True).cuda()
        start = torch.cat([p.detach().flatten() for p in model.parameters()]).clone()
        opt = make_optimizer(model, 1e-3, capturable=graphs)
        graphed = GraphedSteps(model, opt, model.loss) if graphs else None
        losses = []
        for b in batches:
            loss = graphed(b) if graphed is not None else train_step(model, opt, model.loss, b)
            losses.append(float(loss))
        end = torch.cat([p.detach().flatten() for p in model.parameters()])
        return losses, start, end, len(graphed) if graphed is not None else 0

    le, start, pe, _ = train(False)
    le2, _, pe2, _ = train(False)
    lg, _, pg, n_graphs = train(True)
    moved = rel_err(pe, start)  # what five steps change: a leaked warm-up step would show on this scale
    noise = rel_err(pe2, pe)  # eager against itself
    record_property("losses_eager", le)
    record_property("losses_eager_again", le2)
    record_property("losses_graphs", lg)
    record_property("param_rel_diff", f"{rel_err(pg, pe):.3e}")
    record_property("param_rel_diff_eager_again", f"{noise:.3e}")
    record_property("param_rel_moved", f"{moved:.3e}")
    assert n_graphs == 2
    assert moved > 1e-2
    assert noise == 0.0 and le2 == le  # eager steps are bitwise repeatable (TableLookup, the kernels)
    assert torch.equal(pg, pe) and lg == le  # and a replay runs the very same kernels (run 63)


def test_cuda_graph_recording_failure_names_the_shape_and_the_reason() -> None:
    """A loss that synchronises with the host cannot be recorded: the error says so and names the
    batch shape instead of surfacing CUDA's capture error."""
    from featurecache.errors import FeatureCacheError
    from featurecache.model.train import GraphedSteps, make_optimizer

    torch.manual_seed(0)
    model = Trunk(ModelConfig(n_blocks=1), fused=True).cuda()
    opt = make_optimizer(model, 1e-3, capturable=True)

    def syncing_loss(batch: dict[str, torch.Tensor]) -> torch.Tensor:
        loss = model.loss(batch)
        if float(loss) < 0:  # a host synchronisation: fine eagerly, illegal while capturing
            loss = loss * 0
        return loss

    raw = synthetic_batch(np.random.default_rng(1), 1, 64, msa_rows=8, full=True)
    batch = {k: raw[k].cuda() for k in MODEL_INPUT_KEYS}
    with pytest.raises(
        FeatureCacheError, match=r"CUDA graph failed for the batch shape \(.*restype \[1, 64\]"
    ):
        GraphedSteps(model, opt, syncing_loss)(batch)
    with torch.autocast("cuda", dtype=BF16):  # the failed recording left the process usable
        assert torch.isfinite(model.loss(batch))


def test_prefetch_hides_the_loader_behind_the_step(record_property: Record) -> None:
    """``run_training`` with CUDA graphs over a source that takes 5 ms per batch, with and without
    the prefetch: the same losses bitwise (same batches, same order, same kernels); without it the
    GPU waits for every fetch, with it the fetch runs while the GPU works on the step (a step of
    two blocks at 384 tokens takes several times 5 ms on an H200), so most of the wait is hidden."""
    import time

    from featurecache.model.train import run_training

    rng = np.random.default_rng(4)
    stream = [synthetic_batch(rng, 1, 384, msa_rows=32, full=True) for _ in range(8)]

    def slow_source():  # type: ignore[no-untyped-def]
        for b in stream:
            time.sleep(0.005)
            yield b

    docs = {}
    for prefetch in (False, True):
        docs[prefetch] = run_training(
            None, None, steps=8, crop_size=384, device="cuda", log_path=None, config=ModelConfig(n_blocks=2),
            batches=slow_source(), cuda_graphs=True, prefetch=prefetch,
        )  # fmt: skip
    sums = {}
    for prefetch, doc in docs.items():
        timed = doc["steps"][1:]  # step 0 records the graph
        sums[prefetch] = (sum(r["data_wait_s"] for r in timed), sum(r["exposed_data_wait_s"] for r in timed),
                          sum(r["gpu_s"] for r in timed))  # fmt: skip
        record_property(f"wait_exposed_gpu_s_prefetch_{prefetch}", [f"{x:.4f}" for x in sums[prefetch]])
    assert [r["loss"] for r in docs[True]["steps"]] == [r["loss"] for r in docs[False]["steps"]]
    wait, exposed, gpu = sums[False]
    assert wait >= 7 * 0.005 and exposed == pytest.approx(wait)  # all of it exposed
    wait, exposed, gpu = sums[True]
    assert wait >= 6 * 0.005 and gpu > 2 * wait  # the GPU had time enough to hide it
    assert exposed < 0.25 * wait


def test_resume_with_cuda_graphs_continues_bitwise(tmp_path: Path) -> None:
    """Six CUDA-graph steps with a checkpoint after the third, against three resumed from it: the
    capturable fused AdamW's state goes through the checkpoint onto the device before any graph
    is recorded, so the resumed steps give bitwise the uninterrupted run's losses and parameters."""
    from featurecache.model.train import load_checkpoint, run_training

    common = {"steps": 6, "crop_size": 128, "device": "cuda", "log_path": None,
              "config": ModelConfig(n_blocks=2), "cuda_graphs": True}  # fmt: skip
    full = run_training(None, None, checkpoint=tmp_path / "full_{step}.pt", checkpoint_every=3, **common)
    resumed = run_training(
        None, None, checkpoint=tmp_path / "resumed.pt", resume=tmp_path / "full_3.pt", **common
    )
    assert [r["loss"] for r in resumed["steps"]] == [r["loss"] for r in full["steps"][3:]]
    a, b = load_checkpoint(tmp_path / "full_6.pt"), load_checkpoint(tmp_path / "resumed.pt")
    for k, v in a["model"].items():
        assert torch.equal(v, b["model"][k]), k
    for (pa, sa), (pb, sb) in zip(
        a["optimizer"]["state"].items(), b["optimizer"]["state"].items(), strict=True
    ):
        assert pa == pb and all(torch.equal(sa[k], sb[k]) for k in sa), pa
