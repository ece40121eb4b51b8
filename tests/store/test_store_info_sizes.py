"""``store_info``'s byte counts: right (against ``os.walk``/``os.lstat``), and summed once per part.

A 200k-entry store has ~13k parts and ~200k files; walking them on every ``info()`` took 23–52 s
(``GET /v1/info`` timed out). Parts are never written again once committed, so the second
``info()`` of an unchanged store must not look inside any part; a part added, or removed and
written again under the same name, is summed afresh.
"""

from __future__ import annotations

import os
import shutil
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from featurecache import open_store
from featurecache.store.info import store_info

# ------------------------------------------------------------------ directories this process lists
_listing: list[str] | None = None
_hook_installed = False


def _audit(event: str, args: tuple[Any, ...]) -> None:
    if _listing is not None and event in ("os.scandir", "os.listdir") and args:
        _listing.append(os.path.abspath(os.fsdecode(args[0] if args[0] is not None else ".")))


@contextmanager
def listed_dirs() -> Iterator[list[str]]:
    """Every directory passed to ``os.scandir``/``os.listdir`` in this process while the block runs
    (pathlib's ``rglob``/``iterdir`` and ``os.walk`` go through them)."""
    global _listing, _hook_installed
    if not _hook_installed:
        sys.addaudithook(_audit)  # cannot be removed; idle outside the block
        _hook_installed = True
    _listing = []
    try:
        yield _listing
    finally:
        _listing = None


def _reference_bytes(path: Path) -> int:
    """Bytes of the regular files under ``path``, by os.walk + lstat (the independent count)."""
    total = 0
    for d, _, files in os.walk(path):
        for f in files:
            st = os.lstat(os.path.join(d, f))
            if os.path.isfile(os.path.join(d, f)) and not os.path.islink(os.path.join(d, f)):
                total += st.st_size
    return total


def _check_sizes(store: Path, listed: list[str] | None = None) -> dict[str, Any]:
    """store_info's sizes and part counts against the reference; ``listed``: record what the
    ``store_info`` call itself lists (the store opened first)."""
    reader = open_store(store)
    if listed is None:
        info = store_info(reader)
    else:
        with listed_dirs() as seen:
            info = store_info(reader)
        listed.extend(seen)
    assert info["bytes"] == {
        "total": _reference_bytes(store),
        "parts": _reference_bytes(store / "parts"),
        "index": _reference_bytes(store / "index"),
    }
    kinds: dict[str, int] = {}
    for p in (store / "parts").iterdir():
        if p.is_dir() and not p.name.startswith("."):
            kinds[p.name.split("-")[0]] = kinds.get(p.name.split("-")[0], 0) + 1
    assert info["parts"] == kinds
    return info


def _inside_a_part(listed: list[str], store: Path) -> list[str]:
    parts = os.path.abspath(store / "parts") + os.sep
    return [d for d in listed if d.startswith(parts)]


def test_sizes_match_a_walk_and_an_unchanged_store_is_not_walked_again(
    sample_store: Path, tmp_path: Path
) -> None:
    store = tmp_path / "store"
    shutil.copytree(sample_store, store)
    first = _check_sizes(store)
    assert first["bytes"]["parts"] > 0 and first["parts"].get("s", 0) >= 1

    reader = open_store(store)
    with listed_dirs() as listed:
        again = store_info(reader)
    assert again["bytes"] == first["bytes"]
    assert (store / "parts").is_dir() and os.path.abspath(store / "parts") in listed  # the hook sees it
    assert _inside_a_part(listed, store) == []


def test_a_part_added_or_written_again_is_summed_afresh(sample_store: Path, tmp_path: Path) -> None:
    store = tmp_path / "store"
    shutil.copytree(sample_store, store)
    before = _check_sizes(store)
    structure_parts = sorted(p for p in (store / "parts").iterdir() if p.name.startswith("s-"))
    src = structure_parts[0]
    # a part added (as a build extending the store adds one): counted, and only it is walked
    added = store / "parts" / "s-000900"
    shutil.copytree(src, added)
    listed: list[str] = []
    after = _check_sizes(store, listed)
    assert after["bytes"]["parts"] == before["bytes"]["parts"] + _reference_bytes(src)
    assert after["parts"]["s"] == before["parts"]["s"] + 1
    walked = {Path(d).relative_to(store / "parts").parts[0] for d in _inside_a_part(listed, store)}
    assert walked == {"s-000900"}
    # the same name removed and written again with other contents (a rebuild after rm -rf)
    shutil.rmtree(added)
    shutil.copytree(src, added)
    extra = added / "_index" / "padding.bin"
    extra.write_bytes(b"x" * 12345)
    _check_sizes(store)
    # a part removed
    shutil.rmtree(added)
    assert _check_sizes(store)["bytes"] == before["bytes"]
