"""A prune killed between setting its parts aside and rebuilding the index (review R25b s43 #1):
the next prune finishes the job (deletes what the killed one set aside, counts those parts and
bytes), a build's cleanup removes the killed prune's copy of the index too and says what it
removed, ``info`` warns about the bytes, and a Ctrl-C or SIGTERM of a prune says in one line what
state the store is in.

A real store built in two steps, as tests/store/test_prune.py builds it (the first 102m replaced,
so part s-000000 holds nothing live); real prunes, killed in a child process with ``os._exit`` (as
SIGKILL would) where ``rebuild_index`` would start.
"""

from __future__ import annotations

import logging
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest

import featurecache.store.prune as prune_module
from featurecache.store.index import complete_parts
from featurecache.store.leftovers import leftover_note
from featurecache.store.prune import prune_store
from featurecache.store.root import remove_leftovers
from featurecache.store.verify import repair_store, verify_store
from tests.conftest import cli_in_process

#: a prune in a child process that dies (``os._exit``, no cleanup, as SIGKILL) once its parts are
#: set aside, before the index is rebuilt
_KILLED_PRUNE = """
import os, sys
import featurecache.store.prune as p
def die(*args, **kwargs):
    os._exit(137)
p.rebuild_index = die
p.prune_store(sys.argv[1])
"""


def _killed_prune(store: Path) -> list[str]:
    """Run :data:`_KILLED_PRUNE` on ``store``; the parts it set aside."""
    r = subprocess.run([sys.executable, "-c", _KILLED_PRUNE, str(store)], capture_output=True, text=True,
                       timeout=300, check=False)  # fmt: skip
    assert r.returncode == 137, r.stderr
    aside = sorted(p.name for p in (store / "parts").glob(".tmp-pruned-*"))
    assert aside and list(store.glob(".index-saved-*")), (aside, r.stderr)
    return [n.removeprefix(".tmp-pruned-").rsplit("-", 1)[0] for n in aside]


def _index_bytes(store: Path) -> dict[str, bytes]:
    return {f.name: f.read_bytes() for f in sorted((store / "index").glob("*.arrow"))}


def test_the_next_prune_finishes_a_killed_one(replaced_store: Path, tmp_path: Path) -> None:
    store = Path(shutil.copytree(replaced_store, tmp_path / "store"))
    index = _index_bytes(store)
    aside = _killed_prune(store)
    assert "s-000000" in aside
    assert _index_bytes(store) == index and verify_store(store) == []

    note = leftover_note(store)  # what `info` warns about
    assert note is not None and f"{len(aside)} part(s) an interrupted prune had set aside" in note, note
    info = cli_in_process("info", str(store))
    assert info.returncode == 0 and "left by interrupted commands" in info.stderr, info.stderr

    dry = prune_store(store, dry_run=True)
    assert dry.parts == aside and dry.interrupted_earlier == aside and dry.bytes > 0
    result = prune_store(store)
    assert result.parts == aside and result.interrupted_earlier == aside, result
    assert result.bytes == dry.bytes > 0
    assert not [p for p in (store / "parts").iterdir() if p.name.startswith(".")]
    assert not list(store.glob(".index-saved-*"))
    assert leftover_note(store) is None
    assert _index_bytes(store) == index and verify_store(store) == []
    assert prune_store(store).parts == []


def test_a_builds_cleanup_removes_what_a_killed_prune_left_and_names_it(
    replaced_store: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    store = Path(shutil.copytree(replaced_store, tmp_path / "store"))
    aside = _killed_prune(store)
    with caplog.at_level(logging.INFO, logger="featurecache.store.leftovers"):
        assert remove_leftovers(store) == len(aside) + 1  # the parts and the copy of the index
    said = "\n".join(r.getMessage() for r in caplog.records)
    assert f"removed {len(aside)} part(s) an interrupted prune had set aside to delete" in said, said
    assert "removed 1 cop(ies) of the index kept by an interrupted prune or verify --repair" in said, said
    assert "interrupted build" not in said, said
    assert not list(store.glob(".index-saved-*")) and not list((store / "parts").glob(".tmp-*"))


def test_a_repair_removes_what_a_killed_prune_left(replaced_store: Path, tmp_path: Path) -> None:
    store = Path(shutil.copytree(replaced_store, tmp_path / "store"))
    _killed_prune(store)
    result = repair_store(store, workers=1)
    assert not result.report.problems
    assert not list(store.glob(".index-saved-*")) and not list((store / "parts").glob(".tmp-*"))


def test_ctrl_c_of_a_prune_says_what_state_the_store_is_in(
    replaced_store: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    store = Path(shutil.copytree(replaced_store, tmp_path / "store"))
    parts = {p.name for p in complete_parts(store)}

    def interrupted(*args: object, **kwargs: object) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(prune_module, "rebuild_index", interrupted)
    with (
        caplog.at_level(logging.WARNING, logger="featurecache.store.prune"),
        pytest.raises(KeyboardInterrupt),
    ):
        prune_store(store)
    said = [r.getMessage() for r in caplog.records if r.getMessage().startswith("interrupted")]
    n = len(parts) - len({p.name for p in complete_parts(store)})
    assert n and said == [
        f"interrupted: what {store} serves is unchanged (no part the index uses was removed); {n} part(s) set "
        f"aside to be deleted are still in {store}/parts/.tmp-pruned-*: run `featurecache prune {store}` again "
        "to delete them"
    ], said
    assert not list(store.glob(".index-saved-*"))  # of no use once the prune stopped
    monkeypatch.undo()
    assert len(prune_store(store).interrupted_earlier) == n


def test_sigterm_of_a_prune_says_so_and_ends_it_by_the_signal(replaced_store: Path, tmp_path: Path) -> None:
    store = Path(shutil.copytree(replaced_store, tmp_path / "store"))
    program = """
import logging, os, signal, sys, time
import featurecache.store.prune as p
logging.basicConfig(level=logging.INFO, format="%(message)s")
def terminated(*args, **kwargs):
    os.kill(os.getpid(), signal.SIGTERM)
    time.sleep(30)
p.rebuild_index = terminated
p.prune_store(sys.argv[1])
"""
    r = subprocess.run([sys.executable, "-c", program, str(store)], capture_output=True, text=True, timeout=300,
                       check=False)  # fmt: skip
    assert r.returncode == -signal.SIGTERM, (r.returncode, r.stderr)
    lines = [line for line in r.stderr.splitlines() if line.startswith("interrupted")]
    assert len(lines) == 1 and "run `featurecache prune" in lines[0] and "Traceback" not in r.stderr, r.stderr
