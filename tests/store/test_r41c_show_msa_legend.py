"""``show``'s MSA table explains "msa files 0 (depth 1)" only for an entry that has such a chain
(review R41c s51 #3: the legend was printed under every entry's table, also where every polymer
chain has an MSA from files). Real sample store: 102m's one protein chain has 2 alignment files;
2q2k's DNA chains have none (no MSA file is for DNA in samples/msas)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

LEGEND = "no alignment file for the chain's sequence"


def _show(store: Path, entry_id: str) -> str:
    env = {**os.environ, "COLUMNS": "200", "NO_COLOR": "1"}
    done = subprocess.run([sys.executable, "-m", "featurecache.cli", "show", str(store), entry_id],
                          capture_output=True, text=True, env=env, timeout=120)  # fmt: skip
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_the_legend_is_shown_only_where_a_chain_has_no_msa_file(sample_store: Path) -> None:
    with_files = _show(sample_store, "102m")
    assert "MSAs of the polymer chains" in with_files and LEGEND not in with_files
    mixed = _show(sample_store, "2q2k")
    assert "MSAs of the polymer chains" in mixed and LEGEND in mixed
