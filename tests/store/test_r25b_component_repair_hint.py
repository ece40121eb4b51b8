"""verify's repair hint for damaged component parts names the store's --pdb-dir, not the
placeholder PDB_DIR (review R25b s43 #5): component parts record no directory, but the store's
structure parts (and its latest build) do, and entry damage in the same store got the real path.
The sample store, a component part with a flipped byte / deleted, the real CLI."""

from __future__ import annotations

import shlex
import shutil
from pathlib import Path

import pytest

from featurecache.build.discover import part_source_dir
from tests.conftest import cli_in_process


@pytest.mark.parametrize("damage", ["flipped byte", "deleted"])
def test_the_hint_for_a_damaged_component_part_names_the_structure_dir(
    sample_store: Path, tmp_path: Path, damage: str
) -> None:
    store = Path(shutil.copytree(sample_store, tmp_path / "store"))
    part = store / "parts" / "c-000000"
    if damage == "deleted":
        shutil.rmtree(part)
    else:
        shard = part / "atoms" / "c" / "0" / "0"
        data = bytearray(shard.read_bytes())
        data[len(data) // 2] ^= 0xFF
        shard.write_bytes(bytes(data))
    r = cli_in_process("verify", str(store), "--no-progress")
    assert r.returncode == 4, r.stdout + r.stderr
    hint = next((line for line in r.stderr.splitlines() if line.startswith("to repair:")), "")
    pdb_dir = part_source_dir(store, "s-000000")
    assert pdb_dir and f"featurecache build --pdb-dir {shlex.quote(pdb_dir)} " in hint, hint
    assert "PDB_DIR" not in hint, hint
