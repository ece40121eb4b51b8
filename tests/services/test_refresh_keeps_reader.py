"""A refresh that finds the index files of different generations keeps serving the index it had
(review RF3 s24 #2). A rebuild killed while it renames its new index files into place (or one
slow to) leaves ``index/*.arrow`` of two builds; the service used to drop the reader it served
and, under its lock, read the torn index for 5 s at every retry: each request waited about 5 s,
then got 503, until a build was run.

Real stores: ``old`` built from 1A8O, ``new`` a copy of it extended by a second build with 5y2e
(another generation). A real uvicorn serves ``old``; RF3's repro: ``new``'s chains.arrow renamed
over ``old``'s. Requests keep answering 1A8O as before, from the same index; once ``new``'s parts
and its whole index are put in place, 5y2e is served.
"""

from __future__ import annotations

import logging
import os
import shutil
import time
from pathlib import Path

import httpx
import pytest

from tests.conftest import STRUCTURES, build_store

OLD_ID, NEW_ID = "1A8O", "5y2e"


def _put(src: Path, dst: Path) -> None:
    """``src`` copied over ``dst`` as a writer does: a temp file, then one rename."""
    tmp = dst.parent / f".{dst.name}.test.tmp"
    shutil.copyfile(src, tmp)
    os.replace(tmp, dst)


@pytest.fixture(scope="module")
def two_builds(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    root = tmp_path_factory.mktemp("torn")
    pdb = root / "pdb"
    pdb.mkdir()
    shutil.copy(STRUCTURES / f"{OLD_ID}.cif", pdb / f"{OLD_ID}.cif")
    old = root / "old"
    build_store(old, pdb, workers=1)
    new = root / "new"
    shutil.copytree(old, new)
    shutil.copy(STRUCTURES / f"{NEW_ID}.cif", pdb / f"{NEW_ID}.cif")
    build_store(new, pdb, workers=1)
    return old, new


def test_a_torn_index_keeps_the_previous_reader_served(
    two_builds: tuple[Path, Path], tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    from services.lookup.server import ThreadedServer
    from services.lookup.settings import Settings
    from services.lookup.state import INDEX_HEADER

    old, new = two_builds
    store = tmp_path / "store"
    shutil.copytree(old, store)
    assert (new / "index" / "chains.arrow").read_bytes() != (store / "index" / "chains.arrow").read_bytes()
    settings = Settings(store_path=store, store_check_seconds=0.1, store_retry_seconds=1.0)
    with ThreadedServer(settings) as url, httpx.Client(base_url=url, timeout=60) as http:
        before = http.get(f"/v1/entries/{OLD_ID}")
        assert before.status_code == 200, before.text
        served_id = before.headers[INDEX_HEADER]
        assert http.get(f"/v1/entries/{NEW_ID}").status_code == 404

        caplog.set_level(logging.DEBUG, logger="services.lookup.state")
        _put(new / "index" / "chains.arrow", store / "index" / "chains.arrow")  # RF3's repro
        time.sleep(0.3)  # past the next index check
        end = time.monotonic() + 2.5  # past two retries (store_retry_seconds)
        answers = 0
        while time.monotonic() < end:
            got = http.get(f"/v1/entries/{OLD_ID}")
            assert got.status_code == 200, got.text
            assert got.content == before.content
            assert got.headers[INDEX_HEADER] == served_id
            answers += 1
            time.sleep(0.1)
        ready = http.get("/v1/ready")
        assert ready.status_code == 200, ready.text
        assert http.get(f"/v1/entries/{NEW_ID}").status_code == 404  # the old index, whole
        warnings = [
            r for r in caplog.records if r.levelno >= logging.WARNING and r.name == "services.lookup.state"
        ]
        assert len(warnings) == 1, [r.getMessage() for r in warnings]
        assert "different builds" in warnings[0].getMessage()
        assert answers >= 3

        # the new build's parts, then its whole index (entries.arrow last, as a rebuild renames them)
        for part in (new / "parts").iterdir():
            if not (store / "parts" / part.name).exists():
                shutil.copytree(part, store / "parts" / part.name)
        files = sorted((new / "index").glob("*.arrow"), key=lambda f: f.name == "entries.arrow")
        for f in files:
            _put(f, store / "index" / f.name)
        deadline = time.monotonic() + 30
        while (got := http.get(f"/v1/entries/{NEW_ID}")).status_code != 200 and time.monotonic() < deadline:
            time.sleep(0.1)
        assert got.status_code == 200, got.text
        assert got.headers[INDEX_HEADER] != served_id
        again = http.get(f"/v1/entries/{OLD_ID}")
        assert again.status_code == 200 and again.content == before.content
