"""``info`` sizes a store by one ``stat`` per part, from the bytes the index recorded for each part,
and gives the same numbers as a walk of every file (review R26a s44 #6).

``featurecache info`` on a 198k-entry store (12.5k parts, 218k files) spent 3.2 of its 5 s in
``store/info.py:store_bytes`` walking every file: its part-size cache lives in the process, so a
one-shot CLI walked everything on every call, while ``index.store_bytes`` already had each part's
bytes in the index's manifest. A fresh process must now look inside no part the index recorded.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from featurecache.store import info as info_module
from featurecache.store.index import rebuild_index, recorded_part_bytes
from featurecache.store.index import store_bytes as index_store_bytes
from featurecache.store.info import store_bytes
from tests.conftest import cli_in_process
from tests.store.test_store_info_sizes import _inside_a_part, _reference_bytes, listed_dirs


@pytest.fixture
def store(sample_store: Path, tmp_path: Path) -> Path:
    """A copy of the sample store whose index's manifest records the copy's parts (a copy has new
    inodes: the rebuild records them, as the build that wrote a store does)."""
    out = tmp_path / "store"
    shutil.copytree(sample_store, out)
    rebuild_index(out, incremental=False)
    assert set(recorded_part_bytes(out)) == {p.name for p in (out / "parts").iterdir() if p.is_dir()}
    return out


def _reference(store: Path) -> dict[str, int]:
    return {
        "total": _reference_bytes(store),
        "parts": _reference_bytes(store / "parts"),
        "index": _reference_bytes(store / "index"),
    }


def _fresh_process() -> None:
    """Forget what this process sized: what a one-shot ``featurecache info`` starts from."""
    info_module._part_bytes.clear()


def test_a_fresh_process_looks_inside_no_part_the_index_recorded(store: Path) -> None:
    _fresh_process()
    with listed_dirs() as listed:
        sizes, kinds = store_bytes(store)
    assert _inside_a_part(listed, store) == []
    assert sizes == _reference(store)
    assert sizes["total"] == index_store_bytes(store)  # the build summary's number
    assert sum(kinds.values()) == len(recorded_part_bytes(store))


def test_a_part_changed_since_the_index_recorded_it_is_walked(store: Path) -> None:
    part = sorted(p for p in (store / "parts").iterdir() if p.name.startswith("s-"))[0]
    done = part / "_index" / "part.json"
    # written again under its name (a new part.json: new inode and mtime), with more bytes
    text = done.read_text()
    done.unlink()
    done.write_text(text)
    (part / "_index" / "padding.bin").write_bytes(b"x" * 12345)
    _fresh_process()
    with listed_dirs() as listed:
        sizes, _ = store_bytes(store)
    walked = {Path(d).relative_to(store / "parts").parts[0] for d in _inside_a_part(listed, store)}
    assert walked == {part.name}
    assert sizes == _reference(store)


def test_info_json_bytes_are_the_walks(store: Path) -> None:
    _fresh_process()
    run = cli_in_process("info", str(store), "--json")
    assert run.returncode == 0, run.stderr
    doc = json.loads(run.stdout)
    assert doc["bytes"] == _reference(store)
    assert doc["parts"] == {
        k: sum(1 for p in (store / "parts").iterdir() if p.is_dir() and p.name.split("-")[0] == k)
        for k in ("c", "m", "s")
        if any(p.name.startswith(f"{k}-") for p in (store / "parts").iterdir())
    }
    # and a part being written (parts/.tmp-*) is counted in full, each time
    tmp = store / "parts" / ".tmp-s-000999"
    shutil.copytree(sorted((store / "parts").glob("s-*"))[0], tmp)
    assert store_bytes(store)[0] == _reference(store)
