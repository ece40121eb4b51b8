"""One fused training run (60 steps, crop 384, pad 128) of the featurecache beside this file: a side of
benchmarks/dev/ab_trees.sh (the script is copied into each tree, so that each imports its own package).

    python3 ab_step.py STORE TREE     # run by ab_trees.sh in each tree's root
"""

import argparse
import statistics as s
import time

from featurecache.model.train import run_training

if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("store", help="the feature store to train on")
    ap.add_argument("tree", help="the tree's name, printed on the TREE line")
    args = ap.parse_args()
    t0 = time.time()
    d = run_training(
        args.store,
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
        args.tree,
        featurecache.__file__,
        "median_step_ms %.2f" % (1000 * s.median(x["step_time_s"] for x in st)),
        "median_gpu_ms %.2f" % (1000 * s.median(x["gpu_s"] for x in st)),
        "wall %.1f" % (time.time() - t0),
        flush=True,
    )
