"""Each command's ``--help`` ends with an "Exit status:" paragraph listing the statuses that command
can return, and the code returns what README's "Exit status" section says.

The expected statuses per command are README's (section "Exit status": 0 success, 1 some inputs of
a build failed, 2 usage error = an invalid argument or option, 3 fatal = environment or store, 4
verify's mismatch, 130 Ctrl-C, 143 SIGTERM), written out here by hand: the test compares both the
help text and README's own "By command" line with this table, never one with the other. Real
``featurecache`` processes."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from services.lookup.server import free_port

REPO = Path(__file__).resolve().parents[1]

#: README "Exit status": which statuses each command can end with
EXPECTED: dict[str, set[int]] = {
    "build": {0, 1, 2, 3, 130, 143},
    "info": {0, 2, 3},
    "show": {0, 2, 3},
    "verify": {0, 2, 3, 4, 143},  # 143: review R40b s51 #1 (the orderly SIGTERM stop)
    "prune": {0, 2, 3},
    "serve": {0, 2, 3, 143},
    "train": {0, 2, 3, 130, 143},
    "report": {0, 2, 3},
    "plan": {0, 2, 3},
}
EVERY_STATUS = {0, 1, 2, 3, 4, 130, 143}


def _cli(*args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "COLUMNS": "200", "NO_COLOR": "1"}
    return subprocess.run([sys.executable, "-m", "featurecache.cli", *args], cwd=REPO, capture_output=True,
                          text=True, timeout=timeout, env=env)  # fmt: skip


def _statuses(text: str) -> set[int]:
    """The exit statuses a paragraph names: its whole numbers that are exit statuses."""
    return {int(n) for n in re.findall(r"(?<![\w./-])(\d+)(?![\w/-]|\.\d)", text)} & EVERY_STATUS


def _exit_paragraph(help_text: str) -> str:
    """The "Exit status:" paragraph of a command's help (up to the first option panel)."""
    flat = " ".join(line.strip(" │") for line in help_text.splitlines())
    start = flat.find("Exit status:")
    assert start >= 0, help_text
    end = flat.find("╭", start)
    return " ".join(flat[start : end if end >= 0 else None].split())


def test_every_command_has_a_row() -> None:
    run = _cli("--help")
    assert run.returncode == 0, run.stderr
    listed = set(re.findall(r"^│ (\w+)\s", run.stdout, flags=re.MULTILINE))
    assert set(EXPECTED) <= listed, listed  # a new command needs its row here (and in README)
    assert _statuses(_exit_paragraph(run.stdout)) == EVERY_STATUS, run.stdout


@pytest.mark.parametrize("command", sorted(EXPECTED))
def test_help_lists_the_commands_exit_statuses(command: str) -> None:
    run = _cli(command, "--help")
    assert run.returncode == 0, run.stderr
    paragraph = _exit_paragraph(run.stdout)
    assert _statuses(paragraph) == EXPECTED[command], paragraph


def test_readme_lists_the_same_statuses() -> None:
    text = " ".join((REPO / "README.md").read_text().split())
    section = text[text.index("## Exit status") :]
    by_command = section[section.index("By command:") : section.index("## ", 10)]
    found: dict[str, set[int]] = {}
    for clause in by_command.removeprefix("By command:").split(";"):
        names = re.findall(r"`(\w+)`", clause)
        for name in names:
            found[name] = _statuses(clause.split(f"`{names[-1]}`", 1)[1])
    assert found == EXPECTED, by_command


def test_show_of_an_unknown_entry_is_a_usage_error(sample_store: Path, tmp_path: Path) -> None:
    """An id the store does not hold is a bad argument (2); a store whose index is damaged is the
    store's problem (3)."""
    run = _cli("show", str(sample_store), "nope")
    assert run.returncode == 2, (run.returncode, run.stderr[-2000:])
    assert run.stdout == "" and run.stderr.strip().splitlines() == [
        f"error: no entry 'nope' in store {sample_store}"
    ], run.stderr[-2000:]

    # a PDB code for an assembly's id, an id in another case: the error names the id meant
    for typed, meant in (("721p", "721p-assembly1"), ("1a8o", "1A8O"), ("2q2j", "2q2k")):
        run = _cli("show", str(sample_store), typed)
        assert run.returncode == 2 and run.stderr.strip().splitlines() == [
            f"error: no entry {typed!r} in store {sample_store}; did you mean {meant}?"
        ], run.stderr[-2000:]

    broken = tmp_path / "store"
    shutil.copytree(sample_store, broken)
    (broken / "index" / "chains.arrow").unlink()
    run = _cli("show", str(broken), "nope")
    assert run.returncode == 3, (run.returncode, run.stderr[-2000:])
    assert "chains.arrow" in run.stderr and "Traceback" not in run.stderr, run.stderr[-2000:]


@pytest.mark.parametrize(
    ("token", "says"),
    [
        ("zq9 x7y", "whitespace or a control character"),
        ("zq9\x01x7y", "whitespace or a control character"),
        ("", "empty"),
        ("   ", "empty"),
    ],
)
def test_serve_refuses_an_invalid_token_option_as_a_usage_error(
    sample_store: Path, token: str, says: str
) -> None:
    """Before: 'a b' exited 3 like an unreadable token file, and an empty --token served without
    any token (this run then timed out)."""
    env_clean = {k: v for k, v in os.environ.items() if not k.startswith("FEATURECACHE_AUTH_TOKEN")}
    run = subprocess.run(
        [sys.executable, "-m", "featurecache.cli", "serve", str(sample_store), "--port", str(free_port()),
         "--token", token],
        cwd=REPO, capture_output=True, text=True, timeout=60, env=env_clean,
    )  # fmt: skip
    assert run.returncode == 2, (run.returncode, run.stderr[-2000:])
    lines = run.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: --token") and says in lines[0], run.stderr[-2000:]
    assert "zq9" not in lines[0] and "x7y" not in lines[0], lines  # the token is not shown


def test_serve_still_exits_3_for_a_token_variable(sample_store: Path) -> None:
    """The environment's token is not an option: an unusable one stays a fatal error (3)."""
    env = {**os.environ, "FEATURECACHE_AUTH_TOKEN": "a b"}
    env.pop("FEATURECACHE_AUTH_TOKEN_FILE", None)
    run = subprocess.run(
        [sys.executable, "-m", "featurecache.cli", "serve", str(sample_store), "--port", str(free_port())],
        cwd=REPO, capture_output=True, text=True, timeout=60, env=env,
    )  # fmt: skip
    assert run.returncode == 3, (run.returncode, run.stderr[-2000:])
    assert "FEATURECACHE_AUTH_TOKEN" in run.stderr, run.stderr[-2000:]


def test_an_interrupted_build_exits_even_when_an_exit_handler_hangs() -> None:
    """After an interrupted build's last line, a process whose exit waits on a non-daemon thread
    (here one that never ends) exits within EXIT_GRACE_S with the build's status, naming the thread.
    A full test run once saw such a build still alive 120 s after its line."""
    import textwrap

    code = textwrap.dedent("""
        import threading
        from featurecache.cli import _exit_within
        threading.Thread(target=threading.Event().wait, name="stuck-joiner").start()  # never ends
        _exit_within(0.5, 130)
    """)
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert r.returncode == 130, (r.returncode, r.stderr)
    assert "still running 0.5 s after the last line (non-daemon threads: ['stuck-joiner']" in r.stderr, (
        r.stderr
    )
