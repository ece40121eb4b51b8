"""A checkpoint with a flipped byte (not truncated) is refused, review R28b s46 #3: torch.load does not
check the zip members' CRC-32, so the run resumed (exit 0) on a changed weight, or a flip in a float's
exponent made it "diverge" with advice to lower --lr. Now ``--resume`` and ``--init-from`` both exit 2,
one line naming the damaged member."""

from __future__ import annotations

import shutil
import struct
import zipfile
from pathlib import Path

import pytest

from featurecache.model.train import run_training
from tests.conftest import cli_in_process
from tests.model.test_trunk import TINY


def _flip_a_weight_byte(path: Path) -> str:
    """Flip one byte in the middle of the checkpoint's largest tensor member (its stored bytes: torch
    writes them uncompressed); returns the member's name."""
    with zipfile.ZipFile(path) as archive:
        info = max((i for i in archive.infolist() if "/data/" in i.filename), key=lambda i: i.file_size)
    with path.open("r+b") as f:
        f.seek(info.header_offset + 26)
        name_len, extra_len = struct.unpack("<HH", f.read(4))
        at = info.header_offset + 30 + name_len + extra_len + info.file_size // 2
        f.seek(at)
        byte = f.read(1)[0]
        f.seek(at)
        f.write(bytes([byte ^ 0xFF]))
    return info.filename


@pytest.mark.parametrize("option", ["--resume", "--init-from"])
def test_a_checkpoint_with_a_flipped_byte_is_refused_naming_the_member(
    sample_store: Path, tmp_path: Path, option: str
) -> None:
    good, bad = tmp_path / "good.pt", tmp_path / "bad.pt"
    run_training(sample_store, None, steps=1, crop_size=16, device="cpu", workers=1, config=TINY, log_path=None,
                 checkpoint=good)  # fmt: skip
    shutil.copy(good, bad)
    member = _flip_a_weight_byte(bad)
    assert zipfile.is_zipfile(bad)  # what the check was: it still passes
    log = tmp_path / "log.json"
    done = cli_in_process("train", "--store", str(sample_store), "--device", "cpu", "--crop", "16",
                          "--workers", "1", "--steps", "2", option, str(bad), "--log", str(log))  # fmt: skip
    assert done.returncode == 2, done.stderr[-3000:]
    assert "Traceback" not in done.stderr
    last = done.stderr.strip().splitlines()[-1]
    verb = "resume from" if option == "--resume" else "initialise from"
    assert (
        f"cannot {verb} {bad}: not a featurecache checkpoint (damaged: its member {member} fails its checksum)"
        in (last)
    ), last
    assert not log.exists()
