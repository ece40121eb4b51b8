"""``featurecache train`` after review R4 of session 34: a store whose first build has not finished is
refused (H1), ``--in-order`` makes a run with several client workers repeatable (M3), the line a
stopped run ends with continues it as it is (LOW 1), and a service's 401 names the ways to give
the token (LOW 5). Real stores, real runs on the CPU, a real lookup service."""

from __future__ import annotations

import json
import shlex
import signal
import subprocess
from pathlib import Path

import pytest

from featurecache.errors import AuthenticationError
from featurecache.model.train import run_training
from tests.conftest import REPO, cli_in_process
from tests.model.test_train_guards import _cli, _stop_after, _strict_json
from tests.model.test_trunk import TINY


def test_train_refuses_a_store_whose_first_build_has_not_finished(tmp_path: Path) -> None:
    # the build stack (gemmi, Dask): not on a GPU image
    from tests.client.test_r4_unfinished_store import killed_first_build

    store = killed_first_build(tmp_path / "store")
    # refused before it trains: in this process (tests.conftest; a process of its own costs ~3 s)
    run = cli_in_process("train", "--store", str(store), "--device", "cpu", "--steps", "1", "--crop", "32",
                         "--log", str(tmp_path / "log.json"))  # fmt: skip
    said = " ".join(run.stderr.split())
    assert run.returncode == 3, (run.returncode, run.stderr[-3000:])
    assert f"error: {store}: its first build has not finished" in said, said[-3000:]
    assert "run the same `featurecache build` again to finish it" in said, said[-3000:]
    assert "allow_unfinished" not in said  # FeatureDataset's keyword: nothing a train user can give
    assert "holds no MSAs" not in said and "--msa-dir" not in said  # not the wrong cause
    assert not (tmp_path / "log.json").exists()  # refused before the run began


def _steps(doc: dict) -> list[tuple[list[str], list[int], float]]:
    return [(r["entry_ids"], r["positions"], r["loss"]) for r in doc["steps"]]


def test_in_order_runs_of_one_seed_train_on_the_same_batches_whatever_the_workers(
    sample_store: Path, tmp_path: Path
) -> None:
    """Ready-first (the default), the samples of several client workers arrive in the order they
    finish; ``in_order`` hands them over in the stream's order, so two runs with 4 workers and one
    with 1 train on the same entries, crops and losses, bitwise on the CPU, and so does a run with 4
    workers resumed halfway."""
    common = {"steps": 4, "crop_size": 64, "device": "cpu", "log_path": None, "config": TINY, "seed": 5,
              "in_order": True}  # fmt: skip
    first = run_training(sample_store, None, workers=4, checkpoint=tmp_path / "ck_{step}.pt", checkpoint_every=2,
                         **common)  # fmt: skip
    again = [run_training(sample_store, None, workers=w, **common) for w in (4, 1)]
    assert first["in_order"] is True
    assert _steps(first) == _steps(again[0]) == _steps(again[1]), [_steps(r) for r in (first, *again)]
    assert [p for r in first["steps"] for p in r["positions"]] == [0, 1, 2, 3]  # the stream's order
    resumed = run_training(sample_store, None, workers=4, resume=tmp_path / "ck_2.pt", **common)
    assert _steps(resumed) == _steps(first)[2:]


def test_the_line_a_stopped_run_ends_with_continues_it(sample_store: Path, tmp_path: Path) -> None:
    """A run with --crop 16 and --lr 0.002 stopped by Ctrl-C: the "continue with" arguments it
    prints, given to train as they are (the model config comes from the checkpoint), resume it:
    before, they left out --crop (the resume was refused) and --lr (it went on at the default), and
    --checkpoint / --checkpoint-every (review R13 s39 L3: the resumed steps were in no checkpoint)."""
    log, err = tmp_path / "log.json", tmp_path / "stderr.txt"
    template = tmp_path / "ck_{step}.pt"
    cfg = tmp_path / "tiny.json"
    TINY.to_json(cfg)
    args = ["--store", str(sample_store), "--device", "cpu", "--crop", "16", "--workers", "1", "--steps", "100000",
            "--lr", "0.002", "--checkpoint", str(template), "--checkpoint-every", "1000", "--log", str(log),
            "--model-config", str(cfg)]  # fmt: skip
    with err.open("w") as stderr:
        proc = _cli(*args, stdout=subprocess.PIPE, stderr=stderr, cwd=REPO)
        _stop_after(proc, log, 1, signal.SIGINT, err)
    assert proc.returncode == 130, err.read_text()[-3000:]
    last = err.read_text().strip().splitlines()[-1]
    hint = last.partition("continue with ")[2]
    done = len(_strict_json(log)["steps"])
    ck = tmp_path / f"ck_{done}.pt"  # the stop's checkpoint
    assert hint.startswith(f"--resume {ck} --steps 100000 "), last
    assert f"--checkpoint {shlex.quote(str(template))} --checkpoint-every 1000" in hint, last
    resume = shlex.split(hint)
    resume[resume.index("--steps") + 1] = str(done + 1)  # one more step, not 100000
    # the resume in this process (tests.conftest; a process of its own costs its imports): its
    # arguments are what the stopped process printed, the one that ran in a process of its own
    run = cli_in_process("train", *resume, cwd=REPO)
    assert run.returncode == 0, (hint, run.stderr[-3000:])
    doc = _strict_json(log)  # the hint's --log: the resumed run carried the stopped one's steps over
    assert doc["status"] == "completed" and doc["resumed_from"] == str(ck), doc["status"]
    assert len(doc["steps"]) == done + 1 and doc["crop_size"] == 16 and doc["lr"] == 0.002
    assert (tmp_path / f"ck_{done + 1}.pt").is_file()  # the resumed run's end, checkpointed as before


def test_a_service_refusing_no_token_names_the_ways_to_give_one(
    sample_store: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("FEATURECACHE_AUTH_TOKEN", raising=False)
    monkeypatch.delenv("FEATURECACHE_AUTH_TOKEN_FILE", raising=False)
    common = {"steps": 1, "crop_size": 16, "device": "cpu", "log_path": None, "config": TINY, "workers": 1}
    from services.lookup.server import background_server  # uvicorn: not on a GPU image

    with background_server(sample_store, token="r4-secret") as url:
        with pytest.raises(AuthenticationError) as missing:
            run_training(None, url, **common)
        with pytest.raises(AuthenticationError) as wrong:
            run_training(None, url, token="not-it", **common)
    said = str(missing.value)
    assert "401" in said and "no token was given: give the service's token with --token" in said, said
    assert "FEATURECACHE_AUTH_TOKEN to it" in said and "FEATURECACHE_AUTH_TOKEN_FILE to a file" in said, said
    assert "is not the service's" in str(wrong.value) and "not-it" not in str(wrong.value), str(wrong.value)


def test_the_log_records_in_order(tmp_path: Path) -> None:
    """Synthetic batches have no client: the log's in_order is null, as its pool."""
    doc = run_training(
        None, None, steps=1, crop_size=16, device="cpu", config=TINY, log_path=tmp_path / "l.json"
    )
    assert doc["in_order"] is None and json.loads((tmp_path / "l.json").read_text())["in_order"] is None
