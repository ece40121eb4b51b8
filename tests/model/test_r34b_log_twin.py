"""The training log's twin when its files change under the run (review R34b s48 #1).

A write of the log appends to its twin (``.NAME.twin``) and renames the twin over the log. When the
log's directory was removed and made again mid-run (or the twin deleted), the twin's name no longer
existed and every later write failed, the last one too: the run ended with exit 3 and no log at all
(the log before the twin, a whole file renamed over the log, was written again once the directory was
back). And any failed hard link (the log itself removed, a directory read-only for a while) turned
hard links off for the rest of the run: every write then copied the whole log."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

from featurecache.model.train import _RunLog


def _record(i: int) -> dict[str, Any]:
    return {"step": i, "step_time_s": 0.01, "data_wait_s": 0.0, "compute_s": 0.01, "tokens": 64,
            "peak_mem_bytes": None, "loss": 1.0 + i}  # fmt: skip


def _steps(path: Path) -> list[int]:
    return [r["step"] for r in json.loads(path.read_text())["steps"]]


def _run(path: Path, between: Any, n: int = 12, at: int = 6) -> tuple[_RunLog, dict[str, Any]]:
    doc: dict[str, Any] = {"run": "r34b", "steps": [], "checkpoints": [], "status": "running"}
    runlog = _RunLog(path, doc, 0.0)
    runlog.start()
    for i in range(n):
        if i == at:
            between()
        runlog.add(_record(i))
        runlog.step()
    doc["status"] = "completed"
    return runlog, doc


def test_log_directory_removed_and_made_again(tmp_path: Path) -> None:
    logs = tmp_path / "logs"
    logs.mkdir()
    path = logs / "log.json"

    def remove() -> None:
        shutil.rmtree(logs)

    runlog, _ = _run(path, remove, n=12, at=4)
    assert not path.exists()  # the writes while it is gone fail (warnings)
    logs.mkdir()
    for i in range(12, 15):
        runlog.add(_record(i))
        runlog.step()
    assert _steps(path) == list(range(15))  # written again (before: never again, the end's write neither)
    runlog.finish(raise_errors=True, keep_steps=True)
    assert _steps(path) == list(range(15))
    assert json.loads(path.read_text())["status"] == "completed"
    assert sorted(p.name for p in logs.iterdir()) == ["log.json"]


def test_twin_deleted_mid_run(tmp_path: Path) -> None:
    path = tmp_path / "log.json"
    twin = tmp_path / ".log.json.twin"

    def delete() -> None:
        assert twin.exists()
        twin.unlink()

    runlog, _ = _run(path, delete)
    assert _steps(path) == list(range(12))
    runlog.finish(raise_errors=True, keep_steps=True)
    assert _steps(path) == list(range(12))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["log.json"]


def test_log_removed_keeps_hard_links(tmp_path: Path) -> None:
    """The log removed by hand mid-run: written again at the next write, and the writes after go on
    through the twin (not a copy of the whole log at each write for the rest of the run)."""
    path = tmp_path / "log.json"
    runlog, _ = _run(path, path.unlink)
    assert _steps(path) == list(range(12))
    assert runlog._links
    assert (tmp_path / ".log.json.twin").exists()
    runlog.finish(raise_errors=True, keep_steps=True)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["log.json"]


def test_keep_checkpoints_never_deletes_a_file_put_there_since(tmp_path: Path) -> None:
    """--keep-checkpoints deletes the file this run kept, not another put at its path since (another
    run writing the same checkpoint names, whose log lists it as kept; review R34b s48 #2)."""
    from featurecache.model.train import _delete_checkpoint, _file_identity

    path = tmp_path / "s_5.pt"
    path.write_bytes(b"this run's")
    entry: dict[str, Any] = {"step": 5, "path": str(path)}
    kept = _file_identity(path)
    other = tmp_path / ".other"
    other.write_bytes(b"another run's")
    other.replace(path)  # (checkpoints are moved into place: a new file)
    _delete_checkpoint(entry, (None, None), kept)
    assert path.read_bytes() == b"another run's"
    assert "deleted" not in entry
    # the file this run kept is deleted, as before
    _delete_checkpoint(entry, (None, None), _file_identity(path))
    assert not path.exists() and entry["deleted"] is True
