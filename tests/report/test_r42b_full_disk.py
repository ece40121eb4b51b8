"""A report that runs out of disk part way (review R42b s52 #7): each file was written in place, so
a failed re-run left a zero-length PNG and an old report mixed with truncated files. It now writes
into a hidden directory and renames the files into place once all are written: the old report
stays whole, and nothing is left behind. A real full filesystem: a tmpfs mounted for the test."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from featurecache.errors import StoreError
from featurecache.report import write_report
from tests.faults import mounted_tmpfs


@pytest.fixture
def small_fs(tmp_path: Path) -> Iterator[Path]:
    with mounted_tmpfs(tmp_path / "small", "4M") as mnt:
        yield mnt


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
