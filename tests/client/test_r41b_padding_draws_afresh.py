"""Per-epoch padding draws its entry afresh (review R41b s51 #1), on a real store.

An epoch of L = 4 samples over W = 3 ranks spans S = 6 positions: rank 0 takes 0 and 3, rank 1
takes 1 and 4, rank 2 takes 2 and 5; positions 4 and 5 are padding and draw the epoch's units 0
and 1 again, as torch's ``DistributedSampler`` repeats an index. They were seeded by the epoch's
own key, ``[seed, epoch, 0]`` and ``[seed, epoch, 1]``, so rank 1's position 4 was rank 0's
position 0 byte for byte (same crop, MSA rows and conformer rotations): the same gradient twice
in the epoch, where a ``DistributedSampler`` over an augmented dataset crops and augments the
repeated index afresh. Now a padding position is seeded by its own index in the padded epoch:
same entry, its own crop, MSA rows and rotations; still one sample per position on any rank,
through ``DataLoader`` workers and across a resume.

Only entries with MSAs (102m, 4zey, both larger than the crop) are sampled, so that the MSA rows
and the crop have something to differ in; the rows and rotations are compared over an epoch of
4zey alone, whose crops of 64 always share tokens.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from featurecache.client import FeatureDataset
from featurecache.client.sampler import SamplerFilter

EPOCH, WORLD, SPAN = 4, 3, 6
PADDING = {4: 0, 5: 1}  # padding position -> the epoch's position whose unit it draws again
BOTH = ("102m", "4zey")  # 197 and 84 tokens, with MSAs: units 0 and 1 of the epoch are one each
ZEY = ("4zey",)  # two crops of 64 of its 84 tokens share at least 44


def _dataset(store: Path, rank: int, ids: tuple[str, ...] = BOTH, **kw: Any) -> FeatureDataset:
    kw.setdefault("crop_size", 64)
    kw.setdefault("window", 0)
    return FeatureDataset(
        store, samples_per_epoch=EPOCH, rank=rank, world_size=WORLD, seed=7, workers=1,
        filters=SamplerFilter(ids=list(ids)), max_msa_rows=256, **kw,
    )  # fmt: skip


def _epoch(store: Path, ids: tuple[str, ...]) -> dict[int, dict[str, Any]]:
    """Every rank's per-epoch pass: position -> sample (each rank's own dataset)."""
    out: dict[int, dict[str, Any]] = {}
    for rank in range(WORLD):
        with _dataset(store, rank, ids) as ds:
            assert len(ds) == SPAN // WORLD
            got = list(ds)
        positions = [int(s["position"]) for s in got]
        assert positions == list(range(rank, SPAN, WORLD)), (rank, positions)
        out.update({p: s for p, s in zip(positions, got, strict=True)})
    return out


def _arrays(s: dict[str, Any]) -> dict[str, np.ndarray]:
    return {k: v for k, v in s.items() if isinstance(v, np.ndarray)}


def _same(a: dict[str, Any], b: dict[str, Any]) -> bool:
    x, y = _arrays(a), _arrays(b)
    return x.keys() == y.keys() and all(np.array_equal(v, y[k]) for k, v in x.items())


def _token_atoms(s: dict[str, Any], token: int) -> np.ndarray:
    (k,) = np.flatnonzero(s["token_index"] == token)
    return np.flatnonzero(s["atom_to_token"] == k)


@pytest.fixture(scope="module")
def epoch(client_store: Path) -> dict[int, dict[str, Any]]:
    return _epoch(client_store, BOTH)


def test_a_padding_sample_is_its_entry_cropped_afresh(epoch: dict[int, dict[str, Any]]) -> None:
    assert sorted(epoch) == list(range(SPAN))  # every position once over the ranks
    assert {epoch[0]["entry_id"], epoch[1]["entry_id"]} == set(BOTH)
    for pad, drawn in PADDING.items():
        a, b = epoch[pad], epoch[drawn]
        assert pad % WORLD != drawn % WORLD  # drawn by another rank
        # the same entry: the padding repeats the unit, as DistributedSampler repeats the index
        assert a["entry_id"] == b["entry_id"]
        assert a["epoch"] == b["epoch"] == 0 and a["index"] == b["index"] == drawn
        arrays = [k for k, v in b.items() if isinstance(v, np.ndarray)]
        assert len(arrays) > 10 and not _same(a, b)  # before: byte-identical, every array
        # its own crop (both entries have more tokens than the crop)
        assert a["token_index"].size == b["token_index"].size == 64
        assert not np.array_equal(a["token_index"], b["token_index"]), pad


def test_its_msa_rows_and_rotations_are_its_own(client_store: Path) -> None:
    epoch = _epoch(client_store, ZEY)
    for pad, drawn in PADDING.items():
        a, b = epoch[pad], epoch[drawn]
        assert a["entry_id"] == b["entry_id"] == "4zey" and not _same(a, b)
        both = np.intersect1d(a["token_index"], b["token_index"])
        assert both.size >= 44
        # its own MSA rows: over the tokens both crops hold, the rows differ (number or content)
        rows = [s["msa"][:, [int(np.flatnonzero(s["token_index"] == t)[0]) for t in both]] for s in (a, b)]
        assert a["msa"].shape[0] > 1 and b["msa"].shape[0] > 1
        assert rows[0].shape != rows[1].shape or not np.array_equal(*rows), pad
        np.testing.assert_array_equal(rows[0][0], rows[1][0])  # (the query row is the same)
        # its own conformer rotation: a residue both crops hold has the same conformer (internal
        # distances), rotated and translated otherwise
        for token in both[:5].tolist():
            pa, pb = (s["ref_pos"][_token_atoms(s, token)] for s in (a, b))
            assert pa.shape == pb.shape and pa.shape[0] >= 4
            da, db = (np.linalg.norm(p[:, None] - p[None], axis=-1) for p in (pa, pb))
            np.testing.assert_allclose(da, db, atol=1e-4)
            assert not np.allclose(pa, pb, atol=1e-2), (pad, token)


def test_a_padding_position_still_names_one_sample(
    client_store: Path, epoch: dict[int, dict[str, Any]]
) -> None:
    """Same seed -> byte-identical samples: a position's recomputed by sample() on any rank, and
    handed over by a FeatureLoader's DataLoader workers (which iterate a copy of the dataset)."""
    for rank in range(WORLD):
        with _dataset(client_store, rank) as ds:
            for p, s in epoch.items():
                assert _same(ds.sample(p), s), (rank, p)
    with _dataset(client_store, 1) as ds:
        got = {int(b["position"][0]): b for b in ds.loader(batch_size=1, num_workers=2)}
    assert sorted(got) == [1, 4]
    for p, batch in got.items():
        assert batch["entry_id"] == [epoch[p]["entry_id"]]
        for k in ("token_index", "ref_pos", "msa"):
            np.testing.assert_array_equal(
                torch.as_tensor(batch[k])[0].numpy(), epoch[p][k], err_msg=f"{p} {k}"
            )


@pytest.mark.parametrize("resolved", [[1], [4]])
def test_a_resume_across_the_padding_draws_each_position_once(
    client_store: Path, epoch: dict[int, dict[str, Any]], resolved: list[int]
) -> None:
    """Rank 1 (positions 1 and 4, the padding) resumed after one of them was received: the other
    comes once, the same sample as without the break, iterated directly and through a
    FeatureLoader's workers; the pass after it is the next epoch's."""
    with _dataset(client_store, 1) as ds:
        ds.consume({"position": resolved})
        state = ds.state_dict()
    expected = (
        {"watermark": 4, "resolved_above": []} if resolved == [1] else {"watermark": 1, "resolved_above": [4]}
    )
    assert state["consumed"] == expected
    rest_positions = sorted({1, 4} - set(resolved))
    # window 8 here: iterated directly with window=0, a state with positions resolved above its
    # watermark draws them again (ConsumedPositions.pending; reported beside this fix)
    with _dataset(client_store, 1, window=8) as again:
        again.load_state_dict(state)
        rest = list(again)
        following = sorted(int(s["position"]) for s in again)
    assert [int(s["position"]) for s in rest] == rest_positions
    assert all(_same(s, epoch[int(s["position"])]) for s in rest)
    assert all(not _same(s, epoch[PADDING[4]]) for s in rest if s["position"] == 4)  # fresh, also resumed
    assert following == [SPAN + 1, SPAN + 4]
    with _dataset(client_store, 1) as again:
        again.load_state_dict(state)
        loader = again.loader(batch_size=1, num_workers=2)
        rest_batches = list(loader)
        following = sorted(int(b["position"][0]) for b in loader)
    assert [int(b["position"][0]) for b in rest_batches] == rest_positions
    for b in rest_batches:
        p = int(b["position"][0])
        np.testing.assert_array_equal(torch.as_tensor(b["ref_pos"])[0].numpy(), epoch[p]["ref_pos"])
    assert following == [SPAN + 1, SPAN + 4]
