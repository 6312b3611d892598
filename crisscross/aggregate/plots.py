"""Figures of the aggregate stage as PNG bytes: score distributions (CxC Figure 3) and per-item
standard deviations (CxC appendix Figure 2).

Figures are built on :class:`matplotlib.figure.Figure` with an Agg canvas (no pyplot, no global
figure state, no display) and saved without the PNG ``Software`` text, so the same input always
gives the same bytes and DVC sees an unchanged figure as unchanged.  One panel per task type, one
step histogram per sampling method and, when a panel has several methods, the filled ``all``
histogram behind them; each legend entry says how many items it counts.  Anything built from
simulated judgments says so in its title.

Empty input gives a figure that says "no data" instead of an error: a round whose items all went
unjudged still gets its report, and the figure says why it is empty.  Missing columns, and values
a histogram would silently drop (null or out-of-range scores, negative deviations), are errors.
"""

from __future__ import annotations

import io
import math
from typing import TYPE_CHECKING

import numpy as np
import pandas as pd

from crisscross.tasktypes import type_names
from crisscross.tasktypes.base import SCORE_MAX, SCORE_MIN

if TYPE_CHECKING:  # matplotlib (0.3 s) loads when a figure is drawn, not with the stage command
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

SCORE_BIN_WIDTH = 0.5
STD_BIN_WIDTH = 0.1
STD_MIN_RANGE = 2.5  # std axis spans at least 0–2.5 (the largest population std on a 0–5 scale)
ALL = "all"
SIMULATED_NOTE = "SIMULATED judgments, not people"
PANEL_SIZE = (4.2, 4.0)  # inches per task-type panel
DPI = 100


def score_distribution_figure(rated: pd.DataFrame, *, simulated: bool = False, title: str = "Aggregated scores") -> Figure:
    """Histogram of ``agg_score`` (bins of 0.5 over 0–5) per ``task_type`` and ``sampling_method``."""
    _require(rated, ("task_type", "sampling_method", "agg_score"), "rated")
    scores = pd.to_numeric(rated["agg_score"], errors="coerce")
    bad = scores.isna() | (scores < SCORE_MIN) | (scores > SCORE_MAX)
    if bad.any():
        example = rated.loc[bad, "agg_score"].iloc[0]
        raise ValueError(
            f"rated has {int(bad.sum())} agg_score values that are null, non-numeric or outside "
            f"[{SCORE_MIN}, {SCORE_MAX}] (first: {example!r})"
        )
    frame = rated.assign(value=scores)
    edges = np.arange(SCORE_MIN, SCORE_MAX + SCORE_BIN_WIDTH / 2, SCORE_BIN_WIDTH)
    return _histograms(frame, edges, "aggregated score", "items", title, simulated, notes={})


def item_std_figure(stats: pd.DataFrame, *, simulated: bool = False, title: str = "Standard deviation of ratings per item") -> Figure:
    """Histogram of per-item ``std`` (bins of 0.1) per ``task_type``, and per ``sampling_method``
    when that column is present.  Items without a std (fewer than two ratings) are not drawn;
    each panel says how many there were."""
    _require(stats, ("task_type", "std"), "stats")
    values = pd.to_numeric(stats["std"], errors="coerce")
    negative = values < 0
    if negative.any():
        raise ValueError(f"stats has {int(negative.sum())} negative std values (first: {values[negative].iloc[0]})")
    frame = stats.assign(value=values)
    if "sampling_method" not in frame.columns:
        frame = frame.assign(sampling_method=ALL)
    undefined = frame[frame["value"].isna()].groupby("task_type").size()
    notes = {str(t): f"{n:,} items without std not shown" for t, n in undefined.items()}
    frame = frame[frame["value"].notna()]
    top = max(STD_MIN_RANGE, math.ceil(float(frame["value"].max()) / 0.5) * 0.5) if len(frame) else STD_MIN_RANGE
    edges = np.linspace(0.0, top, round(top / STD_BIN_WIDTH) + 1)
    return _histograms(frame, edges, "std of ratings", "items", title, simulated, notes)


def score_distribution_png(rated: pd.DataFrame, *, simulated: bool = False, title: str = "Aggregated scores") -> bytes:
    """:func:`score_distribution_figure` as PNG bytes."""
    return png_bytes(score_distribution_figure(rated, simulated=simulated, title=title))


def item_std_png(stats: pd.DataFrame, *, simulated: bool = False, title: str = "Standard deviation of ratings per item") -> bytes:
    """:func:`item_std_figure` as PNG bytes."""
    return png_bytes(item_std_figure(stats, simulated=simulated, title=title))


def png_bytes(figure: Figure) -> bytes:
    """The figure as PNG, without the Software text so the bytes depend only on the content."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    FigureCanvasAgg(figure)  # renders with Agg whatever pyplot's backend is
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png", metadata={"Software": None})
    return buffer.getvalue()


def _require(frame: pd.DataFrame, columns: tuple[str, ...], what: str) -> None:
    missing = [c for c in columns if c not in frame.columns]
    if missing:
        raise ValueError(f"{what} lacks columns {missing}; it has {sorted(map(str, frame.columns))}")


def _panel_order(task_types: set[str]) -> list[str]:
    """Known task types in their canonical order, then any others alphabetically."""
    return [t for t in type_names() if t in task_types] + sorted(task_types - set(type_names()))


def _histograms(
    frame: pd.DataFrame,
    edges: np.ndarray,
    xlabel: str,
    ylabel: str,
    title: str,
    simulated: bool,
    notes: dict[str, str],
) -> Figure:
    """One panel per task type (``value`` column), one series per sampling method."""
    from matplotlib import colormaps
    from matplotlib.figure import Figure

    frame = frame.assign(task_type=frame["task_type"].astype(str), sampling_method=frame["sampling_method"].astype(str))
    panels = _panel_order(set(frame["task_type"]) | set(notes))
    methods = sorted(set(frame["sampling_method"]) - {ALL})
    palette = colormaps["tab10"]
    colours = {m: palette(i % palette.N) for i, m in enumerate(methods)}
    figure = Figure(figsize=(PANEL_SIZE[0] * max(1, len(panels)), PANEL_SIZE[1]), dpi=DPI, layout="constrained")
    figure.suptitle(f"{title} — {SIMULATED_NOTE}" if simulated else title)
    if not panels:
        axes = figure.subplots()
        axes.text(0.5, 0.5, "no data", ha="center", va="center", fontsize=14, transform=axes.transAxes)
        axes.set_axis_off()
        return figure
    for axes, task in zip(np.atleast_1d(figure.subplots(1, len(panels), sharex=True)), panels, strict=True):
        _panel(axes, frame[frame["task_type"] == task], edges, colours)
        axes.set_title(f"{task}\n{notes[task]}" if task in notes else task)
        axes.set_xlabel(xlabel)
        axes.set_ylabel(ylabel)
    return figure


def _panel(axes: Axes, rows: pd.DataFrame, edges: np.ndarray, colours: dict[str, tuple[float, ...]]) -> None:
    values = rows["value"].to_numpy(dtype=np.float64)
    groups = sorted(set(rows["sampling_method"]) - {ALL})
    if len(groups) != 1:
        counts, _ = np.histogram(values, bins=edges)
        axes.stairs(counts, edges, fill=True, color="0.85", label=f"{ALL} (n={len(values):,})")
    for method in groups:
        subset = rows.loc[rows["sampling_method"] == method, "value"].to_numpy(dtype=np.float64)
        counts, _ = np.histogram(subset, bins=edges)
        axes.stairs(counts, edges, color=colours[method], linewidth=1.6, label=f"{method} (n={len(subset):,})")
    axes.set_xlim(edges[0], edges[-1])
    axes.set_ylim(bottom=0)
    axes.legend(fontsize="small", frameon=False, loc="upper center", bbox_to_anchor=(0.5, -0.22))
