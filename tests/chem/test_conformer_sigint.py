"""A SIGINT during RDKit's embedding is an error, never a fallback (a review's finding).

RDKit sets a SIGINT handler of its own while it embeds; a SIGINT then cancels ETKDG, which
returned -1 like a failed embedding, so the component fell back to random coordinates or the
CCD's coordinates, and the build stored that worse conformer. Real RDKit, real CCD definitions:
the embedding runs in a thread while this process sends itself SIGINT (a Python handler that
does nothing, as a build worker's was)."""

from __future__ import annotations

import os
import signal
import threading
import time
from typing import Any

import numpy as np
import pytest
from rdkit import rdBase

import featurecache.errors as errors
from featurecache.chem.conformer import conformer_for_component
from featurecache.parse.ccd import CCD
from tests.chem import ccdtext

#: RDKit before 2026.09 ends the process on a SIGINT during an embedding when the process's handler
#: is a Python one (its own handler re-raises it), which these tests install; a build's workers
#: block SIGINT in every thread but the one that waits for it, so a real build behaves the same on
#: every RDKit the package allows (2024.9.5 on: review R38d s50, Ctrl-C mid-embedding, exit 130,
#: parts kept, the resumed conformers identical)
pytestmark = pytest.mark.skipif(
    tuple(int(p) for p in rdBase.rdkitVersion.split(".")[:2]) < (2026, 9),
    reason=f"RDKit {rdBase.rdkitVersion} < 2026.09 ends the process on SIGINT under a Python handler",
)

CODES = ("CLR", "PLM", "9N0")  # the reviewer's components that ended up random_coords


@pytest.fixture(scope="module")
def ccd() -> CCD:
    return CCD(ccdtext.CCD_DIR)


def _under_sigint(fn: Any) -> Any:
    """``fn()`` in a thread while this process gets SIGINT every 2 ms; its result or exception."""
    out: list[Any] = []

    def run() -> None:
        try:
            out.append(fn())
        except BaseException as exc:  # the outcome is what the test looks at
            out.append(exc)

    previous = signal.signal(signal.SIGINT, lambda signum, frame: None)
    try:
        worker = threading.Thread(target=run)
        worker.start()
        while worker.is_alive():
            os.kill(os.getpid(), signal.SIGINT)
            time.sleep(0.002)
        worker.join()
    finally:
        signal.signal(signal.SIGINT, previous)
    return out[0]


@pytest.mark.parametrize("code", CODES)
def test_an_interrupted_embedding_raises_instead_of_falling_back(ccd: CCD, code: str) -> None:
    interrupted = getattr(errors, "EmbeddingInterrupted", None)
    outcome = _under_sigint(lambda: conformer_for_component(ccd[code]))
    assert interrupted is not None and isinstance(outcome, interrupted), (
        f"{code}: got {getattr(outcome, 'strategy', outcome)!r} ({getattr(outcome, 'reason', '')})"
    )
    assert isinstance(outcome, errors.ChemError) and code in str(outcome) and "SIGINT" in str(outcome)


def test_the_next_embedding_is_the_uninterrupted_one(ccd: CCD) -> None:
    """After an interrupted embedding the same thread's next one is not taken for interrupted,
    and it gives the conformer of a run that never saw a SIGINT (determinism)."""
    clean = conformer_for_component(ccd["CLR"])
    assert clean.strategy == "etkdg", clean.reason
    _under_sigint(lambda: conformer_for_component(ccd["CLR"]))
    box: list[Any] = []
    worker = threading.Thread(target=lambda: box.append(conformer_for_component(ccd["CLR"])))
    worker.start()
    worker.join()
    again = box[0]
    assert again.strategy == "etkdg", again.reason
    np.testing.assert_array_equal(again.positions, clean.positions)
