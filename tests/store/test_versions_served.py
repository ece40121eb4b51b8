"""A served store of another featurizer version (review R3 s24 #5, #6): ``serve`` says so in one
line at start-up; a lookup client whose service moves mid-stream to a store rebuilt by another
featurizer logs one WARNING naming the URL and both versions (before: an INFO line, and the same
client returned the new features), a client made with ``on_featurizer_change="raise"`` (and its
worker copies) raises FeaturizerChanged from then on, and ``train --url`` stops on the data-failure
path: the steps done checkpointed, one line (exit 3 at the CLI).

The older store is real (tests/store/conftest.py: built by the package of b974d7d, featurizer
0.5.0); this code rebuilds it under a real ``featurecache serve``."""

from __future__ import annotations

import json
import logging
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest

from featurecache.const import FEATURIZER_VERSION
from tests.conftest import build_store
from tests.store.conftest import OLD_VERSION, Stores


@contextmanager
def _serving(store: Path, out: Path) -> Iterator[str]:
    """``featurecache serve STORE`` (a real uvicorn on 127.0.0.1), its output in ``out``."""
    from services.lookup.server import free_port, wait_ready

    port = free_port()
    with out.open("w") as sink:
        proc = subprocess.Popen([sys.executable, "-m", "featurecache.cli", "serve", str(store), "--port", str(port)],
                                stdout=sink, stderr=subprocess.STDOUT, text=True)  # fmt: skip
        try:
            url = f"http://127.0.0.1:{port}"
            wait_ready(url, timeout=60)
            yield url
        finally:
            proc.terminate()
            proc.wait(timeout=30)


def _wait_for_version(url: str, version: str, timeout: float = 60) -> None:
    """Until the service's /v1/info is that of a store whose latest build was ``version``'s (it
    reopens a rebuilt store)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        doc = httpx.get(url + "/v1/info", timeout=10).json()
        if doc["versions"]["featurizer_version"] == version:
            return
        time.sleep(0.2)
    raise TimeoutError(f"{url} still serves {doc['versions']}")


def test_serve_says_so_and_a_client_warns_when_the_store_is_rebuilt_by_another_featurizer(
    version_stores: Stores, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    from featurecache.client.http import LookupClient
    from featurecache.store.versions import FeaturizerChanged

    served = tmp_path / "served"
    shutil.copytree(version_stores.old, served)
    with _serving(served, tmp_path / "serve.log") as url:
        client = LookupClient(url)
        strict = LookupClient(url, on_featurizer_change="raise")
        assert len(client.entry("102m").atoms["element"]) == len(strict.entry("102m").atoms["element"])
        assert client.featurizer_versions()["entries"] == {OLD_VERSION: 1}  # type: ignore[index]
        copy = LookupClient(**strict.settings())  # a loader worker's client, first used after the rebuild

        summary = build_store(
            served, version_stores.a, msa_dir=version_stores.msa, workers=1
        )  # this code: 0.6.0
        assert summary.n_built == 1
        _wait_for_version(url, FEATURIZER_VERSION)

        with caplog.at_level(logging.WARNING, logger="featurecache.client.http"):
            client.entry("102m")  # a warning, and the entry of the new store
            client.entry("102m")  # one warning per change
        warned = [r.getMessage() for r in caplog.records if r.name == "featurecache.client.http"]
        assert len(warned) == 1, warned
        assert warned[0].startswith(f"{url}: the service now answers from a store of featurizer "
                                    f"{FEATURIZER_VERSION} "), warned  # fmt: skip
        assert f"this client's data so far were of featurizer {OLD_VERSION}:" in warned[0]

        for reader in (strict, copy):
            for _ in range(2):  # this call and every later one
                with pytest.raises(
                    FeaturizerChanged, match=f"featurizer {FEATURIZER_VERSION} .*{OLD_VERSION}"
                ):
                    reader.entry("102m")
    lines = [line for line in (tmp_path / "serve.log").read_text().splitlines() if "featurizer" in line]
    assert len(lines) == 1, lines
    assert f"{served.resolve()} holds 1 entry and 1 MSA of featurizer {OLD_VERSION}" in lines[0], lines


def test_train_on_a_url_stops_when_the_store_is_rebuilt_by_another_featurizer(
    version_stores: Stores, tmp_path: Path
) -> None:
    from featurecache.errors import TrainingError
    from featurecache.model.train import load_checkpoint, run_training
    from tests.model.test_trunk import TINY

    served = tmp_path / "served"
    shutil.copytree(version_stores.old, served)
    log, ck = tmp_path / "log.json", tmp_path / "ck.pt"
    with _serving(served, tmp_path / "serve.log") as url:

        def on_step(rec: dict[str, Any]) -> None:
            if rec["step"] == 1:
                build_store(served, version_stores.a, msa_dir=version_stores.msa, workers=1)
                _wait_for_version(url, FEATURIZER_VERSION)

        with pytest.raises(TrainingError) as caught:
            run_training(None, url, steps=60, log_path=log, checkpoint=ck, checkpoint_every=1000, on_step=on_step,
                         crop_size=16, device="cpu", config=TINY, workers=1)  # fmt: skip
    message = str(caught.value)
    doc = json.loads(log.read_text())
    done = len(doc["steps"])
    assert "\n" not in message
    assert f"the service now answers from a store of featurizer {FEATURIZER_VERSION}" in message, message
    assert f"the {done} steps done are checkpointed in {ck}" in message and f"--init-from {ck}" in message, (
        message
    )
    assert doc["status"] == "failed" and doc["featurizer_versions"]["entries"] == {OLD_VERSION: 1}
    assert 2 <= done < 60 and load_checkpoint(ck)["step"] == done
