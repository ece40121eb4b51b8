"""``featurecache train --url http://user:password@host:port`` (review R42c s52 #1, #9): the
URL's password (the only way to reach a service behind a Basic-auth proxy) and the values of its
query (a proxy's ``?access_token=``) are in none of what the run writes: stderr, the JSON train log,
the checkpoints, the messages of a resume (which printed the checkpoint's stored URL). A rotated
password is the same source to a resume, also for a checkpoint of an older featurecache that
holds the URL as given; ``HTTP://`` (a valid URL: the scheme is case-insensitive) is accepted, and
the refusal of a URL that is not http(s) does not echo its password.

Real ``featurecache train`` processes against real ``featurecache serve`` processes on 127.0.0.1,
over two small stores built from the repo's samples."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
import torch

from services.lookup.server import free_port, wait_ready
from tests.conftest import SAMPLES, build_store, cli_in_process
from tests.model.test_trunk import TINY

TOKEN_VARS = ("FEATURECACHE_AUTH_TOKEN", "FEATURECACHE_AUTH_TOKEN_FILE")
PW1, PW2, PW3, QUERY_SECRET = "PASSWORDone99", "PASSWORDtwo77", "UPPERpw55", "QUERYSECRET77"
SECRETS = (PW1, PW2, PW3, QUERY_SECRET)


def _env() -> dict[str, str]:
    """This environment without a token (the client refuses URL credentials together with one), its
    log lines unwrapped (rich wraps at 80 columns when stderr is no terminal)."""
    return {**{k: v for k, v in os.environ.items() if k not in TOKEN_VARS}, "COLUMNS": "1000"}


@pytest.fixture(scope="module")
def stores(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """``a`` and ``b``: two entries each, other ids (as many: a rebuilt store, to a resume)."""
    root = tmp_path_factory.mktemp("r42c_url")
    out = {}
    for name, files in (("a", ["1A8O.pdb", "1psm.cif"]), ("b", ["102m.cif", "2q2k.cif"])):
        inputs = root / f"in_{name}"
        inputs.mkdir()
        for f in files:
            shutil.copy(SAMPLES / "structures" / f, inputs / f)
        build_store(root / name, inputs, workers=1, ccd=SAMPLES / "ccd")
        out[name] = root / name
    return out


@contextmanager
def _serve(store: Path, port: int) -> Iterator[str]:
    """A ``featurecache serve STORE`` process (no token) on 127.0.0.1:``port``; its URL."""
    cmd = [sys.executable, "-m", "featurecache.cli", "serve", str(store), "--port", str(port),
           "--workers", "1"]  # fmt: skip
    proc = subprocess.Popen(cmd, env=_env(), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_ready(f"http://127.0.0.1:{port}", timeout=60)
        yield f"127.0.0.1:{port}"
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def _train(url: str, tmp: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """``featurecache train --url URL`` (tiny model, CPU, crop 16, one worker) with ``args``."""
    cfg = tmp / "tiny.json"
    if not cfg.exists():
        TINY.to_json(cfg)
    cmd = [sys.executable, "-m", "featurecache.cli", "train", "--url", url, "--crop", "16", "--device", "cpu",
           "--workers", "1", "--model-config", str(cfg), "--service-wait", "30", *args]  # fmt: skip
    return subprocess.run(cmd, env=_env(), capture_output=True, text=True, timeout=300, cwd=tmp)


def _no_secret(what: str, data: str | bytes) -> None:
    text = data.decode("latin-1") if isinstance(data, bytes) else data
    joined = "".join(text.split())  # a line wrapped inside a secret, too
    shown = [s for s in SECRETS if s in text or s in joined]
    assert not shown, f"{what} holds {shown}: {text[-3000:] if isinstance(data, str) else ''}"


@pytest.fixture(scope="module")
def served_a(stores: dict[str, Path]) -> Iterator[str]:
    """``host:port`` of a ``featurecache serve`` of store ``a``."""
    with _serve(stores["a"], free_port()) as host:
        yield host


def test_the_password_is_in_no_output_log_or_checkpoint(served_a: str, tmp_path: Path) -> None:
    host, ck, log = served_a, tmp_path / "ck.pt", tmp_path / "log.json"
    first = _train(f"http://alice:{PW1}@{host}", tmp_path, "--steps", "1", "--checkpoint", str(ck),
                   "--log", str(log))  # fmt: skip
    assert first.returncode == 0, first.stderr[-3000:]
    for what, data in (("stderr", first.stderr), ("stdout", first.stdout), ("the log", log.read_bytes()),
                       ("the checkpoint", ck.read_bytes())):  # fmt: skip
        _no_secret(what, data)
    assert json.loads(log.read_text())["source"] == f"http://{host}"  # still named, without the password
    assert torch.load(ck, weights_only=True)["source"] == f"http://{host}"
    assert f"source http://{host}" in first.stderr, first.stderr[-3000:]

    # resumed with another (rotated) password: the same source; no password in any message
    again = _train(f"http://bob:{PW2}@{host}", tmp_path, "--steps", "2", "--resume", str(ck),
                   "--checkpoint", str(ck), "--log", str(log))  # fmt: skip
    assert again.returncode == 0, again.stderr[-3000:]
    said = f"resuming from {ck} at step 1 (its source: http://{host})"
    assert said in again.stderr, again.stderr[-3000:]
    for what, data in (("stderr", again.stderr), ("stdout", again.stdout), ("the log", log.read_bytes()),
                       ("the checkpoint", ck.read_bytes())):  # fmt: skip
        _no_secret(what, data)


def test_an_upper_case_scheme_trains_and_a_query_token_is_not_shown(served_a: str, tmp_path: Path) -> None:
    host, log = served_a, tmp_path / "log.json"
    # an upper-case scheme is a valid URL (LookupClient takes it): trained, recorded in lower case
    upper = _train(f"HTTP://carol:{PW3}@{host}", tmp_path, "--steps", "1", "--log", str(log))
    assert upper.returncode == 0, upper.stderr[-3000:]
    _no_secret("stderr", upper.stderr)
    _no_secret("the log", log.read_bytes())
    assert json.loads(log.read_text())["source"] == f"http://{host}"

    # a query's values are not echoed (a proxy may take a token there): exit 3, the URL masked
    query = _train(f"http://{host}/?token={QUERY_SECRET}", tmp_path, "--steps", "1", "--log",
                   str(tmp_path / "q.json"))  # fmt: skip
    assert query.returncode == 3, query.stderr[-3000:]
    assert f"http://{host}/?token=***" in query.stderr, query.stderr[-3000:]
    _no_secret("stderr", query.stderr)


def test_a_url_that_is_not_http_is_refused_without_its_password(tmp_path: Path) -> None:
    for url, shown in ((f"ftp://alice:{PW1}@127.0.0.1:9/x", "'ftp://127.0.0.1:9/x'"),
                       (f"alice:{PW2}@127.0.0.1:9", "'127.0.0.1:9'"),
                       (f"ftp://127.0.0.1:9/?access_token={QUERY_SECRET}", "'ftp://127.0.0.1:9/?access_token=***'")):  # fmt: skip
        done = cli_in_process("train", "--url", url, "--steps", "1", "--device", "cpu",
                              "--log", str(tmp_path / "log.json"), env=dict.fromkeys(TOKEN_VARS))  # fmt: skip
        assert done.returncode == 2, done.stderr
        assert f"url (--url) {shown}: must start with http:// or https://" in done.stderr, done.stderr
        _no_secret("stderr", done.stderr)


def test_a_changed_store_at_the_same_url_is_the_same_source_whatever_the_password(
    stores: dict[str, Path], tmp_path: Path
) -> None:
    """The store behind the URL rebuilt with other entries (as many): the refusal says the run's own
    source changed (not "another store", which the URL with a rotated password is not), naming no
    password, for a checkpoint of this featurecache and for one of an older featurecache (its
    ``source`` the URL as given, password and all)."""
    ck, old = tmp_path / "ck.pt", tmp_path / "old.pt"
    port = free_port()
    with _serve(stores["a"], port) as host:
        first = _train(f"http://alice:{PW1}@{host}", tmp_path, "--steps", "1", "--checkpoint", str(ck),
                       "--log", str(tmp_path / "log.json"))  # fmt: skip
        assert first.returncode == 0, first.stderr[-3000:]
    doc = torch.load(ck, weights_only=True)
    doc["source"] = f"http://alice:{PW1}@{host}"  # what an older featurecache's checkpoint holds
    torch.save(doc, old)
    with _serve(stores["b"], port):  # the same URL, now other entries
        for resume in (ck, old):
            done = _train(f"http://bob:{PW2}@{host}", tmp_path, "--steps", "2", "--resume", str(resume),
                          "--log", str(tmp_path / "log2.json"))  # fmt: skip
            assert done.returncode == 2, done.stderr[-3000:]
            last = done.stderr.strip().splitlines()[-1]
            assert f"cannot resume from {resume}: the lookup service at http://{host} is the source its run drew " \
                   "from, but its entries changed" in last, last  # fmt: skip
            _no_secret("stderr", done.stderr)
