"""Review R42c s52 #3: the build's embedded Dask cluster listened on 127.0.0.1 with plain ``tcp://``
and no authentication, so any other local user of a shared node could connect while a build ran
and run Python in its scheduler and workers, as the build's user (``Client(addr).run(...)``).

The embedded cluster now runs on TLS with credentials made for it in memory
(``Security.temporary()``: a self-signed CA, both sides verify each other), so a process without
them cannot talk to the scheduler, a worker or a nanny. Real clusters, started as a build starts
them (:func:`featurecache.build.run._make_client`, in a process of its own; with the workers forked
by the build's fork server, as ``featurecache build`` does, and spawned, as ``run_build`` does by
default), probed from another process as another user would: a plain Dask client (the reviewer's
probe), a raw connection with each scheme, a TLS connection that presents no certificate and
trusts any server, and one with credentials of its own. The same probe given the cluster's own
credentials connects, so each refusal is the credentials', not a cluster that is gone."""

from __future__ import annotations

import ast
import json
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

import featurecache
from tests.conftest import REPO, SAMPLES

#: the build's side: an embedded cluster made as a build makes it; prints its addresses and
#: credentials (for the positive control only), waits for a line on stdin, then checks that the
#: cluster still works and closes it
HOLDER = r"""
import json, os, sys
from featurecache.build import fork_server
from featurecache.build.run import _make_client, _shutdown
from featurecache.signals import sigint_blocked

def pid():
    return os.getpid()

if __name__ == "__main__":
    forked = sys.argv[1] == "1"
    if forked:
        with sigint_blocked():
            assert fork_server.start()
    client, cluster = _make_client(2, None)
    try:
        info = client.scheduler_info()["workers"]
        sec = cluster.security
        print(json.dumps({
            "scheduler": cluster.scheduler_address,
            "workers": sorted(info),
            "nannies": sorted(w["nanny"] for w in info.values()),
            "credentials": {k: getattr(sec, k) for k in ("tls_ca_file", "tls_client_cert", "tls_client_key")},
        }), flush=True)
        sys.stdin.readline()
        pids = client.run(pid)
        total = client.submit(sum, [1, 2, 3], pure=False).result(timeout=60)
        print(json.dumps({"after": {"workers": len(pids), "sum": total}}), flush=True)
    finally:
        _shutdown(client, cluster)
        if forked:
            fork_server.stop()
"""

#: another process's attempts (argv: the holder's JSON); prints {attempt: [outcome, detail]}
PROBE = r"""
import asyncio, json, os, ssl, sys
from distributed import Client
from distributed.comm import connect
from distributed.security import Security

given = json.loads(sys.argv[1])
mode = sys.argv[2]
results = {}

def record(name, fn):
    try:
        results[name] = ["connected", repr(fn())[:200]]
    except BaseException as exc:
        results[name] = ["refused", f"{type(exc).__name__}: {exc}"[:300]]

async def identity(address, **kwargs):
    comm = await connect(address, timeout=5, **kwargs)
    try:
        await comm.write({"op": "identity", "reply": True})
        return (await comm.read()).get("type")
    finally:
        comm.abort()

def ask(address, **kwargs):
    return lambda: asyncio.run(asyncio.wait_for(identity(address, **kwargs), 15))

def run_on_workers(address, **kwargs):
    def go():
        with Client(address, timeout="5s", set_as_default=False, **kwargs) as c:
            return c.run(os.getpid)
    return go

trust_any = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
trust_any.check_hostname = False
trust_any.verify_mode = ssl.CERT_NONE
endpoints = [given["scheduler"], *given["workers"], *given["nannies"]]
if mode == "own":  # the positive control: the cluster's own credentials
    own = Security(require_encryption=True, tls_ca_file=given["credentials"]["tls_ca_file"],
                   tls_client_cert=given["credentials"]["tls_client_cert"],
                   tls_client_key=given["credentials"]["tls_client_key"])
    for address in endpoints:
        record(f"own credentials identity {address}", ask(address, **own.get_connection_args("client")))
    record("own credentials client.run", run_on_workers(given["scheduler"], security=own))
else:
    foreign = Security.temporary()
    record(f"plain Client {given['scheduler']} .run", run_on_workers(given["scheduler"]))
    plain = "tcp://" + given["scheduler"].split("://", 1)[1]  # the reviewer's probe, as it was
    record(f"plain Client {plain} .run", run_on_workers(plain))
    for address in endpoints:
        host_port = address.split("://", 1)[1]
        record(f"tcp identity {host_port}", ask(f"tcp://{host_port}"))
        record(f"tls no certificate, any server {host_port}", ask(f"tls://{host_port}", ssl_context=trust_any))
        record(f"tls own temporary credentials {host_port}",
               ask(f"tls://{host_port}", **foreign.get_connection_args("client")))
print(json.dumps(results))
"""


def _probe(given: dict, mode: str) -> dict[str, list[str]]:  # type: ignore[type-arg]
    r = subprocess.run([sys.executable, "-c", PROBE, json.dumps(given), mode], cwd=REPO, capture_output=True,
                       text=True, timeout=300, env={**os.environ, "PYTHONPATH": str(REPO)})  # fmt: skip
    assert r.returncode == 0, r.stderr[-3000:]
    return json.loads(r.stdout.strip().splitlines()[-1])  # type: ignore[no-any-return]


@pytest.mark.parametrize("forked", [True, False], ids=["fork-server", "spawned"])
def test_a_process_without_the_builds_credentials_cannot_reach_its_cluster(forked: bool) -> None:
    holder = subprocess.Popen([sys.executable, "-c", HOLDER, "1" if forked else "0"], cwd=REPO,
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                              env={**os.environ, "PYTHONPATH": str(REPO)})  # fmt: skip
    try:
        assert holder.stdout is not None and holder.stdin is not None
        line = holder.stdout.readline()
        assert line, holder.communicate(timeout=60)[1][-3000:]
        given = json.loads(line)
        assert len(given["workers"]) == 2 and len(given["nannies"]) == 2, given
        others = _probe(given, "foreign")
        own = _probe(given, "own")
        holder.stdin.write("go\n")
        holder.stdin.flush()
        after = json.loads(holder.stdout.readline())["after"]
        _, err = holder.communicate(timeout=120)
    finally:
        if holder.poll() is None:
            holder.kill()
            holder.wait()
    assert holder.returncode == 0, err[-3000:]
    connected = {name: detail for name, (outcome, detail) in others.items() if outcome == "connected"}
    assert not connected, f"reached the build's cluster without its credentials: {connected}"
    # every endpoint tried (scheduler, 2 workers, 2 nannies: 3 ways each; and the plain clients)
    assert len(others) == 2 + 5 * 3, sorted(others)
    # ... and was alive then: the cluster's own credentials reach each of them, and its workers run code
    refused = {name: detail for name, (outcome, detail) in own.items() if outcome != "connected"}
    assert not refused, refused
    kinds = sorted(
        ast.literal_eval(own[f"own credentials identity {a}"][1])
        for a in [given["scheduler"], *given["workers"]]
    )
    assert kinds == ["Scheduler", "Worker", "Worker"], kinds
    assert after == {"workers": 2, "sum": 6}, after
    for address in [given["scheduler"], *given["workers"], *given["nannies"]]:
        assert address.startswith("tls://127.0.0.1:"), address


@pytest.fixture(scope="module")
def held_cluster() -> Iterator[dict]:  # type: ignore[type-arg]
    """A 1-worker embedded cluster in a process of its own (forked workers, as the CLI's), kept for
    the module's tests; its addresses and credentials (as ``HOLDER`` prints them)."""
    holder = subprocess.Popen([sys.executable, "-c", HOLDER.replace("_make_client(2, None)", "_make_client(1, None)"),
                               "1"], cwd=REPO, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              text=True, env={**os.environ, "PYTHONPATH": str(REPO)})  # fmt: skip
    try:
        assert holder.stdout is not None and holder.stdin is not None
        line = holder.stdout.readline()
        assert line, holder.communicate(timeout=60)[1][-3000:]
        yield json.loads(line)
        holder.stdin.write("go\n")
        holder.stdin.flush()
        holder.communicate(timeout=120)
    finally:
        if holder.poll() is None:
            holder.kill()
            holder.wait()


def _cli_build(tmp: Path, scheduler: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    pdb = tmp / "pdb"
    pdb.mkdir(parents=True)
    shutil.copy(SAMPLES / "structures" / "1psm.cif", pdb)
    args = [
        "build",
        "--pdb-dir",
        str(pdb),
        "--out",
        str(tmp / "store"),
        "--scheduler",
        scheduler,
        "--no-progress",
    ]
    clean = {k: v for k, v in os.environ.items() if not k.startswith("DASK_DISTRIBUTED__COMM__")}
    return subprocess.run([sys.executable, "-m", "featurecache.cli", *args], capture_output=True, text=True, cwd=REPO,
                          env={**clean, "PYTHONPATH": str(REPO), **env}, timeout=300)  # fmt: skip


def _tls_env(tmp: Path, ca: str, cert: str, key: str) -> dict[str, str]:
    """Dask's TLS settings for a client, as variables naming files written under ``tmp``."""
    tmp.mkdir(mode=0o700)
    files = {}
    for name, text in (("ca.pem", ca), ("cert.pem", cert), ("key.pem", key)):
        (tmp / name).write_text(text)
        files[name] = str(tmp / name)
    return {"DASK_DISTRIBUTED__COMM__TLS__CA_FILE": files["ca.pem"],
            "DASK_DISTRIBUTED__COMM__TLS__CLIENT__CERT": files["cert.pem"],
            "DASK_DISTRIBUTED__COMM__TLS__CLIENT__KEY": files["key.pem"]}  # fmt: skip


def test_another_featurecache_build_cannot_join_the_cluster(tmp_path: Path, held_cluster: dict) -> None:  # type: ignore[type-arg]
    """``featurecache build --scheduler ADDR`` in another process, at the embedded cluster's address:
    without Dask TLS settings one line, exit 3, saying a tls:// address needs them (distributed's
    TypeError had read as "answered, but not in Dask's protocol"); with credentials of its own,
    refused by the cluster, exit 3, also when it trusts the cluster's certificate; nothing built."""
    address = held_cluster["scheduler"]
    assert address.startswith("tls://127.0.0.1:"), address
    plain = _cli_build(tmp_path / "plain", address, {})
    assert plain.returncode == 3, plain.stderr[-3000:]
    assert (
        f"cannot connect to the Dask scheduler at {address}: a tls:// address needs Dask's TLS settings"
        in plain.stderr
    )
    assert len(plain.stderr.strip().splitlines()) == 1, plain.stderr
    assert not (tmp_path / "plain" / "store").exists()
    from distributed.security import Security

    other = Security.temporary()
    env = _tls_env(tmp_path / "other-creds", other.tls_ca_file, other.tls_client_cert, other.tls_client_key)
    foreign = _cli_build(tmp_path / "foreign", address, env)
    assert foreign.returncode == 3, foreign.stderr[-3000:]
    assert (
        f"cannot connect to the Dask scheduler at {address}: TLS certificate does not match" in foreign.stderr
    )
    assert not (tmp_path / "foreign" / "store").exists()
    # trusting the cluster's CA (it is no secret) but with a certificate of its own: refused by the cluster
    ca = held_cluster["credentials"]["tls_ca_file"]
    env = _tls_env(tmp_path / "ca-creds", ca, other.tls_client_cert, other.tls_client_key)
    own_cert = _cli_build(tmp_path / "own-cert", address, env)
    assert own_cert.returncode == 3, own_cert.stderr[-3000:]
    # the cluster's TLS alert (it does not know the certificate), read in the handshake or after it;
    # tornado may log the alert as a WARNING first ("error on read"), then the build's one line
    last = own_cert.stderr.strip().splitlines()[-1]
    assert last.startswith(f"error: cannot connect to the Dask scheduler at {address}: "), own_cert.stderr
    assert "alert unknown ca" in last or "refusing this client's certificate" in last, own_cert.stderr
    assert "Traceback" not in own_cert.stderr, own_cert.stderr
    assert not (tmp_path / "own-cert" / "store").exists()


def test_a_tls_scheduler_with_dasks_tls_settings_still_builds(tmp_path: Path, held_cluster: dict) -> None:  # type: ignore[type-arg]
    """``--scheduler tls://...`` with Dask's TLS settings for a client (here: the held cluster's
    credentials, in files named by DASK_* variables) builds, as before: the user's own TLS cluster."""
    creds = held_cluster["credentials"]
    env = _tls_env(
        tmp_path / "creds", creds["tls_ca_file"], creds["tls_client_cert"], creds["tls_client_key"]
    )
    built = _cli_build(tmp_path / "own", held_cluster["scheduler"], env)
    assert built.returncode == 0, built.stderr[-3000:]
    assert featurecache.open_store(tmp_path / "own" / "store").ids == ["1psm"]


def test_a_build_reuses_an_embedded_cluster_of_this_process_by_address(tmp_path: Path) -> None:
    """An embedded cluster this process started (``_make_client``, as tests/clusters.py keeps them)
    given as ``scheduler=`` is reached with its own credentials, not Dask's settings."""
    from featurecache.build.run import _make_client, _shutdown, run_build

    client, cluster = _make_client(1, None)
    try:
        address = cluster.scheduler_address
        assert address.startswith("tls://127.0.0.1:"), address
        pdb = tmp_path / "pdb"
        pdb.mkdir()
        shutil.copy(SAMPLES / "structures" / "1psm.cif", pdb)
        summary = run_build(pdb_dir=pdb, out=tmp_path / "s", scheduler=address, progress=False)
        assert (summary.n_built, summary.n_failed, summary.workers) == (1, 0, 1)
    finally:
        _shutdown(client, cluster)
    assert featurecache.open_store(tmp_path / "s").ids == ["1psm"]


MISSING = """
import sys
sys.modules["cryptography"] = None  # as where it is not installed: its import raises ImportError
from featurecache.cli import app
sys.argv = ["featurecache", *sys.argv[1:]]
app()
"""


def test_without_cryptography_the_build_stops_in_one_line(tmp_path: Path) -> None:
    """The embedded cluster is not started on plain tcp:// when the credentials cannot be made:
    one line naming the package and the install, exit 3, no store left behind."""
    out = tmp_path / "store"
    r = subprocess.run([sys.executable, "-c", MISSING, "build", "--pdb-dir", str(SAMPLES / "structures"), "--out",
                        str(out), "--workers", "1", "--no-progress"], capture_output=True, text=True, cwd=REPO,
                       env={**os.environ, "PYTHONPATH": str(REPO)}, timeout=300)  # fmt: skip
    assert r.returncode == 3, r.stderr[-3000:]
    # the CLI's extra check names it before the build starts (31d5b0f); run_build's own check says
    # "needs the cryptography package" where the CLI is not in front of it
    assert "cryptography" in r.stderr and "pip install 'featurecache[build]'" in r.stderr, r.stderr
    assert len(r.stderr.strip().splitlines()) == 1, r.stderr
    assert not out.exists()


API_MISSING = """
import sys
sys.modules["cryptography"] = None
from featurecache.build.run import run_build
try:
    run_build(pdb_dir=sys.argv[1], out=sys.argv[2], workers=1, progress=False)
except Exception as exc:
    print(type(exc).__name__, exc)
"""


def test_without_cryptography_run_build_refuses_too(tmp_path: Path) -> None:
    """Called without the CLI (whose extra check answers first), the build itself refuses to start
    the embedded cluster on plain tcp:// and names the package."""
    out = tmp_path / "store"
    r = subprocess.run([sys.executable, "-c", API_MISSING, str(SAMPLES / "structures"), str(out)],
                       capture_output=True, text=True, cwd=REPO, env={**os.environ, "PYTHONPATH": str(REPO)},
                       timeout=300)  # fmt: skip
    assert "needs the cryptography package: pip install 'featurecache[build]'" in r.stdout, (
        r.stdout,
        r.stderr,
    )
    assert not out.exists()
