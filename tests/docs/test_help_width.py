"""``featurecache <command> --help`` at 80 columns (a terminal's default, and the width rich uses
when stdout is not a terminal) shows every option's full name. ``train --help`` cut
``--checkpoint-every`` to ``--checkpoint-eve…``: --max-atoms's ``[x>=1]`` range widened the type
column and rich narrowed the name column (review R1 #7)."""

from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest
import typer

from featurecache.cli import app

COMMANDS = ["train", "build", "verify", "prune", "serve", "info", "show", "report", "plan"]


@pytest.mark.parametrize("name", COMMANDS)
def test_help_at_80_columns_shows_every_option_name(name: str) -> None:
    command = typer.main.get_command(app).commands[name]  # type: ignore[attr-defined]
    names = [o for p in command.params for o in (*p.opts, *p.secondary_opts) if o.startswith("--")]
    assert name != "train" or "--checkpoint-every" in names
    env = {**os.environ, "COLUMNS": "80", "TERM": "dumb"}
    proc = subprocess.run([sys.executable, "-m", "featurecache.cli", name, "--help"], env=env, capture_output=True,
                          text=True, timeout=120)  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert max(len(line) for line in proc.stdout.splitlines()) <= 80
    cut = [line for line in proc.stdout.splitlines() if line.startswith("│ -") and "…" in line.split()[1]]
    assert cut == [], "\n".join(cut)
    shown = proc.stdout.replace(",", " ").split()
    missing = [n for n in names if n not in shown]
    assert missing == [], proc.stdout
    # every environment variable the help names is shown in full (review RF1 s24 #6: train's --token
    # help read FEATURECACHE_AUTH_TOKEN_F…, the variable's name wider than the help column)
    told = " ".join([command.help or "", *(getattr(p, "help", None) or "" for p in command.params)])
    variables = set(re.findall(r"FEATURECACHE_[A-Z0-9_]+", told))
    assert name != "train" or "FEATURECACHE_AUTH_TOKEN_FILE" in variables
    printed = set(re.findall(r"FEATURECACHE_[A-Z0-9_]+", proc.stdout))
    assert variables <= printed, (sorted(variables - printed), proc.stdout)


def test_max_atoms_below_one_is_still_a_usage_error(tmp_path: object) -> None:
    from typer.testing import CliRunner

    bad = CliRunner().invoke(app, ["train", "--store", "nowhere", "--max-atoms", "0", "--device", "cpu"])
    assert bad.exit_code == 2 and "--max-atoms" in bad.output and "at least 1" in bad.output, bad.output
