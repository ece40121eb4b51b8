"""Command-line pieces shared by the dev scripts (standard library only, so cheap to import first).

``help_exit(__doc__)``: the scripts that read ``sys.argv`` themselves call it before anything else,
so that ``-h``/``--help`` prints their usage (the docstring) and exits 0 instead of being taken for
an output path (review R24: ``ab57.py --help`` wrote a file named ``--help``).

``ran_elsewhere(...)``: a historical A/B -- one written against kernels or a generated module that
this tree does not have -- carries ``RAN_AGAINST = "<commit>"`` and, where what it needs is
missing, exits 2 with one line that names that commit and how to re-run it there (a worktree),
instead of a traceback. ``tests/build/test_benchmarks_import.py`` checks that the benchmarks use
only names this tree has, and that every ``RAN_AGAINST`` is a commit of this repository.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path
from typing import NoReturn

HELP_FLAGS = ("-h", "--help")


def help_exit(doc: str | None, argv: list[str] | None = None) -> None:
    """With ``-h`` or ``--help`` among the arguments: print the command lines that ``doc`` gives for
    this script as ``usage:``, then ``doc``, and exit 0; else return (nothing is read or written)."""
    args = sys.argv[1:] if argv is None else argv
    if not any(a in HELP_FLAGS for a in args):
        return
    name = Path(sys.argv[0]).name
    text = (doc or "").strip()
    pattern = re.compile(rf"((?:PYTHONPATH=\S+\s+)?(?:\S*/)?python3?\s.*{re.escape(name)}.*)$")
    usage = [m.group(1).strip() for line in text.splitlines() if (m := pattern.search(line))]
    print("usage: " + ("\n       ".join(usage) if usage else f"python3 benchmarks/dev/{name}"))
    if text:
        print(f"\n{text}")
    raise SystemExit(0)


def ran_elsewhere(commit: str, run: str, reason: str, there: str = "") -> NoReturn:
    """Exit 2 with one line on stderr: ``reason`` (what this tree lacks), the commit the script ran
    against (``run``: which run, e.g. "run 13") and how to run it there; ``there``: what to do in
    that worktree first, if anything."""
    short = commit[:7]
    then = f", {there}" if there else ""
    print(f"{Path(sys.argv[0]).name}: {reason}; it ran against {short} ({run}): "
          f"git worktree add /tmp/fc-{short} {short} and run it there{then}", file=sys.stderr)  # fmt: skip
    raise SystemExit(2)
