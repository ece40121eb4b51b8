"""``featurecache verify`` shows how far it is (rich bars on stderr, one per stage: parts, entries,
MSA/component checks) unless ``--no-progress``; stdout keeps only the verdict.

A 200k-entry store takes 10–28 min to verify; before, nothing was printed until the end.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from featurecache import open_store


def _verify(store: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "featurecache.cli", "verify", *args, str(store)],
        capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip


def test_verify_shows_progress_on_stderr_unless_asked_not_to(sample_store: Path) -> None:
    n_entries = len(open_store(sample_store).ids)
    n_parts = sum(1 for p in (sample_store / "parts").iterdir() if p.is_dir() and not p.name.startswith("."))
    assert n_entries > 0
    shown = _verify(sample_store)
    assert shown.returncode == 0, shown.stderr
    assert shown.stdout == "ok: store verified\n"
    bars = {
        m[0]: (int(m[1]), int(m[2]))
        for m in re.findall(r"^(parts|entries)\b.*?(\d+)/(\d+)", shown.stderr, re.M)
    }
    assert bars == {"parts": (n_parts, n_parts), "entries": (n_entries, n_entries)}, shown.stderr

    quiet = _verify(sample_store, "--no-progress")
    assert quiet.returncode == 0, quiet.stderr
    assert quiet.stdout == "ok: store verified\n"
    assert not re.search(r"^(parts|entries)\b", quiet.stderr, re.M), quiet.stderr
    assert f"{n_entries}/{n_entries}" not in quiet.stderr


def test_worker_processes_report_the_problems_of_one_process_in_index_order(
    sample_store: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Entries and MSAs are checked by worker processes, in batches; the problem list is the one
    a check in this process gives, in the order of the index (entries sorted by id), however the
    batches finish. Damage in several entries and MSAs: a structure shard cut short (every entry
    of that part unreadable) and two MSA strips cut short."""
    import shutil

    from featurecache.store import verify
    from featurecache.store.verify import verify_store

    store = Path(shutil.copytree(sample_store, tmp_path / "store"))
    reader = open_store(store)
    part = reader.entries.column("part")[0].as_py()
    in_part = [
        i for i, p in zip(reader.ids, reader.entries.column("part").to_pylist(), strict=True) if p == part
    ]
    assert len(in_part) >= 3, in_part
    (atoms,) = [
        f for f in (store / "parts" / part / "atoms").rglob("*") if f.is_file() and f.name != "zarr.json"
    ]
    atoms.write_bytes(atoms.read_bytes()[: atoms.stat().st_size // 2])
    msas = reader.msas.select(["key", "part", "array"]).to_pylist()[:2]
    for m in msas:
        (strip,) = [f for f in (store / "parts" / m["part"] / m["array"]).rglob("*")
                    if f.is_file() and f.name != "zarr.json"]  # fmt: skip
        strip.write_bytes(strip.read_bytes()[: strip.stat().st_size // 2])

    here = verify_store(store, workers=1)
    monkeypatch.setattr(verify, "BATCH_ROWS", 1)  # one row per task: the order across tasks counts
    in_workers = verify_store(store, workers=3)
    assert in_workers == here
    unreadable = [p.split(":", 1)[0] for p in in_workers if p.endswith(")") and ": unreadable (" in p]
    assert unreadable == [f"entry {i}" for i in sorted(in_part)] + [f"MSA {m['key']}" for m in msas], (
        in_workers
    )
