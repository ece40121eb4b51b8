"""Shared fixtures: paths to the real corpus in ../shared and session-built real stores."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

if TYPE_CHECKING:
    from featurecache.build.config import BuildConfig

# pytest-xdist runs one test process per core (the README's `-n 2` on CI's 2 cores); torch's intra-op
# pool and OpenBLAS's (both sized by OMP_NUM_THREADS) would each start a thread per core in every one,
# and their spinning threads then take the cores from each other: tests/model/test_trunk.py and
# test_transition.py under -n 2 took 63.6 s -> 36.7 s and 50.3 s -> 34.9 s of CPU without -> with it
# (session 48, side by side). Set before torch is imported below; a value the caller set is kept, and a
# test about thread counts sets its own. Builds' and training runs' subprocesses inherit it.
if os.environ.get("PYTEST_XDIST_WORKER"):
    os.environ.setdefault("OMP_NUM_THREADS", "1")

# Triton reads TRITON_INTERPRET when a kernel module is imported. Test modules anywhere in the
# suite may import the model at collection (tests/client/test_crop_budget.py imports
# featurecache.model.train), and tests/client is collected before tests/model, whose conftest
# checks the kernels are interpreted on a machine without CUDA: so it is set here, first, with the
# same rule (only without CUDA; find_spec: a [build]-only install has no torch, and then nothing
# imports the kernels).
if "TRITON_INTERPRET" not in os.environ:
    import importlib.util

    if importlib.util.find_spec("torch") is not None:
        import torch

        if not torch.cuda.is_available():
            os.environ["TRITON_INTERPRET"] = "1"

REPO = Path(__file__).resolve().parents[1]
# The suite runs ~100 builds on embedded clusters (CLI runs inherit this): without a dashboard each
# scheduler skips bokeh's import and HTTP server (featurecache build --no-dashboard, docs/build.md "Dask").
# tests/build/test_dashboard_option.py turns it on where it checks it.
os.environ.setdefault("FEATURECACHE_DASHBOARD", "0")
# The suite runs as from a terminal: SIGINT not ignored. A runner that starts it in the background
# (`cmd &` in a script: the shell ignores SIGINT for it) has every process it starts inherit the
# ignore, and then every build and train run says so on stderr ("SIGINT is ignored by this
# process ...": featurecache.signals.ignored_signal_note), which tests of their output do not
# expect. A Python handler is not inherited across exec: processes started from here get SIGINT's
# default. The tests of that note ignore SIGINT themselves.
import signal  # noqa: E402

if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)


def _compile_sources() -> None:
    """Write the bytecode of the repo's own Python once, before any test runs. The suite starts
    hundreds of Python processes (CLI runs, Dask workers, uvicorn servers), and where
    PYTHONDONTWRITEBYTECODE is set (this machine and CI set it) each of them compiled featurecache
    from source again: ~0.9 s of a one-structure build's 4.7 s. Installed libraries are compiled by
    pip. Done by the xdist controller (or a plain session), not by each worker; pyc files are
    written atomically and only where stale, and .gitignore ignores them. Hash-checked (review RF1
    s26 #4): a timestamp pyc of a file edited within the same second at the same size would be
    run instead of the edit."""
    if os.environ.get("PYTEST_XDIST_WORKER"):
        return
    import compileall
    import py_compile

    for sub in ("featurecache", "services", "benchmarks", "tests"):
        if (REPO / sub).is_dir():
            compileall.compile_dir(REPO / sub, quiet=2, workers=1,
                                   invalidation_mode=py_compile.PycInvalidationMode.CHECKED_HASH)  # fmt: skip


_compile_sources()
SHARED = Path(os.environ.get("FEATURECACHE_SHARED", REPO.parent / "shared")).resolve()
REAL = SHARED / "data" / "real"
STRUCTURES = REAL / "structures"
MSAS = REAL / "msas"
CCD = SHARED / "data" / "ccd"
SAMPLES = REPO / "samples"
SOURCES_TSV = REAL / "SOURCES.tsv"

#: AF3 supplement §2.5.4, Table 9 ("Crystallization aids"), written out from the supplement (not
#: featurecache's constant): a default build removes them from X-ray structures (featurizer 0.8.0)
AF3_CRYSTALLIZATION_AIDS = frozenset("SO4 GOL EDO PO4 ACT PEG DMS TRS PGE PG4 FMT EPE MPD MES CD IOD".split())  # noqa: SIM905 (the table as one line)


def removed_aids(st: Any) -> frozenset[str]:
    """The residue names a default build leaves out of the gemmi structure ``st``: Table 9's when its
    stated method (``st.meta.experiments``: mmCIF ``_exptl``, PDB ``EXPDTA``) is X-ray diffraction."""
    xray = any("X-RAY" in e.method.upper() for e in st.meta.experiments)
    return AF3_CRYSTALLIZATION_AIDS if xray else frozenset()


@pytest.fixture(scope="session")
def shared_dir() -> Path:
    assert SHARED.is_dir(), f"the shared data directory {SHARED} is missing (set FEATURECACHE_SHARED)"
    return SHARED


@pytest.fixture(scope="session")
def real_dir(shared_dir: Path) -> Path:
    return REAL


@pytest.fixture(scope="session")
def structures_dir(real_dir: Path) -> Path:
    return STRUCTURES


@pytest.fixture(scope="session")
def ccd_dir(shared_dir: Path) -> Path:
    return CCD


def featurecache_at(commit: str, dest: Path, paths: tuple[str, ...] = ("featurecache",)) -> Path:
    """The featurecache package of ``commit`` (and whatever else of its tree ``paths`` names, e.g.
    ``services`` for a lookup service of then), extracted under ``dest`` (for tests that write a
    store with an older version's code); skips the test when the git history is not there."""
    import io
    import subprocess
    import tarfile

    try:
        blob = subprocess.run(["git", "-C", str(REPO), "archive", commit, *paths],
                              capture_output=True, check=True, timeout=120).stdout  # fmt: skip
    except (OSError, subprocess.CalledProcessError) as exc:
        pytest.skip(f"needs the git history ({commit}): {exc}")
    with tarfile.open(fileobj=io.BytesIO(blob)) as tar:
        tar.extractall(dest, filter="data")
    return dest


def build_with_package(package: Path, pdb_dir: Path, out: Path, *, msa_dir: Path | None = None):  # type: ignore[no-untyped-def]
    """``featurecache build`` (1 worker, no progress bar) run by the package tree ``package`` (from
    :func:`featurecache_at`) in a process of its own; returns the CompletedProcess (text output)."""
    import os
    import subprocess
    import sys

    args = ["build", "--pdb-dir", str(pdb_dir), *(["--msa-dir", str(msa_dir)] if msa_dir else []),
            "--out", str(out), "--workers", "1", "--no-progress"]  # fmt: skip
    return subprocess.run([sys.executable, "-m", "featurecache.cli", *args], capture_output=True, text=True,
                          cwd=package, env={**os.environ, "PYTHONPATH": str(package)}, timeout=300)  # fmt: skip


def build_store(out: Path, pdb_dir: Path, *, workers: int = 2, msa_dir: Path | None = None,
                ccd: Path | None = None, part_size: int = 8, own_cluster: bool = False,
                config: BuildConfig | None = None):  # type: ignore[no-untyped-def]  # fmt: skip
    """Run a real build without a progress bar; returns the summary. It runs on the session's
    LocalCluster of ``workers`` workers (tests/clusters.py: set up as an embedded build's, checked
    before each reuse), through the product's ``scheduler=`` path; ``own_cluster``: on an embedded
    LocalCluster of its own, started and shut down by the build (a test about the cluster itself:
    its start, its shutdown, fresh worker processes, workers killed or signalled). ``config``: the
    build's settings (``--msa-depth``, ``--conformer-timeout``), the defaults when None."""
    from featurecache.build.run import run_build

    if own_cluster:
        return run_build(pdb_dir=pdb_dir, out=out, msa_dir=msa_dir, ccd=ccd, workers=workers,
                         part_size=part_size, config=config, progress=False)  # fmt: skip
    from tests.clusters import shared_scheduler

    return run_build(pdb_dir=pdb_dir, out=out, msa_dir=msa_dir, ccd=ccd, scheduler=shared_scheduler(workers),
                     part_size=part_size, config=config, progress=False)  # fmt: skip


def store_snapshot(store: Path) -> dict[str, bytes]:
    """Every file of the store but the lock (the pid of its last holder), by path: what a refused
    or dry-run command must leave byte for byte as it was."""
    return {
        str(f.relative_to(store)): f.read_bytes()
        for f in sorted(store.rglob("*"))
        if f.is_file() and f.name != ".build.lock"
    }


@pytest.fixture
def no_shared_clusters() -> None:
    """The shared build clusters (tests/clusters.py) closed for a test that counts this process's
    children (their worker processes are children of the test session); the next build starts
    them again."""
    from tests.clusters import close_all

    close_all()


@pytest.fixture(scope="session", autouse=True)
def _close_shared_clusters() -> Iterator[None]:
    """The shared build clusters (tests/clusters.py) close with the session."""
    yield
    from tests.clusters import close_all

    close_all()


#: 24 corpus inputs for the tests that interrupt a build (SIGKILL, Ctrl-C) and resume it: every
#: input format (.cif, .pdb, .ent, .gz, .bcif.gz), format twins, and the six inputs SOURCES.tsv marks
#: malformed or without coordinates (failures); a third of the whole corpus' inputs, so the resumed
#: build and the uninterrupted reference build cost a third as much
INTERRUPT_INPUTS = (
    "102m.cif", "1A8O.cif", "1A8O.pdb", "1LCD.cif", "1LCD.pdb", "6wg6.bcif.gz", "2crb.cif.gz", "7DDO.pdb",
    "721p-assembly1.cif", "2q2k.cif", "4oz7.pdb", "pdb1gdr.ent", "1lzh.pdb.gz", "AF-P01112-F1-model_v4.cif.gz",
    "5e5z.pdb", "3u8v.cif", "ions.pdb", "disordered.pdb",
    "1MOM_min.cif", "4Q9R_min.cif", "1bna-errors.cif", "r5wkdsf.ent", "5moo_header.pdb", "header.pdb",
)  # fmt: skip


def interrupt_inputs(dest: Path) -> Path:
    """A --pdb-dir under ``dest`` holding copies of :data:`INTERRUPT_INPUTS`."""
    import shutil

    dest.mkdir(parents=True)
    for name in INTERRUPT_INPUTS:
        shutil.copy(STRUCTURES / name, dest / name)
    return dest


def session_store(factory: pytest.TempPathFactory, name: str, build: Callable[[Path], object]) -> Path:
    """The session store ``name``, built by ``build(out)`` once per test run: under pytest-xdist the
    first worker to ask builds it into a directory every worker of the run shares (the run's
    basetemp), under an exclusive lock, and the others wait for it and read it (each built its own
    before: the corpus twice, ~12 s of a 2-core run). Session stores are read-only by convention:
    a test that changes a store copies it first. A build that raises leaves no mark, so the next
    worker to ask builds it again (and fails the same way, in its own tests)."""
    if not os.environ.get("PYTEST_XDIST_WORKER"):
        out = factory.mktemp("stores") / name
        build(out)
        return out
    import fcntl
    import shutil

    root = factory.getbasetemp().parent / "session-stores"  # the run's, shared by its workers
    root.mkdir(exist_ok=True)
    out, done = root / name, root / f"{name}.done"
    with open(root / f"{name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not done.exists():
            if out.exists():  # a failed attempt's remains
                shutil.rmtree(out)
            build(out)
            done.touch()
    return out


@pytest.fixture(scope="session")
def corpus_store(tmp_path_factory: pytest.TempPathFactory, structures_dir: Path, ccd_dir: Path) -> Path:
    """The whole real structure corpus with its MSAs and the CCD, built once per test run."""
    return session_store(tmp_path_factory, "corpus",
                         lambda out: build_store(out, structures_dir, msa_dir=MSAS, ccd=ccd_dir))  # fmt: skip


@pytest.fixture(scope="session")
def sample_store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The small sample committed in the repo (samples/), with its MSAs and CCD files."""
    return session_store(
        tmp_path_factory, "sample",
        lambda out: build_store(out, SAMPLES / "structures", msa_dir=SAMPLES / "msas", ccd=SAMPLES / "ccd"),
    )  # fmt: skip


@pytest.fixture(scope="session")
def two_entry_store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """1psm and 2q2k of the sample with their mgnify MSA and the sample CCD, one entry a part: a
    small sound store for verify and repair tests to copy and break (built once per test run)."""
    import shutil

    def build(out: Path) -> None:
        src = out.parent / "two_entry_inputs"
        shutil.rmtree(src, ignore_errors=True)
        pdb, msa = src / "pdb", src / "msa"
        pdb.mkdir(parents=True)
        for entry in ("1psm", "2q2k"):
            shutil.copy(SAMPLES / "structures" / f"{entry}.cif", pdb)
            (msa / f"{entry}_A").mkdir(parents=True)
            shutil.copy(SAMPLES / "msas" / "openfold" / f"{entry}_A" / "mgnify_hits.sto", msa / f"{entry}_A")
        summary = build_store(out, pdb, workers=1, msa_dir=msa, ccd=SAMPLES / "ccd", part_size=1)
        assert summary.n_failed == 0

    return session_store(tmp_path_factory, "two_entry", build)


@pytest.fixture
def two_entry_copy(two_entry_store: Path, tmp_path: Path) -> Path:
    """A copy of :func:`two_entry_store` for one test to break and repair (verified sound first)."""
    import shutil

    from featurecache.store.verify import verify_store

    out = tmp_path / "s"
    shutil.copytree(two_entry_store, out)
    assert verify_store(out) == []
    return out


@dataclass(frozen=True)
class CliRun:
    """What :func:`cli_in_process` returns: the fields of a CompletedProcess the tests read."""

    returncode: int
    stdout: str
    stderr: str


def cli_in_process(*args: str, env: dict[str, str | None] | None = None, cwd: Path | None = None) -> CliRun:
    """``python -m featurecache.cli ARGS`` run in this process (typer's CliRunner: the same click
    app, its SystemExit status, stdout and stderr apart), for a test of a usage error or another
    refusal that happens before the command starts any work: it costs milliseconds where a process
    of its own costs 0.6-3 s (the imports; torch for ``train``). That the exit status, the streams
    and the messages are the real process's is checked by tests/test_cli_in_process.py, with real
    processes. ``env``: variables set (None: removed) for the run; ``cwd``: the directory it runs in.

    A run must not change the tests after it in the same pytest worker, so what a command may
    change in its process is put back afterwards: logging (the run gets a process's: no handler on
    the root logger, so the command's own ``logging.basicConfig`` installs its stderr handler, and
    its log lines land on the run's stderr as in a real process; the loggers' levels it sets are
    put back), warnings (shown on the run's stderr under Python's default filters, as a process
    would), signal handlers and the signal mask, the environment, the working directory, Dask's
    config and torch's global settings. A thread or child process it leaves running fails the
    test: such a command belongs in a process of its own."""
    import multiprocessing
    import threading
    import warnings

    from typer.testing import CliRunner

    from featurecache.cli import app

    threads, children = set(threading.enumerate()), set(multiprocessing.active_children())
    with _process_state_kept(), warnings.catch_warnings():
        warnings.resetwarnings()  # Python's defaults, as in a process started without -W
        for action, category in (("ignore", ResourceWarning), ("ignore", ImportWarning),
                                 ("ignore", PendingDeprecationWarning), ("ignore", DeprecationWarning)):  # fmt: skip
            warnings.simplefilter(action, category)  # type: ignore[arg-type]
        warnings.showwarning = _warning_on_stderr
        if cwd is not None:
            os.chdir(cwd)
        result = CliRunner().invoke(app, list(args), env=env, catch_exceptions=False,
                                    prog_name="python -m featurecache.cli")  # fmt: skip
    left = [t for t in threading.enumerate() if t not in threads and t.is_alive() and not t.daemon]
    started = [p for p in multiprocessing.active_children() if p not in children]
    assert not left and not started, f"featurecache {' '.join(args)} left running: {left} {started}"
    return CliRun(result.exit_code, result.stdout, result.stderr)


def _warning_on_stderr(message: Warning | str, category: type[Warning], filename: str, lineno: int,
                       file: Any = None, line: str | None = None) -> None:  # fmt: skip
    import sys
    import warnings

    sys.stderr.write(warnings.formatwarning(message, category, filename, lineno, line))


@contextmanager
def _process_state_kept() -> Iterator[None]:
    """What :func:`cli_in_process` puts back after a run (see there)."""
    import copy
    import logging
    import signal
    import sys

    root = logging.getLogger()
    loggers = [
        root,
        *(lg for lg in logging.Logger.manager.loggerDict.values() if isinstance(lg, logging.Logger)),
    ]
    kept = {lg: (lg.level, list(lg.handlers), lg.propagate, lg.disabled) for lg in loggers}
    disabled = logging.root.manager.disable
    signals = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT)}
    mask = signal.pthread_sigmask(signal.SIG_BLOCK, [])
    environ, cwd = dict(os.environ), os.getcwd()
    dask_config = copy.deepcopy(sys.modules["dask.config"].config) if "dask.config" in sys.modules else None
    torch = sys.modules.get("torch")
    torch_state = (
        (torch.get_num_threads(), torch.get_default_dtype(), torch.are_deterministic_algorithms_enabled(),
         torch.get_rng_state())
        if torch is not None else None
    )  # fmt: skip
    for handler in kept[root][1]:  # pytest's log capture, back after the run
        root.removeHandler(handler)
    root.setLevel(logging.WARNING)  # a fresh process's root logger
    try:
        yield
    finally:
        for lg in [root, *logging.Logger.manager.loggerDict.values()]:
            if not isinstance(lg, logging.Logger):
                continue
            level, handlers, propagate, was_disabled = kept.get(lg, (logging.NOTSET, [], True, False))
            for handler in list(lg.handlers):
                if handler not in handlers:
                    lg.removeHandler(handler)
            for handler in handlers:
                if handler not in lg.handlers:
                    lg.addHandler(handler)
            if lg.level != level:  # only when changed: each setLevel clears every logger's cache
                lg.setLevel(level)
            lg.propagate, lg.disabled = propagate, was_disabled
        if logging.root.manager.disable != disabled:
            logging.disable(disabled)
        for s, handler in signals.items():
            if handler is not None:
                signal.signal(s, handler)
        signal.pthread_sigmask(signal.SIG_SETMASK, mask)
        os.chdir(cwd)
        if dask_config is not None:
            config = sys.modules["dask.config"].config
            config.clear()
            config.update(dask_config)
        if torch is not None and torch_state is not None:  # each only when changed (the setters import more)
            threads, dtype, deterministic, rng = torch_state
            if torch.get_num_threads() != threads:
                torch.set_num_threads(threads)
            if torch.get_default_dtype() != dtype:
                torch.set_default_dtype(dtype)
            if torch.are_deterministic_algorithms_enabled() != deterministic:
                torch.use_deterministic_algorithms(deterministic)
            torch.set_rng_state(rng)
        os.environ.clear()
        os.environ.update(environ)
