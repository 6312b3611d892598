"""Evaluation results for a reader: the markdown report and the recall@K plot."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from crisscross.aggregate.plots import DPI, png_bytes
from crisscross.scoring.models import ALL, FOLDS, RATING_KINDS, TASK_KINDS
from crisscross.scoring.protocol import Results

if TYPE_CHECKING:  # matplotlib (0.3 s) loads when the plot is drawn, not with the stage command
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

RETRIEVAL_COLUMNS = (
    "R@1",
    "R@5",
    "R@10",
    "median_rank",
    "mean_rank",
    "mAP@R",
    "R-Precision",
    "queries",
    "queries_without_positive",
    "missing_positives",
)
PROTOCOL_TITLES = {ALL: "whole gallery (COCO 5K on the Karpathy test split)", FOLDS: "mean over image folds (COCO 1K: five folds)"}


def _cell(metric: str, value: Any) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "–"
    if metric in ("queries", "queries_without_positive", "missing_positives", "pairs", "pairs_outside_gallery", "triples"):
        return f"{int(value):,}"
    if metric in ("median_rank", "mean_rank"):
        return f"{value:.1f}"
    return f"{100 * value:.1f}"


def _table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> list[str]:
    return ["| " + " | ".join(header) + " |", "|" + "---|" * len(header), *("| " + " | ".join(r) + " |" for r in rows)]


def markdown(
    results: Results,
    agreement: Sequence[Mapping[str, Any]],
    positives: Sequence[Mapping[str, Any]],
    notes: Mapping[str, str],
    galleries: Mapping[str, Mapping[str, Any]] | None = None,
) -> str:
    """Tables per ground truth, protocol and direction; rates in percent, ranks as ranks.  A model
    scored on a sub-gallery (``galleries[model]["rule"] != "full"``) is named with it in every row."""
    lines = [
        "# Evaluation report",
        "",
        "Rates (R@K, mAP@R, R-Precision, PMRP, Spearman) are ×100; ranks are 1-based, ties pessimistic.",
        "",
    ]
    lines += [f"- {key}: {value}" for key, value in sorted(notes.items())]
    galleries = galleries or {}
    partial = {m: g["note"] for m, g in sorted(galleries.items()) if g.get("rule", "full") != "full"}
    lines += [f"- gallery of {model}: {note}" for model, note in partial.items()]

    def label(model: str) -> str:
        return f"{model} ({partial[model]})" if model in partial else model

    truths = sorted({t for by_truth in results.values() for t in by_truth})
    for truth in truths:
        lines += ["", f"## Ground truth `{truth}`"]
        for protocol in (ALL, FOLDS):
            for direction in TASK_KINDS:
                rows = []
                for model in sorted(results):
                    metrics = results[model].get(truth, {}).get(protocol, {})
                    if direction in metrics.get("R@1", {}):
                        extra = sorted(m for m in metrics if m.startswith("PMRP") and direction in metrics[m])
                        rows.append(
                            (label(model), [_cell(m, metrics.get(m, {}).get(direction)) for m in (*RETRIEVAL_COLUMNS, *extra)], extra)
                        )
                if rows:
                    extra = rows[0][2]
                    lines += ["", f"### {direction.upper()}, {PROTOCOL_TITLES[protocol]}", ""]
                    lines += _table(("model", *RETRIEVAL_COLUMNS, *extra), [(m, *cells) for m, cells, _ in rows])
        rating_rows = []
        for model in sorted(results):
            metrics = results[model].get(truth, {}).get(ALL, {})
            cells = []
            for kind in RATING_KINDS:
                mean = metrics.get("spearman", {}).get(kind)
                std = metrics.get("spearman_std", {}).get(kind)
                pairs = metrics.get("pairs", {}).get(kind)
                cells.append("–" if mean is None else f"{100 * mean:.1f} ± {100 * std:.1f} ({int(pairs):,} pairs)")
            if any(c != "–" for c in cells):
                rating_rows.append((label(model), *cells))
        if rating_rows:
            lines += ["", "### Bootstrap Spearman (CxC §4), mean ± std", ""]
            lines += _table(("model", *(k.upper() for k in RATING_KINDS)), rating_rows)
        bison_rows = [
            (label(m), _cell("accuracy", results[m][truth][ALL]["accuracy"]["bison"]))
            for m in sorted(results)
            if "bison" in results[m].get(truth, {}).get(ALL, {}).get("accuracy", {})
        ]
        if bison_rows:
            lines += ["", "### BISON accuracy", ""] + _table(("model", "accuracy"), bison_rows)
    if agreement:
        lines += ["", "## Agreement of model rankings (Kendall's tau-b)", ""]
        lines += _table(
            ("direction", "a", "b", "models", "tau-b"),
            [(a["direction"], a["a"], a["b"], str(a["models"]), f"{a['tau_b']:.3f}") for a in agreement],
        )
    if positives:
        lines += ["", "## Positives against verified positives (precision, recall)", ""]
        lines += _table(
            ("benchmark", "verified", "direction", "precision", "recall"),
            [(p["benchmark"], p["verified"], p["direction"], _cell("p", p["precision"]), _cell("r", p["recall"])) for p in positives],
        )
    return "\n".join(lines) + "\n"


def _figure(panels: int, title: str) -> tuple[Figure, list[Axes]]:
    from matplotlib.figure import Figure

    fig = Figure(figsize=(4.2 * panels, 3.6), dpi=DPI, layout="constrained")
    axes = list(fig.subplots(1, panels, squeeze=False)[0])
    fig.suptitle(title)
    return fig, axes


def recall_at_k_png(results: Results) -> bytes:
    """R@K against K (log scale) per retrieval direction, one line per model and ground truth."""
    curves = [
        (direction, f"{model} / {truth}", curve)
        for model in sorted(results)
        for truth in sorted(results[model])
        for direction, curve in results[model][truth].get(ALL, {}).get("recall_curve", {}).items()
    ]
    directions = [d for d in TASK_KINDS if any(c[0] == d for c in curves)]
    fig, axes = _figure(max(len(directions), 1), "Recall@K (whole gallery)")
    for ax, direction in zip(axes, directions, strict=False):
        for _, label, curve in (c for c in curves if c[0] == direction):
            ax.plot(range(1, len(curve) + 1), [100 * v for v in curve], label=label)
        ax.set_xscale("log")
        ax.set_xlabel("K")
        ax.set_ylabel("R@K (%)")
        ax.set_ylim(0, 100)
        ax.set_title(direction.upper())
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=7)
    if not directions:
        axes[0].text(0.5, 0.5, "no retrieval task was scored", ha="center", va="center")
        axes[0].set_axis_off()
    return png_bytes(fig)
