"""Review R42b s52 #2 and #8: one read error (EIO) in a build's worker, on the CCD or on a structure.

#2: one EIO reading the CCD in a worker failed every entry that worker featurized after it, as bad
input (stage ``ccd``, keyed by the entry's bytes): the worker's CCD reader kept the error for its
life, and the next build, with the disk fine again, skipped those entries as "still failing
(recorded by an earlier run)", exit 1 for ever; a CCD directory's file was called one to "fix or
replace". Now the worker reads the CCD again for its next entry, and the entry whose read failed
has a row keyed "" naming the CCD file and the OS's reason, which the next build retries.

#8: an EIO reading a structure file in the worker was explained as "replaced or changed during the
build"; now its row gives the OS's reason, with no guess at the cause.

Real builds (``featurecache build`` in a process of its own, on its embedded LocalCluster) of real
files; the EIO is made by the ``LD_PRELOAD`` shim of ``tests/faults.py`` (compiled with gcc):
the first ``read`` of a file under a given path fails with EIO, once, and only in processes whose
command line holds "forkserver" (the Dask workers), never in the build's driver.
"""

from __future__ import annotations

import os
import re
import shutil
from pathlib import Path

import pytest

import featurecache
from tests.conftest import SAMPLES
from tests.faults import ccd_inputs, cli_build, compiled_shim, fault_env


@pytest.fixture(scope="module")
def shim(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return compiled_shim(tmp_path_factory, missing="fail")


def _build(pdb: Path, ccd: Path, out: Path, *, shim: Path | None = None, prefix: Path | None = None):  # type: ignore[no-untyped-def]
    """``featurecache build`` (1 worker, parts of 1 entry) in a process of its own; with ``shim``,
    the first read of a file under ``prefix`` in the worker fails with EIO."""
    env: dict[str, str] = dict(os.environ)
    if shim is not None:
        assert prefix is not None
        env = fault_env(shim, prefix, env=env, cmd="forkserver")
    return cli_build(pdb, ccd, out, env)


def _ccd(tmp_path: Path, kind: str) -> tuple[Path, Path]:
    """``(--ccd, the path whose first read in the worker fails)``: a copy of the sample CCD as a
    directory (any of its files: the first one the worker reads) or as one components.cif."""
    if kind == "dir":
        d = tmp_path / "ccd"
        shutil.copytree(SAMPLES / "ccd", d)
        return d, d
    one = tmp_path / "components.cif"
    one.write_text(
        "".join(f.read_text().rstrip("\n") + "\n" for f in sorted((SAMPLES / "ccd").glob("*.cif")))
    )
    return one, one


@pytest.mark.parametrize("kind", ["file", "dir"])
def test_one_eio_on_the_ccd_fails_one_entry_and_the_next_build_builds_it(
    tmp_path: Path, shim: Path, kind: str
) -> None:
    pdb = ccd_inputs(tmp_path)
    ccd, prefix = _ccd(tmp_path, kind)
    out = tmp_path / "store"
    first = _build(pdb, ccd, out, shim=shim, prefix=prefix)
    assert first.returncode == 1, first.stdout[-3000:] + first.stderr[-3000:]
    store = featurecache.open_store(out)
    rows = store.failures.to_pylist()
    # one read failed: one entry; the worker read the CCD again for the other
    assert len(rows) == 1, rows
    (row,) = rows
    assert len(store.ids) == 1 and row["entry_id"] not in store.ids
    assert (row["stage"], row["error_class"], row["key"]) == ("ccd", "CCDReadError", "")
    if kind == "file":
        what = re.escape(f"the CCD {ccd}")
    else:
        what = re.escape(f"the CCD file {ccd}/") + r"(\w+)\.cif \(the definition of \1\)"
    assert re.fullmatch(
        rf"cannot read {what}: Input/output error \(EIO\) on worker tls://\S+: a read error of the CCD, not a "
        rf"fault of {re.escape(row['path'])} or of the definition; the next build tries this entry again",
        row["message"],
    ), row["message"]
    assert "fix or replace" not in row["message"]

    again = _build(pdb, ccd, out)  # the disk is fine again
    assert again.returncode == 0, again.stdout[-3000:] + again.stderr[-3000:]
    assert "still failing" not in again.stdout
    store = featurecache.open_store(out)
    assert store.failures.to_pylist() == []
    assert sorted(store.ids) == ["102m", "2q2k"]


def test_an_eio_on_a_structure_gives_the_os_reason(tmp_path: Path, shim: Path) -> None:
    """#8: the row says what the OS said, not "replaced or changed during the build"."""
    pdb = ccd_inputs(tmp_path)
    ccd, _ = _ccd(tmp_path, "dir")
    out = tmp_path / "store"
    run = _build(pdb, ccd, out, shim=shim, prefix=pdb / "102m.cif")
    assert run.returncode == 1, run.stdout[-3000:] + run.stderr[-3000:]
    store = featurecache.open_store(out)
    (row,) = store.failures.to_pylist()
    assert (row["path"], row["stage"], row["error_class"], row["key"]) == ("102m.cif", "read", "OSError", "")
    assert re.fullmatch(
        r"cannot read 102m\.cif: Input/output error \(EIO\) on worker tls://\S+: the driver read it when it "
        r"listed --pdb-dir; the next build reads it again",
        row["message"],
    ), row["message"]
    assert store.ids == ["2q2k"]
