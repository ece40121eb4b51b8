"""FeatureDataset on a real store: batches, reproducibility, resume, skips, DataLoader workers, ranks."""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from torch.utils.data import DataLoader

from featurecache.client import FeatureDataset, FeatureLoader, collate
from featurecache.client.sampler import SampleKey
from featurecache.client.schema import BATCH_SCHEMA, MODEL_INPUT_KEYS
from featurecache.const import MolType, decode_atom_name
from featurecache.errors import LoaderError

EPOCH = 40  # samples per epoch (8 entries, cycled through further permutations)


class Delay:
    """Sample hook: position → extra seconds (slow samples get overtaken); position ``held`` waits
    until ``release`` is set (at most 60 s)."""

    def __init__(
        self, delays: dict[int, float], held: int | None = None, release: threading.Event | None = None
    ) -> None:
        self.delays, self.held, self.release = delays, held, release

    def __call__(self, key: SampleKey) -> None:
        if key.position == self.held and self.release is not None:
            self.release.wait(60.0)
        time.sleep(self.delays.get(key.position, 0.0))


class Faults:
    """Sample hook: ``raise_at`` raises, ``hang_at`` sleeps ``hang_s`` (past any test deadline), or
    until ``release`` is set (a test in this process sets it once the hung sample was skipped, so
    that the dataset's close does not wait out the rest of the hang)."""

    def __init__(
        self, raise_at: int, hang_at: int, hang_s: float, release: threading.Event | None = None
    ) -> None:
        self.raise_at, self.hang_at, self.hang_s, self.release = raise_at, hang_at, hang_s, release

    def __call__(self, key: SampleKey) -> None:
        if key.position == self.raise_at:
            raise RuntimeError(f"injected failure at {key.position}")
        if key.position == self.hang_at:
            if self.release is not None:
                self.release.wait(self.hang_s)
            else:
                time.sleep(self.hang_s)


def _dataset(store: Path | str, **kw: Any) -> FeatureDataset:
    kw.setdefault("crop_size", 96)
    kw.setdefault("samples_per_epoch", EPOCH)
    kw.setdefault("workers", 2)
    kw.setdefault("window", 4)
    return FeatureDataset(store, **kw)


def _positions(batches: list[dict[str, Any]]) -> list[int]:
    return [int(p) for b in batches for p in torch.as_tensor(b["position"]).reshape(-1).tolist()]


# ---------------------------------------------------------------------------------- the batch
def test_batch_follows_the_schema(client_store: Path) -> None:
    ds = _dataset(client_store)
    batch = next(iter(ds.loader(batch_size=3)))
    ds.close()
    assert set(MODEL_INPUT_KEYS) <= set(batch)
    b = 3
    n = batch["restype"].shape[1]
    m = batch["msa"].shape[1]
    a = batch["atom_to_token"].shape[1]
    sizes = {"B": b, "N": n, "M": m, "A": a, "3": 3, "32": 32, "4": 4}
    for key, (dtype, shape) in BATCH_SCHEMA.items():
        t = batch[key]
        assert t.dtype == getattr(torch, dtype), key
        assert tuple(t.shape) == tuple(sizes[s] for s in shape.split()), (key, tuple(t.shape), shape)
    assert n <= 96
    assert torch.equal(batch["token_bonds"], batch["token_bonds"].transpose(1, 2))
    for i in range(b):
        n_i = int(batch["token_mask"][i].sum())
        a_i = int(batch["atom_mask"][i].sum())
        assert batch["token_mask"][i, :n_i].all() and not batch["token_mask"][i, n_i:].any()
        assert int(batch["atom_to_token"][i, :a_i].max()) == n_i - 1  # every token has atoms
        assert not batch["token_bonds"][i, n_i:].any()


def test_sample_matches_the_entry_it_came_from(client_store: Path, client_reader: Any) -> None:
    ds = _dataset(client_store)
    for position in range(8):
        s = ds.sample(position)
        e = client_reader.entry(s["entry_id"])
        tok, atoms = e.tokens, e.atoms
        idx = s["token_index"]
        np.testing.assert_array_equal(s["restype"], tok["restype"][idx])
        np.testing.assert_array_equal(s["asym_id"], tok["asym_id"][idx])
        # atoms of the kept tokens, gathered token by token here
        rows = np.concatenate(
            [np.arange(tok["atom_start"][t], tok["atom_start"][t] + tok["atom_count"][t]) for t in idx]
        )
        np.testing.assert_array_equal(s["atom_coords"], atoms["coords"][rows])
        np.testing.assert_array_equal(s["atom_present"], atoms["is_present"][rows])
        names = [decode_atom_name(x) for x in s["ref_atom_name_chars"]]
        for k, t in enumerate(idx.tolist()):
            if tok["is_standard"][t] and tok["mol_type"][t] == MolType.PROTEIN and s["centre_mask"][k]:
                ca = [j for j in np.flatnonzero(s["atom_to_token"] == k) if names[j] == "CA"]
                np.testing.assert_array_equal(s["centre_coords"][k], s["atom_coords"][ca[0]])
        assert s["msa"].shape[1] == idx.size and s["msa_mask"][0].all()
        # reference conformers: augmented positions keep each residue's internal distances
        if s["ref_mask"].any():
            uid = s["ref_space_uid"]
            for u in np.unique(uid[s["ref_mask"]])[:5]:
                sel = (uid == u) & s["ref_mask"]
                assert np.isfinite(s["ref_pos"][sel]).all()
    ds.close()


def test_same_seed_reproduces_the_sample_exactly(client_store: Path) -> None:
    a = _dataset(client_store, seed=5)
    b = _dataset(client_store, seed=5)
    c = _dataset(client_store, seed=6)
    for p in (0, 3, 17):
        x, y = a.sample(p), b.sample(p)
        assert x.keys() == y.keys()
        for k, v in x.items():
            if isinstance(v, np.ndarray):
                np.testing.assert_array_equal(v, y[k], err_msg=k)
            else:
                assert v == y[k], k
    # the stream itself (which entry at which position) is seeded too
    assert [a.sampler.key(p).entry_id for p in range(EPOCH)] != [
        c.sampler.key(p).entry_id for p in range(EPOCH)
    ]
    # and iteration yields the same sample as direct access
    first = next(iter(a))
    np.testing.assert_array_equal(first["token_index"], b.sample(first["position"])["token_index"])
    for d in (a, b, c):
        d.close()


# ------------------------------------------------------------------------------------- resume
def test_resume_is_exact_with_out_of_order_yielding(client_store: Path) -> None:
    # 12 is still running when the state is taken: 13 and 14 have overtaken it (12 is held until
    # then, where it slept 2.5 s before)
    release = threading.Event()
    ds = _dataset(client_store, workers=3, window=4,
                  sample_hook=Delay({1: 0.3, 2: 0.3}, held=12, release=release))  # fmt: skip
    it = ds.__iter__()
    before = [next(it) for _ in range(14)]
    state = ds.state_dict()
    release.set()
    it.close()
    ds.close()
    got_before = [s["position"] for s in before]
    assert got_before != sorted(got_before)  # samples really came out of order
    assert max(s["reorder_depth"] for s in before) > 0
    assert 12 not in got_before
    assert (
        state["consumed"]["watermark"] == 12 and state["consumed"]["resolved_above"]
    )  # more than a watermark

    ds2 = _dataset(client_store, workers=2, window=2)
    ds2.load_state_dict(state)
    after = [s["position"] for s in ds2]
    ds2.close()
    everything = got_before + after
    assert len(everything) == len(set(everything)) == EPOCH
    assert set(everything) == set(range(EPOCH))


def test_resume_through_dataloader_workers(client_store: Path) -> None:
    ds = _dataset(client_store, sample_hook=Delay({4: 0.3, 9: 0.3}))
    loader = FeatureLoader(ds, batch_size=2, num_workers=2)
    it = iter(loader)
    first = [next(it) for _ in range(6)]
    state = loader.state_dict()
    del it
    ds2 = _dataset(client_store)
    loader2 = FeatureLoader(ds2, batch_size=2, num_workers=2)
    loader2.load_state_dict(state)
    rest = list(loader2)
    everything = _positions(first) + _positions(rest)
    assert len(everything) == len(set(everything)) == EPOCH


def test_epochs_are_independent_streams(client_store: Path) -> None:
    ds = _dataset(client_store, crop_size=64)
    e0 = [s["position"] for s in ds]
    ds.set_epoch(1)
    e1 = [s["position"] for s in ds]
    ds.close()
    assert sorted(e0) == list(range(EPOCH)) and sorted(e1) == list(range(EPOCH, 2 * EPOCH))


def test_iterating_again_after_an_epoch_starts_the_next(client_store: Path) -> None:
    ds = _dataset(client_store, samples_per_epoch=6, crop_size=64)
    epochs = [sorted(s["position"] for s in ds) for _ in range(3)]
    assert epochs == [list(range(6 * e, 6 * e + 6)) for e in range(3)] and ds.epoch == 2
    loader = ds.loader(batch_size=4)
    assert [sorted(_positions(list(loader))) for _ in range(2)] == [list(range(18, 24)), list(range(24, 30))]
    ds.close()


def test_next_epoch_reaches_dataloader_workers(client_store: Path) -> None:
    ds = _dataset(client_store, samples_per_epoch=6, crop_size=64)
    loader = ds.loader(batch_size=2, num_workers=2)
    assert [sorted(_positions(list(loader))) for _ in range(2)] == [list(range(6)), list(range(6, 12))]


def test_a_stopped_iteration_continues_its_epoch(client_store: Path) -> None:
    ds = _dataset(client_store, samples_per_epoch=6, crop_size=64, workers=1, window=0)
    it = iter(ds)
    first = [next(it)["position"] for _ in range(2)]
    it.close()
    rest = [s["position"] for s in ds]
    state = ds.state_dict()  # the epoch is done; a resumed run goes on with the next one
    ds.close()
    assert sorted(first + rest) == list(range(6)) and len(rest) == 4
    ds2 = _dataset(client_store, samples_per_epoch=6, crop_size=64)
    ds2.load_state_dict(state)
    assert sorted(s["position"] for s in ds2) == list(range(6, 12))
    ds2.close()


# -------------------------------------------------------------------------------- failures
def test_failing_and_hanging_samples_are_skipped_and_counted(client_store: Path) -> None:
    # deadline 2.5 s against a 6 s hang: at 1.0 s a loaded machine (a CI rehearsal beside other test
    # runs) took over a second to raise the failing sample, which then counted as a deadline skip
    release = threading.Event()  # set once the pass ended: the hung sample was skipped by then
    ds = _dataset(client_store, deadline_s=2.5, sample_hook=Faults(raise_at=3, hang_at=5, hang_s=6.0,
                                                                   release=release))  # fmt: skip
    got = [s["position"] for s in ds]
    release.set()
    ds.close()
    assert sorted(got) == [p for p in range(EPOCH) if p not in (3, 5)]
    summary = ds.stats.summary()
    assert summary["failures"] == 1 and summary["deadline_skips"] == 1
    reasons = {r.position: (r.reason, r.error_class) for r in ds.stats.skips}
    assert reasons == {3: ("error", "RuntimeError"), 5: ("deadline", "DeadlineExceeded")}
    assert ds.state_dict()["consumed"]["watermark"] == EPOCH  # skipped samples count as resolved


def test_skips_travel_through_dataloader_workers(client_store: Path) -> None:
    ds = _dataset(client_store, deadline_s=2.5, sample_hook=Faults(raise_at=2, hang_at=11, hang_s=6.0))
    loader = FeatureLoader(ds, batch_size=4, num_workers=2)
    batches = list(loader)
    got = _positions(batches)
    assert sorted(got) == [p for p in range(EPOCH) if p not in (2, 11)]
    s = loader.stats.summary()
    assert s["failures"] == 1 and s["deadline_skips"] == 1
    assert s["steps"] == len(batches) and s["samples"] == len(got)
    assert sorted(r["position"] for b in batches for r in b["skipped"]) == [2, 11]


# ------------------------------------------------------------------------- workers and ranks
def test_plain_dataloader_with_two_workers_sees_each_sample_once(client_store: Path) -> None:
    ds = _dataset(client_store)
    loader = DataLoader(ds, batch_size=3, num_workers=2, collate_fn=collate)
    got = _positions(list(loader))
    assert sorted(got) == list(range(EPOCH))


def test_two_ranks_get_disjoint_shares(client_store: Path) -> None:
    shares = []
    for rank in (0, 1):
        ds = _dataset(client_store, rank=rank, world_size=2)
        loader = FeatureLoader(ds, batch_size=2, num_workers=2)
        shares.append(_positions(list(loader)))
        state = loader.state_dict()
        assert state["rank"] == rank and state["world_size"] == 2
    a, b = shares
    assert not set(a) & set(b)
    assert sorted(a + b) == list(range(EPOCH))
    assert all(p % 2 == 0 for p in a) and all(p % 2 == 1 for p in b)


def test_resume_refuses_a_different_world(client_store: Path) -> None:
    ds = _dataset(client_store, rank=0, world_size=2)
    state = ds.state_dict()
    other = _dataset(client_store)
    with pytest.raises(ValueError, match="world_size"):
        other.load_state_dict(state)


def test_process_pool_gives_the_same_samples_as_threads(client_store: Path) -> None:
    threads = _dataset(client_store, samples_per_epoch=6)
    procs = _dataset(client_store, samples_per_epoch=6, pool="process", workers=2)
    a = {s["position"]: s for s in threads}
    b = {s["position"]: s for s in procs}
    threads.close()
    procs.close()
    assert a.keys() == b.keys() == set(range(6))
    for p in a:
        np.testing.assert_array_equal(a[p]["token_index"], b[p]["token_index"])
        np.testing.assert_array_equal(a[p]["msa"], b[p]["msa"])
        np.testing.assert_array_equal(a[p]["ref_pos"], b[p]["ref_pos"])


class AlwaysFail:
    def __call__(self, key: SampleKey) -> None:
        raise OSError(f"store unreachable for {key.entry_id}")


def test_a_broken_source_raises_instead_of_spinning(client_store: Path) -> None:
    ds = _dataset(client_store, infinite=True, sample_hook=AlwaysFail(), max_consecutive_skips=6)
    with pytest.raises(LoaderError, match="6 samples in a row"):
        next(iter(ds))
    ds.close()
    assert ds.stats.failures == 6


class Unavailable:
    """Sample hook: the positions in ``at`` fail as if the lookup service were down."""

    def __init__(self, at: set[int]) -> None:
        self.at = at

    def __call__(self, key: SampleKey) -> None:
        from featurecache.client.http import ServiceUnavailable

        if key.position in self.at:
            raise ServiceUnavailable(f"GET http://lookup/v1/entries/{key.entry_id}: ConnectError (injected)")


def test_source_failures_in_a_row_raise_and_a_sample_in_between_resets_them(client_store: Path) -> None:
    # positions 2,3 and 5,6 fail: never 3 in a row, sample 4 arrived in between; 8, 9, 10 do fail in a row
    hook = Unavailable({2, 3, 5, 6, 8, 9, 10})
    ds = _dataset(client_store, sample_hook=hook, workers=1, window=0, max_source_failures=3)
    it = iter(ds)
    got = [next(it)["position"] for _ in range(4)]
    with pytest.raises(LoaderError, match=r"the store .* failed 3 samples in a row; the last: position 10 .*"
                                          r"ServiceUnavailable: GET http://lookup"):  # fmt: skip
        next(it)
    ds.close()
    assert got == [0, 1, 4, 7] and ds.stats.failures == 7
    with pytest.raises(ValueError, match="max_source_failures"):
        _dataset(client_store, max_source_failures=0)


# ----------------------------------------------------------------------- reference conformers
def test_reference_conformers_are_rigidly_moved_per_residue(client_store: Path, client_reader: Any) -> None:
    from featurecache.chem.reference import reference_features

    table = client_reader.component_table()
    assert len(table) > 0  # the build's chem stage stored conformers
    ds = _dataset(client_store, seed=11)
    n_checked = 0
    for position in range(6):
        s = ds.sample(position)
        e = client_reader.entry(s["entry_id"])
        tok, atoms = e.tokens, e.atoms
        rows = np.concatenate(
            [
                np.arange(tok["atom_start"][t], tok["atom_start"][t] + tok["atom_count"][t])
                for t in s["token_index"]
            ]
        )
        plain = reference_features({k: v[rows] for k, v in atoms.items()}, tok, table)  # not augmented
        np.testing.assert_array_equal(s["ref_mask"], plain["ref_mask"])
        assert s["ref_mask"].mean() > 0.5
        uid = s["ref_space_uid"]
        for u in np.unique(uid[s["ref_mask"]]):
            sel = (uid == u) & s["ref_mask"]
            if sel.sum() < 3:
                continue
            a, b = s["ref_pos"][sel].astype(np.float64), plain["ref_pos"][sel].astype(np.float64)
            da = np.linalg.norm(a[:, None] - a[None], axis=-1)
            db = np.linalg.norm(b[:, None] - b[None], axis=-1)
            np.testing.assert_allclose(da, db, atol=1e-3)  # a rigid motion keeps every distance
            assert not np.allclose(a, b, atol=1e-2)  # … but it did move
            n_checked += 1
    assert n_checked > 20


# ------------------------------------------------------------------------------ the service
def test_service_source_gives_the_same_samples_as_the_local_store(client_store: Path) -> None:
    from services.lookup.server import background_server

    local = _dataset(client_store, samples_per_epoch=10)
    with background_server(client_store) as url:
        remote = _dataset(url, samples_per_epoch=10)
        got = {s["position"]: s for s in remote}
        remote.close()
    want = {s["position"]: s for s in local}
    local.close()
    assert got.keys() == want.keys() == set(range(10))
    for p, s in want.items():
        for k, v in s.items():
            if isinstance(v, np.ndarray):
                np.testing.assert_array_equal(got[p][k], v, err_msg=f"{p} {k}")
