"""A repair that verify blocks names what it would have done, the index rewrite included (review R30
s46 #5). A failure row of a part that records no checksum of its own index (written before session
46) differs from the index's copy, so the store cannot tell which is damaged and ``--repair`` writes
nothing; a missing ``index/timings.arrow`` is a rewrite the block holds back too. Before, the line
ended "(without them, --repair would )": a blocked rewrite was not among what it named.

A real build (1 worker, one input per part) of the sample 1psm and a file that fails to parse;
real CLI runs."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pyarrow as pa
import pyarrow.ipc as ipc

from featurecache.store.writer import INDEX_SHA256_KEY
from tests.conftest import SAMPLES, build_store, cli_in_process


def test_a_blocked_repair_names_the_rewrite_it_holds_back(tmp_path: Path) -> None:
    pdb = tmp_path / "pdb"
    pdb.mkdir()
    shutil.copy(SAMPLES / "structures" / "1psm.cif", pdb)
    (pdb / "zzbad.cif").write_text("data_zzbad\n_atom_site.id 1\n")  # no coordinates: a parse failure
    store = tmp_path / "s"
    assert build_store(store, pdb, workers=1, part_size=1).n_failed == 1
    (failures,) = [f for f in (store / "parts").glob("s-*/_index/failures.arrow")
                   if ipc.open_file(f).read_all().num_rows]  # fmt: skip
    manifest = failures.parent / "part.json"
    doc = json.loads(manifest.read_text())
    doc.pop(INDEX_SHA256_KEY, None)  # a part written before parts recorded it
    manifest.write_text(json.dumps(doc, indent=1, sort_keys=True))
    with ipc.open_file(failures) as f:
        table = f.read_all()
    i = table.column_names.index("message")
    table = table.set_column(i, table.schema.field(i), pa.array(["tampered"], table.schema.field(i).type))
    with ipc.new_file(failures, table.schema) as w:
        w.write_table(table)
    (store / "index" / "timings.arrow").unlink()

    run = cli_in_process("verify", str(store), "--repair", "--no-progress")
    assert run.returncode == 4, run.stdout + run.stderr
    assert "--repair would )" not in run.stdout, run.stdout
    assert "(without them, --repair would rewrite index/timings.arrow from the parts)" in run.stdout, (
        run.stdout
    )
    assert not (store / "index" / "timings.arrow").exists()  # blocked: nothing written
