"""One ``LD_PRELOAD`` fault-injection shim for tests that run the CLI in a process of its own.

:data:`SHIM` is compiled once per test session with gcc (:func:`compiled_shim`); :func:`fault_env`
builds a subprocess's environment that preloads it. The shim makes calls on files whose path
starts with a prefix fail, in the process that preloads it (and its children that keep the
environment), as its ``FC_FAULT_*`` variables say:

* ``FC_FAULT_PREFIX``: the path prefix (of the file an fd was opened on, or the path given to a
  ``stat``); unset, nothing fails;
* ``FC_FAULT_CALLS``: a comma-separated list of ``read`` (``read``/``pread64``), ``stat``
  (``stat64``/``fstatat64``) and ``write`` (``write``/``pwrite``/``pwrite64``/``writev``/
  ``pwritev``); default ``read``;
* ``FC_FAULT_ERRNO``: the errno they fail with (default EIO); with ``FC_FAULT_KILL`` set, the
  process SIGKILLs itself there instead;
* ``FC_FAULT_LIMIT``: how many calls fail in each process (default 1; negative: every one);
* ``FC_FAULT_CMD``: only in a process whose ``/proc/self/cmdline`` (NULs read as spaces) holds it;
* ``FC_FAULT_TRIGGER``: only once this file exists (checked at each call);
* ``FC_FAULT_OPEN=N``: for ``read``/``write``, only calls on the file descriptor of the Nth
  ``open64``/``openat64`` of such a path in that process (counted while the fault is armed), once.
"""

from __future__ import annotations

import errno as errnos
import os
import shutil
import subprocess
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Literal

import pytest

SHIM = r"""
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/uio.h>
#include <unistd.h>

static ssize_t (*real_read)(int, void *, size_t);
static ssize_t (*real_pread64)(int, void *, size_t, off_t);
static int failed = 0, opened = 0, doomed = -1;

static void init(void) {
    if (!real_read) real_read = dlsym(RTLD_NEXT, "read");
    if (!real_pread64) real_pread64 = dlsym(RTLD_NEXT, "pread64");
}

/* whether FC_FAULT_CALLS names `kind` (unset: "read") */
static int calls(const char *kind) {
    const char *list = getenv("FC_FAULT_CALLS");
    size_t n = strlen(kind);
    if (!list) list = "read";
    for (const char *p = list; (p = strstr(p, kind)) != NULL; p += n)
        if ((p == list || p[-1] == ',') && (p[n] == 0 || p[n] == ',')) return 1;
    return 0;
}

static int in_command(void) {
    const char *want = getenv("FC_FAULT_CMD");
    char buf[8192];
    if (!want) return 1;
    init();
    int fd = open("/proc/self/cmdline", O_RDONLY);
    ssize_t k = fd < 0 ? 0 : real_read(fd, buf, sizeof buf - 1);
    if (fd >= 0) close(fd);
    if (k <= 0) return 0;
    for (ssize_t i = 0; i < k; i++) if (!buf[i]) buf[i] = ' ';
    buf[k] = 0;
    return strstr(buf, want) != NULL;
}

static int armed(void) {
    const char *prefix = getenv("FC_FAULT_PREFIX");
    const char *limit = getenv("FC_FAULT_LIMIT");
    const char *trigger = getenv("FC_FAULT_TRIGGER");
    int most = limit ? atoi(limit) : 1;
    if (!prefix || (most >= 0 && failed >= most)) return 0;
    if (trigger && access(trigger, F_OK) != 0) return 0;
    return in_command();
}

static int under_prefix(const char *path) {
    const char *prefix = getenv("FC_FAULT_PREFIX");
    return path && prefix && strncmp(path, prefix, strlen(prefix)) == 0;
}

static int fd_matches(int fd) {
    char link[64], path[4096];
    snprintf(link, sizeof link, "/proc/self/fd/%d", fd);
    ssize_t n = readlink(link, path, sizeof path - 1);
    if (n <= 0) return 0;
    path[n] = 0;
    return under_prefix(path);
}

/* the call fails: counted, then SIGKILL (FC_FAULT_KILL) or errno FC_FAULT_ERRNO (default EIO) */
static int fail(void) {
    const char *e = getenv("FC_FAULT_ERRNO");
    failed++;
    if (getenv("FC_FAULT_KILL")) kill(getpid(), SIGKILL);
    errno = e ? atoi(e) : EIO;
    return 1;
}

static void opened_fd(int fd) {
    const char *nth = getenv("FC_FAULT_OPEN");
    init();
    if (fd < 0 || !nth || !(calls("read") || calls("write")) || !armed() || !fd_matches(fd)) return;
    if (++opened == atoi(nth)) doomed = fd;
}

static int fail_fd(int fd, const char *kind) {
    init();
    if (!calls(kind) || !armed()) return 0;
    if (getenv("FC_FAULT_OPEN") ? fd != doomed : !fd_matches(fd)) return 0;
    doomed = -1;
    return fail();
}

static int fail_stat(const char *path) {
    init();
    if (!calls("stat") || !path || !armed() || !under_prefix(path)) return 0;
    return fail();
}

int open64(const char *path, int flags, ...) {
    static int (*real)(const char *, int, ...);
    mode_t mode = 0;
    if (flags & (O_CREAT | O_TMPFILE)) {
        va_list ap; va_start(ap, flags); mode = va_arg(ap, int); va_end(ap);
    }
    if (!real) real = dlsym(RTLD_NEXT, "open64");
    int fd = real(path, flags, mode);
    opened_fd(fd);
    return fd;
}

int openat64(int dirfd, const char *path, int flags, ...) {
    static int (*real)(int, const char *, int, ...);
    mode_t mode = 0;
    if (flags & (O_CREAT | O_TMPFILE)) {
        va_list ap; va_start(ap, flags); mode = va_arg(ap, int); va_end(ap);
    }
    if (!real) real = dlsym(RTLD_NEXT, "openat64");
    int fd = real(dirfd, path, flags, mode);
    opened_fd(fd);
    return fd;
}

ssize_t read(int fd, void *buf, size_t count) {
    init();
    if (fail_fd(fd, "read")) return -1;
    return real_read(fd, buf, count);
}

ssize_t pread64(int fd, void *buf, size_t count, off_t offset) {
    init();
    if (fail_fd(fd, "read")) return -1;
    return real_pread64(fd, buf, count, offset);
}

int stat64(const char *path, struct stat64 *st) {
    static int (*real)(const char *, struct stat64 *);
    if (!real) real = dlsym(RTLD_NEXT, "stat64");
    if (fail_stat(path)) return -1;
    return real(path, st);
}

int fstatat64(int dirfd, const char *path, struct stat64 *st, int flags) {
    static int (*real)(int, const char *, struct stat64 *, int);
    if (!real) real = dlsym(RTLD_NEXT, "fstatat64");
    if (fail_stat(path)) return -1;
    return real(dirfd, path, st, flags);
}

#define WRITE(ret, name, params, args) \
ret name params { static ret (*real) params; if (!real) real = dlsym(RTLD_NEXT, #name); \
    if (fail_fd(fd, "write")) return -1; return real args; }
WRITE(ssize_t, write, (int fd, const void *b, size_t c), (fd, b, c))
WRITE(ssize_t, pwrite, (int fd, const void *b, size_t c, off_t o), (fd, b, c, o))
WRITE(ssize_t, pwrite64, (int fd, const void *b, size_t c, off_t o), (fd, b, c, o))
WRITE(ssize_t, writev, (int fd, const struct iovec *v, int c), (fd, v, c))
WRITE(ssize_t, pwritev, (int fd, const struct iovec *v, int c, off_t o), (fd, v, c, o))
"""

#: the session's compiled shim, or why there is none (:func:`compiled_shim`)
_compiled: dict[str, Path | str] = {}


def compiled_shim(tmp_path_factory: pytest.TempPathFactory, *, missing: Literal["fail", "skip"]) -> Path:
    """The shim compiled with gcc (once per session, in a session temp directory). Without gcc
    the test fails (``missing="fail"``) or is skipped (``"skip"``); a failed compile fails it."""
    if "so" not in _compiled:
        gcc = shutil.which("gcc") or shutil.which("cc")
        if gcc is None:
            _compiled["so"] = "gcc"
        else:
            d = tmp_path_factory.mktemp("fault-shim")
            (d / "fault.c").write_text(SHIM)
            cc = [gcc, "-shared", "-fPIC", "-O1", "-o", str(d / "fault.so"), str(d / "fault.c"), "-ldl"]
            done = subprocess.run(cc, capture_output=True, text=True, check=False, timeout=120)
            _compiled["so"] = d / "fault.so" if done.returncode == 0 else f"compile: {done.stderr}"
    so = _compiled["so"]
    if isinstance(so, Path):
        return so
    if so != "gcc":
        pytest.fail(f"the LD_PRELOAD fault shim (tests/faults.py) did not compile: {so}")
    if missing == "skip":
        pytest.skip("no C compiler (gcc) to build the fault-injection shim")
    pytest.fail("these tests compile an LD_PRELOAD shim (tests/faults.py): they need gcc")


def fault_env(
    shim: Path,
    prefix: str | Path,
    *,
    env: Mapping[str, str] | None = None,
    calls: str = "read",
    errno: int = errnos.EIO,
    kill: bool = False,
    limit: int | None = 1,
    cmd: str | None = None,
    trigger: str | Path | None = None,
    open: int | None = None,
) -> dict[str, str]:
    """``env`` (default: this process's environment) with ``shim`` preloaded: ``calls`` (``read``,
    ``stat``, ``write``, comma-separated) on files under ``prefix`` fail with ``errno`` (or SIGKILL
    the process, ``kill``), ``limit`` times per process (``None``: every one), only in processes
    whose command line holds ``cmd``, once ``trigger`` exists, on the fd of the ``open``-th open."""
    out = {**(os.environ if env is None else env), "LD_PRELOAD": str(shim), "FC_FAULT_PREFIX": str(prefix),
           "FC_FAULT_CALLS": calls, "FC_FAULT_ERRNO": str(errno),
           "FC_FAULT_LIMIT": str(-1 if limit is None else limit)}  # fmt: skip
    for name, value in (("KILL", "1" if kill else None), ("CMD", cmd), ("TRIGGER", trigger), ("OPEN", open)):
        if value is not None:
            out[f"FC_FAULT_{name}"] = str(value)
        else:
            out.pop(f"FC_FAULT_{name}", None)
    return out


@contextmanager
def mounted_tmpfs(mount: Path, size: str) -> Iterator[Path]:
    """A tmpfs of ``size`` (``"4M"``) mounted at ``mount`` (made here) for the block: a real
    filesystem to fill up. Skips the test where it cannot be mounted (not root, no mount
    permission); unmounted after the block (lazily when busy)."""
    mount.mkdir(parents=True, exist_ok=True)
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs (a real full disk) needs root (CI runs these as root)")
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(mount)],
                          capture_output=True, text=True, check=False)  # fmt: skip
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {done.stderr.strip()}")
    try:
        yield mount
    finally:
        if subprocess.run(["umount", str(mount)], capture_output=True, check=False).returncode != 0:
            subprocess.run(["umount", "-l", str(mount)], capture_output=True, check=False)


def ccd_inputs(tmp_path: Path) -> Path:
    """A ``--pdb-dir`` of 102m (HEM, standard residues) and 2q2k (standard residues): two entries
    that each look up CCD definitions."""
    from tests.conftest import SAMPLES

    pdb = tmp_path / "pdb"
    pdb.mkdir()
    for name in ("102m.cif", "2q2k.cif"):
        shutil.copy(SAMPLES / "structures" / name, pdb)
    return pdb


def cli_build(pdb: Path, ccd: Path, out: Path, env: Mapping[str, str]) -> subprocess.CompletedProcess[str]:
    """``featurecache build --ccd`` (1 worker, parts of 1 entry) in a process of its own, with
    ``env`` (a :func:`fault_env`'s, or the plain environment)."""
    import sys

    from tests.conftest import REPO

    args = ["build", "--pdb-dir", str(pdb), "--ccd", str(ccd), "--out", str(out), "--workers", "1",
            "--part-size", "1", "--no-progress"]  # fmt: skip
    return subprocess.run([sys.executable, "-m", "featurecache.cli", *args], capture_output=True, text=True,
                          cwd=REPO, env={**env, "COLUMNS": "400", "NO_COLOR": "1"}, timeout=400)  # fmt: skip
