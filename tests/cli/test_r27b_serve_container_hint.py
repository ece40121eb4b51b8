"""The lookup server's unreadable-store error, in a container, says the chmod is for the host's
directory (review R27b s45 #10): it told the user to ``chmod -R a+rX /stores/s``, the path inside
the container, where deploy/README.md says "on the host". A command, or a server outside a
container, says it as before (tests/test_e3s27_unreadable_store_exit.py runs the real CLI as another
uid). Here the uid's access is denied by a patched ``os.access``: the tests run as root."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from featurecache.store import index
from featurecache.store.index import access_problem

HOST = ": on the host, of the directory mounted there"


def test_a_server_in_a_container_names_the_host_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = tmp_path / "s"
    store.mkdir()
    allowed = os.access
    monkeypatch.setattr(index.os, "access", lambda p, mode: False if Path(p) == store else allowed(p, mode))
    monkeypatch.setattr(index, "in_container", lambda: True)
    said = access_problem(store, store, serving=True)
    assert said is not None and f"(e.g. chmod -R a+rX {store}{HOST}), or run the server as uid" in said, said
    assert HOST not in (access_problem(store, store) or ""), "a command: as before"
    monkeypatch.setattr(index, "in_container", lambda: False)
    said = access_problem(store, store, serving=True)
    assert said is not None and f"(e.g. chmod -R a+rX {store}), or run the server" in said, said
