"""A reader bug in verify's components checks is an ``UNCHECKED`` line that ``--repair`` keeps, as
for entries and MSAs (review R32a s47 #4).

The load of the component table and the content check of the reference conformers each caught
the error themselves: the line said "could not be checked (KeyError: …)" but was printed as
``MISMATCH``, and ``--repair`` ended with "nothing --repair can fix: the 1 MISMATCH line above".
The exit status stays 4: the store was not verified.

A real build (1 worker, one input per structure part) of the repo's sample 1psm and 2q2k with the
sample CCD; the bug is a monkeypatched reader function; real CLI runs (the click app in this
process: :func:`tests.conftest.cli_in_process`)."""

from __future__ import annotations

from pathlib import Path

import pytest

import featurecache.store.components as components
from tests.conftest import cli_in_process, store_snapshot

BUG = "could not be checked (KeyError: 'simulated reader bug')"
#: the reader function patched -> the line verify prints of it
CHECKS = {
    "load_component_table": f"UNCHECKED components: {BUG}",
    "component_content_problems": f"UNCHECKED component contents: {BUG}",
}


@pytest.fixture
def store(two_entry_copy: Path) -> Path:
    return two_entry_copy


def _bug(*args: object, **kwargs: object) -> object:
    raise KeyError("simulated reader bug")  # a bug: a lookup of a renamed key


@pytest.mark.parametrize("reader", sorted(CHECKS))
def test_verify_prints_an_unchecked_line(store: Path, monkeypatch: pytest.MonkeyPatch, reader: str) -> None:
    monkeypatch.setattr(components, reader, _bug)
    run = cli_in_process("verify", str(store), "--no-progress")
    assert run.returncode == 4, run.stdout + run.stderr
    assert run.stdout.splitlines() == [CHECKS[reader]], run.stdout
    assert "`featurecache verify --repair` keeps the 1 UNCHECKED line above" in run.stderr, run.stderr
    assert "to repair:" not in run.stderr  # no damage: no repair to advise


@pytest.mark.parametrize("reader", sorted(CHECKS))
def test_the_repair_keeps_it_and_says_so(store: Path, monkeypatch: pytest.MonkeyPatch, reader: str) -> None:
    before = store_snapshot(store)
    monkeypatch.setattr(components, reader, _bug)
    run = cli_in_process("verify", str(store), "--repair", "--no-progress")
    assert run.returncode == 4, run.stdout + run.stderr  # not verified
    lines = run.stdout.splitlines()
    assert lines[:-1] == [CHECKS[reader]], run.stdout
    assert lines[-1].startswith("nothing to repair: --repair keeps the 1 UNCHECKED line above: its check stopped "
                                "on an error that does not say the data is unreadable"), lines[-1]  # fmt: skip
    assert "MISMATCH" not in run.stdout and "nothing --repair can fix" not in run.stdout
    monkeypatch.undo()
    assert store_snapshot(store) == before
