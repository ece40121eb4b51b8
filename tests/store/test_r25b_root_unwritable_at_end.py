"""A store root that cannot be written when a build stamps it at its very end (review R25b s43 #4):
the message names STORE/zarr.json, not zarr's temp name for it (``zarr.<uuid>.partial``, a file
that never exists), and it is a warning: the parts and the index are complete, and only the
``updated`` time (set already when the build started) keeps the start's value. A real store (the
sample) whose root directory is made immutable (``chattr +i``: the tests run as root, which chmod
does not stop), and the build's own last step (``build.run._publish``)."""

from __future__ import annotations

import json
import logging
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from featurecache.build.run import _publish
from featurecache.store.index import store_write_error
from featurecache.store.root import mark_updated
from featurecache.store.verify import verify_store


def test_a_write_error_names_the_file_zarr_was_replacing(tmp_path: Path) -> None:
    temp = tmp_path / "zarr.7485eb82852844eeb17ca72fa646ca03.partial"
    message = str(store_write_error(PermissionError(1, "Operation not permitted", str(temp)), tmp_path))
    assert message == f"cannot write the store at {tmp_path / 'zarr.json'}: Operation not permitted"
    chunk = tmp_path / "atoms" / "c" / "0.0123456789abcdef0123456789abcdef.partial"
    message = str(store_write_error(OSError(28, "No space left on device", str(chunk)), tmp_path))
    assert message == f"cannot write the store at {tmp_path / 'atoms' / 'c' / '0'}: No space left on device"


@pytest.fixture
def immutable_root(sample_store: Path, tmp_path: Path) -> Iterator[Path]:
    store = Path(shutil.copytree(sample_store, tmp_path / "store"))
    if shutil.which("chattr") is None or subprocess.run(["chattr", "+i", str(store)], check=False).returncode:
        pytest.skip("chattr +i is not available here")
    try:
        yield store
    finally:
        subprocess.run(["chattr", "-i", str(store)], check=False)


def test_the_builds_last_stamp_on_an_unwritable_root_is_a_warning(
    immutable_root: Path, caplog: pytest.LogCaptureFixture
) -> None:
    store = immutable_root
    before = json.loads((store / "zarr.json").read_text())["attributes"]["updated"]
    with caplog.at_level(logging.WARNING, logger="featurecache.store.root"):
        assert mark_updated(store) is False
        tables = _publish(store, finished=True)  # the build's end: no exception (exit 0)
    assert tables["entries"].num_rows
    said = [r.getMessage() for r in caplog.records]
    expected = (
        f"cannot write the store at {store / 'zarr.json'}: Operation not permitted: the store is complete"
    )
    assert len(said) == 2 and all(m.startswith(expected) for m in said), said
    assert not any(".partial" in m for m in said), said
    assert json.loads((store / "zarr.json").read_text())["attributes"]["updated"] == before
    assert verify_store(store, workers=1) == []
