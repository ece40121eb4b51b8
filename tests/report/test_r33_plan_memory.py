"""Review R33 #2: summary.json's ``plan.gpu_memory_bytes`` is the usable memory (the GPU memory
given less the headroom), not the GPU's, and the given size and the headroom were not there. The
plan summary names the usable memory for what it is and carries the given size and headroom beside
it (``gpu_memory_bytes`` keeps its meaning, deprecated)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from featurecache.plan import plan_store
from featurecache.report import write_report


def test_the_plan_summary_names_the_usable_memory_and_gives_the_gpu_and_headroom(
    two_entry_store: Path, tmp_path: Path
) -> None:
    store = tmp_path / "store"
    shutil.copytree(two_entry_store, store)
    plan_store(store, gpu_memory="80GiB", headroom=0.08)
    write_report(store, tmp_path / "r")
    plan = json.loads((tmp_path / "r" / "summary.json").read_text())["plan"]
    given = 80 * 2**30
    assert plan["gpu_memory_given_bytes"] == given
    assert plan["headroom"] == 0.08
    assert plan["usable_memory_bytes"] == int(given * (1 - 0.08)) < given
    assert plan["gpu_memory_bytes"] == plan["usable_memory_bytes"]  # the old key, its meaning kept
