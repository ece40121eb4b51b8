"""``train --resume`` on a store rebuilt in place by another featurizer is refused like a changed
store. The rebuild keeps the entry ids (the checkpoint's source identity matches) while every
feature may differ, so the resumed run would go on over other inputs than its run started on, with
nothing said. The checkpoint records its data's featurizer versions (f182074); a resume whose
store now holds others stops with exit 2 and one line naming both versions and ``--init-from``.

Real stores: tests/store/conftest.py's store of featurizer 0.5.0 (built by b974d7d's package),
rebuilt by this code from the same --pdb-dir and --msa-dir (featurizer 0.6.0, same entry ids)."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

from featurecache.const import FEATURIZER_VERSION
from tests.conftest import build_store, cli_in_process
from tests.model.test_trunk import TINY
from tests.store.conftest import OLD_VERSION, Stores

SMALL: dict[str, Any] = {"crop_size": 16, "device": "cpu", "config": TINY, "workers": 1}


def test_resume_on_a_store_rebuilt_by_another_featurizer_is_refused(
    version_stores: Stores, tmp_path: Path
) -> None:
    from featurecache.model.train import load_checkpoint, run_training, source_identity

    store = tmp_path / "store"
    shutil.copytree(version_stores.old, store)
    ck = tmp_path / "ck.pt"
    run_training(store, None, steps=1, log_path=None, checkpoint=ck, **SMALL)
    saved = load_checkpoint(ck)
    assert saved["featurizer_versions"]["entries"] == {OLD_VERSION: 1}
    # the same store path and the same inputs still resume (the versions are compared, not refused blindly)
    twice = tmp_path / "ck2.pt"
    doc = run_training(store, None, steps=2, log_path=None, resume=ck, checkpoint=twice, **SMALL)
    assert [r["step"] for r in doc["steps"]] == [1]

    summary = build_store(store, version_stores.a, msa_dir=version_stores.msa, workers=1)
    assert summary.n_built == 1 and FEATURIZER_VERSION != OLD_VERSION
    from featurecache import open_store

    # the premise: the identity the checkpoint records does not tell the rebuild apart
    assert source_identity(open_store(store).ids) == saved["source_identity"]

    cfg = tmp_path / "tiny.json"
    TINY.to_json(cfg)
    done = cli_in_process("train", "--device", "cpu", "--store", str(store), "--crop", "16", "--workers", "1",
                          "--steps", "2", "--model-config", str(cfg), "--resume", str(ck))  # fmt: skip
    assert done.returncode == 2, done.stdout + done.stderr
    lines = [line for line in done.stderr.splitlines() if f"cannot resume from {ck}" in line]
    assert len(lines) == 1, done.stderr
    line = lines[0]
    assert f"featurizer {FEATURIZER_VERSION}" in line and f"featurizer {OLD_VERSION}" in line, line
    assert f"--init-from {ck}" in line, line
