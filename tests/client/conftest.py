"""Client fixtures: one small real store built from a handful of real files (session scope)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from featurecache.client.sampler import SampleKey
from tests.conftest import CCD, MSAS, STRUCTURES, build_store, session_store


class FailAt:
    """Sample hook: the sample at ``position`` raises."""

    def __init__(self, position: int) -> None:
        self.position = position

    def __call__(self, key: SampleKey) -> None:
        if key.position == self.position:
            raise RuntimeError(f"injected failure at {key.position}")


#: Real files chosen for what the croppers must handle: many chains, DNA, ligands (GNP/MG, HEM,
#: EPE, PCG), modified residues (5IU; MSE becomes MET, AF3 SI 2.1), a cyclic peptide, unresolved tails, one chain alone.
CLIENT_FILES = (
    "7pzb.pdb",  # 2 protein + 4 DNA chains + cAMP ligands, 600 tokens
    "721p-assembly1.cif",  # H-Ras dimer with GNP + MG
    "2q2k.cif",  # protein-DNA, modified nucleotide 5IU, EPE
    "102m.cif",  # myoglobin + HEM + SO4
    "4zey.cif",  # MSE (read as MET), SO4
    "3u8v.cif",  # 2 protein chains + NI
    "1A8O.cif",  # one chain, MSE (read as MET)
    "209d-assembly1.cif",  # DNA duplex + actinomycin-like peptide
)
#: MSAs of 4zey (OpenFold layout) and of 102m (Protenix layout), relative to the real msas dir.
CLIENT_MSAS = ("openfold/4zey_A", "Protenix/mmcif_msa/3")


def _real_store(
    tmp_path_factory: pytest.TempPathFactory,
    name: str,
    files: tuple[str, ...],
    msa_rels: tuple[str, ...] = (),
) -> Path:
    """A real store (real build: Dask LocalCluster, the CCD, the MSAs ``msa_rels`` of the real msas
    dir) of the real structure ``files``; every file must build. Built once per test run
    (tests/conftest.py ``session_store``)."""

    def build(out: Path) -> None:
        root = tmp_path_factory.mktemp(name)
        inputs = root / "structures"
        inputs.mkdir()
        for f in files:
            shutil.copy(STRUCTURES / f, inputs / f)
        msas = root / "msas" if msa_rels else None
        for rel in msa_rels:
            shutil.copytree(MSAS / rel, root / "msas" / rel)
        summary = build_store(out, inputs, workers=1, msa_dir=msas, ccd=CCD, part_size=4)
        assert summary.n_built == len(files), summary.failures

    return session_store(tmp_path_factory, name, build)


@pytest.fixture(scope="session")
def client_store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A real store (real build: Dask LocalCluster, CCD, MSAs) of :data:`CLIENT_FILES`."""
    return _real_store(tmp_path_factory, "client", CLIENT_FILES, CLIENT_MSAS)


@pytest.fixture(scope="session")
def client_reader(client_store: Path):  # type: ignore[no-untyped-def]
    import featurecache

    reader = featurecache.open_store(client_store)
    yield reader
    reader.close()


#: Real files whose crops an atom budget would cut short: the 50S ribosome of 1ffk (RNA, ~14 atoms
#: per token on average, 23 for a G), 2XHE (929 protein tokens), 1GBT (thrombin with Ca²⁺).
BUDGET_FILES = ("1ffk.cif.gz", "2XHE.cif.gz", "1GBT.cif")


@pytest.fixture(scope="session")
def budget_store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A real store (real build, CCD, no MSAs) of :data:`BUDGET_FILES`."""
    return _real_store(tmp_path_factory, "budget", BUDGET_FILES)
