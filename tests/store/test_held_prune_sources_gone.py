"""``prune --sources-gone`` while an extension's structure part is held back from the published
index (its build killed before its MSA and chem stages). The no-data-loss rule: prune never deletes
what the next build needs to publish, and never leaves the published index listing removed data.

Real builds with the sample MSAs and CCD: 1A8O and 7DDO in a part each; then 1A8O's file changed
(one coordinate) and 1psm added, and a CLI build (its own embedded cluster) SIGKILLed once its
index rebuild before the MSA stage has taken in its new part (tests/killed_builds.py): that part
holds the new 1A8O and 1psm, both held back. Then 1A8O's file is removed (a held entry whose source
is gone) while 1psm's stays (a held entry whose source is there).
"""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pytest

from featurecache import open_store
from featurecache.store.index import complete_parts
from featurecache.store.prune import prune_store
from featurecache.store.verify import verify_store
from tests.conftest import SAMPLES, build_store
from tests.killed_builds import kill_after_the_pre_msa_rebuild

MSAS, CCD = SAMPLES / "msas", SAMPLES / "ccd"
LINE = "ATOM     90  N   ASP A 152      21.554  34.953"


def _read_all(store: Path) -> dict[str, bytes]:
    """Every listed entry's atoms as a reader gets them (each read must succeed)."""
    reader = open_store(store)
    return {
        i: np.ascontiguousarray(reader.entry(i, arrays="atoms").atoms["coords"]).tobytes() for i in reader.ids
    }


def _parts(store: Path) -> set[str]:
    return {p.name for p in complete_parts(store)}


@pytest.mark.timeout(900)
def test_prune_sources_gone_with_a_held_part(tmp_path: Path) -> None:
    pdb, store = tmp_path / "pdb", tmp_path / "store"
    pdb.mkdir()
    for name in ("1A8O.pdb", "7DDO.pdb"):
        shutil.copy(SAMPLES / "structures" / name, pdb / name)
    build_store(store, pdb, workers=1, part_size=1, msa_dir=MSAS, ccd=CCD)
    first = open_store(store)
    part_of = dict(zip(first.ids, first.entries.column("part").to_pylist(), strict=True))
    assert sorted(part_of) == ["1A8O", "7DDO"]
    served_7ddo = _read_all(store)["7DDO"]

    text = (pdb / "1A8O.pdb").read_text()
    assert text.count(LINE) == 1
    (pdb / "1A8O.pdb").write_text(text.replace(LINE, LINE.replace("21.554", "21.555")))
    shutil.copy(SAMPLES / "structures" / "1psm.cif", pdb)
    kill_after_the_pre_msa_rebuild(store, pdb, MSAS, CCD)
    killed = open_store(store)
    assert len(killed.unpublished_parts) == 1
    held = killed.unpublished_parts[0]
    assert sorted(killed.ids) == ["1A8O", "7DDO"]  # 1psm and the new 1A8O: held back

    # the held 1A8O's file is removed; the held 1psm's stays
    (pdb / "1A8O.pdb").unlink()
    dry = prune_store(store, dry_run=True, sources_gone=pdb)
    assert dry.entries == ["1A8O"] and held not in dry.parts
    result = prune_store(store, sources_gone=pdb)
    assert result.entries == ["1A8O"]
    # the held part is kept: the next build publishes 1psm from it
    assert held not in result.parts and held in _parts(store)
    after = open_store(store)
    assert after.unpublished_parts == [held]
    # the published index lists no entry whose file is gone, and every entry it lists reads
    assert after.ids == ["7DDO"], after.ids
    assert _read_all(store) == {"7DDO": served_7ddo}
    problems = verify_store(store)
    assert [p for p in problems if "not yet published" not in p] == [], problems

    # the next build publishes the held 1psm (nothing built again: it is in the held part); 1A8O
    # stays removed (its file is gone)
    summary = build_store(store, pdb, workers=1, part_size=1, msa_dir=MSAS, ccd=CCD)
    assert summary.n_built == 0, summary
    done = open_store(store)
    assert done.unpublished_parts == []
    assert sorted(done.ids) == ["1psm", "7DDO"], done.ids
    assert dict(zip(done.ids, done.entries.column("part").to_pylist(), strict=True))["1psm"] == held
    reads = _read_all(store)
    assert reads["7DDO"] == served_7ddo
    assert verify_store(store) == []
    # a prune now removes nothing that is served
    prune_store(store)
    assert _read_all(store) == reads and verify_store(store) == []
