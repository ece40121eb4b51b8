"""`featurecache info`: counts, sizes, versions and a failures summary."""

from __future__ import annotations

import json
import sys
from collections import Counter
from pathlib import Path
from typing import TYPE_CHECKING, Any

from featurecache.store.layout import INDEX_DIR, PARTS_DIR

if TYPE_CHECKING:
    from featurecache.store.reader import LocalStore


def _dir_bytes(path: Path) -> int:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file()) if path.is_dir() else 0


def store_info(store: LocalStore) -> dict[str, Any]:
    e = store.entries
    parts_dir = store.path / PARTS_DIR
    kinds = Counter(
        p.name.split("-")[0] for p in parts_dir.iterdir() if p.is_dir() and not p.name.startswith(".")
    )
    failures = store.failures
    by_stage = Counter(failures.column("stage").to_pylist()) if failures.num_rows else Counter()
    by_class = Counter(failures.column("error_class").to_pylist()) if failures.num_rows else Counter()
    counts = {
        "entries": e.num_rows,
        "chains": store.chains.num_rows,
        "interfaces": store.interfaces.num_rows,
        "atoms": int(sum(e.column("atom_count").to_pylist())) if e.num_rows else 0,
        "tokens": int(sum(e.column("token_count").to_pylist())) if e.num_rows else 0,
        "bonds": int(sum(e.column("bond_count").to_pylist())) if e.num_rows else 0,
        "failures": failures.num_rows,
        "warnings": store.warnings.num_rows,
        "msas": store.msas.num_rows,
        "components": store.components.num_rows,
    }
    return {
        "path": str(store.path),
        "versions": {
            k: store.attributes.get(k) for k in ("format_version", "schema_version", "featurizer_version")
        },
        "config_hash": store.attributes.get("config_hash"),
        "updated": store.attributes.get("updated"),
        "counts": counts,
        "parts": dict(kinds),
        "bytes": {
            "total": _dir_bytes(store.path),
            "parts": _dir_bytes(parts_dir),
            "index": _dir_bytes(store.path / INDEX_DIR),
        },
        "failures_by_stage": dict(by_stage),
        "failures_by_error": dict(by_class),
    }


SHOWN_FAILURES = 100


def print_info(path: Path, *, as_json: bool = False, failures: bool = False) -> None:
    """Print the store's summary; ``failures``: every failure row (else the first 100)."""
    from rich.console import Console
    from rich.table import Table

    from featurecache.build.summary import printable
    from featurecache.store.reader import open_store

    store = open_store(path)
    info = store.info()
    rows = store.failures.to_pylist()
    if as_json:
        if failures:
            info["failures"] = [{k: r[k] for k in ("path", "entry_id", "stage", "error_class", "message")}
                                for r in rows]  # fmt: skip
        sys.stdout.write(json.dumps(info, indent=2) + "\n")
        return
    console = Console()
    t = Table(title=f"featurecache store {info['path']}", show_header=False)
    t.add_column("", style="bold")
    t.add_column("")
    for k, v in info["versions"].items():
        t.add_row(k, str(v))
    t.add_row("updated", str(info["updated"]))
    for k, v in info["counts"].items():
        t.add_row(k, str(v))
    t.add_row("parts", ", ".join(f"{k}: {v}" for k, v in sorted(info["parts"].items())) or "none")
    t.add_row("size", f"{info['bytes']['total'] / 1e6:.2f} MB (index {info['bytes']['index'] / 1e3:.0f} kB)")
    for stage, n in sorted(info["failures_by_stage"].items()):
        t.add_row(f"failed at {stage}", str(n))
    console.print(t)
    if rows:
        f = Table(title="failures")
        for col in ("path", "stage", "error_class", "message"):
            f.add_column(col, overflow="fold")
        shown = rows if failures else rows[:SHOWN_FAILURES]
        for row in shown:
            f.add_row(printable(row["path"]), row["stage"], row["error_class"], printable(row["message"]))
        if len(shown) < len(rows):
            f.add_row(
                "…",
                "",
                "",
                f"{len(rows) - len(shown)} more: featurecache info STORE --failures (or --json --failures)",
            )
        console.print(f)
