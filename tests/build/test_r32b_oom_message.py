"""A worker killed for memory: the failure names the workers' memory limit and the input's size
(review R32b s47 #3). Before, it said only "often its memory limit: see the worker's log", and the
user had to find the limit in the worker's log and still did not learn what the input needs.

A real kill: an external ``dask scheduler`` (``allowed-failures`` 0: the first death is the task's
KilledWorker) and one ``dask worker --memory-limit 300MiB`` (pausing off, so the worker is not
held paused between 80 % and 95 % but terminated at 95 % by its nanny), building 1psm and a real
capsid entry made here (5cvz's 60 BIOMT copies, gemmi.make_assembly, laid out 4× with new chain
ids: 254,640 atoms, ~21 MB of mmCIF, ~380 MB of worker memory). 1psm builds; the capsid's worker is
killed for memory, and its failure row gives 300.0 MiB and the file's size. The MSA stage's
messages are checked through their builders, with a real alignment file and a KilledWorker."""

from __future__ import annotations

import itertools
import os
import shutil
import string
import subprocess
from pathlib import Path
from types import SimpleNamespace

import gemmi
import pytest

from featurecache.build.msa_stage import MSAUse, PlannedMSA, _crashed_msa, _crashed_scan
from featurecache.build.run import run_build, size_text, worker_memory_limit
from featurecache.store.layout import MSA_PART_PREFIX, part_name
from tests.build.test_cluster import DASK, _start_scheduler, _stop, _wait_for_workers
from tests.conftest import CCD, MSAS, REPO, SAMPLES, STRUCTURES


def _capsid_lattice(path: Path, copies: int = 4) -> None:
    st = gemmi.read_structure(str(STRUCTURES / "5cvz_final.pdb"))
    st.remove_waters()
    st.setup_entities()
    capsid = gemmi.make_assembly(st.assemblies[0], st[0], gemmi.HowToNameCopiedChain.Short)
    xs = [atom.pos.x for ch in capsid for res in ch for atom in res]
    step = max(xs) - min(xs) + 8.0  # no contact between copies
    names = (
        "".join(t) for n in (1, 2) for t in itertools.product(string.ascii_letters + string.digits, repeat=n)
    )
    model = gemmi.Model("1")
    for k in range(copies):
        for ch in capsid:
            c = ch.clone()
            c.name = next(names)
            for res in c:
                for atom in res:
                    atom.pos = gemmi.Position(atom.pos.x + k * step, atom.pos.y, atom.pos.z)
            model.add_chain(c)
    out = gemmi.Structure()
    out.cell, out.spacegroup_hm, out.info = st.cell, st.spacegroup_hm, st.info
    out.add_model(model)
    out.setup_entities()
    doc = out.make_mmcif_document()
    doc[0].name = "CAPL"
    doc.write_file(str(path))


def test_a_worker_killed_for_memory_names_the_limit_and_the_file_size(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    pdb = tmp_path / "pdb"
    pdb.mkdir()
    shutil.copy(SAMPLES / "structures" / "1psm.cif", pdb / "1psm.cif")
    big = pdb / "capl4.cif"
    _capsid_lattice(big)
    monkeypatch.setenv("DASK_DISTRIBUTED__SCHEDULER__ALLOWED_FAILURES", "0")
    address, sched = _start_scheduler(tmp_path)
    procs = [sched]
    cwd = tmp_path / "worker-cwd"
    cwd.mkdir()
    try:
        procs.append(subprocess.Popen(
            [DASK, "worker", address, "--nthreads", "1", "--nworkers", "1", "--no-dashboard",
             "--memory-limit", "300MiB"],
            stdout=(cwd / "worker.log").open("wb"), stderr=subprocess.STDOUT, cwd=cwd,
            env=dict(os.environ, PYTHONPATH=str(REPO), DASK_DISTRIBUTED__WORKER__MEMORY__PAUSE="False"),
        ))  # fmt: skip
        _wait_for_workers(address, 1)
        summary = run_build(pdb_dir=pdb, out=tmp_path / "store", ccd=CCD, scheduler=address, progress=False)
    finally:
        _stop(procs)
    assert "exceeded 95% memory budget" in (cwd / "worker.log").read_text()  # a real kill for memory
    assert summary.n_built == 1  # 1psm, under the same limit
    (failure,) = summary.failures
    assert failure["path"] == "capl4.cif" and failure["stage"] == "worker" and failure["key"] == ""
    size = big.stat().st_size
    assert size > 20 * 2**20
    message = failure["message"]
    assert message.startswith(
        f"the worker process died while featurizing this file ({size_text(size)}; the workers' memory "
        "limit is 300.0 MiB; often the memory limit kills it: see the worker's log): "
    ), message
    assert "KilledWorker" == failure["error_class"]


def test_worker_memory_limit_phrases() -> None:
    def client(*limits: int | None) -> SimpleNamespace:
        workers = {f"tcp://w{k}": {"memory_limit": lim} for k, lim in enumerate(limits)}
        return SimpleNamespace(scheduler_info=lambda n_workers=-1: {"workers": workers})

    assert worker_memory_limit(client(600 * 2**20)) == "the workers' memory limit is 600.0 MiB"
    assert (
        worker_memory_limit(client(2**30, 24 * 2**30))
        == "the workers' memory limits are 1,024.0 MiB to 24.0 GiB"
    )
    assert worker_memory_limit(client(0)).startswith("the workers have no memory limit")
    assert worker_memory_limit(client()) == ""


def _killed() -> BaseException:
    from distributed import KilledWorker

    return KilledWorker("msa-part-x", SimpleNamespace(address="tcp://127.0.0.1:1"), 1)  # type: ignore[arg-type]


def test_msa_failures_name_the_limit_the_files_size_and_the_query_length(tmp_path: Path) -> None:
    src = MSAS / "alphafold3-pytorch" / "721p-assembly1A_protein.a3m.gz"
    rel, size = "721p-assembly1A_protein.a3m.gz", src.stat().st_size
    memory = "the workers' memory limit is 600.0 MiB"
    scan = _crashed_scan(rel, size, _killed(), memory)
    assert f"died while reading it ({size_text(size)}; {memory}; often the memory limit" in scan.message

    use = MSAUse(rel=rel, sha256="", size=size, block=0, query_row=0, adopt=False, label=rel)
    item = PlannedMSA(key="k", sequence="M" * 166, mol_type=1, uses=[use], inputs_key="")
    res = _crashed_msa(
        tmp_path,
        part_name(MSA_PART_PREFIX, 0),
        [item],
        [],
        None,
        str(MSAS),
        _killed(),
        {"k": ["721p/A"]},
        memory,
    )
    (row,) = res.failures
    assert (f"({size_text(size)} of alignment file, query 166 residues; {memory}; often the memory limit kills it"
            in row["message"]), row["message"]  # fmt: skip
