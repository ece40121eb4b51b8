"""``featurecache train --resume``'s data-settings checks (review RF4 s25 #1-#4), through the real
CLI (``--device cpu``) on the repo's sample store:

1. a checkpoint of an older featurecache (no data settings recorded) cropped whole groups: a
   resume that would crop per token is refused, and the advice it prints resumes it exactly;
2. crop weights that give the same mix (1,1,5 and 0.1,0.1,0.5) resume, the printed values read
   back as the same floats, and the log carry-over compares them the same way;
3. ``--crop-per-token`` exists (the refusal advises it);
4. crop weights whose sum overflows exit 2 in one line naming the option."""

from __future__ import annotations

import json
import re
import shlex
from pathlib import Path
from typing import Any

import pytest
import torch

from tests.conftest import CliRun, cli_in_process
from tests.model.test_trunk import TINY

DATA_KEYS = ("weighting", "crop_weights", "max_msa_rows", "pair_msa", "crop_whole_groups")
#: what the step records of two runs must share for one to be the other (bitwise)
SAME = ("step", "loss", "grad_norm", "entry_ids", "positions", "msa_rows", "tokens")


@pytest.fixture(scope="module")
def cfg(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("e12_cfg") / "tiny.json"
    TINY.to_json(path)
    return path


def _train(store: Path, cfg: Path, *args: str | Path) -> CliRun:
    """``featurecache train`` at this file's settings, in this process (:func:`cli_in_process`: a
    process of its own cost ~2 s of imports per run, and these tests make ~14 short runs)."""
    return cli_in_process("train", "--store", str(store), "--crop", "16", "--device", "cpu", "--workers", "1",
                          "--model-config", str(cfg), *map(str, args))  # fmt: skip


#: a run the test expects refused before it trains: the same command
_refused = _train


def _error(done: CliRun) -> str:
    """The one error line of a run refused with exit 2."""
    assert done.returncode == 2, done.stderr[-3000:]
    assert "Traceback" not in done.stderr, done.stderr[-3000:]
    lines = [x for x in done.stderr.strip().splitlines() if x.startswith("error:")]
    assert len(lines) == 1, done.stderr[-3000:]
    return lines[0]


def _advice(line: str) -> list[str]:
    """The options a refusal says to give: 'give OPTIONS, or --init-from for a new run'."""
    m = re.search(r"give (.+?), or --init-from", line)
    assert m, line
    return shlex.split(m.group(1))


def _steps(log: Path) -> list[dict[str, Any]]:
    return [{k: r[k] for k in SAME} for r in json.loads(log.read_text())["steps"]]


def _ok(done: CliRun) -> None:
    assert done.returncode == 0, done.stderr[-3000:]


def _strip_data_settings(ck: Path, log: Path) -> None:
    """Make ``ck`` and ``log`` what a featurecache before 1892e34 wrote: no data settings recorded."""
    doc = torch.load(ck, weights_only=True)
    header = json.loads(log.read_text())
    assert all(k in doc and k in header for k in DATA_KEYS)
    for key in DATA_KEYS:
        del doc[key], header[key]
    torch.save(doc, ck)
    log.write_text(json.dumps(header))


# ------------------------------------------------------------------------ 1. an older checkpoint
def test_an_older_checkpoint_resumes_with_whole_group_crops_only(
    sample_store: Path, cfg: Path, tmp_path: Path
) -> None:
    """Before session 25 train cropped whole groups (the client's default then) and sampled
    uniformly. A checkpoint that records no data settings resumed with the new defaults, or with
    --weighting uniform alone (what the README said), is refused in one line naming the crop
    rule; the advice it prints, followed as printed, resumes bitwise as the uninterrupted run."""
    old = ("--weighting", "uniform", "--crop-whole-groups")  # what such a run did
    straight = tmp_path / "straight.json"
    _ok(_train(sample_store, cfg, "--steps", "4", *old, "--log", straight))
    # per-token crops give other steps on this store: the comparison below can fail
    per_token = tmp_path / "per_token.json"
    _ok(_train(sample_store, cfg, "--steps", "4", "--weighting", "uniform", "--log", per_token))
    assert _steps(per_token)[2:] != _steps(straight)[2:]

    ck, log = tmp_path / "old.pt", tmp_path / "log.json"
    _ok(_train(sample_store, cfg, "--steps", "2", *old, "--checkpoint", ck, "--log", log))
    _strip_data_settings(ck, log)

    # what the README said (--weighting uniform) would crop per token: refused
    line = _error(_refused(sample_store, cfg, "--steps", "4", "--weighting", "uniform", "--resume", ck,
                         "--log", log))  # fmt: skip
    assert str(ck) in line and "--crop-per-token" in line, line
    assert "its run used --crop-whole-groups (an older checkpoint" in line, line
    assert _advice(line) == ["--crop-whole-groups"], line

    # the defaults: both settings differ, one line names both and advises both
    line = _error(_refused(sample_store, cfg, "--steps", "4", "--resume", ck, "--log", log))
    assert "--weighting uniform" in line and "--weighting af3" in line, line
    advice = _advice(line)
    assert sorted(advice) == sorted(old), line

    _ok(_train(sample_store, cfg, "--steps", "4", *advice, "--resume", ck, "--log", log))
    assert json.loads(log.read_text())["steps_from_earlier_log"] == 2
    assert _steps(log) == _steps(straight)
    assert json.loads(log.read_text())["crop_whole_groups"] is True


# ------------------------------------------------------------------------------ 2. crop weights
def test_crop_weights_of_the_same_mix_resume_and_the_advice_reads_back(
    sample_store: Path, cfg: Path, tmp_path: Path
) -> None:
    """0.1,0.1,0.5 normalizes to 0.1/0.7 = 0.14285714285714288, 1,1,5 to 1/7 = 0.14285714285714285:
    the same mix, resumed (bitwise as the uninterrupted run, the log carried over). Another mix is
    refused with values that read back as the checkpoint's floats, and giving them resumes."""
    assert 0.1 / (0.1 + 0.1 + 0.5) != 1 / 7  # the two spellings really are an ulp apart
    straight = tmp_path / "straight.json"
    _ok(_train(sample_store, cfg, "--steps", "3", "--crop-weights", "0.1,0.1,0.5", "--log", straight))

    ck, log = tmp_path / "ck.pt", tmp_path / "log.json"
    _ok(_train(sample_store, cfg, "--steps", "1", "--crop-weights", "0.1,0.1,0.5", "--checkpoint", ck,
               "--log", log))  # fmt: skip
    recorded = torch.load(ck, weights_only=True)["crop_weights"]
    assert recorded == [0.1 / 0.7, 0.1 / 0.7, 0.5 / 0.7]

    line = _error(_refused(sample_store, cfg, "--steps", "3", "--crop-weights", "1,1,4", "--resume", ck,
                         "--log", log))  # fmt: skip
    advice = _advice(line)
    assert advice[0] == "--crop-weights" and len(advice) == 2, line
    assert [float(v) for v in advice[1].split(",")] == recorded, line  # round-trips
    assert f"its run used --crop-weights {advice[1]}," in line, line

    # the printed advice resumes (its values normalize to floats an ulp from the recorded ones)
    kept = tmp_path / "kept.json"
    kept.write_bytes(log.read_bytes())
    _ok(_train(sample_store, cfg, "--steps", "2", *advice, "--resume", ck, "--log", kept))
    assert _steps(kept) == _steps(straight)[:2]

    # the same mix, spelled 1,1,5: resumes bitwise, the log carried over, the checkpoint's floats kept
    _ok(_train(sample_store, cfg, "--steps", "3", "--crop-weights", "1,1,5", "--resume", ck, "--log", log))
    doc = json.loads(log.read_text())
    assert doc["steps_from_earlier_log"] == 1 and doc["crop_weights"] == recorded
    assert _steps(log) == _steps(straight)


def test_the_log_carry_over_compares_crop_weights_as_the_same_mix(
    sample_store: Path, cfg: Path, tmp_path: Path
) -> None:
    """A --log whose crop weights are the same mix an ulp apart (1/7 where the checkpoint has
    0.1/0.7) is carried over; one of another mix is refused, naming values that read back."""
    ck, log = tmp_path / "ck.pt", tmp_path / "log.json"
    _ok(_train(sample_store, cfg, "--steps", "1", "--crop-weights", "0.1,0.1,0.5", "--checkpoint", ck,
               "--log", log))  # fmt: skip
    doc = json.loads(log.read_text())
    doc["crop_weights"] = [1 / 7, 1 / 7, 5 / 7]
    assert doc["crop_weights"] != torch.load(ck, weights_only=True)["crop_weights"]
    log.write_text(json.dumps(doc))
    _ok(_train(sample_store, cfg, "--steps", "2", "--crop-weights", "1,1,5", "--resume", ck, "--log", log))
    assert json.loads(log.read_text())["steps_from_earlier_log"] == 1

    other = tmp_path / "other.json"
    doc["crop_weights"] = [0.25, 0.25, 0.5]
    other.write_text(json.dumps(doc))
    line = _error(_refused(sample_store, cfg, "--steps", "2", "--crop-weights", "1,1,5", "--resume", ck,
                         "--log", other))  # fmt: skip
    assert f"--log {other} is the log of another run (its crop_weights [0.25, 0.25, 0.5]" in line, line
    assert json.loads(other.read_text()) == doc  # not overwritten


# ------------------------------------------------------------------- 3. --crop-per-token
def test_no_crop_whole_groups_is_an_option_and_its_advice_resumes(
    sample_store: Path, cfg: Path, tmp_path: Path
) -> None:
    """A per-token run resumed with --crop-whole-groups is refused, advising
    --crop-per-token, which train accepts (and which resumes it)."""
    ck, log = tmp_path / "ck.pt", tmp_path / "log.json"
    _ok(_train(sample_store, cfg, "--steps", "1", "--crop-per-token", "--checkpoint", ck, "--log", log))
    assert json.loads(log.read_text())["crop_whole_groups"] is False
    line = _error(
        _refused(sample_store, cfg, "--steps", "2", "--crop-whole-groups", "--resume", ck, "--log", log)
    )
    assert _advice(line) == ["--crop-per-token"], line
    _ok(_train(sample_store, cfg, "--steps", "2", *_advice(line), "--resume", ck, "--log", log))
    assert [r["step"] for r in json.loads(log.read_text())["steps"]] == [0, 1]


# ------------------------------------------------------------------- 4. weights that overflow
@pytest.mark.parametrize("weights", ["1e308,1e308,1e308", "1e308,1e308,0"])
def test_crop_weights_whose_sum_overflows_exit_2_naming_the_option(
    sample_store: Path, cfg: Path, tmp_path: Path, weights: str
) -> None:
    log = tmp_path / "log.json"
    line = _error(_refused(sample_store, cfg, "--steps", "1", "--crop-weights", weights, "--log", log))
    assert line.startswith("error: crop_weights (--crop-weights) 1e+308,1e+308,"), line
    assert "finite" in line, line
    assert not log.exists()  # refused before anything ran
