"""Session 22: summarise `ncu_profile.sh`'s CSV exports into one table and a JSON.

    python benchmarks/dev/ncu_summary.py DIR OUT.json

DIR holds raw.csv and source_<kernel>.csv from `benchmarks/dev/ncu_profile.sh`. Per Triton kernel:
duration, issued instructions, issue-slot utilisation, warps per scheduler, registers, local-memory
(spill) instructions, pipe utilisations, the stall reasons (cycles per issued instruction) and the
time the same instructions would take at 100 % issue (one instruction per cycle per scheduler, 528
schedulers, at the nominal 1.98 GHz boost clock and at the clock ncu measured), plus, from the
per-instruction samples, the share of stall samples per reason and the five most-stalled SASS lines.
"""

from __future__ import annotations

import argparse
import csv
import json
from collections import Counter
from pathlib import Path

SCHEDULERS = 132 * 4  # H200: 132 SMs × 4 sub-partitions, one issue per cycle each
BOOST_HZ = 1.98e9

METRICS = {
    "duration_us": ("gpu__time_duration.sum", 1.0),  # scaled to µs by its unit
    "sm_hz": ("smsp__cycles_elapsed.avg.per_second", 1.0),
    "issued": ("smsp__inst_issued.sum", 1.0),
    "issue_pct": ("smsp__issue_active.avg.pct_of_peak_sustained_active", 1.0),
    "warps_per_scheduler": ("smsp__warps_active.avg.per_cycle_active", 1.0),
    "registers": ("launch__registers_per_thread", 1.0),
    "local_ld": ("smsp__sass_inst_executed_op_local_ld.sum", 1.0),
    "local_st": ("smsp__sass_inst_executed_op_local_st.sum", 1.0),
    "xu_pct": ("sm__inst_executed_pipe_xu.avg.pct_of_peak_sustained_active", 1.0),
    "fma_pct": ("sm__inst_executed_pipe_fma.avg.pct_of_peak_sustained_active", 1.0),
    "alu_pct": ("sm__inst_executed_pipe_alu.avg.pct_of_peak_sustained_active", 1.0),
    "tensor_pct": ("sm__pipe_tensor_cycles_active.avg.pct_of_peak_sustained_active", 1.0),
}
STALL_PREFIX = "smsp__average_warps_issue_stalled_"
STALL_SUFFIX = "_per_issue_active.ratio"


def _num(text: str) -> float:
    try:
        return float(text.replace(",", ""))
    except ValueError:
        return float("nan")


#: ncu writes each metric in the unit it picks (row 1 of the export); these bring them to µs and Hz
UNIT_SCALE = {"ns": 1e-3, "us": 1.0, "usecond": 1.0, "ms": 1e3, "msecond": 1e3, "s": 1e6,
              "hz": 1.0, "khz": 1e3, "mhz": 1e6, "ghz": 1e9}  # fmt: skip


def raw_table(path: Path) -> list[dict]:
    rows = list(csv.reader(path.open()))
    header, units, data = rows[0], rows[1], rows[2:]
    ix = {h: i for i, h in enumerate(header)}
    out = []
    for row in data:
        name = row[ix["Kernel Name"]]
        if not name.startswith("_"):  # our Triton kernels; torch/cuBLAS kernels have other names
            continue
        rec: dict = {"id": int(row[ix["ID"]]), "kernel": name}
        for key, (metric, scale) in METRICS.items():
            if metric in ix:
                unit = UNIT_SCALE.get(units[ix[metric]].strip().lower(), 1.0)
                rec[key] = _num(row[ix[metric]]) * scale * unit
            else:
                rec[key] = None
        rec["stalls_per_issue"] = {
            h[len(STALL_PREFIX) : -len(STALL_SUFFIX)]: round(_num(row[i]), 3)
            for h, i in ix.items()
            if h.startswith(STALL_PREFIX) and h.endswith(STALL_SUFFIX) and _num(row[i]) >= 0.05
        }
        issued = rec["issued"]
        rec["floor_100pct_issue_us_boost"] = issued / SCHEDULERS / BOOST_HZ * 1e6
        if rec["sm_hz"]:
            rec["floor_100pct_issue_us_measured_clock"] = issued / SCHEDULERS / rec["sm_hz"] * 1e6
        out.append(rec)
    return out


def source_summary(path: Path) -> dict:
    """First kernel instance in a --page source export: stall-sample shares and the top lines."""
    rows = list(csv.reader(path.open()))
    starts = [i for i, r in enumerate(rows) if r and r[0] == "Kernel Name"]
    end = starts[1] if len(starts) > 1 else len(rows)
    header = rows[starts[0] + 1]
    data = [r for r in rows[starts[0] + 2 : end] if len(r) == len(header)]
    ix = {h: i for i, h in enumerate(header)}
    samples = "Warp Stall Sampling (All Samples)"
    reasons = [h for h in header if h.startswith("stall_") and "Not Issued" not in h]
    total = sum(_num(r[ix[samples]]) for r in data) or 1.0
    shares = Counter({h[6:]: sum(_num(r[ix[h]]) for r in data) / total for h in reasons})
    top = sorted(data, key=lambda r: -_num(r[ix[samples]]))[:5]
    return {
        "stall_sample_share": {k: round(v, 3) for k, v in shares.most_common(8)},
        "top_lines": [
            {"sass": " ".join(r[ix["Source"]].split()), "share": round(_num(r[ix[samples]]) / total, 4)}
            for r in top
        ],
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument(
        "dir", type=Path, metavar="DIR", help="ncu_profile.sh's output folder (raw.csv, source_*.csv)"
    )
    ap.add_argument("out", type=Path, metavar="OUT.json", help="the summary JSON to write")
    args = ap.parse_args()
    src, out = args.dir, args.out
    kernels = raw_table(src / "raw.csv")
    for name in sorted({k["kernel"] for k in kernels}):
        path = src / f"source_{name}.csv"
        if path.exists():
            summary = source_summary(path)
            for k in kernels:
                if k["kernel"] == name:
                    k["source"] = summary
                    break
    print(f"{'id':>3} {'kernel':18} {'µs':>8} {'issued M':>9} {'issue %':>7} {'warps/sch':>9} {'regs':>5} "
          f"{'spill inst M':>12} {'100%-issue µs':>13}")  # fmt: skip
    for k in kernels:
        spills = ((k["local_ld"] or 0) + (k["local_st"] or 0)) / 1e6
        print(f"{k['id']:>3} {k['kernel'][:18]:18} {k['duration_us']:8.1f} {k['issued'] / 1e6:9.1f} "
              f"{k['issue_pct']:7.1f} {k['warps_per_scheduler']:9.2f} {k['registers']:5.0f} {spills:12.2f} "
              f"{k['floor_100pct_issue_us_boost']:13.1f}")  # fmt: skip
    out.write_text(json.dumps({"source_dir": str(src), "kernels": kernels}, indent=1) + "\n")
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
