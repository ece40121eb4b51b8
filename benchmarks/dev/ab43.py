"""Run 43 (session 9): is the chunked transition backward (fp32-out weight GEMMs, grid.TRANSITION_BWD_CHUNK_BYTES)
slower than session 8's at the training crops? Session 8's module (benchmarks/dev/transition_prev.py, generated
from fb3a7f2, not committed) vs the shipped one, with and without chunks, N in {256, 384, 512, 768}; two
interleaved reps; fwd+bwd called through the launchers.

Historical: ran against 05fa9c4 (run 44; run 43 on its parent's tree, the fix committed in 3905747);
to re-run: ``git worktree add /tmp/fc-05fa9c4 05fa9c4``, make ``benchmarks/dev/transition_prev.py``
there (session 8's ``kernels/transition.py`` with its SwiGLU helpers inlined and without the
torch.library registration, as in ``ab39.py``), and run it there (without that file it exits 2 at
once, saying so).

    PYTHONPATH=. python3 benchmarks/dev/ab43.py OUT.json
"""

from __future__ import annotations

import dataclasses
import functools
import json
import sys

import torch

from benchmarks.dev.devcli import help_exit, ran_elsewhere
from benchmarks.kernels import free, ms, transition_inputs
from featurecache.model.kernels import transition as tr

try:
    from benchmarks.dev import transition_prev as prev  # not committed: made as said above
except ImportError:
    prev = None

RAN_AGAINST = "05fa9c436bff676b3b90d196d9fd031fbcf6387f"


def main() -> None:
    if prev is None:
        ran_elsewhere(RAN_AGAINST, "runs 43-44", "benchmarks/dev/transition_prev.py is missing (made by hand "
                      "from fb3a7f2: see the docstring)", "after making it there")  # fmt: skip
    rows = []
    for n in (256, 384, 512, 768):
        t = transition_inputs(n * n, 128, 4)
        xs = [t[k] for k in ("x", "lnw", "lnb", "w1", "w2")]
        cfg = tr.default_config(128, torch.bfloat16, torch.device("cuda"))
        v = {
            "prev": functools.partial(prev.transition_backward, t["dy"], *xs, 1e-5),
            "chunked": functools.partial(tr.transition_backward, t["dy"], *xs, 1e-5, cfg),
            "one_chunk": functools.partial(
                tr.transition_backward, t["dy"], *xs, 1e-5, dataclasses.replace(cfg, bwd_chunk_bytes=None)
            ),
        }
        for rep in range(2):
            for name, fn in v.items():
                rows.append({"n": n, "variant": name, "rep": rep, "bwd_ms": ms(fn)})
                print(rows[-1], flush=True)
        del t, xs, v
        free()
    with open(sys.argv[1], "w") as f:
        json.dump({"torch": torch.__version__, "rows": rows}, f, indent=1)
    for row in rows:
        print(f"{row['n']:5} {row['variant']:10} {row['rep']} {row['bwd_ms']:.3f}")


if __name__ == "__main__":
    help_exit(__doc__)
    main()
