"""featurecache leaves RDKit's logging as the program set it (review R35b s49 #3, R36a s49 #1-#4).

Importing ``featurecache.chem.conformer`` (so ``chem.library``, ``chem.reference`` and every
``run_build`` driver) routed RDKit's log for good: ``LogToPythonLogger``, every ``rdApp`` log off
but info and warning, and the ``rdkit`` logger's handlers replaced by a watcher that dropped
everything, ``propagate`` False, level DEBUG. A program's RDKit errors then went nowhere, and its
own handler on the ``rdkit`` logger was gone. Now the routing is done in the processes that
compute conformers (a build's workers), at their first one (``featurecache.chem.rdkit_log``).

Fresh interpreters (the point is the process's state): the program sets up RDKit's logging, imports
the public chem modules and runs a real build on the repository's samples (one worker, the sample
CCD: the worker computes HEM's conformer and others), and then parses ``C1CC``: RDKit's error must
reach the program's own destination, its handler must still be on the ``rdkit`` logger, and RDKit's
settings must be as before. The process that computes a conformer itself is routed (the watcher
needs it): its UFF typer chatter is not printed, and the program is told so by the docs."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from tests.conftest import REPO, SAMPLES

PARSE_ERROR = "SMILES Parse Error: unclosed ring for input: 'C1CC'"
UFF = "UFFTYPER"

PROGRAM = r"""
import json, logging, shutil, sys, threading
from pathlib import Path
from rdkit import Chem, rdBase

mode, samples, work = sys.argv[1], Path(sys.argv[2]), Path(sys.argv[3])
records = []

class Keep(logging.Handler):
    def emit(self, record):
        records.append((record.levelname, record.getMessage()))

def state():
    lg = logging.getLogger("rdkit")
    return (rdBase.LogStatus(), lg.level, lg.propagate, list(lg.handlers), len(lg.filters))

rdkit_logger = logging.getLogger("rdkit")
mine = Keep()
rdkit_logger.addHandler(mine)
if mode == "logger":  # the program's choice: RDKit to Python's logging, info off, its own level
    rdBase.LogToPythonLogger()
    rdBase.DisableLog("rdApp.info")
    rdBase.DisableLog("rdApp.debug")
    rdkit_logger.setLevel(logging.INFO)
    rdkit_logger.propagate = True
before = state()

import featurecache.chem.conformer as conformer
import featurecache.chem.library  # noqa: F401
import featurecache.chem.reference  # noqa: F401
from featurecache.build.run import run_build
from featurecache.parse.ccd import CCD

def main():
    # a real build driven from this process: its worker computes 102m's HEM, SO4, ... conformers
    pdb = work / "pdb"
    pdb.mkdir()
    shutil.copy(samples / "structures" / "102m.cif", pdb)
    summary = run_build(pdb_dir=pdb, out=work / "store", ccd=samples / "ccd", workers=1,
                        progress=False, dashboard=False)
    assert summary.n_built == 1, summary
    after_build = state()
    print("--- after the build ---", file=sys.stderr, flush=True)
    del records[:]
    Chem.MolFromSmiles("C1CC")
    parse_records = list(records)
    print("--- a conformer in this process ---", file=sys.stderr, flush=True)
    # ZN's embedding makes RDKit log UFF typer errors: this process is routed now (documented)
    assert conformer.conformer_for_component(CCD(samples / "ccd")["ZN"]).strategy == "etkdg"
    print(json.dumps({"same": after_build == before, "mine_kept": mine in after_build[3],
                      "parse_records": parse_records, "before": str(before), "after": str(after_build)}))

if __name__ == "__main__":
    main()
"""


def _run(tmp_path: Path, mode: str) -> tuple[dict, str]:  # type: ignore[type-arg]
    script = tmp_path / "program.py"
    script.write_text(PROGRAM)
    work = tmp_path / "work"
    work.mkdir()
    env = {**os.environ, "PYTHONPATH": str(REPO), "FEATURECACHE_DASHBOARD": "0"}
    r = subprocess.run([sys.executable, str(script), mode, str(SAMPLES), str(work)], cwd=tmp_path, env=env,
                       capture_output=True, text=True, timeout=300)  # fmt: skip
    assert r.returncode == 0, r.stderr[-3000:]
    return json.loads(r.stdout.strip().splitlines()[-1]), r.stderr


def test_after_a_build_rdkit_errors_reach_stderr_and_the_programs_handler_stays(tmp_path: Path) -> None:
    """RDKit's default (C++ streams to stderr) with the program's handler on the ``rdkit`` logger:
    after importing the chem modules and a real build driven from this process, ``C1CC``'s parse
    error is on stderr, the handler is there, RDKit's logs and the logger are as before. A
    conformer computed in the process afterwards prints no UFF chatter (it is routed)."""
    result, stderr = _run(tmp_path, "cpp")
    after_build = stderr.split("--- after the build ---", 1)[1]
    parse, conformer = after_build.split("--- a conformer in this process ---", 1)
    assert PARSE_ERROR in parse, stderr[-2000:]
    assert result["mine_kept"] and result["same"], result
    assert UFF not in conformer, [line for line in conformer.splitlines() if UFF in line][:3]


def test_rdkit_to_python_logging_stays_the_programs(tmp_path: Path) -> None:
    """The program sent RDKit's log to Python's logging (info off, level INFO, propagating): after
    the imports and a real build, ``C1CC``'s error reaches the program's handler, once, and
    RDKit's logs and the logger are as the program set them."""
    result, _ = _run(tmp_path, "logger")
    assert result["mine_kept"] and result["same"], result
    assert [(level, PARSE_ERROR in message) for level, message in result["parse_records"]] == [
        ("ERROR", True)
    ], result["parse_records"]
