"""One fused training run (60 steps, crop 384, pad 128) of the featurecache beside this file: a side of
benchmarks/dev/ab_trees.sh (the script is copied into each tree, so that each imports its own package)."""

import statistics as s
import sys
import time

from featurecache.model.train import run_training

if __name__ == "__main__":
    t0 = time.time()
    d = run_training(
        sys.argv[1],
        None,
        steps=60,
        crop_size=384,
        device="cuda",
        log_path=None,
        workers=4,
        seed=0,
        pad_multiple=128,
    )
    st = d["steps"][1:]
    import featurecache

    print(
        "TREE",
        sys.argv[2],
        featurecache.__file__,
        "median_step_ms %.2f" % (1000 * s.median(x["step_time_s"] for x in st)),
        "median_gpu_ms %.2f" % (1000 * s.median(x["gpu_s"] for x in st)),
        "wall %.1f" % (time.time() - t0),
        flush=True,
    )
