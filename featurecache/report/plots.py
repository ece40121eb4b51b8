"""Render :class:`~featurecache.report.data.Panel` objects to PNG files (matplotlib, Agg backend)."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from featurecache.report.data import Panel

log = logging.getLogger(__name__)

_COLOURS = ("#3b6ea8", "#d9822b", "#4f9a5b", "#b04a5a", "#7d5ba6", "#8c8c8c")
_DPI = 100


def _figure(size: tuple[float, float] = (6.4, 3.6)) -> tuple[Any, Any]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=size, dpi=_DPI)
    return fig, ax


def _empty(ax: Any, text: str) -> None:
    ax.text(0.5, 0.5, text, ha="center", va="center", fontsize=13, color="#555555", transform=ax.transAxes)
    ax.set_xticks([])
    ax.set_yticks([])


def _series_names(panel: Panel, skip: tuple[str, ...]) -> list[str]:
    return [k for k in panel.columns if k not in skip]


def _integer_counts(ax: Any, panel: Panel) -> None:
    """Whole-number ticks on the value axis when every value drawn is an integer."""
    from matplotlib.ticker import MaxNLocator

    values = panel.columns.get("count") if panel.kind == "hist" else None
    if values is None:
        values = [v for k, col in panel.columns.items() if k != "label" for v in col]
    if panel.extra.get("log_value") or not values or not all(isinstance(v, int) for v in values):
        return
    (ax.xaxis if panel.kind == "barh" else ax.yaxis).set_major_locator(MaxNLocator(integer=True))


def render(panel: Panel, out_dir: Path) -> Path:
    """Draw ``panel`` to ``out_dir/<name>.png``; returns the path."""
    import matplotlib.pyplot as plt

    cols = panel.columns
    if panel.kind == "series":
        names = _series_names(panel, ("x",))
        fig, axes = plt.subplots(len(names), 1, figsize=(9.0, 1.9 * len(names) + 0.6), dpi=_DPI, sharex=True,
                                 squeeze=False)  # fmt: skip
        for ax, name, colour in zip(axes[:, 0], names, _COLOURS * 4, strict=False):
            ys = cols[name]
            style = panel.extra.get("styles", {}).get(name, "line")
            if style == "bar":
                ax.bar(cols["x"], ys, color=colour, width=0.8)
            else:
                ax.plot(cols["x"], ys, color=colour, lw=1.2, marker="." if len(ys) < 200 else None)
            ax.set_ylabel(panel.extra.get("labels", {}).get(name, name), fontsize=8)
            ax.grid(alpha=0.3)
        axes[-1, 0].set_xlabel(panel.xlabel)
        if all(isinstance(x, int) and not isinstance(x, bool) for x in cols["x"]):  # steps: no tick at 0.5
            from matplotlib.ticker import MaxNLocator

            axes[-1, 0].xaxis.set_major_locator(MaxNLocator(integer=True))
        fig.suptitle(panel.title)
    else:
        size = (
            (6.4, max(3.0, 0.32 * len(cols.get("label", [])) + 1.2)) if panel.kind == "barh" else (6.4, 3.6)
        )
        fig, ax = _figure(size)
        if panel.kind == "hist":
            if not cols["count"]:
                _empty(ax, "no values")
            else:
                widths = [hi - lo for lo, hi in zip(cols["bin_lo"], cols["bin_hi"], strict=True)]
                ax.bar(cols["bin_lo"], cols["count"], width=widths, align="edge", color=_COLOURS[0],
                       edgecolor="white", linewidth=0.5)  # fmt: skip
                if panel.log_x:
                    ax.set_xscale("log")
        elif panel.kind in ("bar", "barh"):
            names = _series_names(panel, ("label",))
            labels = cols["label"]
            # a share (of entries that fit a crop) of 0 is an answer, not a lack of data: drawn
            shares = panel.extra.get("share") and all(
                isinstance(v, int | float) and v == v for n in names for v in cols[n]
            )
            if not labels or not (shares or any(any(v for v in cols[n]) for n in names)):
                _empty(ax, panel.caption or "nothing to show")
            else:
                import numpy as np

                pos = np.arange(len(labels))
                width = 0.8 / len(names)
                for i, (name, colour) in enumerate(zip(names, _COLOURS, strict=False)):
                    offset = (i - (len(names) - 1) / 2) * width
                    if panel.kind == "bar":
                        ax.bar(pos + offset, cols[name], width=width, label=name, color=colour)
                    else:
                        ax.barh(pos + offset, cols[name], height=width, label=name, color=colour)
                if panel.kind == "bar":
                    ax.set_xticks(pos, labels, rotation=20 if max(len(str(x)) for x in labels) > 8 else 0,
                                  ha="right" if max(len(str(x)) for x in labels) > 8 else "center")  # fmt: skip
                else:
                    ax.set_yticks(pos, labels, fontsize=8)
                    ax.invert_yaxis()
                if len(names) > 1:
                    ax.legend(fontsize=8)
                if panel.extra.get("log_value"):
                    (ax.set_yscale if panel.kind == "bar" else ax.set_xscale)("log")
                if shares:  # 0 … 1, each bar's value written on it
                    ax.set_ylim(0, 1.1)
                    for container in ax.containers:
                        ax.bar_label(container, fmt="%.2f", fontsize=8)
        else:  # pragma: no cover - kinds are a closed set
            raise ValueError(f"unknown panel kind {panel.kind}")
        _integer_counts(ax, panel)
        ax.set_title(panel.title)
        ax.set_xlabel(panel.xlabel)
        ax.set_ylabel(panel.ylabel)
        ax.grid(alpha=0.3, axis="y" if panel.kind != "barh" else "x")
    path = out_dir / f"{panel.name}.png"
    try:
        fig.tight_layout()
        fig.savefig(path)
    finally:  # an unwritable directory must not leave the figure open
        plt.close(fig)
    log.debug("wrote %s", path)
    return path
