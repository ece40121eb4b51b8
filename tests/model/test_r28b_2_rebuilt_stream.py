"""A resume on a store rebuilt with the same entry ids but other chains (``--keep-cryst-aids``: 102m's
SO4, 2q2k's EPE... kept as chains) is refused, review R28b s46 #2: the sampler's stream maps the same
positions to other samples, and the run went on over them (exit 0, only the client's warning).
Both ways: another store of the same ids, and the run's own store rebuilt in place."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from featurecache.build.config import BuildConfig
from featurecache.model.train import run_training
from tests.conftest import SAMPLES, build_store, cli_in_process
from tests.model.test_trunk import TINY

CROP = 32


@pytest.fixture(scope="module")
def cryst_store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The sample store built again with its crystallization aids kept: the same 6 entry ids."""
    out = tmp_path_factory.mktemp("cryst") / "store"
    build_store(out, SAMPLES / "structures", msa_dir=SAMPLES / "msas", ccd=SAMPLES / "ccd",
                config=BuildConfig(keep_crystallization_aids=True))  # fmt: skip
    return out


def _checkpoint(store: Path, ck: Path) -> None:
    run_training(store, None, steps=2, crop_size=CROP, device="cpu", seed=3, workers=1, config=TINY,
                 log_path=None, checkpoint=ck)  # fmt: skip


def _resume(store: Path, ck: Path, log: Path):  # type: ignore[no-untyped-def]
    return cli_in_process("train", "--store", str(store), "--device", "cpu", "--crop", str(CROP), "--seed", "3",
                          "--workers", "1", "--steps", "4", "--resume", str(ck), "--log", str(log))  # fmt: skip


def test_resume_on_another_store_of_the_same_ids_but_other_chains_is_refused(
    sample_store: Path, cryst_store: Path, tmp_path: Path
) -> None:
    ck, log = tmp_path / "ck.pt", tmp_path / "log.json"
    _checkpoint(sample_store, ck)
    done = _resume(cryst_store, ck, log)
    assert done.returncode == 2, done.stderr[-3000:]
    assert "Traceback" not in done.stderr
    last = done.stderr.strip().splitlines()[-1]
    for words in (f"cannot resume from {ck}", "the same ids", "other chains or sampling weights",
                  f"--init-from {ck}"):  # fmt: skip
        assert words in last, (words, last)
    assert not log.exists()
    # the store it was written on still resumes
    assert _resume(sample_store, ck, log).returncode == 0


def test_resume_on_its_store_rebuilt_in_place_with_other_chains_is_refused(
    sample_store: Path, cryst_store: Path, tmp_path: Path
) -> None:
    store, ck, log = tmp_path / "store", tmp_path / "ck.pt", tmp_path / "log.json"
    shutil.copytree(sample_store, store)
    _checkpoint(store, ck)
    shutil.rmtree(store)
    shutil.copytree(cryst_store, store)  # the same path, rebuilt with --keep-cryst-aids
    done = _resume(store, ck, log)
    assert done.returncode == 2, done.stderr[-3000:]
    last = done.stderr.strip().splitlines()[-1]
    assert "is the source its run drew from, but its entries' chains or sampling weights changed" in last, (
        last
    )
    assert f"--init-from {ck}" in last, last
