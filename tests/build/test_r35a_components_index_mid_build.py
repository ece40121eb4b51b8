"""``featurecache info`` during a store's first build exits 0 with its "first build has not finished"
warning all the way through (review R35a s49 #1).

Before, the index refreshes of a first build wrote no ``index/components.arrow`` while no
component part existed; once the chem stage committed ``c-000000``, every reader (``info``,
``show``, ``plan``, the lookup service) found the store with a component part and no components
index, and, the build's lock being held, refused it: "a build is running on this store ... and has
not written its index yet (components.arrow missing)", exit 3, for seconds, until the publish
rebuilt the index. Now every rebuild writes every table of ``layout.TABLES``, the components one
empty while no component part is listed, so the file never goes missing mid-build.

The window made exactly, by the build itself: a real first build, in this process, whose chem stage
(the real one) is followed by the readers, run while the build still holds its lock and before the
publish rebuilds the index: the state it leaves between committing its component parts and the next
refresh.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.ipc as ipc
import pytest

from featurecache.build import chem_stage
from featurecache.store.layout import TABLES
from featurecache.store.root import lock_holder
from tests.conftest import SAMPLES, CliRun, build_store, cli_in_process

NAMES = ("102m.cif", "2q2k.cif")


def _rows(f: Path) -> int:
    with pa.memory_map(str(f)) as source:
        return int(ipc.open_file(source).read_all().num_rows)


def test_info_exits_0_between_the_first_component_part_and_the_publish(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    pdb, store = tmp_path / "pdb", tmp_path / "store"
    pdb.mkdir()
    for name in NAMES:
        shutil.copy(SAMPLES / "structures" / name, pdb / name)
    seen: dict[str, Any] = {}
    real = chem_stage.run_chem_stage

    def then_read(client: Any, out: Path, *args: Any, **kwargs: Any) -> Any:
        result = real(client, out, *args, **kwargs)
        # the build's state right after its chem stage committed its component part(s), before
        # the publish lists them: its lock held, its index of the last refresh
        seen["holder"] = lock_holder(out)
        seen["c_parts"] = sorted(p.name for p in (out / "parts").iterdir() if p.name.startswith("c-"))
        seen["index"] = sorted(f.name for f in (out / "index").glob("*.arrow"))
        seen["components_rows"] = (
            _rows(out / "index" / "components.arrow")
            if (out / "index" / "components.arrow").is_file()
            else None
        )
        seen["info"] = cli_in_process("info", str(out))
        seen["show"] = cli_in_process("show", str(out), "102m")
        seen["plan"] = cli_in_process("plan", str(out), "--no-write-index")
        return result

    monkeypatch.setattr(chem_stage, "run_chem_stage", then_read)
    build_store(store, pdb, workers=1, ccd=SAMPLES / "ccd")

    assert seen["holder"] is not None and seen["holder"].startswith("pid "), seen["holder"]
    assert seen["c_parts"] and seen["c_parts"][0] == "c-000000", seen["c_parts"]
    info: CliRun = seen["info"]
    said = " ".join(info.stderr.split())
    assert info.returncode == 0, info.stderr  # before: 3, "... has not written its index yet"
    assert "first build has not finished" in said and "lists the 2 entries written so far" in said, (
        info.stderr
    )
    assert "has not written its index yet" not in said, info.stderr
    assert "entries" in info.stdout, info.stdout
    # every table of TABLES is there, the components one empty: none of its parts is listed yet
    assert {f"{name}.arrow" for name in TABLES} <= set(seen["index"]), seen["index"]
    assert seen["components_rows"] == 0
    for name in ("show", "plan"):
        r: CliRun = seen[name]
        assert "has not written its index yet" not in r.stderr, (name, r.stderr)
        assert r.returncode == 0, (name, r.returncode, r.stderr)
    # and once the build ends, the components are listed
    assert _rows(store / "index" / "components.arrow") > 0
    r = cli_in_process("info", str(store))
    assert r.returncode == 0 and "warning" not in r.stderr, r.stderr
