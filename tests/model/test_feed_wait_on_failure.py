"""Time blocked on a data source that then fails or ends is counted as data wait (review R17 s40
#2): ``featurecache train`` on a paused lookup service logged its last step as 38.4 s of compute
and 0.0 s of data wait, because the wait was added only when a batch arrived."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest

from featurecache.model.train import _Feed


def _slow_then(end: BaseException) -> Iterator[dict[str, Any]]:
    time.sleep(0.3)
    raise end
    yield {}  # a generator  # pragma: no cover


def test_a_failing_fetch_counts_its_wait() -> None:
    feed = _Feed(_slow_then(ConnectionError("service gone")), lambda raw: {})
    with pytest.raises(ConnectionError):
        feed.next()
    wait, exposed = feed.settle()
    assert wait >= 0.3 and exposed >= 0.3, (wait, exposed)


def test_an_ending_fetch_counts_its_wait() -> None:
    def ends() -> Iterator[dict[str, Any]]:
        time.sleep(0.3)
        return
        yield {}  # pragma: no cover

    feed = _Feed(ends(), lambda raw: {})
    assert feed.next() is None
    wait, _exposed = feed.settle()
    assert wait >= 0.3, wait
