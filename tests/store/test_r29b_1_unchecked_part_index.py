"""``verify --repair`` does not serve a damaged own index of a part that records no checksum of
it (review R29b s46 #1). Parts written before session 46 record no ``index_sha256`` in their
``part.json``: when their own index and ``STORE/index/`` differ, the store alone cannot tell which
copy is damaged. The repair rewrote the index from the parts, so one flipped bit in such a part's
``_index/entries.arrow`` became the served resolution (1.84 -> 0.92), and every later verify said
ok. Now verify says it cannot tell, the repair takes the entry out of the index (the index keeps
no copy of the part's rows) and the build rebuilds it from its source.

Real build (1 worker, one input per structure part) of the repo's samples 1psm and 2q2k; the part
of 2q2k made to look older by dropping ``index_sha256`` from its ``part.json`` (as
tests/store/test_r25b_component_content_hash.py imitates older parts); one bit flipped in place."""

from __future__ import annotations

import json
import math
import struct
from pathlib import Path

import pytest

import featurecache
from featurecache.store.index import read_table
from featurecache.store.verify import verify_report
from featurecache.store.writer import INDEX_SHA256_KEY
from tests.conftest import CliRun, build_store, cli_in_process
from tests.store.conftest import SAMPLE_PAIR

IDS = SAMPLE_PAIR


def _cli(*args: str | Path) -> CliRun:
    return cli_in_process(*map(str, args))


@pytest.fixture
def built(sample_pair: tuple[Path, Path]) -> tuple[Path, Path]:
    """(store, pdb): 1psm and 2q2k built one part each (tests/store/conftest.py)."""
    return sample_pair


def _resolution(store: Path, entry_id: str) -> float | None:
    s = featurecache.open_store(store)
    if entry_id not in s.ids:
        return None
    return float(s.entries.column("resolution")[s.row_of(entry_id)].as_py())


def _make_older(store: Path, part: str) -> None:
    """``part``'s ``part.json`` without ``index_sha256``, as a part written before session 46."""
    manifest = store / "parts" / part / "_index" / "part.json"
    doc = json.loads(manifest.read_text())
    del doc[INDEX_SHA256_KEY]
    manifest.write_text(json.dumps(doc, indent=1, sort_keys=True))


def _flip_resolution(f: Path, value: float) -> float:
    """Flip one bit of ``value`` (float64) in ``f`` in place; returns the value it reads as."""
    with f.open("r+b") as fh:
        data = bytearray(fh.read())
        at = data.index(struct.pack("<d", value)) + 6
        data[at] ^= 0x10
        fh.seek(at)
        fh.write(bytes([data[at]]))
    return float(struct.unpack("<d", bytes(data[at - 6 : at + 2]))[0])


def test_a_flipped_bit_in_an_older_parts_own_index_is_not_served(built: tuple[Path, Path]) -> None:
    store, pdb = built
    s = featurecache.open_store(store)
    part = str(s.entries.column("part")[s.row_of("2q2k")].as_py())
    want = _resolution(store, "2q2k")
    assert want is not None and not math.isnan(want)
    _make_older(store, part)
    assert _cli("verify", store, "--no-progress").returncode == 0  # an older part alone is no problem
    flipped = _flip_resolution(store / "parts" / part / "_index" / "entries.arrow", want)
    assert flipped != want and _resolution(store, "2q2k") == want  # the premise: the index is intact

    bad = _cli("verify", store, "--no-progress")
    assert bad.returncode == 4, bad.stdout + bad.stderr
    assert (
        "MISMATCH index/entries.arrow differs from the rows of the parts' own index: column resolution"
        in bad.stdout
    )
    assert f"part(s) {part} record no checksum of their own index" in bad.stdout, bad.stdout
    assert "cannot tell which copy is damaged" in bad.stdout, bad.stdout
    assert "1 part records no checksum of its own index" in bad.stderr, bad.stderr  # the note
    report = verify_report(store)
    assert [(d.kind, d.id) for d in report.damaged] == [("entry", "2q2k")] and report.index_differs == {}

    rep = _cli("verify", store, "--repair", "--no-progress")
    assert rep.returncode == 0, rep.stdout + rep.stderr
    assert "removed from the index: 2q2k" in rep.stdout, rep.stdout
    # the part's copy is not served: the entry is out of the index until the build rebuilds it
    assert _resolution(store, "2q2k") is None
    assert (
        read_table(store / "index" / "entries.arrow", memory_map=False)
        .column("resolution")
        .to_pylist()
        .count(flipped)
        == 0
    )

    again = build_store(store, pdb, workers=1, part_size=1)
    assert again.n_failed == 0 and again.n_built == 1  # exactly 2q2k
    assert _resolution(store, "2q2k") == want
    ok = _cli("verify", store, "--no-progress")
    assert ok.returncode == 0 and "ok: store verified" in ok.stdout, ok.stdout + ok.stderr


def test_a_difference_in_a_part_that_records_its_checksum_is_still_rewritten(
    built: tuple[Path, Path],
) -> None:
    """The index file damaged, every part recording its own index's checksum: the repair rewrites
    the index from the parts, as before (no entry is taken out)."""
    store, _pdb = built
    want = _resolution(store, "2q2k")
    assert want is not None
    _flip_resolution(store / "index" / "entries.arrow", want)
    bad = _cli("verify", store, "--no-progress")
    assert bad.returncode == 4 and "--repair` rewrites the index" in bad.stdout, bad.stdout
    assert "record no checksum" not in bad.stdout + bad.stderr
    rep = _cli("verify", store, "--repair", "--no-progress")
    assert rep.returncode == 0 and "removed from the index" not in rep.stdout, rep.stdout
    assert _resolution(store, "2q2k") == want and sorted(featurecache.open_store(store).ids) == list(IDS)
