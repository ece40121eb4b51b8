"""``prune`` keeps serving what the store serves while an extension's new parts are held back
(review RF3 s24 #1). An extension build holds its new structure parts out of the published index
until its MSA and chem stages have run (``index.rebuild_index``); a killed build leaves them so. The
prune took "used" from the index over every part, held ones included, where the held part's new
version of an entry supersedes the published old one: it deleted the part holding the published
version, and the entry stopped being served (after a killed full rebuild, every entry).

Real builds with the sample MSAs and CCD: 1A8O and 7DDO in a part each; 1A8O's file changed (one
coordinate, so its sequence and its MSA stay the same) and extended by a CLI build (its own embedded
cluster) SIGKILLed once its index rebuild before the MSA stage has taken in the new part.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pytest

from featurecache import open_store
from featurecache.store.index import complete_parts
from featurecache.store.prune import prune_store, unused_parts
from tests.conftest import SAMPLES, build_store
from tests.killed_builds import kill_after_the_pre_msa_rebuild

MSAS, CCD = SAMPLES / "msas", SAMPLES / "ccd"
#: 1A8O.pdb's ATOM 90 (ASP A 152 N) x, and the x the changed file gives it
OLD_X, NEW_X = "21.554", "21.555"


def _atom_x(store: Path, entry_id: str) -> np.ndarray:
    return open_store(store).entry(entry_id, arrays="atoms").atoms["coords"][:, 0]


def _served(store: Path) -> dict[str, bytes]:
    """Every listed entry's atoms, tokens and bonds as a reader gets them."""
    reader = open_store(store)
    out = {}
    for i in reader.ids:
        e = reader.entry(i)
        out[i] = b"".join(
            name.encode() + np.ascontiguousarray(group[name]).tobytes()
            for group in (e.atoms, e.tokens, e.bonds)
            for name in sorted(group)
        )
    return out


@pytest.mark.timeout(600)
def test_prune_after_a_killed_extension_keeps_serving_the_old_version_and_the_next_build_publishes_the_new(
    tmp_path: Path,
) -> None:
    pdb, store = tmp_path / "pdb", tmp_path / "store"
    pdb.mkdir()
    for name in ("1A8O.pdb", "7DDO.pdb"):
        shutil.copy(SAMPLES / "structures" / name, pdb / name)
    build_store(store, pdb, workers=1, part_size=1, msa_dir=MSAS, ccd=CCD)
    first = open_store(store)
    part_of = dict(zip(first.ids, first.entries.column("part").to_pylist(), strict=True))
    assert sorted(part_of) == ["1A8O", "7DDO"] and part_of["1A8O"] != part_of["7DDO"]
    old_part = part_of["1A8O"]  # holds the published 1A8O alone
    served = _served(store)
    assert np.isclose(_atom_x(store, "1A8O"), float(OLD_X), atol=1e-4).any()

    text = (pdb / "1A8O.pdb").read_text()
    line = "ATOM     90  N   ASP A 152      21.554  34.953"
    assert text.count(line) == 1
    (pdb / "1A8O.pdb").write_text(text.replace(line, line.replace(OLD_X, NEW_X)))
    kill_after_the_pre_msa_rebuild(store, pdb, MSAS, CCD)
    killed = open_store(store)
    held = killed.unpublished_parts
    assert len(held) == 1 and held[0] not in part_of.values()  # the new 1A8O's part, held back
    assert sorted(killed.ids) == ["1A8O", "7DDO"] and _served(store) == served  # the old 1A8O served

    # neither the part of the published 1A8O nor the held one is unused; the prune leaves the store
    # serving what it served
    assert old_part not in [p.name for p in unused_parts(store)]
    result = prune_store(store)
    assert old_part not in result.parts and held[0] not in result.parts
    assert {old_part, held[0]} <= {p.name for p in complete_parts(store)}
    after = open_store(store)
    assert sorted(after.ids) == ["1A8O", "7DDO"], "prune dropped the published 1A8O"
    assert after.unpublished_parts == held
    assert _served(store) == served
    x = _atom_x(store, "1A8O")
    assert np.isclose(x, float(OLD_X), atol=1e-4).any() and not np.isclose(x, float(NEW_X), atol=1e-4).any()

    # the next build publishes the new 1A8O (from the held part: nothing built again); only then
    # is the old one's part unused, and a prune removes it without changing what is served
    summary = build_store(store, pdb, workers=1, part_size=1, msa_dir=MSAS, ccd=CCD)
    assert summary.n_built == 0
    done = open_store(store)
    assert done.unpublished_parts == [] and sorted(done.ids) == ["1A8O", "7DDO"]
    assert dict(zip(done.ids, done.entries.column("part").to_pylist(), strict=True))["1A8O"] == held[0]
    x = _atom_x(store, "1A8O")
    assert np.isclose(x, float(NEW_X), atol=1e-4).any() and not np.isclose(x, float(OLD_X), atol=1e-4).any()
    published = _served(store)
    assert published["7DDO"] == served["7DDO"] and published["1A8O"] != served["1A8O"]
    assert old_part in prune_store(store).parts
    assert _served(store) == published
