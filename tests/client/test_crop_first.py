"""The per-step path crops before it reads the atoms (DESIGN.md "Crop before decoding anything
large"; ``client.job.SampleJob._crop_first``), and its samples are those of the whole-entry read.

The oracle is that equality, byte for byte, over every array of the sample: the whole-entry path
(``crop_first_atoms=None``: the path every sample took before) against the crop-first path forced on
every entry (``crop_first_atoms=0``), on real multi-chain entries with ligands, glycans, per-atom
modified residues and unresolved centre atoms, with small crops (so the crop cuts the entries, and
per-atom residues, and the atom rows read are a strict subset), each crop method alone and snap
groups kept whole. A store of featurizer 0.6.0 (built by that commit's package: tokens without
``centre_coords``) is read through the whole-entry fallback and gives the samples that package
gives; its entries read back with the ``centre_coords`` a 0.7.0 build stores.

Over the lookup service (``featurecache serve`` on 127.0.0.1; ``LookupClient``'s row reads, ``POST
/v1/entries/{id}:rows``) the same keys give the same samples, byte for byte, as the whole entry
over HTTP and crop first locally, in two requests a sample (tokens, bonds and interfaces; the atom
rows), counted by the service's own metrics; a service older than the route (its package from ``git
archive``) and the 0.6.0 store are read whole, one request a sample as before.

Real parts: real builds (this code's, and 0.6.0's package from ``git archive`` in a process of its
own), real zarr stores, a process pool for the worker-count check, real uvicorn servers."""

from __future__ import annotations

import os
import pickle
import shutil
import subprocess
import sys
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from featurecache import open_store
from featurecache.client import FeatureDataset
from featurecache.client.assemble import atom_indices, crop_atom_ranges, whole_residue_atoms
from featurecache.client.crop import CropInput
from featurecache.client.http import LookupClient
from featurecache.errors import InvalidRequest
from featurecache.store.layout import CHUNK_ROWS, ENTRY_GROUPS
from services.lookup.server import background_server
from tests.conftest import CCD, STRUCTURES, build_store, featurecache_at
from tests.services.lookup_helpers import metric_samples, metric_sum

#: the last commit of featurizer 0.6.0 (tokens without centre_coords)
OLD_COMMIT = "859fe88265ef2028c25a767ffadbbc59a7d3eadd"

#: real entries: many chains (7pzb: 8, 7DDO: 7), DNA with a per-atom modified nucleotide (2q2k:
#: 5IU; unresolved centre atoms), NAG glycans and ZN (7DDO), GNP/MG ligands (721p), a peptide of
#: modified residues bound to DNA (209d), polymer caps (7a4d); 7pzb and 7DDO span chunk boundaries
FILES = ("7pzb.pdb", "7DDO.pdb", "2q2k.cif", "721p-assembly1.cif", "209d-assembly1.cif", "7a4d-assembly1.cif")
#: the 0.6.0 store's inputs (fewer: its package builds them in a process of its own), compared with this
#: code's entries of the same files: files whose features featurizer 0.8.0 left as they were (2q2k, with
#: a crystallization aid and a modified nucleotide, is not one)
OLD_FILES = ("7pzb.pdb", "7DDO.pdb", "721p-assembly1.cif")

CONFIGS: tuple[dict[str, Any], ...] = (
    {"crop_size": 48, "crop_weights": (1, 0, 0)},
    {"crop_size": 48, "crop_weights": (0, 1, 0)},
    {"crop_size": 48, "crop_weights": (0, 0, 1)},
    {"crop_size": 128},
    {"crop_size": 96, "crop_whole_groups": True},
    {"crop_size": 200, "max_atoms": 900},
)


def _inputs(root: Path, files: tuple[str, ...]) -> Path:
    root.mkdir(parents=True)
    for f in files:
        shutil.copy(STRUCTURES / f, root / f)
    return root


def _store(tmp_path_factory: pytest.TempPathFactory, name: str, ccd: Path | None) -> Path:
    root = tmp_path_factory.mktemp(name)
    out = root / "store"
    summary = build_store(out, _inputs(root / "in", FILES), workers=1, ccd=ccd, part_size=2)
    assert summary.n_built == len(FILES), summary.failures
    return out


@pytest.fixture(scope="module")
def cf_store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """FILES built with the CCD: per-atom residues laid out from their definitions."""
    return _store(tmp_path_factory, "crop_first", CCD)


@pytest.fixture(scope="module")
def no_ccd_store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """FILES built without the CCD: per-atom residues are the file's atoms, and residues whose
    atoms are not a stored component's take a perceived conformer keyed on all their atoms
    (``chem.reference.resolve``), so a crop that cut one and looked up only its kept atoms would
    get another reference for them (or none)."""
    return _store(tmp_path_factory, "crop_first_no_ccd", None)


def _same(a: dict[str, Any], b: dict[str, Any], what: str) -> None:
    assert a.keys() == b.keys(), (what, sorted(a.keys() ^ b.keys()))
    for k, x in a.items():
        y = b[k]
        if isinstance(x, np.ndarray):
            assert isinstance(y, np.ndarray) and x.dtype == y.dtype and x.shape == y.shape, (what, k)
            assert x.tobytes() == y.tobytes(), (what, k)
        else:
            assert x == y, (what, k, x, y)


def _dataset(store: Path, crop_first_atoms: int | None, **kw: Any) -> FeatureDataset:
    ds = FeatureDataset(store, seed=11, weighting="uniform", samples_per_epoch=400, **kw)
    ds.job.crop_first_atoms = crop_first_atoms
    return ds


def test_tokens_carry_their_centre_atoms_coordinates(cf_store: Path) -> None:
    store = open_store(cf_store)
    unresolved = 0
    for eid in store.ids:
        assert "centre_coords" in store.stored_fields(eid, "tokens")
        tokens, atoms = store.read_group(eid, "tokens"), store.read_group(eid, "atoms")
        want = atoms["coords"][tokens["centre_atom"]]
        assert tokens["centre_coords"].dtype == np.float32 and tokens["centre_coords"].shape == (
            len(tokens),
            3,
        )
        assert tokens["centre_coords"].tobytes() == want.tobytes(), eid
        missing = ~atoms["is_present"][tokens["centre_atom"]]
        assert not tokens["centre_coords"][missing].any(), eid  # 0 where the centre atom is absent
        unresolved += int(missing.sum())
    assert unresolved > 0  # the premise: some centre atoms are unresolved


def test_read_rows_gives_the_rows_of_the_whole_group(cf_store: Path) -> None:
    store = open_store(cf_store)
    rng = np.random.default_rng(0)
    partial = 0
    for eid in store.ids:
        whole = store.read_group(eid, "atoms")
        n = len(whole)
        assert store.row_count(eid, "atoms") == n and store.row_count(eid, "tokens") == len(
            store.read_group(eid, "tokens")
        )
        for _ in range(6):
            k = int(rng.integers(1, 5))
            starts = rng.integers(0, n, size=k)
            ranges = np.stack([starts, np.minimum(starts + rng.integers(1, 300, size=k), n)], axis=1)
            rows, rec = store.read_rows(eid, "atoms", ranges)
            assert rows.dtype == np.int64 and np.all(np.diff(rows) > 0) and rows[0] >= 0 and rows[-1] < n
            wanted = np.unique(np.concatenate([np.arange(a, b) for a, b in ranges]))
            assert np.isin(wanted, rows).all()
            assert rec.tobytes() == whole[rows].tobytes(), eid
            partial += int(len(rows) < n)
    assert partial > 0  # the premise: some reads skip chunks (entries over CHUNK_ROWS atoms)
    eid = store.ids[0]
    rows, rec = store.read_rows(eid, "atoms", np.zeros((0, 2), dtype=np.int64))
    assert rows.size == 0 and rec.size == 0
    n = len(store.read_group(eid, "atoms"))
    with pytest.raises(InvalidRequest, match=f"entry {eid}: rows"):
        store.read_rows(eid, "atoms", [(0, n + 1)])


@pytest.mark.parametrize("which", ["cf_store", "no_ccd_store"])
def test_crop_first_samples_are_the_whole_entry_samples(which: str, request: pytest.FixtureRequest) -> None:
    """Every array of every sample, byte for byte, over 6 crop settings × 60 positions."""
    cf_store = request.getfixturevalue(which)
    reader = open_store(cf_store)
    sizes = {eid: len(reader.read_group(eid, "atoms")) for eid in reader.ids}
    assert max(sizes.values()) > CHUNK_ROWS  # the premise: entries over one chunk
    partial = cut_residues = methods = 0
    seen_methods: set[str] = set()
    for cfg in CONFIGS:
        first, whole = _dataset(cf_store, 0, **cfg), _dataset(cf_store, None, **cfg)
        for p in range(60):
            a, b = first.sample(p), whole.sample(p)
            _same(a, b, f"{cfg} position {p} ({a['entry_id']})")
            seen_methods.add(str(a["crop_method"]))
            # what the crop-first path read (the premise that it reads less, and cuts residues)
            key = first.sampler.key(p)
            got = first.job._crop_first(reader, key, first.job.rng(key))
            if got is None:
                assert a["crop_method"] == "none", (cfg, p)
                continue
            entry, crop = got
            partial += int(len(entry.atoms["coords"]) < sizes[key.entry_id])
            aidx, _ = atom_indices(entry.tokens, crop.indices)
            cut_residues += int(whole_residue_atoms(entry.atoms["ref_space_uid"], aidx) is not None)
            methods += 1
        first.close()
        whole.close()
    assert {"contiguous", "spatial", "spatial_interface"} <= seen_methods
    assert methods > 200 and partial > 50 and cut_residues > 5, (methods, partial, cut_residues)


def test_only_entries_over_crop_first_atoms_are_cropped_first(cf_store: Path) -> None:
    """``crop_first_atoms``: entries of at most that many atoms, and entries the crop keeps whole,
    are read whole (the second round trip would cost more than it saves)."""
    reader = open_store(cf_store)
    ds = _dataset(cf_store, 5000, crop_size=64)
    sizes = {eid: reader.row_count(eid, "atoms") for eid in reader.ids}
    assert min(sizes.values()) <= 5000 < max(sizes.values())  # the premise: both kinds
    kinds = set()
    for p in range(40):
        key = ds.sampler.key(p)
        got = ds.job._crop_first(reader, key, ds.job.rng(key))
        assert (got is not None) == (sizes[key.entry_id] > 5000), key.entry_id
        kinds.add(got is not None)
    assert kinds == {True, False}
    big = _dataset(cf_store, 0, crop_size=100_000)  # every entry fits: read whole
    key = big.sampler.key(0)
    assert big.job._crop_first(reader, key, big.job.rng(key)) is None
    ds.close()
    big.close()


def test_crop_atom_ranges_take_every_atom_of_a_cut_residue(cf_store: Path) -> None:
    """The ranges' rule against the entry's own ``ref_space_uid`` (whole_residue_atoms)."""
    store = open_store(cf_store)
    checked = 0
    for eid in store.ids:
        e = store.entry(eid)
        for k in np.flatnonzero(~e.tokens["is_standard"]):
            keep = np.array([k], dtype=np.int64)
            aidx, _ = atom_indices(e.tokens, keep)
            whole = whole_residue_atoms(e.atoms["ref_space_uid"], aidx)
            want = aidx if whole is None else whole
            ranges = crop_atom_ranges(e.tokens, keep)
            got = np.concatenate([np.arange(a, b) for a, b in ranges])
            assert np.isin(want, got).all(), (eid, k)
            checked += int(whole is not None)
    assert checked > 100  # per-atom residues of several atoms: ligands, glycans, modified residues


def test_crop_first_across_worker_processes(cf_store: Path) -> None:
    """The crop-first path in a process pool gives the samples of the whole-entry path here."""
    whole = _dataset(cf_store, None, crop_size=64)
    ds = FeatureDataset(cf_store, seed=11, weighting="uniform", samples_per_epoch=24, crop_size=64,
                        pool="process", workers=2)  # fmt: skip
    ds.job.crop_first_atoms = 0
    n = 0
    for s in ds:
        _same({k: v for k, v in s.items() if k not in ("position", "reorder_depth", "skipped")},
              {k: v for k, v in whole.sample(s["position"]).items() if k not in ("position", "reorder_depth", "skipped")},
              f"position {s['position']}")  # fmt: skip
        n += 1
    ds.close()
    whole.close()
    assert n == 24


# ------------------------------------------------------------------------------ a 0.6.0 store
_OLD_SAMPLES = """
import pickle, sys
from featurecache.client import FeatureDataset
from featurecache.const import FEATURIZER_VERSION
assert FEATURIZER_VERSION == "0.6.0", FEATURIZER_VERSION
out = []
for cfg in pickle.loads(bytes.fromhex(sys.argv[2])):
    ds = FeatureDataset(sys.argv[1], seed=11, weighting="uniform", samples_per_epoch=400, **cfg)
    out.append([ds.sample(p) for p in range(int(sys.argv[3]))])
    ds.close()
sys.stdout.buffer.write(pickle.dumps(out))
"""


#: positions of each of CONFIGS the 0.6.0 package samples from its store
OLD_N = 40


def _old_package_runs(root: Path, pkg: Path) -> tuple[subprocess.CompletedProcess[str], bytes | None]:
    """OLD_COMMIT's package (``pkg``) builds OLD_FILES with the CCD into ``root / "store"``, then
    draws OLD_N samples of each of CONFIGS from it, each in a process of its own: (the build's
    CompletedProcess, the pickled samples or None when the build failed)."""
    out = root / "store"
    env = {**os.environ, "PYTHONPATH": str(pkg)}
    args = ["build", "--pdb-dir", str(_inputs(root / "in", OLD_FILES)), "--ccd", str(CCD), "--out", str(out),
            "--workers", "1", "--no-progress", "--part-size", "2"]  # fmt: skip
    done = subprocess.run([sys.executable, "-m", "featurecache.cli", *args], capture_output=True, text=True,
                          cwd=pkg, env=env, timeout=600)  # fmt: skip
    if done.returncode != 0:
        return done, None
    cfgs = pickle.dumps([dict(c) for c in CONFIGS]).hex()
    drawn = subprocess.run([sys.executable, "-c", _OLD_SAMPLES, str(out), cfgs, str(OLD_N)], capture_output=True,
                           cwd=pkg, env=env, timeout=600)  # fmt: skip
    assert drawn.returncode == 0, drawn.stderr.decode()
    return done, drawn.stdout


@pytest.fixture(scope="module", autouse=True)
def old_runs(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, Future[Any]] | str]:
    """(OLD_COMMIT's package tree, the future of :func:`_old_package_runs`), started when the module
    starts: that package's processes run while the module's other tests do (they waited for them at
    the end before, ~20 s). Without the git history: why (old_store then skips with it)."""
    root = tmp_path_factory.mktemp("crop_first_old")
    try:
        pkg = featurecache_at(OLD_COMMIT, root / "pkg")
    except pytest.skip.Exception as skipped:
        yield str(skipped)
        return
    with ThreadPoolExecutor(1) as pool:
        yield pkg, pool.submit(_old_package_runs, root, pkg)


@pytest.fixture(scope="module")
def old_store(old_runs: tuple[Path, Future[Any]] | str) -> tuple[Path, Path]:
    """(a store built by OLD_COMMIT's package from OLD_FILES with the CCD, that package's tree)."""
    if isinstance(old_runs, str):
        pytest.skip(old_runs)
    pkg, future = old_runs
    done, _ = future.result()
    assert done.returncode == 0, done.stdout + done.stderr
    return pkg.parent / "store", pkg


def test_a_0_6_0_store_reads_as_before(
    old_store: tuple[Path, Path], cf_store: Path, old_runs: tuple[Path, Future[Any]]
) -> None:
    store_dir, _ = old_store
    old, new = open_store(store_dir), open_store(cf_store)
    for eid in old.ids:
        # the premise: its tokens have no centre_coords; the reader derives them as a build stores them
        assert "centre_coords" not in old.stored_fields(eid, "tokens"), eid
        got, want = old.entry(eid), new.entry(eid)
        for group in ("atoms", "tokens", "bonds", "interfaces"):
            a, b = getattr(got, group), getattr(want, group)
            assert a.keys() == b.keys(), (eid, group)
            for f in a:
                if (group, f) == ("atoms", "charge"):
                    # featurizer 0.11.0 (review R40a/R41a s51): a resolved atom whose file states no charge
                    # in its residue takes the definition's, as an absent one did; 0.6.0 stored 0 there
                    assert a[f].dtype == b[f].dtype and ((a[f] == b[f]) | (a[f] == 0)).all(), (eid, group, f)
                    continue
                assert a[f].dtype == b[f].dtype and a[f].tobytes() == b[f].tobytes(), (eid, group, f)
        assert old.entry(eid, ["tokens/centre_coords"]).tokens["centre_coords"].tobytes() == (
            want.tokens["centre_coords"].tobytes()
        )

    n = OLD_N
    cfgs = [dict(c) for c in CONFIGS]
    _, drawn = old_runs[1].result()  # that package's samples of the same positions (old_runs)
    assert drawn is not None
    before = pickle.loads(drawn)
    for cfg, theirs in zip(cfgs, before, strict=True):
        here = _dataset(store_dir, 0, **cfg)  # crop first asked for: the 0.6.0 parts fall back
        on_new = _dataset(cf_store, 0, **cfg)
        for p in range(n):
            s = here.sample(p)
            # review R25d s43 #3: a residue the crop cuts is centred on its whole conformer now (on
            # its kept atoms in 0.6.0's client), so its ref_pos differ by one shift per residue
            _same({k: v for k, v in s.items() if k != "ref_pos"},
                  {k: v for k, v in theirs[p].items() if k != "ref_pos"}, f"0.6.0 store, {cfg} position {p}")  # fmt: skip
            shift = s["ref_pos"].astype(np.float64) - theirs[p]["ref_pos"]
            first = np.unique(s["ref_space_uid"], return_index=True)[1][s["ref_space_uid"]]
            np.testing.assert_allclose(shift, shift[first], atol=1e-4, err_msg=f"{cfg} position {p}")
            key = here.sampler.key(p)
            assert here.job._crop_first(old, key, here.job.rng(key)) is None  # the fallback
            # the same key on this code's store of the same inputs, crop first: the same sample
            _same({k: v for k, v in on_new.job(key).items()},
                  {k: v for k, v in s.items() if k not in ("position", "reorder_depth", "skipped")},
                  f"0.7.0 store, {cfg} position {p}")  # fmt: skip
        here.close()
        on_new.close()


def test_verify_and_the_chem_scan_read_a_0_6_0_store(old_store: tuple[Path, Path], tmp_path: Path) -> None:
    from featurecache.build.chem_stage import scan_structure_part

    store = tmp_path / "store"
    shutil.copytree(old_store[0], store)
    done = subprocess.run([sys.executable, "-m", "featurecache.cli", "verify", str(store)], capture_output=True,
                          text=True, timeout=300)  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    assert "ok: store verified" in done.stdout, done.stdout
    parts = sorted((store / "parts").glob("s-*"))
    assert parts
    for part in parts:
        res = scan_structure_part(str(part))
        assert res.error is None and res.n_entries > 0 and res.n_residues > 0, part


def test_crop_input_without_atoms_needs_centre_coords() -> None:
    tokens = {"asym_id": np.zeros(2, np.int32), "is_resolved": np.ones(2, bool), "centre_atom": np.arange(2),
              "atom_count": np.ones(2, np.int32), "residue_index": np.arange(2), "mol_type": np.zeros(2, np.uint8),
              "is_standard": np.ones(2, bool)}  # fmt: skip
    with pytest.raises(ValueError, match="need the atoms' coords"):
        CropInput.from_arrays(tokens, None)
    coords = np.arange(6, dtype=np.float32).reshape(2, 3)
    inp = CropInput.from_arrays({**tokens, "centre_coords": coords}, None)
    assert inp.centre.tobytes() == coords.tobytes()


# ------------------------------------------------------------------------------ over the lookup service
#: the last commit whose lookup service has no ``POST /v1/entries/{id}:rows`` (nor its capability)
BEFORE_ROWS_ROUTE = "a3d7cf29d4dbde73179bd0bd0b992662e476a847"
REQUESTS = "featurecache_lookup_requests_total"
ROWS_ROUTE = "/v1/entries/{entry_id}:rows"
ENTRY_ROUTE = "/v1/entries/{entry_id}"
SERVED_ROWS = "featurecache_lookup_entry_rows_served_total"


def _metrics(url: str) -> dict[str, float]:
    got = metric_samples(LookupClient(url).request("GET", "/metrics").text)
    return {
        "rows": metric_sum(got, REQUESTS, route=ROWS_ROUTE, method="POST"),
        "entry": metric_sum(got, REQUESTS, route=ENTRY_ROUTE, method="GET"),
        "service": metric_sum(got, REQUESTS, route="/v1/service", method="GET"),
        "errors": sum(v for (n, lab), v in got.items() if n == REQUESTS and int(dict(lab)["status"]) >= 400),
        "atom_rows": metric_sum(got, SERVED_ROWS, group="atoms"),
    }


def _delta(after: dict[str, float], before: dict[str, float]) -> dict[str, float]:
    return {k: after[k] - before[k] for k in after}


@pytest.fixture(scope="module")
def cf_url(cf_store: Path) -> Iterator[str]:
    """``featurecache serve`` (2 workers) over the crop-first store."""
    with background_server(cf_store, workers=2) as url:
        yield url


def test_lookup_client_reads_rows_as_the_store_does(cf_url: str, cf_store: Path) -> None:
    """row_count, stored_fields, read_groups and read_rows of LookupClient against LocalStore's."""
    local, client = open_store(cf_store), LookupClient(cf_url)
    assert client.row_reads()
    rng = np.random.default_rng(3)
    for eid in local.ids:
        for g in ENTRY_GROUPS:
            assert client.row_count(eid, g) == local.row_count(eid, g), (eid, g)
            assert client.stored_fields(eid, g) == local.stored_fields(eid, g), (eid, g)
        got, want = (
            client.read_groups(eid, ["tokens", "bonds", "interfaces"]),
            local.read_groups(eid, ["tokens", "bonds", "interfaces"]),
        )
        assert got.keys() == want.keys()
        for g in want:
            assert got[g].dtype == want[g].dtype and got[g].tobytes() == want[g].tobytes(), (eid, g)
        whole = local.read_group(eid, "atoms")
        n = len(whole)
        for _ in range(4):
            starts = rng.integers(0, n, size=int(rng.integers(1, 6)))
            ranges = np.stack(
                [starts, np.minimum(starts + rng.integers(0, 500, size=starts.size), n)], axis=1
            )
            rows, rec = client.read_rows(eid, "atoms", ranges[::-1])  # any order
            want_rows = np.unique(np.concatenate([np.arange(a, b) for a, b in ranges]))
            assert rows.tobytes() == want_rows.tobytes(), eid  # exactly the rows asked for
            assert rec.dtype == whole.dtype and rec.tobytes() == whole[want_rows].tobytes(), eid
        rows, rec = client.read_rows(eid, "atoms", np.zeros((0, 2), dtype=np.int64))
        assert rows.size == 0 and rec.size == 0 and rec.dtype == whole.dtype
        with pytest.raises(
            InvalidRequest, match=f"entry {eid}: rows 0..{n + 1} of atoms asked for; it has {n}"
        ):
            client.read_rows(eid, "atoms", [(0, n + 1)])
    client.close()


def test_http_crop_first_samples_are_the_whole_entry_samples(cf_url: str, cf_store: Path) -> None:
    """Every array of every sample, byte for byte: crop first over HTTP, the whole entry over HTTP,
    crop first locally; over HTTP one GET a sample read whole and one an entry cropped first (its
    tokens: the client keeps them for the entry's later samples) and one POST :rows a sample cropped
    first (plus one, of no rows, the first time a part is asked what it stores), counted by the
    service."""
    local = open_store(cf_store)
    parts = dict(
        zip(local.entries.column("id").to_pylist(), local.entries.column("part").to_pylist(), strict=True)
    )
    n = 30
    cropped_total = 0
    for cfg in CONFIGS:
        first, whole, here = (
            _dataset(cf_url, 0, **cfg),
            _dataset(cf_url, None, **cfg),
            _dataset(cf_store, 0, **cfg),
        )
        before = _metrics(cf_url)
        a = [first.sample(p) for p in range(n)]
        used = _delta(_metrics(cf_url), before)
        cropped = []  # the entries the local crop-first path cropped (the same decisions)
        for p in range(n):
            key = here.sampler.key(p)
            if here.job._crop_first(local, key, here.job.rng(key)) is not None:
                cropped.append(key.entry_id)
        assert len(set(cropped)) < len(cropped), cropped  # the premise: entries cropped first again
        # one GET a sample read whole, one an entry cropped first (its tokens, bonds and interfaces:
        # its later samples take them from the process's client.job.TokenCache)
        assert used["entry"] == n - len(cropped) + len(set(cropped)), (cfg, used, cropped)
        assert used["rows"] == len(cropped) + len({parts[e] for e in cropped}), (cfg, used, cropped)
        assert used["errors"] == 0, (cfg, used)
        atoms = sum(local.row_count(e, "atoms") for e in cropped)
        assert 0 < used["atom_rows"] < atoms, (cfg, used, atoms)  # the premise: fewer atom rows travel
        cropped_total += len(cropped)
        for p in range(n):
            _same(a[p], whole.sample(p), f"HTTP crop first vs whole, {cfg} position {p}")
            _same(a[p], here.sample(p), f"HTTP vs local crop first, {cfg} position {p}")
        for ds in (first, whole, here):
            ds.close()
    assert cropped_total > 60, cropped_total


def _service_package(commit: str, dest: Path) -> Path:
    """``featurecache`` and ``services`` of ``commit`` under ``dest`` (a lookup service of then)."""
    return featurecache_at(commit, dest, ("featurecache", "services"))


def test_a_service_older_than_row_reads_is_read_whole(cf_store: Path, tmp_path: Path) -> None:
    """A service without the route (BEFORE_ROWS_ROUTE's package): the client tells it from
    /v1/service (asked once, not per sample), reads each entry whole (one GET a sample, no POST it
    would refuse) and draws the samples of crop first here."""
    pkg = _service_package(BEFORE_ROWS_ROUTE, tmp_path / "pkg")
    with background_server(cf_store, workers=1, cwd=pkg, env={"PYTHONPATH": str(pkg)}) as url:
        assert "capabilities" not in LookupClient(url).service_info  # the premise: the service of then
        for cfg in CONFIGS[:3]:
            old, here = _dataset(url, 0, **cfg), _dataset(cf_store, 0, **cfg)
            before = _metrics(url)
            got = [old.sample(p) for p in range(20)]
            used = _delta(_metrics(url), before)
            assert used["entry"] == 20 and used["rows"] == 0 and used["errors"] == 0, used
            assert used["service"] <= 1, used  # the capabilities are asked once a client
            reader = old.job.source.get()
            assert reader.row_reads() is False
            for p in range(20):
                _same(got[p], here.sample(p), f"old service, {cfg} position {p}")
            old.close()
            here.close()


def test_a_0_6_0_store_over_the_service_is_read_whole(old_store: tuple[Path, Path]) -> None:
    """A store of 0.6.0 parts (tokens without centre_coords): the client learns so from one rows
    request of no rows per part, never asks the service for tokens it would derive from the atoms,
    and reads each entry whole in one GET, as before; the samples are crop first's locally (which
    test_a_0_6_0_store_reads_as_before checks against that package's)."""
    store_dir, _ = old_store
    local = open_store(store_dir)
    with background_server(store_dir, workers=1) as url:
        client = LookupClient(url)
        for eid in local.ids:
            assert "centre_coords" not in client.stored_fields(eid, "tokens"), eid
            got, want = client.read_groups(eid, ["tokens"]), local.read_groups(eid, ["tokens"])
            assert got["tokens"].dtype == want["tokens"].dtype
            assert got["tokens"].tobytes() == want["tokens"].tobytes()
        for cfg in (CONFIGS[0], CONFIGS[3]):
            ds, here = _dataset(url, 0, **cfg), _dataset(store_dir, 0, **cfg)
            before = _metrics(url)
            got = [ds.sample(p) for p in range(20)]
            used = _delta(_metrics(url), before)
            asked = {ds.sampler.key(p).entry_id for p in range(20)}
            parts = {local.entries.column("part")[local.row_of(e)].as_py() for e in asked}
            assert used["entry"] == 20 and used["errors"] == 0, used
            assert used["rows"] <= len(parts) and used["atom_rows"] == 0, used  # what the parts store
            for p in range(20):
                _same(got[p], here.sample(p), f"0.6.0 store over HTTP, {cfg} position {p}")
            ds.close()
            here.close()
