"""How a build stage cuts its work into Dask tasks: enough tasks that every worker gets some, and
the same cut whatever the worker count.

A stage that writes a store part per task must cut its work the same way on 1 or 64 workers, or
the index (which names the part of every row) would depend on the cluster
(tests/build/test_index_deterministic.py). So the cut depends only on the work: about
``target_parts`` groups of consecutive items by weight, each at most ``max_weight`` (and
``max_count`` items), none made lighter than ``min_weight`` just to reach the target, since each
task and each part costs a fixed amount (a round trip through the scheduler, a part's files).

Before, the MSA stage cut only at its maxima (256 MSAs or 256 MiB of input per part): a build of a
few hundred chains wrote all its MSAs in one task, on one worker, however many there were (the MSA
stage of the real corpus: 6-8 s of one task while the other workers idled); likewise the MSA scan
read up to 32 MiB of files per task.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

__all__ = ["cut_by_weight"]


def cut_by_weight(
    weights: Sequence[int],
    *,
    target_parts: int,
    min_weight: int,
    max_weight: int,
    max_count: int | None = None,
) -> list[range]:
    """Cut items (in the given order, with ``weights``: e.g. input bytes) into consecutive groups.

    A group closes before the item that would take it over the weight budget
    ``clamp(ceil(sum / target_parts), min_weight, max_weight)``, or past ``max_count`` items; an
    item heavier than the budget is a group of its own. ``target_parts=1`` cuts only at the maxima.

    Returns the groups as ranges of item positions, covering ``0..len(weights)`` in order (an
    empty list for no items). A function of the weights only (never of the worker count).
    """
    if target_parts < 1:
        raise ValueError(f"target_parts must be >= 1 (got {target_parts})")
    n = len(weights)
    if n == 0:
        return []
    budget = min(max_weight, max(min_weight, math.ceil(sum(weights) / target_parts)))
    count = n if max_count is None else max(1, max_count)
    groups: list[range] = []
    start, weight = 0, 0
    for i, w in enumerate(weights):
        if i > start and (i - start >= count or weight + w > budget):
            groups.append(range(start, i))
            start, weight = i, 0
        weight += w
    groups.append(range(start, n))
    return groups
