"""featurecache leaves RDKit's logging as the program set it (review R35b s49 #3).

Importing ``featurecache.chem.conformer`` (so ``chem.library``, ``chem.reference`` and every
``run_build`` driver) routed RDKit's log for good: ``LogToPythonLogger``, every ``rdApp`` log off
but info and warning, and the ``rdkit`` logger's handlers replaced by a watcher that dropped
everything, ``propagate`` False, level DEBUG. A program's RDKit errors then went nowhere, and its
own handler on the ``rdkit`` logger was gone. Now the routing is held only while a thread computes
a conformer (``featurecache.chem.rdkit_log``) and put back after.

Fresh interpreters (the point is the process's state): the program sets up RDKit's logging, imports
the public chem modules, runs a real build on the repository's samples (one worker, the sample CCD)
or computes real conformers in this process, and then parses ``C1CC``: RDKit's error must reach the
program's own destination, its handler must still be on the ``rdkit`` logger, and RDKit's settings
must be as before. ZN's conformer makes RDKit log UFF typer errors in the embedding thread: those
are still not printed."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from tests.conftest import REPO, SAMPLES

PARSES = 200  # the program's parses while another thread computes conformers
PARSE_ERROR = "SMILES Parse Error: unclosed ring for input: 'C1CC'"
UFF = "UFFTYPER"

PROGRAM = r"""
import json, logging, shutil, sys, threading, time
from pathlib import Path
from rdkit import Chem, rdBase

mode, samples, work = sys.argv[1], Path(sys.argv[2]), Path(sys.argv[3])
records = []

class Keep(logging.Handler):
    def emit(self, record):
        records.append((record.levelname, record.getMessage(), record.thread == threading.main_thread().ident))

rdkit_logger = logging.getLogger("rdkit")
mine = Keep()
rdkit_logger.addHandler(mine)
if mode == "logger":  # the program's choice: RDKit to Python's logging, info off, its own level
    rdBase.LogToPythonLogger()
    rdBase.DisableLog("rdApp.info")
    rdBase.DisableLog("rdApp.debug")
    rdkit_logger.setLevel(logging.INFO)
    rdkit_logger.propagate = True
before = (rdBase.LogStatus(), rdkit_logger.level, rdkit_logger.propagate, list(rdkit_logger.handlers))

import featurecache.chem.conformer as conformer
import featurecache.chem.library  # noqa: F401
import featurecache.chem.reference  # noqa: F401
from featurecache.parse.ccd import CCD

PARSES = %d

def main():
    ccd = CCD(samples / "ccd")
    if mode == "cpp":  # a real build: the driver, and its worker computing HEM, SO4, ZN, ...
        from featurecache.build.run import run_build
        pdb = work / "pdb"
        pdb.mkdir()
        shutil.copy(samples / "structures" / "102m.cif", pdb)
        summary = run_build(pdb_dir=pdb, out=work / "store", ccd=samples / "ccd", workers=1,
                            progress=False, dashboard=False)
        assert summary.n_built == 1, summary
    # in this process: ZN's embedding logs UFF typer errors (not the program's business)
    assert conformer.conformer_for_component(ccd["ZN"]).strategy == "etkdg"
    # another thread inside a conformer while this one parses: its error still comes out
    stop, started = threading.Event(), threading.Event()
    def embed():
        while not stop.is_set():
            conformer.conformer_for_component(ccd["ZN"])
            started.set()
            conformer.conformer_for_component(ccd["SO4"])
    del records[:]
    t = threading.Thread(target=embed)
    t.start()
    started.wait(60)
    overlapped = 0  # parses while the other thread held RDKit's log routed
    for _ in range(PARSES):
        overlapped += bool(rdkit_logger.filters)
        Chem.MolFromSmiles("C1CC")
        time.sleep(0.0005)
    stop.set()
    t.join()
    during = list(records)
    print("--- after ---", file=sys.stderr, flush=True)
    del records[:]
    Chem.MolFromSmiles("C1CC")
    after = (rdBase.LogStatus(), rdkit_logger.level, rdkit_logger.propagate, list(rdkit_logger.handlers))
    print(json.dumps({"same": after == before, "mine_kept": mine in rdkit_logger.handlers,
                      "filters": len(rdkit_logger.filters), "records": records,
                      "during": during, "overlapped": overlapped, "before": str(before), "after": str(after)}))

if __name__ == "__main__":
    main()
"""


def _run(tmp_path: Path, mode: str) -> tuple[dict, str]:  # type: ignore[type-arg]
    script = tmp_path / "program.py"
    script.write_text(PROGRAM % PARSES)
    work = tmp_path / "work"
    work.mkdir()
    env = {**os.environ, "PYTHONPATH": str(REPO), "FEATURECACHE_DASHBOARD": "0"}
    r = subprocess.run([sys.executable, str(script), mode, str(SAMPLES), str(work)], cwd=tmp_path, env=env,
                       capture_output=True, text=True, timeout=300)  # fmt: skip
    assert r.returncode == 0, r.stderr[-3000:]
    return json.loads(r.stdout.strip().splitlines()[-1]), r.stderr


def test_after_a_build_rdkit_errors_reach_stderr_and_the_programs_handler_stays(tmp_path: Path) -> None:
    """RDKit's default (C++ streams to stderr) with the program's handler on the ``rdkit`` logger:
    after a real build and conformers computed in this process, ``C1CC``'s parse error is on
    stderr, the handler is there, RDKit's logs and the logger are as before; no UFF chatter."""
    result, stderr = _run(tmp_path, "cpp")
    during, after = stderr.split("--- after ---", 1)
    assert PARSE_ERROR in after, stderr[-2000:]
    assert result["mine_kept"] and result["same"], result
    assert result["filters"] == 0, result
    # while the other thread held the routing, each of this thread's errors still came out on
    # stderr once (RDKit's own stream, or the rdkit logger's handler that RDKit installs), and
    # reached the program's handler as well when routed; none of the embedding thread's did
    assert during.count(PARSE_ERROR) == PARSES, during[-2000:]
    assert result["overlapped"] > 0, result
    assert all(main and PARSE_ERROR in message for _, message, main in result["during"]), result["during"][:5]
    assert UFF not in stderr, [line for line in stderr.splitlines() if UFF in line][:3]


def test_rdkit_to_python_logging_stays_the_programs(tmp_path: Path) -> None:
    """The program sent RDKit's log to Python's logging (info off, level INFO, propagating): after
    conformers in this process, and while another thread computes them, every ``C1CC`` error of
    the main thread reaches the program's handler, none of the embedding thread's records does."""
    result, stderr = _run(tmp_path, "logger")
    assert result["mine_kept"] and result["same"], result
    assert result["filters"] == 0, result
    assert [(level, PARSE_ERROR in message, main) for level, message, main in result["records"]] == [
        ("ERROR", True, True)
    ], result["records"]
    during = [(level, PARSE_ERROR in message, main) for level, message, main in result["during"]]
    assert result["overlapped"] > 0, result
    assert during == [("ERROR", True, True)] * PARSES, [r for r in result["during"] if not r[2]][:5]
    assert UFF not in stderr, [line for line in stderr.splitlines() if UFF in line][:3]
