"""``--resume`` continues a data position that indexes its run's entries (R2 findings 3, 5): on a
store with other entries (another store, or the same one extended since) or with another
``--max-atoms`` the same batches cannot follow, so it is refused in one line naming the checkpoint,
what differs and what to do (``--init-from``: a new run from the checkpoint's weights), exit 2.
The same store read through its lookup service (real uvicorn) is the same source. A checkpoint of
an older featurecache (no identity, no atom budget recorded) is warned about. Real stores, built
from the repo's samples without MSAs (which also shows the no-MSA warning, R2 finding 6)."""

from __future__ import annotations

import logging
import shutil
from pathlib import Path
from typing import Any

import pytest
import torch

from featurecache.errors import UsageError
from featurecache.model.train import load_checkpoint, make_batches, run_training
from tests.conftest import SAMPLES, build_store, cli_in_process
from tests.model.test_trunk import TINY

SMALL: dict[str, Any] = {"crop_size": 16, "device": "cpu", "config": TINY, "workers": 1}


def _build(out: Path, names: list[str], tmp: Path) -> Path:
    inputs = tmp / f"in_{out.name}"
    inputs.mkdir()
    for name in names:
        shutil.copy(SAMPLES / "structures" / name, inputs / name)
    build_store(out, inputs, workers=1, ccd=SAMPLES / "ccd")
    return out


@pytest.fixture(scope="module")
def stores(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """``a``: two entries; ``b``: two other entries; ``grown``: ``a`` extended by a third."""
    root = tmp_path_factory.mktemp("resume_source")
    a = _build(root / "a", ["1A8O.pdb", "1psm.cif"], root)
    b = _build(root / "b", ["102m.cif", "2q2k.cif"], root)
    grown = root / "grown"
    shutil.copytree(a, grown)
    _build(grown, ["1A8O.pdb", "1psm.cif", "7DDO.pdb"], root)  # an extension of a's copy
    return {"a": a, "b": b, "grown": grown}


def _never(*_: Any) -> None:
    raise AssertionError("a refused resume trained a step")


def test_resume_on_another_store_or_a_grown_one_is_refused(stores: dict[str, Path], tmp_path: Path) -> None:
    ck = tmp_path / "ck.pt"
    run_training(stores["a"], None, steps=1, log_path=None, checkpoint=ck, **SMALL)
    with pytest.raises(UsageError) as other:
        run_training(stores["b"], None, steps=2, log_path=None, resume=ck, on_step=_never, **SMALL)
    msg = str(other.value)
    assert "\n" not in msg and f"cannot resume from {ck}" in msg and f"the store {stores['b']}" in msg, msg
    assert "other entries" in msg and f"--init-from {ck}" in msg, msg
    with pytest.raises(UsageError) as grown:
        run_training(stores["grown"], None, steps=2, log_path=None, resume=ck, on_step=_never, **SMALL)
    msg = str(grown.value)
    assert "\n" not in msg and f"cannot resume from {ck}" in msg and f"the store {stores['grown']}" in msg, (
        msg
    )
    assert "now has 3 entries, its run drew from 2" in msg and f"--init-from {ck}" in msg, msg
    # the same store (another path to it) still resumes
    link = tmp_path / "same"
    link.symlink_to(stores["a"])
    doc = run_training(link, None, steps=2, log_path=None, resume=ck, **SMALL)
    assert [r["step"] for r in doc["steps"]] == [1]


def test_a_store_changed_in_place_is_not_called_another_store(
    stores: dict[str, Path], tmp_path: Path
) -> None:
    """RF1 finding 3: the run's own store path, rebuilt with other entries (as many): the refusal says
    its entries changed and offers --init-from, not "resume on that store" (the path is this one)."""
    here = tmp_path / "store"
    shutil.copytree(stores["a"], here)
    ck = tmp_path / "ck.pt"
    run_training(here, None, steps=1, log_path=None, checkpoint=ck, **SMALL)
    shutil.rmtree(here)
    shutil.copytree(stores["b"], here)
    with pytest.raises(UsageError) as changed:
        run_training(here, None, steps=2, log_path=None, resume=ck, on_step=_never, **SMALL)
    msg = str(changed.value)
    assert "\n" not in msg and f"cannot resume from {ck}" in msg and f"the store {here}" in msg, msg
    assert "entries changed" in msg and f"--init-from {ck}" in msg, msg
    assert "resume on that store" not in msg, msg


def test_resume_with_another_max_atoms_is_refused(stores: dict[str, Path], tmp_path: Path) -> None:
    ck = tmp_path / "ck.pt"
    run_training(stores["a"], None, steps=1, log_path=None, checkpoint=ck, **SMALL)
    assert load_checkpoint(ck)["max_atoms"] is None
    with pytest.raises(UsageError, match=rf"{ck}: its run used no --max-atoms, this one --max-atoms 100\b"):
        run_training(
            stores["a"], None, steps=2, log_path=None, resume=ck, max_atoms=100, on_step=_never, **SMALL
        )
    run_training(stores["a"], None, steps=1, log_path=None, checkpoint=ck, max_atoms=100, **SMALL)
    with pytest.raises(UsageError, match=r"its run used --max-atoms 100, this one no --max-atoms"):
        run_training(stores["a"], None, steps=2, log_path=None, resume=ck, on_step=_never, **SMALL)


def test_resume_may_switch_between_a_store_and_its_lookup_service(
    stores: dict[str, Path], tmp_path: Path
) -> None:
    """Stopped after 1 step on the store, resumed through the service (and the other way round):
    the step that follows is the uninterrupted run's, bitwise (CPU, one client worker)."""
    from services.lookup.server import ThreadedServer
    from services.lookup.settings import Settings

    whole = run_training(stores["a"], None, steps=2, log_path=None, **SMALL)["steps"]
    with ThreadedServer(Settings(store_path=stores["a"])) as url:
        local: dict[str, Any] = {"store": stores["a"], "url": None}
        remote: dict[str, Any] = {"store": None, "url": url}
        for first, then in ((local, remote), (remote, local)):
            ck = tmp_path / "ck.pt"
            run_training(**first, steps=1, log_path=None, checkpoint=ck, **SMALL)
            doc = run_training(**then, steps=2, log_path=None, resume=ck, **SMALL)
            (rec,) = doc["steps"]
            assert (rec["step"], rec["entry_ids"], rec["positions"], rec["loss"]) == (
                1, whole[1]["entry_ids"], whole[1]["positions"], whole[1]["loss"],
            )  # fmt: skip


def test_an_older_checkpoint_is_warned_about_and_refused_on_a_grown_store(
    stores: dict[str, Path], tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    ck = tmp_path / "old.pt"
    run_training(stores["a"], None, steps=1, log_path=None, checkpoint=ck, **SMALL)
    doc = torch.load(ck, weights_only=True)
    del doc["source_identity"], doc["max_atoms"]  # what a checkpoint of the previous version holds
    torch.save(doc, ck)
    with caplog.at_level(logging.WARNING, logger="featurecache.model.train"):
        again = run_training(stores["a"], None, steps=2, log_path=None, resume=ck, **SMALL)
    assert [r["step"] for r in again["steps"]] == [1]
    said = [r.getMessage() for r in caplog.records]
    assert any(f"{ck} records no identity of its run's store" in m for m in said), said
    assert any(f"{ck} records no --max-atoms" in m for m in said), said

    # the CLI: a grown store is a checkpoint that does not match (exit 2), said in one line
    cfg = tmp_path / "tiny.json"
    TINY.to_json(cfg)
    done = cli_in_process("train", "--store", str(stores["grown"]), "--steps", "3", "--crop", "16", "--device", "cpu",
                          "--workers", "1", "--model-config", str(cfg), "--resume", str(ck),
                          "--log", str(tmp_path / "log.json"))  # fmt: skip
    assert done.returncode == 2, done.stderr[-2000:]
    last = done.stderr.strip().splitlines()[-1]
    assert "Traceback" not in done.stderr and str(ck) in last and str(stores["grown"]) in last, done.stderr[
        -2000:
    ]
    assert "now has 3 entries, its run drew from 2" in last and f"--init-from {ck}" in last, last


def test_init_from_starts_a_new_run_from_the_weights(stores: dict[str, Path], tmp_path: Path) -> None:
    ck, ck2 = tmp_path / "ck.pt", tmp_path / "ck2.pt"
    run_training(stores["a"], None, steps=1, log_path=None, checkpoint=ck, **SMALL)
    fresh = tmp_path / "fresh.pt"  # a new run's parameters after one step with a negligible lr
    run_training(stores["grown"], None, steps=1, log_path=None, checkpoint=fresh, lr=1e-20, **SMALL)
    doc = run_training(stores["grown"], None, steps=1, log_path=None, checkpoint=ck2, lr=1e-20, init_from=ck,
                       **SMALL)  # fmt: skip
    assert doc["initialized_from"] == str(ck) and [r["step"] for r in doc["steps"]] == [0]
    start, new, other = (load_checkpoint(p)["model"] for p in (ck, ck2, fresh))
    assert load_checkpoint(ck2)["step"] == 1
    assert all(torch.allclose(new[k], start[k], rtol=0, atol=1e-12) for k in start)
    assert any(not torch.allclose(other[k], start[k], rtol=0, atol=1e-6) for k in start)  # the test can fail
    with pytest.raises(UsageError, match="--resume or --init-from, not both"):
        run_training(
            stores["a"], None, steps=2, log_path=None, resume=ck, init_from=ck, on_step=_never, **SMALL
        )


def test_a_store_without_msas_is_warned_about(
    stores: dict[str, Path], sample_store: Path, caplog: pytest.LogCaptureFixture
) -> None:
    for store in (stores["a"], sample_store):
        with caplog.at_level(logging.WARNING, logger="featurecache.model.train"):
            make_batches(store, None, 16, 1, 0, 1).close()
    said = [r.getMessage() for r in caplog.records if "MSA" in r.getMessage()]
    assert len(said) == 1 and f"the store {stores['a']} holds no MSAs" in said[0], said
    assert "--msa-dir" in said[0]


def test_a_checkpoint_of_another_trunk_is_refused_in_one_line(tmp_path: Path) -> None:
    """A checkpoint whose parameters are not this trunk's (one written before the trunk gained or
    lost a parameter) is refused naming it and the keys, not with torch's traceback (exit 1)."""
    ck = tmp_path / "ck.pt"
    synth: dict[str, Any] = {"crop_size": 16, "device": "cpu", "config": TINY}
    run_training(None, None, steps=1, log_path=None, checkpoint=ck, **synth)
    doc = torch.load(ck, weights_only=True)
    gone = sorted(doc["model"])[0]
    doc["model"]["extra.weight"] = doc["model"].pop(gone)
    torch.save(doc, ck)
    cases: list[dict[str, Any]] = [{"resume": ck}, {"init_from": ck}]
    for kwargs in cases:
        with pytest.raises(UsageError) as caught:
            run_training(None, None, steps=2, log_path=None, on_step=_never, **kwargs, **synth)
        msg = str(caught.value)
        assert "\n" not in msg and str(ck) in msg and "do not fit" in msg, msg
        assert f"missing {gone}" in msg and "unexpected extra.weight" in msg, msg
