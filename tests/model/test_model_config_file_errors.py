"""A ``--model-config`` file that cannot be used is refused by ``featurecache train`` and
``featurecache plan`` with one line naming the option and the file, and the reason (exit 2).

Review R1 (s26) #2: "model config is not valid JSON: …" and "unknown model config keys: […]" named
neither; a file that is not UTF-8 text crashed both commands with a traceback.

A real build of the sample 1psm structure; the real CLI, run in this process
(tests.conftest.cli_in_process)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from tests.conftest import SAMPLES, CliRun, build_store, cli_in_process


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    pdb = tmp_path_factory.mktemp("pdb")
    shutil.copy(SAMPLES / "structures" / "1psm.cif", pdb)
    out = tmp_path_factory.mktemp("stores") / "s"
    assert build_store(out, pdb, workers=1).n_failed == 0
    return out


def _run(command: str, store: Path, config: Path, tmp: Path) -> CliRun:
    args = (
        ["train", "--store", str(store), "--device", "cpu", "--crop", "32", "--steps", "1",
         "--log", str(tmp / "train.jsonl")]
        if command == "train"
        else ["plan", str(store), "--no-write-index"]
    )  # fmt: skip
    return cli_in_process(*args, "--model-config", str(config), cwd=tmp)


@pytest.mark.parametrize("command", ["train", "plan"])
@pytest.mark.parametrize(
    ("content", "says"),
    [
        (b"", "not valid JSON (Expecting value at line 1 column 1)"),
        (b'{"c_token": 128,\n "n_blocks": }', "not valid JSON (Expecting value at line 2 column 14)"),
        (b'{"c_token": 128, "bogus": 1, "also": 2}', "unknown keys ['also', 'bogus']"),
        (b"[128]", "must be a JSON object"),
        (b'{"eps": -1}', "eps must be > 0; got -1"),
        (b"\xff\xfe\x00{}", "cannot read it"),  # not UTF-8 text (before: a UnicodeDecodeError traceback)
        # review R9 F4: past int64 in the planner (an OverflowError traceback), or minutes of planning
        (b'{"transition_n": 1000000000000000}', "transition_n must be ≤ 16; got 1000000000000000"),
        (b'{"n_blocks": 100000}', "n_blocks must be ≤ 512; got 100000"),
    ],
    ids=["empty", "broken", "unknown", "array", "field", "binary", "overflow", "blocks"],
)
def test_a_model_config_that_cannot_be_used_is_one_line_naming_option_and_file(
    store: Path, tmp_path: Path, command: str, content: bytes, says: str
) -> None:
    config = tmp_path / "model.json"
    config.write_bytes(content)
    r = _run(command, store, config, tmp_path)
    out = r.stdout + r.stderr
    assert r.returncode == 2, out
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in out, out
    assert lines[0].startswith(f"error: --model-config {config}: {says}"), out
    assert not (tmp_path / "train.jsonl").exists()  # refused before training started
