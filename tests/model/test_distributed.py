"""``featurecache train`` under torchrun: two ranks on the CPU (gloo), each on its share of the
client's sample stream, gradients averaged. The oracle is a single process that replays the same
steps: each step's two batches (recomputed from their stream positions), the mean of their
gradients over the samples that have a supervised pair, the same clipping and AdamW step."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from featurecache.client import FeatureDataset
from featurecache.client.assemble import collate
from featurecache.errors import InvalidRequest
from featurecache.model.train import (
    DEFAULT_CLIP_GRAD_NORM,
    TRAIN_WEIGHTING,
    _prepare,
    load_checkpoint,
    make_optimizer,
    rank_log_path,
    run_training,
)
from featurecache.model.trunk import Trunk, supervised_pairs
from tests.model.test_trunk import TINY

STEPS, CROP, SEED, LR = 3, 24, 0, 1e-3


def _torchrun(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2",
           "-m", "featurecache.cli", "train", "--device", "cpu", *args]  # fmt: skip
    return subprocess.run(cmd, capture_output=True, text=True, timeout=900, cwd=tmp_path)


def test_two_ranks_train_like_one_process_averaging_their_batches(sample_store: Path, tmp_path: Path) -> None:
    cfg_path = tmp_path / "tiny.json"
    TINY.to_json(cfg_path)
    log_path, ck = tmp_path / "log.json", tmp_path / "ck.pt"
    proc = _torchrun(tmp_path, "--store", str(sample_store), "--steps", str(STEPS), "--crop", str(CROP),
                     "--workers", "1", "--model-config", str(cfg_path), "--log-file", str(log_path),
                     "--checkpoint", str(ck), "--seed", str(SEED), "--lr", str(LR))  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-4000:]
    docs = [json.loads(rank_log_path(log_path, r).read_text()) for r in (0, 1)]
    assert [d["rank"] for d in docs] == [0, 1] and all(d["world_size"] == 2 for d in docs)
    positions = [[r["positions"] for r in d["steps"]] for d in docs]
    # rank r takes the stream positions p with p % 2 == r (one worker each: in order)
    assert positions == [[[0], [2], [4]], [[1], [3], [5]]]
    for d in docs:  # the logged loss is the ranks' mean, the same on both
        assert [r["loss"] for r in d["steps"]] == [r["loss"] for r in docs[0]["steps"]]
        assert [r["world_tokens"] for r in d["steps"]] == [
            a["tokens"] + b["tokens"] for a, b in zip(docs[0]["steps"], docs[1]["steps"], strict=True)
        ]

    # the oracle: one process, the same initial parameters, each step the mean of the two batches'
    # gradients; one intra-op thread like torchrun's ranks (OMP_NUM_THREADS=1), since CPU kernels
    # split their reductions by thread count
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        model, losses_seen = _replay(sample_store, positions)
    finally:
        torch.set_num_threads(threads)
    assert [r["loss"] for r in docs[0]["steps"]] == losses_seen
    saved = load_checkpoint(ck)
    assert saved["step"] == STEPS and len(saved["data"]["ranks"]) == 2
    for name, value in model.state_dict().items():
        assert torch.equal(saved["model"][name], value), name

    # a two-rank checkpoint holds two data positions: one process of the same global batch (2)
    # continues it on the positions neither rank drew (their states resharded, review R5 s35; it was
    # refused), in the stream's order (another global batch is refused: review R28b s46 #1)
    one = tmp_path / "one.json"
    run_training(sample_store, None, steps=STEPS + 2, crop_size=CROP, device="cpu", log_path=one,
                 resume=ck, workers=1, batch_size=2)  # fmt: skip
    assert [r["positions"] for r in json.loads(one.read_text())["steps"]] == [[6, 7], [8, 9]]
    # a checkpoint of synthetic batches (no client position per rank) still cannot be resharded
    synthetic = load_checkpoint(ck)
    synthetic["data"]["ranks"] = [None, None]
    torch.save(synthetic, tmp_path / "synthetic.pt")
    with pytest.raises(InvalidRequest, match="data positions of 2 rank"):
        run_training(sample_store, None, steps=STEPS + 1, crop_size=CROP, device="cpu", log_path=None,
                     resume=tmp_path / "synthetic.pt", workers=1, batch_size=2)  # fmt: skip


def _replay(store: Path, positions: list[list[list[int]]]) -> tuple[Trunk, list[float]]:
    """The ranks' steps in one process: (the model after them, each step's mean loss)."""
    torch.manual_seed(SEED)
    model = Trunk(TINY, fused=False)
    opt = make_optimizer(model, LR)
    # train's sampling (its --weighting default, af3, is not FeatureDataset's)
    dataset = FeatureDataset(
        store, crop_size=CROP, seed=SEED, workers=1, infinite=True, weighting=TRAIN_WEIGHTING
    )
    params = list(model.parameters())
    means = []
    for step in range(STEPS):
        grads, losses, weights = [], [], []
        for rank in (0, 1):
            (pos,) = positions[rank][step]
            raw = collate([dataset.sample(pos)])
            batch = _prepare(raw, torch.device("cpu"), 1, CROP, False)
            opt.zero_grad(set_to_none=True)
            loss = model.loss(batch)
            loss.backward()
            grads.append([p.grad if p.grad is not None else torch.zeros_like(p) for p in params])
            losses.append(loss.detach())
            # the mean over the samples that have a supervised pair (here each rank's one sample)
            weights.append(sum(1 for pairs in supervised_pairs(raw) if pairs))
        total = sum(weights)
        for p, g0, g1 in zip(params, *grads, strict=True):
            p.grad = (g0 * weights[0] + g1 * weights[1]) / total
        torch.nn.utils.clip_grad_norm_(params, DEFAULT_CLIP_GRAD_NORM)  # train's, as the CLI gives none
        opt.step()
        means.append(float((losses[0] * weights[0] + losses[1] * weights[1]) / total))
    dataset.close()
    return model, means
