"""The root's ``updated`` time is one instant whatever the writer's time zone (review R31a s47 #3)."""

from __future__ import annotations

import datetime as dt
import json
import os
import subprocess
import sys
from pathlib import Path


def _init_under(tz: str, root: Path) -> str:
    code = "import sys; from featurecache.store.root import init_store; init_store(sys.argv[1], {})"
    env = {**os.environ, "TZ": tz}
    subprocess.run([sys.executable, "-c", code, str(root)], check=True, env=env, timeout=120)
    return json.loads((root / "zarr.json").read_text())["attributes"]["updated"]


def test_updated_is_utc_whatever_the_time_zone(tmp_path: Path) -> None:
    before = dt.datetime.now(dt.UTC).replace(microsecond=0)
    # 13 h apart (and not both UTC): a local time without an offset would differ by hours
    stamps = [
        _init_under(tz, tmp_path / tz.replace("/", "_")) for tz in ("Pacific/Auckland", "America/Los_Angeles")
    ]
    after = dt.datetime.now(dt.UTC)
    for stamp in stamps:
        assert stamp.endswith("Z"), stamp
        when = dt.datetime.fromisoformat(stamp.replace("Z", "+00:00"))
        assert before <= when <= after, (stamp, before, after)
