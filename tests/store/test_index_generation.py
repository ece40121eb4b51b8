"""An index read is one rebuild's tables, never one rebuild's entries with another's chains
(review R2 s24 #2). ``rebuild_index`` puts each ``index/<table>.arrow`` in place with its own
rename (``entries.arrow`` last) and the reader read ``entries.arrow`` first: an open during the
renames paired the old entries with the new chains (R2: 24 of 37,763 opens; 2 of 13,508 answers of
the lookup service whose chains did not tile the entry's tokens). Now every file of one rebuild
carries one generation id and the reader reads again until its files agree.

A real store of two structure parts that hold two versions of the same entry, ``5y2e`` (the real
5y2e, then 1A8O's structure under that name: 47 and 70 tokens, as R2 saw them). Index A is
built from the first part alone (the second renamed to a temp name, which readers and rebuilds
ignore), index B from both.
"""

from __future__ import annotations

import collections
import os
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from featurecache.store.index import rebuild_index
from featurecache.store.reader import LocalStore
from tests.conftest import REPO, STRUCTURES, build_store

ID = "5y2e"
#: the two versions' token counts (the real files: 5y2e.cif and 1A8O.cif)
TOKENS_A, TOKENS_B = 47, 70


@pytest.fixture(scope="module")
def two_versions(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("generations")
    pdb = root / "pdb"
    pdb.mkdir()
    shutil.copy(STRUCTURES / "5y2e.cif", pdb / "5y2e.cif")
    store = root / "store"
    build_store(store, pdb, workers=1, part_size=1)
    shutil.copy(STRUCTURES / "1A8O.cif", pdb / "5y2e.cif")  # same name, another structure
    build_store(store, pdb, workers=1, part_size=1)
    parts = sorted(p.name for p in (store / "parts").iterdir() if p.name.startswith("s-"))
    assert len(parts) == 2, parts
    return store


def _hide(store: Path, part: str) -> None:
    os.rename(store / "parts" / part, store / "parts" / f".tmp-hidden-{part}")


def _unhide(store: Path, part: str) -> None:
    os.rename(store / "parts" / f".tmp-hidden-{part}", store / "parts" / part)


def _index_files(store: Path) -> dict[str, bytes]:
    return {f.name: f.read_bytes() for f in sorted((store / "index").glob("*.arrow"))}


def _tear(reader: LocalStore) -> str | None:
    """What is inconsistent between the reader's entries and chains tables (None: nothing): each
    entry's chain rows are of its part and tile its tokens."""
    e, c = reader.entries.to_pydict(), reader.chains.to_pydict()
    parts: dict[str, set[str]] = collections.defaultdict(set)
    tokens: collections.Counter[str] = collections.Counter()
    for eid, part, n in zip(c["entry_id"], c["part"], c["token_count"], strict=True):
        parts[eid].add(part)
        tokens[eid] += n
    for eid, part, n in zip(e["id"], e["part"], e["token_count"], strict=True):
        if parts[eid] != {part} or tokens[eid] != n:
            return f"entry {eid}: part {part}, {n} tokens; its chains: parts {sorted(parts[eid])}, {tokens[eid]} tokens"
    return None


def _two_indexes(store: Path) -> tuple[dict[str, bytes], dict[str, bytes]]:
    """The index files of A (the first part only) and of B (both parts), as rebuild_index writes them.
    (``finished=False``, as a first build's progress index is written: every part it finds is in
    it; a finished store's index would hold back a structure part that went and came back as one
    not yet through a build's MSA and chem stages.)"""
    second = sorted(p.name for p in (store / "parts").iterdir() if p.name.startswith("s-"))[-1]
    _hide(store, second)
    try:
        rebuild_index(store, incremental=False, finished=False)
        a = _index_files(store)
    finally:
        _unhide(store, second)
    rebuild_index(store, incremental=False, finished=False)
    return a, _index_files(store)


def _put(store: Path, name: str, data: bytes) -> None:
    """One file put in place as the writer does: a temp file, then a rename over the old one."""
    tmp = store / "index" / f".{name}.test.tmp"
    tmp.write_bytes(data)
    os.replace(tmp, store / "index" / name)


def test_an_open_during_the_renames_reads_one_generation(two_versions: Path) -> None:
    """The window held open: index A in place, then every file of B renamed in but entries.arrow
    (the writer's order). A reader opened now (in a thread) must not pair A's entries with B's
    chains; once entries.arrow of B is in place, its open gives B whole."""
    store = two_versions
    a, b = _two_indexes(store)
    assert a["chains.arrow"] != b["chains.arrow"] and a["entries.arrow"] != b["entries.arrow"]
    for name, data in a.items():
        _put(store, name, data)
    for f in (store / "index").glob("*.arrow"):
        if f.name not in a:
            f.unlink()
    assert _tear(LocalStore(store)) is None  # A alone is consistent
    assert int(LocalStore(store).entries.column("token_count")[0].as_py()) == TOKENS_A
    for name, data in b.items():
        if name != "entries.arrow":
            _put(store, name, data)
    got: dict[str, object] = {}

    def open_now() -> None:
        try:
            reader = LocalStore(store)
            got["tear"] = _tear(reader)
            got["tokens"] = int(reader.entries.column("token_count")[0].as_py())
        except Exception as exc:  # (shown by the assertion below)
            got["error"] = exc

    thread = threading.Thread(target=open_now)
    thread.start()
    thread.join(timeout=1.0)  # (a reader that waits for one generation is still waiting here)
    _put(store, "entries.arrow", b["entries.arrow"])
    thread.join(timeout=30)
    assert not thread.is_alive()
    assert "error" not in got, got
    assert got["tear"] is None, got["tear"]
    assert got["tokens"] == TOKENS_B  # B, once its entries are in place


#: A and B rebuilt this many times each
ROUNDS = 15
WRITER = """
import os, sys
from pathlib import Path
from featurecache.store.index import rebuild_index
store, second, rounds = Path(sys.argv[1]), sys.argv[2], int(sys.argv[3])
parts = store / "parts"
for i in range(rounds):
    os.rename(parts / second, parts / f".tmp-hidden-{second}")
    rebuild_index(store, finished=False)
    os.rename(parts / f".tmp-hidden-{second}", parts / second)
    rebuild_index(store, finished=False)
print("done", rounds)
"""


def test_opens_while_another_process_rebuilds_never_tear(two_versions: Path, tmp_path: Path) -> None:
    """R2's reproduction, bounded: another process alternates the index between A and B with the
    real rebuild_index (no sleeps; ``finished=False`` as in :func:`_two_indexes`) while this one
    opens the store in a loop; every open must be one generation's tables. (The code before this
    change tore 39 to 46 of about 650 opens in each of three runs here.)"""
    store = two_versions
    second = sorted(p.name for p in (store / "parts").iterdir() if p.name.startswith("s-"))[-1]
    script = tmp_path / "writer.py"
    script.write_text(WRITER)
    writer = subprocess.Popen([sys.executable, str(script), str(store), second, str(ROUNDS)], cwd=REPO,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)  # fmt: skip
    opens, torn, errors = 0, [], []
    deadline = time.monotonic() + 60
    try:
        while writer.poll() is None and time.monotonic() < deadline:
            try:
                reader = LocalStore(store)
            except Exception as exc:  # (listed below)
                errors.append(f"{type(exc).__name__}: {exc}")
                continue
            opens += 1
            tear = _tear(reader)
            if tear is not None:
                torn.append(tear)
    finally:
        if writer.poll() is None:
            writer.kill()
        out, err = writer.communicate(timeout=30)
    assert writer.returncode == 0 and f"done {ROUNDS}" in out, err[-3000:]
    assert opens >= 50, opens  # the reads did overlap the rebuilds
    assert not errors, errors[:3]
    assert not torn, f"{len(torn)} of {opens} opens tore: {torn[:3]}"
