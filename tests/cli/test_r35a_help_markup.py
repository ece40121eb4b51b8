"""Every bracketed name in a command's help text shows in its ``--help`` (review R35a s49 #2).

Typer renders help text as rich markup, which reads ``[build]`` as a style tag and drops it: ``build
--help`` said "unreadable store, the  extra not installed" and ``serve``, ``train`` and ``report``
"3 the  extra is not installed", where the source names the extra (``[build]``, ``[serve]``,
``[train]``, ``[report]``: what ``pip install 'featurecache[...]'`` takes). Now the brackets are
escaped. The check covers every command's description and every option's help, so a bracket added
to any of them later is caught as well.
"""

from __future__ import annotations

import re

import pytest
import typer

from featurecache.cli import app
from tests.conftest import cli_in_process

COMMANDS = typer.main.get_command(app).commands  # type: ignore[attr-defined]
#: ``[name]`` as rich markup would take it for a tag (a letter first), escaped (``\\[name]``) or not
BRACKETED = re.compile(r"\\?\[([A-Za-z][^\[\]\s]*)\]")


def _source_text(name: str) -> str:
    command = COMMANDS[name]
    return " ".join([command.help or "", *(getattr(p, "help", None) or "" for p in command.params)])


def test_the_commands_that_name_their_extra_are_all_checked() -> None:
    for name in ("build", "serve", "train", "report"):
        assert f"[{name}]" in _source_text(name), name


@pytest.mark.parametrize("name", sorted(COMMANDS))
def test_every_bracketed_name_of_a_commands_help_is_shown(name: str) -> None:
    wanted = sorted(set(BRACKETED.findall(_source_text(name))))
    r = cli_in_process(name, "--help", env={"COLUMNS": "200", "TERM": "dumb"})
    assert r.returncode == 0, r.stderr
    shown = " ".join(r.stdout.split())
    missing = [f"[{w}]" for w in wanted if f"[{w}]" not in shown]
    assert missing == [], (missing, r.stdout)
    assert "\\[" not in shown, r.stdout  # the escape itself is not shown
    if name in ("build", "serve", "train", "report"):
        assert f"the [{name}] extra" in shown, r.stdout
        assert "the  extra" not in r.stdout, r.stdout
