"""A report that runs out of disk part way (review R42b s52 #7): each file was written in place, so
a failed re-run left a zero-length PNG and an old report mixed with truncated files. It now writes
into a hidden directory and renames the files into place once all are written: the old report
stays whole, and nothing is left behind. A real full filesystem: a tmpfs mounted for the test."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from featurecache.errors import StoreError
from featurecache.report import write_report


@pytest.fixture
def small_fs(tmp_path: Path) -> Path:
    mnt = tmp_path / "small"
    mnt.mkdir()
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root")
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=4M", "tmpfs", str(mnt)], capture_output=True, text=True
    )
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {done.stderr.strip()}")
    yield mnt
    subprocess.run(["umount", "-l", str(mnt)], check=False)


def _files(d: Path) -> dict[str, bytes]:
    return {str(p.relative_to(d)): p.read_bytes() for p in sorted(d.rglob("*")) if p.is_file()}


def _fill(fs: Path, leave: int) -> None:
    st = os.statvfs(fs)
    (fs / "filler").write_bytes(b"\0" * (st.f_bavail * st.f_frsize - leave))


def test_a_report_that_runs_out_of_disk_leaves_no_file(sample_store: Path, small_fs: Path) -> None:
    _fill(small_fs, 16 * 1024)  # 16 KB left: less than one plot
    out = small_fs / "report"
    with pytest.raises(StoreError, match=f"cannot write the report to {out}: No space left on device"):
        write_report(sample_store, out)
    assert list(out.iterdir()) == []  # was: tokens_per_entry.png of 0 bytes


def test_a_report_that_runs_out_of_disk_leaves_the_old_one_whole(sample_store: Path, small_fs: Path) -> None:
    out = small_fs / "report"
    write_report(sample_store, out)
    before = _files(out)
    assert "index.html" in before and any(n.endswith(".png") for n in before)
    _fill(small_fs, 16 * 1024)
    with pytest.raises(StoreError, match=f"cannot write the report to {out}: No space left on device"):
        write_report(sample_store, out)
    assert _files(out) == before  # every old file whole, no new one (a hidden temp dir included)
    assert sorted(p.name for p in out.iterdir()) == sorted(before)
    (small_fs / "filler").unlink()
    write_report(sample_store, out)  # with room again it writes, and leaves no temp dir
    assert sorted(p.name for p in out.iterdir()) == sorted(before)
