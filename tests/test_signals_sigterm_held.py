"""featurecache.signals.sigterm_held: a SIGTERM that quiet_on_sigint turns into an exception is
raised when the held block ends, not inside it; the hooks run at once. In a process of its own
(signal handlers are process-wide), with real signals sent to itself."""

from __future__ import annotations

import json
import subprocess
import sys

from tests.conftest import REPO

SCRIPT = r"""
import json, os, signal
from featurecache.signals import quiet_on_sigint, sigterm_held

class Terminated(KeyboardInterrupt):
    pass

events = []
with quiet_on_sigint(sigterm=Terminated) as hooks:
    hooks.append(lambda: events.append("hook"))
    try:  # held: the block runs to its end, then the exception
        with sigterm_held():
            os.kill(os.getpid(), signal.SIGTERM)
            events.append("after the signal, inside")
        events.append("after the block")
    except Terminated as exc:
        events.append(("raised", exc.__cause__ is None))
    try:  # the block fails after the signal: the signal's exception, from the failure
        with sigterm_held():
            os.kill(os.getpid(), signal.SIGTERM)
            raise ValueError("the step failed")
    except Terminated as exc:
        events.append(("raised", type(exc.__cause__).__name__))
    try:  # not held: raised where the signal lands
        os.kill(os.getpid(), signal.SIGTERM)
        events.append("not reached")
    except Terminated:
        events.append("raised at once")
    with sigterm_held():  # no signal: nothing raised
        events.append("quiet block")
print(json.dumps(events))
"""


def test_a_held_sigterm_is_raised_when_the_block_ends() -> None:
    r = subprocess.run([sys.executable, "-c", SCRIPT], cwd=REPO, capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    # the hooks run once, at the first signal (quiet_on_sigint), before the block goes on
    assert json.loads(r.stdout) == [
        "hook", "after the signal, inside", ["raised", True],
        ["raised", "ValueError"],
        "raised at once",
        "quiet block",
    ]  # fmt: skip
