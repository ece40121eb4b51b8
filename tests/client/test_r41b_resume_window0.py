"""A resumed stream hands out each unresolved position once, also when positions resolve while it runs.

``ConsumedPositions.pending()`` walked the share lazily, skipping only positions in ``above``; marking
an earlier position moves the watermark past resolved ones and removes them from ``above``, so the
walk then handed them out again. With ``window=0`` (``train --in-order``) a resumed
``FeatureLoader(num_workers=0)`` redrew positions the trainer had already consumed: state
``{'watermark': 0, 'resolved_above': [2, 3]}`` gave ``[0, 1, 2, 3]`` instead of ``[0, 1, 4, 5]``
(found by fix helper F41b, session 51).
"""

from __future__ import annotations

from itertools import islice
from pathlib import Path

import pytest

from featurecache.client import FeatureDataset
from featurecache.client.loader import ConsumedPositions


def test_pending_skips_positions_resolved_while_it_runs() -> None:
    c = ConsumedPositions(0, None, 1, 0)
    c.load({"watermark": 0, "resolved_above": [2, 3]})
    got = []
    for p in c.pending():
        got.append(p)
        c.mark(p)  # the consumer resolves each position as it is handed out
        if len(got) == 4:
            break
    assert got == [0, 1, 4, 5]


@pytest.mark.parametrize("infinite", [True, False])
def test_a_resumed_in_order_loader_draws_no_consumed_position(client_store: Path, infinite: bool) -> None:
    kw = dict(samples_per_epoch=8, crop_size=32, infinite=infinite, workers=1, window=0)
    with FeatureDataset(client_store, **kw) as a:
        a.consume({"position": [2, 3]})  # consumed out of order: 0 and 1 still pending
        state = a.state_dict()
    with FeatureDataset(client_store, **kw) as b:
        b.load_state_dict(state)
        got = [int(p) for batch in islice(b.loader(batch_size=2), 3) for p in batch["position"].tolist()]
    assert got == [0, 1, 4, 5, 6, 7]
