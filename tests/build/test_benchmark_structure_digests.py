"""structure_digests.py times the whole run and honours the temp dir (review R31b s47 #11).

Its ``Bench`` was made after the copies and the first build, so the result's ``started`` and
``seconds`` left them out; its default ``--dir /tmp/e7`` ignored ``$TMPDIR``. A real run over four
small structure files (one no-op rebuild a variant).
"""

from __future__ import annotations

import json
import sys
import tempfile
from datetime import datetime
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from benchmarks import structure_digests  # noqa: E402


def test_the_run_covers_the_first_build_and_its_dir_is_under_tmpdir(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    monkeypatch.setattr(tempfile, "tempdir", None)  # read $TMPDIR again
    out = tmp_path / "structure_digests.json"
    before = datetime.now().astimezone()
    structure_digests.main(["--copies", "4", "--repeats", "1", "--workers", "1", "--out", str(out)])
    doc = json.loads(out.read_text())
    where = tmp_path / "featurecache-structure-digests"
    assert len(list((where / "pdb").iterdir())) == 4 and (where / "store").is_dir()
    first = doc["params"]["first_build_s"]
    started = datetime.fromisoformat(doc["started"])
    assert (started - before).total_seconds() < 1.5  # started before the copies and the 2.5 s settle
    assert doc["seconds"] > first + 2.5, doc  # the settle, the first build and the no-op builds
    assert {r["variant"] for r in doc["rows"]} == {"before", "after"}
