"""How the build cuts its work into Dask tasks (featurecache/build/granularity.py): enough tasks
that a cluster's workers all get some, the same cut whatever the worker count.

Before, the MSA stage wrote every MSA of a build of up to 256 MSAs / 256 MiB of input in one task
(the real corpus: one 6-8 s task while the other workers idled), and scanned up to 32 MiB of MSA
files per task."""

from __future__ import annotations

import itertools
import random
from pathlib import Path

import pyarrow.ipc as ipc
import pytest

from featurecache.build import msa_stage
from featurecache.build.granularity import cut_by_weight
from tests.conftest import SAMPLES, build_store


def _groups(weights: list[int], **kw: int) -> list[list[int]]:
    return [weights[g.start : g.stop] for g in cut_by_weight(weights, **kw)]


def test_cut_by_weight_aims_at_the_target_within_the_bounds() -> None:
    # 40 bytes, 4 parts: a budget of 10 each
    assert _groups([5] * 8, target_parts=4, min_weight=1, max_weight=100) == [[5, 5]] * 4
    # an item heavier than the budget (34 / 2 = 17) is a group of its own; order is kept
    assert _groups([1, 1, 30, 1, 1], target_parts=2, min_weight=1, max_weight=100) == [[1, 1], [30], [1, 1]]
    # never under min_weight just to reach the target (10 parts of 1 asked, 5 the least)
    assert _groups([1] * 10, target_parts=10, min_weight=5, max_weight=100) == [[1] * 5] * 2
    # never over max_weight, even with one part asked
    assert _groups([10] * 4, target_parts=1, min_weight=1, max_weight=20) == [[10, 10]] * 2
    # at most max_count items, whatever their weight
    assert _groups([0] * 7, target_parts=1, min_weight=1, max_weight=100, max_count=3) == [
        [0] * 3,
        [0] * 3,
        [0],
    ]
    assert cut_by_weight([], target_parts=3, min_weight=1, max_weight=10) == []
    with pytest.raises(ValueError, match="target_parts"):
        cut_by_weight([1], target_parts=0, min_weight=1, max_weight=10)


def test_cut_by_weight_covers_every_item_once_in_order() -> None:
    rng = random.Random(7)
    for _ in range(200):
        weights = [rng.randrange(0, 50) for _ in range(rng.randrange(1, 80))]
        target, lo, hi = rng.randrange(1, 20), rng.randrange(1, 40), rng.randrange(40, 200)
        groups = cut_by_weight(weights, target_parts=target, min_weight=lo, max_weight=hi)
        assert [i for g in groups for i in g] == list(range(len(weights)))
        budget = min(hi, max(lo, -(-sum(weights) // target)))
        for g in groups:  # within the budget, unless a single item is heavier
            assert len(g) == 1 or sum(weights[i] for i in g) <= budget
        for a, b in itertools.pairwise(groups):  # closed only when the next item did not fit
            assert sum(weights[i] for i in a) + weights[b.start] > budget


def test_the_msa_scan_of_the_samples_is_cut_into_several_tasks() -> None:
    files = sorted(
        (p.relative_to(SAMPLES / "msas").as_posix(), p.stat().st_size)
        for p in (SAMPLES / "msas").rglob("*")
        if p.is_file()
    )
    total = sum(n for _, n in files)
    assert total > 3 * msa_stage.MIN_SCAN_BATCH_BYTES  # 3.5 MB of MSA files
    batches = msa_stage._batches(files)
    assert len(batches) >= 3
    assert [rel for b in batches for rel in b] == [rel for rel, _ in files]


def test_the_msas_of_a_build_are_written_by_several_tasks(tmp_path: Path) -> None:
    """The sample MSA files (3.5 MB, read with os.stat here) are cut into parts of about 1 MiB of
    input: the MSAs built from files lie in several MSA parts, each written by its own task."""
    msa_bytes = sum(p.stat().st_size for p in (SAMPLES / "msas").rglob("*") if p.is_file())
    assert msa_bytes > 3 * (1 << 20)
    build_store(tmp_path / "store", SAMPLES / "structures", msa_dir=SAMPLES / "msas", workers=1)
    rows = ipc.open_file(tmp_path / "store" / "index" / "msas.arrow").read_all().to_pylist()
    from_files = {r["part"] for r in rows if r["sources"]}
    assert len(from_files) >= 2, f"all MSAs built from files are in {sorted(from_files)}"
    # every part on disk that the index names exists, and no MSA is listed twice
    assert len({r["key"] for r in rows}) == len(rows)
    for part in {r["part"] for r in rows}:
        assert (tmp_path / "store" / "parts" / part).is_dir()
