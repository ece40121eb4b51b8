"""Review R42b s52 #2, what the build's driver reads of the CCD outside its chem stage.

bbb6338 (the workers) and f7c9408 (the driver's chem stage) left these, found by reading:

* the CCD's fingerprint (``run.ccd_fingerprint``), which reads every file of a CCD directory (or
  the whole ``components.cif``) when a build starts: a file the OS does not let the driver read
  (EIO, a stale NFS handle) gave a Python traceback (``OSError: [Errno 5]``), exit 1;
* the checks before it: a refused ``stat`` of the ``--ccd`` path (``check_arguments``' ``exists()``)
  a traceback too; an EIO on a ``components.cif`` in ``check_ccd`` read as "no chemical component
  definitions found (cannot read it: OSError: …)", a usage error (exit 2), and on a
  ``components.cif.gz``'s check to its end "ccd (--ccd): cannot read …", exit 2 too;
* ``parse.ccd.definition_hashes``, with which a later build reads the definitions its entries
  used (``ccd_keys.changed_definitions``): a directory's file gave a traceback, a
  ``components.cif`` a line that did not say the build can be run again; a directory's ``.cif.gz``
  cut short ended the build with click's bare "Aborted." (its ``EOFError``), exit 1.

Now a read the OS refuses before the build's work is one line naming the file and the OS's reason,
exit 3, saying that the same command can be run again; the same command, once the file reads,
builds. ``verify``'s rebuild command says the recorded CCD "cannot be read" (it did: a guard).

The ``stat`` of a directory's file when a definition is looked up (``CCD._file_for``, in the chem
stage and in the workers) was no :class:`CCDReadError` either: the chem stage stopped with a
traceback, and a worker's entry got a failure row keyed by its bytes, kept for good. Now a refused
``stat`` there is handled as a refused read is (bbb6338, f7c9408).

Real builds (``featurecache build`` in a process of its own, on its embedded LocalCluster) of real
files; the EIO is made by the ``LD_PRELOAD`` shim of ``tests/faults.py`` (compiled with gcc): a
``read`` (or a ``stat``) of a file under a given path fails with EIO, once, only in the build's
driver (its command line holds ``--pdb-dir``) or only in its workers ("forkserver"), optionally
only on the file descriptor of the Nth ``open`` of that path, or once a trigger file exists.
"""

from __future__ import annotations

import gzip
import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

import featurecache
from featurecache.store.verify import rebuild_command, rebuild_note
from tests.conftest import SAMPLES
from tests.faults import ccd_inputs, cli_build, compiled_shim, fault_env

DRIVER = "--pdb-dir"  # in the driver's command line, not in its forkserver workers'
WORKERS = "forkserver"
RUN_AGAIN = "run the same command again once it reads"
AT_START = f"the build stopped before it started (nothing was written): {RUN_AGAIN}"
BEFORE_WORK = f"the build stopped before it built anything: {RUN_AGAIN}"


@pytest.fixture(scope="module")
def shim(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return compiled_shim(tmp_path_factory, missing="fail")


def _build(pdb: Path, ccd: Path, out: Path, *, shim: Path | None = None, prefix: Path | None = None,  # type: ignore[no-untyped-def]
           stat: bool = False, **fault: Any):  # fmt: skip
    """``featurecache build`` (1 worker, parts of 1 entry) in a process of its own; with ``shim``,
    reads (``stat``: stats) of files under ``prefix`` fail with EIO as ``fault`` (``cmd``, ``open``,
    ``limit``, ``trigger``) says: :func:`tests.faults.fault_env`."""
    env: dict[str, str] = dict(os.environ)
    if shim is not None:
        assert prefix is not None
        env = fault_env(shim, prefix, env=env, calls="stat" if stat else "read", **fault)
    return cli_build(pdb, ccd, out, env)


def _output(run: subprocess.CompletedProcess[str]) -> str:
    return run.stdout[-4000:] + run.stderr[-4000:]


def _ccd_dir(tmp_path: Path) -> Path:
    d = tmp_path / "ccd"
    shutil.copytree(SAMPLES / "ccd", d)
    return d


def _components_cif(tmp_path: Path, gz: bool = False) -> Path:
    text = "".join(f.read_text().rstrip("\n") + "\n" for f in sorted((SAMPLES / "ccd").glob("*.cif")))
    one = tmp_path / ("components.cif.gz" if gz else "components.cif")
    one.write_bytes(gzip.compress(text.encode()) if gz else text.encode())
    return one


def _one_error_line(run: subprocess.CompletedProcess[str]) -> str:
    """The run's ``error:`` line: its only one, its last line, and no traceback before it."""
    assert "Traceback" not in run.stderr and "Aborted" not in run.stderr, run.stderr[-4000:]
    errors = [x for x in run.stderr.splitlines() if x.startswith("error:")]
    assert len(errors) == 1, run.stderr[-4000:]
    assert run.stderr.rstrip().endswith(errors[0]), run.stderr[-4000:]
    return errors[0]


def _failures(out: Path) -> list[dict[str, Any]]:
    return featurecache.open_store(out).failures.to_pylist()


@pytest.mark.parametrize(
    ("form", "nth_open", "reader"),
    [
        ("dir", 1, "the fingerprint"),  # HEM.cif: check_ccd reads 5IU.cif only, the fingerprint every file
        ("file", 1, "check_ccd"),  # before: exit 2, "no chemical component definitions found"
        ("file", 2, "the fingerprint"),  # after check_ccd's first blocks; before: a traceback, exit 1
        ("file .gz", 2, "check_ccd's gzip check"),  # before: exit 2, "ccd (--ccd): cannot read ..."
        ("file .gz", 3, "the fingerprint"),
    ],
)
def test_a_ccd_file_the_driver_cannot_read_at_start_stops_the_build_in_one_line(
    tmp_path: Path, shim: Path, form: str, nth_open: int, reader: str
) -> None:
    """One read of the CCD refused in the driver before the build starts: exit 3, one line naming
    the file and the OS's reason and that the same command can be run again, nothing written; the
    same command then builds."""
    pdb = ccd_inputs(tmp_path)
    if form == "dir":
        ccd = _ccd_dir(tmp_path)
        file, what = ccd / "HEM.cif", f"the CCD file {ccd / 'HEM.cif'}"
    else:
        ccd = file = _components_cif(tmp_path, gz=form.endswith(".gz"))
        what = f"the CCD {ccd}"
    out = tmp_path / "store"

    first = _build(pdb, ccd, out, shim=shim, prefix=file, cmd=DRIVER, open=nth_open)
    assert first.returncode == 3, (reader, _output(first))  # before: 1 (a traceback) or 2
    line = _one_error_line(first)
    assert line == f"error: cannot read {what}: Input/output error (EIO); {AT_START}", (reader, line)
    assert not out.exists()

    again = _build(pdb, ccd, out)  # the same command, the file reads again
    assert again.returncode == 0, _output(again)
    assert sorted(featurecache.open_store(out).ids) == ["102m", "2q2k"]


def test_a_ccd_directory_the_driver_cannot_stat_stops_the_build_in_one_line(
    tmp_path: Path, shim: Path
) -> None:
    """Every ``stat`` of the CCD directory (or under it) refused in the driver (EIO, a stale NFS
    handle): before, ``check_arguments``' ``exists()`` raised its OSError, a traceback, exit 1."""
    pdb = ccd_inputs(tmp_path)
    ccd = _ccd_dir(tmp_path)
    out = tmp_path / "store"
    first = _build(pdb, ccd, out, shim=shim, prefix=ccd, cmd=DRIVER, stat=True, limit=10**6)
    assert first.returncode == 3, _output(first)
    line = _one_error_line(first)
    assert line == f"error: cannot read the CCD {ccd}: Input/output error (EIO); {AT_START}", line
    assert not out.exists()
    again = _build(pdb, ccd, out)
    assert again.returncode == 0, _output(again)


@pytest.mark.parametrize("form", ["dir", "file"])
def test_a_definition_the_driver_cannot_read_on_a_later_build_stops_it_in_one_line(
    tmp_path: Path, shim: Path, form: str
) -> None:
    """A later build reads the definitions its store's entries used (``definition_hashes``); one
    read the OS refuses there: exit 3, one line, nothing built; the same command then finds every
    entry up to date."""
    pdb = ccd_inputs(tmp_path)
    if form == "dir":
        ccd = _ccd_dir(tmp_path)
        # HEM.cif's opens in the driver: the fingerprint's, then definition_hashes'
        file, nth_open = ccd / "HEM.cif", 2
        what = f"the CCD file {file} (the definition of HEM)"
    else:
        # components.cif's: check_ccd's, the fingerprint's, then definition_hashes'
        ccd = file = _components_cif(tmp_path)
        nth_open, what = 3, f"the CCD {ccd}"
    out = tmp_path / "store"
    built = _build(pdb, ccd, out)
    assert built.returncode == 0, _output(built)
    parts = sorted(p.name for p in (out / "parts").iterdir())

    later = _build(pdb, ccd, out, shim=shim, prefix=file, cmd=DRIVER, open=nth_open)
    assert later.returncode == 3, _output(later)  # before (dir): 1, a traceback
    line = _one_error_line(later)
    # before (file): the line without what the build did and the way on
    assert line == f"error: cannot read {what}: Input/output error (EIO); {BEFORE_WORK}", line
    assert sorted(p.name for p in (out / "parts").iterdir()) == parts
    assert sorted(featurecache.open_store(out).ids) == ["102m", "2q2k"]

    again = _build(pdb, ccd, out)
    assert again.returncode == 0, _output(again)
    assert " ".join(again.stdout.split()).count("entries built │ 0") == 1, again.stdout[-3000:]
    assert _failures(out) == []


def test_a_directory_gz_definition_cut_short_on_a_later_build_fails_its_entries(tmp_path: Path) -> None:
    """A directory's HEM.cif.gz replaced by one cut short after a build: the next build's
    ``definition_hashes`` met its EOFError, and click ended the build with a bare "Aborted.",
    exit 1. Now its entry is rebuilt and fails naming the file (its content is at fault), the
    entry built before still served; with the file sound again, the next build builds it."""
    pdb = ccd_inputs(tmp_path)
    ccd = _ccd_dir(tmp_path)
    hem = ccd / "HEM.cif"
    sound = gzip.compress(hem.read_bytes())
    hem.unlink()
    (ccd / "HEM.cif.gz").write_bytes(sound)
    out = tmp_path / "store"
    built = _build(pdb, ccd, out)
    assert built.returncode == 0, _output(built)

    (ccd / "HEM.cif.gz").write_bytes(sound[: len(sound) // 2])
    later = _build(pdb, ccd, out)
    assert later.returncode == 1, _output(later)
    assert "Aborted" not in later.stderr and "Traceback" not in later.stderr, later.stderr[-4000:]
    (row,) = _failures(out)
    assert (row["entry_id"], row["stage"]) == ("102m", "ccd"), row
    assert str(ccd / "HEM.cif.gz") in row["message"] and "cut short" in row["message"], row
    assert sorted(featurecache.open_store(out).ids) == ["102m", "2q2k"]  # the one built before, kept

    (ccd / "HEM.cif.gz").write_bytes(sound)
    again = _build(pdb, ccd, out)
    assert again.returncode == 0, _output(again)
    assert _failures(out) == []


def test_a_refused_stat_of_a_definition_in_the_chem_stage_is_a_read_error(tmp_path: Path, shim: Path) -> None:
    """The chem stage looks HEM up in the CCD directory (a ``stat`` of HEM.cif); the OS refuses the
    stat (EIO, or a stale NFS handle). Before: a traceback (its OSError was no CCDReadError), exit 1.
    Now as for a refused read (f7c9408): a failure row keyed "", exit 1, no failed HEM stored; the
    next build computes it."""
    pdb = ccd_inputs(tmp_path)
    ccd = _ccd_dir(tmp_path)
    out = tmp_path / "store"
    first = _build(pdb, ccd, out, shim=shim, prefix=ccd / "HEM.cif", cmd=DRIVER, stat=True,
                   trigger=out / "parts" / "s-000001")  # fmt: skip
    assert first.returncode == 1, _output(first)
    assert "Traceback" not in first.stderr, first.stderr[-4000:]
    message = " ".join(first.stdout.split())
    assert (
        f"cannot read the CCD file {ccd / 'HEM.cif'} (the definition of HEM): Input/output error (EIO): a read "
        "error of the CCD, not a fault of the definition;"
    ) in message, message[-3000:]
    components = {r["key"]: r for r in featurecache.open_store(out).components.to_pylist()}
    assert "HEM" not in components, components.get("HEM")

    again = _build(pdb, ccd, out)
    assert again.returncode == 0, _output(again)
    hem = {r["key"]: r for r in featurecache.open_store(out).components.to_pylist()}["HEM"]
    assert hem["source"] == "ccd" and hem["strategy"] != "failed", hem
    assert _failures(out) == []


def test_a_refused_stat_of_a_definition_in_a_worker_is_retried(tmp_path: Path, shim: Path) -> None:
    """A worker looks HEM up (a ``stat`` of HEM.cif) for 102m and the OS refuses it. Before: the
    entry's failure row was keyed by its bytes, so the next build skipped it as "still failing",
    exit 1 for ever. Now its row is keyed "", and the next build builds it."""
    pdb = ccd_inputs(tmp_path)
    ccd = _ccd_dir(tmp_path)
    out = tmp_path / "store"
    first = _build(pdb, ccd, out, shim=shim, prefix=ccd / "HEM.cif", cmd=WORKERS, stat=True)
    assert first.returncode == 1, _output(first)
    (row,) = _failures(out)
    assert (row["entry_id"], row["stage"], row["error_class"]) == ("102m", "ccd", "CCDReadError"), row
    assert row["key"] == "", row  # before: the input's key (stage tokenize), kept for good
    assert row["message"].startswith(
        f"cannot read the CCD file {ccd / 'HEM.cif'} (the definition of HEM): Input/output error (EIO) on worker "
    ), row["message"]

    again = _build(pdb, ccd, out)
    assert again.returncode == 0, _output(again)  # before: 1, "still failing 1"
    assert sorted(featurecache.open_store(out).ids) == ["102m", "2q2k"]
    assert _failures(out) == []


def test_verify_names_a_recorded_ccd_it_cannot_read(tmp_path: Path) -> None:
    """``verify``'s rebuild command reads the recorded CCD for its fingerprint: a file of it that
    does not read (a real EIO: a link to /proc/self/mem) gives the placeholder and a note, not a
    crash (a guard: it did so before too)."""
    pdb = ccd_inputs(tmp_path)
    ccd = _ccd_dir(tmp_path)
    out = tmp_path / "store"
    built = _build(pdb, ccd, out)
    assert built.returncode == 0, _output(built)
    assert f"--ccd {ccd}" in rebuild_command(out, [])
    hem = ccd / "HEM.cif"
    hem.unlink()
    hem.symlink_to("/proc/self/mem")  # a regular file whose read at offset 0 fails with EIO
    command, note = rebuild_command(out, []), rebuild_note(out)
    assert "--ccd CCD" in command, command
    assert f"it recorded {ccd}, which cannot be read (Input/output error)" in note, note
