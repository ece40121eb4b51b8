"""verify checks what the stored reference conformers hold, not only that they read (review R25b
s43 #2): a component part changed through zarr (its shard and chunk checksums stay valid), which
changed the ref_pos served, passed as "ok: store verified". Each component row now records a
content hash of its atoms and bonds rows when it is written; verify recomputes it (MISMATCH
component CODE: content hash ...), --repair moves the part aside and the next build's chem stage
computes its components again. A part written before the column: a note, and verify passes.
The sample store (real build, real CCD), the CLI in process, a real rebuild."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pyarrow.feather as feather
import zarr

from featurecache import open_store
from featurecache.store.index import rebuild_index
from featurecache.store.verify import repair_store, verify_report
from tests.conftest import SAMPLES, build_store, cli_in_process


def _shift_first_atom(store: Path) -> None:
    """Add 3 Å to the x of the first atom of part c-000000, through zarr (checksums stay valid)."""
    atoms = zarr.open_array(str(store / "parts" / "c-000000" / "atoms"), mode="r+")
    records = atoms[:]
    x = records[0, 0:4].view(np.float32).copy()
    records[0, 0:4] = (x + np.float32(3.0)).view(np.uint8)
    atoms[:] = records


def _ref_pos(store: Path) -> dict[str, np.ndarray]:
    reader = open_store(store)
    return {i: reader.reference_features(reader.entry(i))["ref_pos"] for i in reader.ids}


def test_a_changed_reference_conformer_is_a_mismatch_and_repair_rebuilds_it(
    sample_store: Path, tmp_path: Path
) -> None:
    store = Path(shutil.copytree(sample_store, tmp_path / "store"))
    before = _ref_pos(store)
    _shift_first_atom(store)
    assert any(
        not np.array_equal(before[i], got) for i, got in _ref_pos(store).items()
    )  # what is served changed

    r = cli_in_process("verify", str(store), "--no-progress")
    assert r.returncode == 4, r.stdout + r.stderr
    lines = [line for line in r.stdout.splitlines() if line.startswith("MISMATCH component ")]
    assert len(lines) == 1 and "content hash" in lines[0] and "part c-000000" in lines[0], r.stdout
    assert "--repair` moves component part(s) c-000000 (content hash differs)" in r.stderr, r.stderr

    result = repair_store(store, workers=1)
    assert "c-000000" in result.moved_parts and result.rescan, result
    build_store(store, SAMPLES / "structures", msa_dir=SAMPLES / "msas", ccd=SAMPLES / "ccd")
    report = verify_report(store, workers=1)
    assert report.problems == [], report.problems
    after = _ref_pos(store)
    assert after.keys() == before.keys()
    assert all(np.array_equal(before[i], after[i]) for i in before)


def test_the_repair_says_why_it_moved_a_changed_component_part(sample_store: Path, tmp_path: Path) -> None:
    """``verify --repair`` names the reason verify found, not "its arrays are unreadable" (they read)."""
    store = Path(shutil.copytree(sample_store, tmp_path / "store"))
    _shift_first_atom(store)
    r = cli_in_process("verify", str(store), "--repair", "--no-progress")
    moved = [line for line in r.stdout.splitlines() if line.startswith("moved part c-000000 ")]
    assert moved and "(its conformers are not what the build wrote)" in moved[0], r.stdout + r.stderr


def test_component_parts_without_content_hashes_are_noted_and_pass(
    sample_store: Path, tmp_path: Path
) -> None:
    store = Path(shutil.copytree(sample_store, tmp_path / "store"))
    rows = 0
    for own in sorted((store / "parts").glob("c-*/_index/components.arrow")):
        table = feather.read_table(own)
        assert "content_sha256" in table.column_names and all(table.column("content_sha256").to_pylist())
        # as a featurecache before the column wrote it
        feather.write_feather(table.drop_columns(["content_sha256"]), own, compression="uncompressed")
        # nor did it record the sha256 of the part's own index files (review R28c s46 #3)
        manifest = own.parent / "part.json"
        doc = json.loads(manifest.read_text())
        del doc["index_sha256"]
        manifest.write_text(json.dumps(doc))
        rows += table.num_rows
    rebuild_index(store, incremental=False)
    index = feather.read_table(store / "index" / "components.arrow")
    assert rows and index.num_rows and "content_sha256" not in index.column_names
    report = verify_report(store, workers=1)
    assert report.problems == [], report.problems
    n = index.num_rows
    assert any(note.startswith(f"{n} component{'s' if n != 1 else ''} of part(s) c-000000") and
               "record no content hash" in note for note in report.notes), report.notes  # fmt: skip
