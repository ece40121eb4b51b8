"""``featurecache train --help``'s ``--pool`` text quotes the run it cites,
``benchmarks/results/feed_ab_run71.json`` (review R1 s26 #3: the help said 7.7 vs 4.4 ms; the file's
128-token CUDA-graph medians are 7.54 and 8.69 ms with threads, 4.45 ms with processes, GPU 4.04)."""

from __future__ import annotations

import json
import re
import statistics
import subprocess
import sys
from pathlib import Path

import typer

from featurecache.cli import app

REPO = Path(__file__).resolve().parents[2]
RESULT = "benchmarks/results/feed_ab_run71.json"


def _pool_help() -> str:
    command = typer.main.get_command(app).commands["train"]  # type: ignore[attr-defined]
    (param,) = [p for p in command.params if p.name == "pool"]
    return str(param.help)


def test_pool_help_quotes_the_result_file_it_cites() -> None:
    text = _pool_help()
    assert RESULT in text, text
    rows = json.loads((REPO / RESULT).read_text())
    graph_rows = [r for r in rows if r["graphs"]]
    thread = [r["by_tokens"]["128"]["median_step_time_s_ms"] for r in graph_rows if r["pool"] == "thread"]
    process = [r["by_tokens"]["128"]["median_step_time_s_ms"] for r in graph_rows if r["pool"] == "process"]
    # the GPU work of the four CUDA-graph runs (4.04-4.05 ms): their median
    gpu = statistics.median(r["by_tokens"]["128"]["median_gpu_s_ms"] for r in graph_rows)
    assert len(thread) == 2 and len(process) == 2, (thread, process)  # two rounds
    quoted = [float(x) for x in re.findall(r"\d+\.\d+", text)]
    # as written: the threads' first round and second round, the processes', the GPU work
    said = re.search(
        r"took ([\d.]+) ms \(([\d.]+) in a second round\) with threads vs ([\d.]+) ms with processes.*"
        r"GPU work ([\d.]+) ms",
        text,
        re.S,
    )
    assert said is not None, text
    first, second, proc, gpu_said = (said.group(k) for k in range(1, 5))
    for value, measured in ((first, [thread[0]]), (second, [thread[1]]), (proc, process), (gpu_said, [gpu])):
        decimals = len(value.split(".")[1]) if "." in value else 0
        assert all(f"{m:.{decimals}f}" == value for m in measured), (value, measured)
    assert len(quoted) == 4, quoted  # no other measurement that the file does not give


def test_train_help_shows_the_numbers_in_the_terminal() -> None:
    env = {"COLUMNS": "80", "TERM": "dumb", "NO_COLOR": "1", "PATH": "/usr/bin:/bin"}
    proc = subprocess.run([sys.executable, "-m", "featurecache.cli", "train", "--help"], env=env,
                          capture_output=True, text=True, timeout=120, check=True, cwd=REPO)  # fmt: skip
    flat = " ".join(re.sub(r"[│|]", " ", proc.stdout).split())
    assert "7.5 ms (8.7 in a second round) with threads vs 4.45 ms" in flat, proc.stdout
