"""``featurecache verify`` shows how far it is (rich bars on stderr, one per stage: parts, entries,
MSA/component checks) unless ``--no-progress``; stdout keeps only the verdict.

A 200k-entry store takes 10–28 min to verify; before, nothing was printed until the end.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

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
