"""--init-from X and a --checkpoint that would replace X (s25 E3 #2), beyond the path comparison.

A checkpoint is written by renaming a new file over its path, which replaces that directory entry.
So X is lost when the checkpoint path names the same entry by another path: resolving symlinks
catches a symlink, not the same directory seen through a bind mount (paths that resolve apart; the
directory compared by (st_dev, st_ino) catches it). A hard link to X under another name is a
different entry: the rename leaves it holding X's contents, so that run is not refused."""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from featurecache.model.train import load_checkpoint, run_training
from tests.model.test_trunk import TINY

SYNTH: dict[str, Any] = {"crop_size": 16, "device": "cpu", "config": TINY}
ROOT = Path(__file__).resolve().parents[2]

#: run in a private mount namespace where ``alias`` is a bind mount of ``real``
_IN_NAMESPACE = r"""
import sys
from pathlib import Path
from featurecache.errors import UsageError
from featurecache.model.train import run_training
from tests.model.test_trunk import TINY
init, template, every, steps, real, alias = sys.argv[1:7]
assert Path(alias).resolve() != Path(real).resolve()  # the paths do not say it is one directory
try:
    run_training(None, None, steps=int(steps), log_path=None, init_from=init, checkpoint=template,
                 checkpoint_every=int(every) or None, crop_size=16, device="cpu", config=TINY)
except UsageError as exc:
    print("REFUSED", exc)
    sys.exit(0)
print("TRAINED")
sys.exit(1)
"""


def _bind_mount_command(real: Path, alias: Path) -> list[str]:
    return ["unshare", "-rm", "sh", "-c", 'mount --bind "$1" "$2" && shift 2 && exec "$@"', "sh", str(real),
            str(alias)]  # fmt: skip


def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.mark.parametrize(("name", "template", "every", "steps"), [("a.pt", "a.pt", 0, 3),
                                                                   ("ck_2.pt", "ck_{step}.pt", 2, 6)])  # fmt: skip
def test_the_same_file_through_a_bind_mount_is_refused(
    tmp_path: Path, name: str, template: str, every: int, steps: int
) -> None:
    real, alias = tmp_path / "real", tmp_path / "alias"
    real.mkdir()
    alias.mkdir()
    if shutil.which("unshare") is None:
        pytest.skip("no unshare(1) here: a bind mount needs a private mount namespace")
    probe = subprocess.run([*_bind_mount_command(real, alias), "true"], capture_output=True, text=True)
    if probe.returncode != 0:
        pytest.skip(f"cannot bind-mount in a private mount namespace here: {probe.stderr.strip()}")
    source = real / name
    run_training(None, None, steps=2, log_path=None, checkpoint=source, **SYNTH)
    before = _sha(source)
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    args = [str(alias / name), str(real / template), str(every), str(steps), str(real), str(alias)]
    done = subprocess.run([*_bind_mount_command(real, alias), sys.executable, "-c", _IN_NAMESPACE, *args],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)  # fmt: skip
    assert done.returncode == 0 and done.stdout.startswith("REFUSED"), (done.stdout, done.stderr[-3000:])
    assert "would overwrite" in done.stdout and str(alias / name) in done.stdout, done.stdout
    assert _sha(source) == before and load_checkpoint(source)["step"] == 2


def test_a_hard_link_under_another_name_keeps_its_contents_so_it_is_not_refused(tmp_path: Path) -> None:
    """The run replaces a.pt; b.pt, a hard link to the a.pt it starts from, still holds step 2."""
    a, b = tmp_path / "a.pt", tmp_path / "b.pt"
    run_training(None, None, steps=2, log_path=None, checkpoint=a, **SYNTH)
    os.link(a, b)
    before = _sha(b)
    doc = run_training(None, None, steps=3, log_path=None, init_from=b, checkpoint=a, **SYNTH)
    assert doc["status"] == "completed"
    assert _sha(b) == before and load_checkpoint(b)["step"] == 2 and load_checkpoint(a)["step"] == 3
    assert os.stat(a).st_ino != os.stat(b).st_ino
