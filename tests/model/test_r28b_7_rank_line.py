"""Rank r > 0's summary line does not claim the checkpoint only rank 0 wrote (review R28b s46 #7): it
says its rank, and that rank 0's line names the checkpoint. A real 2-rank run (torchrun, CPU)."""

from __future__ import annotations

from pathlib import Path

from tests.model.test_r28b_1_global_batch import two_rank_run  # noqa: F401  (the fixture)


def test_only_rank_0s_line_names_the_checkpoint(two_rank_run: Path) -> None:  # noqa: F811
    lines = [
        line for line in (two_rank_run / "stdout.txt").read_text().splitlines() if "trained 2 steps" in line
    ]
    assert len(lines) == 2, lines
    ck = two_rank_run / "ck.pt"
    assert sum(f"checkpoint {ck}" in line for line in lines) == 1, lines
    rank0 = next(line for line in lines if f"checkpoint {ck}" in line)
    assert f"log {two_rank_run / 'log.json'}" in rank0, rank0
    rank1 = next(line for line in lines if line != rank0)
    assert "rank 1 of 2 (rank 0 wrote the checkpoints; its line names them and how to continue)" in rank1, (
        rank1
    )
