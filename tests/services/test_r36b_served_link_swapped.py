"""``featurecache serve LINK`` follows the link: a store swapped in by replacing it is served
(review R36b s49 #2).

``ln -s new current.tmp && mv -T current.tmp current`` is the usual atomic way to put a new store in
place. The server resolved the link once, at start, and so served the old target for ever; once the
old target was deleted, ``/v1/ready`` answered 503 for ever while ``/v1/health`` said ok. It now
keeps the path as given (absolute, its links kept): its per-request look at the root ``zarr.json``
goes through the link and sees the new store, which it opens as it opens a store renamed into place.
"""

from __future__ import annotations

import os
import shutil
import time
from pathlib import Path

import httpx

from services.lookup.server import background_server


def _ready_entries(http: httpx.Client, want: int, within: float) -> int | None:
    """``/v1/ready``'s entry count once it is ``want``, or the last seen after ``within`` seconds."""
    deadline = time.monotonic() + within
    last = None
    while True:
        r = http.get("/v1/ready")
        last = r.json().get("entries") if r.status_code == 200 else r.status_code
        if last == want or time.monotonic() > deadline:
            return last
        time.sleep(0.1)


def test_a_link_swapped_to_another_store_serves_it(
    sample_store: Path, two_entry_store: Path, tmp_path: Path
) -> None:
    blue, green = tmp_path / "blue", tmp_path / "green"
    shutil.copytree(sample_store, blue)
    shutil.copytree(two_entry_store, green)
    current = tmp_path / "current"
    current.symlink_to(blue)
    env = {"FEATURECACHE_STORE_CHECK_SECONDS": "0.5"}
    with background_server(current, env=env) as url, httpx.Client(base_url=url, timeout=30) as http:
        assert http.get("/v1/ready").json()["entries"] == 6
        (tmp_path / "current.tmp").symlink_to(green)
        os.replace(tmp_path / "current.tmp", current)  # atomic, as `mv -T current.tmp current`
        assert _ready_entries(http, 2, within=10) == 2
        assert http.get("/v1/entries/1psm").status_code == 200
        assert http.get("/v1/entries/102m").status_code == 404
        shutil.rmtree(blue)  # the old target gone: nothing of it was still served
        assert _ready_entries(http, 2, within=2) == 2
        assert http.get("/v1/health").status_code == 200


def test_a_path_through_a_link_and_dot_dot_serves_where_it_leads(
    sample_store: Path, two_entry_store: Path, tmp_path: Path
) -> None:
    """``a/lnk/../store`` with ``lnk -> b/sub`` leads to ``b/store``, as the system follows it; the
    path made absolute by ``os.path.abspath`` cancelled ``lnk/..`` as text and served ``a/store``
    (review R37 s49 #4)."""
    (tmp_path / "a").mkdir()
    (tmp_path / "b" / "sub").mkdir(parents=True)
    shutil.copytree(sample_store, tmp_path / "a" / "store")  # 6 entries: where the text points
    shutil.copytree(two_entry_store, tmp_path / "b" / "store")  # 2 entries: where the path leads
    (tmp_path / "a" / "lnk").symlink_to(tmp_path / "b" / "sub")
    given = Path(f"{tmp_path / 'a' / 'lnk'}/../store")
    with background_server(given) as url, httpx.Client(base_url=url, timeout=30) as http:
        assert http.get("/v1/ready").json()["entries"] == 2
