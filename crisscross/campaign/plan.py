"""Plan a campaign from a pilot round: how many items and raters reach the precision wanted, at what cost.

From the pilot's judgments (real, or the simulated panel's) each rating type gets its estimates
(:func:`estimate_pilot`): one rater's spread ``rater_sd`` (the pooled within-item standard
deviation), the spread of the items' true scores ``item_sd`` (the between-item variance less the
raters' share of it), the positive rate, and the median seconds per judgment.  The half widths of
the confidence intervals a design (``items`` × ``replicas``) gives then follow:

* an item's score: ``z · rater_sd / sqrt(replicas)``;
* the positive rate: Wilson's interval at the pilot's rate (Wald's ``z · sqrt(p (1 - p) / items)`` where ``p`` is moderate);
* a model's Spearman with the human means (CxC's bootstrap comparison): Fisher's ``z`` interval with
  Bonett and Wright's variance ``(1 + ρ²/2) / (items - 3)`` around ``ρ = expected_spearman``;
* Krippendorff's interval alpha: no closed form, so ``resamples`` panels of the design are drawn
  from the estimates (normal item scores, normal rater noise) and ``z`` times the standard deviation
  of their alphas is taken (:func:`interval_alpha`, the complete-design formula).

:func:`plan_campaign` inverts them: the fewest replicas for the item target, the fewest items for
the positive-rate, alpha and Spearman targets, what that costs in judgments, rater-hours and money,
and, for a budget of judgments, what it buys at those replicas.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np
import pandas as pd

from crisscross.aggregate.plots import png_bytes
from crisscross.campaign.replication import normal_quantile
from crisscross.core import io
from crisscross.core.rng import generator
from crisscross.core.settings import setting
from crisscross.tasktypes import default_thresholds, rated_type_names


@dataclass(frozen=True)
class PlanSettings:
    """``plan:`` in params: the precision wanted, the pay, the budget."""

    confidence: float = setting(0.95, low=0.5, high=1.0, open_range=True)
    item_half_width: float = setting(0.75, low=0.0, open_range=True)  # ± on an item's 0–5 score (CxC's five raters: about 0.7)
    positive_rate_half_width: float = setting(0.02, low=0.0, open_range=True)
    alpha_half_width: float = setting(0.05, low=0.0, open_range=True)
    spearman_half_width: float = setting(0.03, low=0.0, open_range=True)
    expected_spearman: float = setting(0.6, low=-1.0, high=1.0, open_range=True)  # a model's Spearman with the human means
    max_replicas: int = setting(10, low=2)
    pay_per_hour: float = setting(12.0, low=0.0)
    currency: str = "USD"
    budget_judgments: int = setting(0, low=0)  # 0: no budget; else what it buys is planned too
    resamples: int = setting(400, low=20)


@dataclass(frozen=True)
class Pilot:
    """One task type's estimates from the pilot."""

    task_type: str
    items: int
    judgments: int
    rater_sd: float
    item_sd: float
    mean: float
    positive_rate: float
    seconds_per_judgment: float


def estimate_pilot(judgments: pd.DataFrame) -> dict[str, Pilot]:
    """Per rating type (``judgments``: item_id, task_type, score, seconds): the pilot's estimates.
    Items need two judgments to say anything of the raters' spread."""
    out = {}
    for kind, rows in judgments[judgments["task_type"].isin(rated_type_names())].groupby("task_type", sort=True):
        per_item = rows.groupby("item_id")["score"]
        counts, means, variances = per_item.size(), per_item.mean(), per_item.var(ddof=1)
        repeated = counts >= 2
        if repeated.sum() < 2:
            raise ValueError(
                f"{kind}: the pilot needs items with two or more judgments to estimate the raters' spread, has {int(repeated.sum())}"
            )
        rater_var = float(np.average(variances[repeated], weights=counts[repeated] - 1))
        between = float(means.var(ddof=1)) - rater_var * float((1 / counts).mean())
        seconds = rows["seconds"].dropna()
        out[kind] = Pilot(
            kind,
            int(len(counts)),
            int(len(rows)),
            math.sqrt(rater_var),
            math.sqrt(max(between, 0.0)),
            float(means.mean()),
            float((means >= default_thresholds()[kind]).mean()),
            float(seconds.median()) if len(seconds) else math.nan,
        )
    return out


def _z(confidence: float) -> float:
    return normal_quantile(0.5 + confidence / 2)


def item_half_width(pilot: Pilot, replicas: int, confidence: float) -> float:
    return _z(confidence) * pilot.rater_sd / math.sqrt(replicas)


def positive_rate_half_width(pilot: Pilot, items: int, confidence: float) -> float:
    """Wilson's half width at the pilot's rate: Wald's where the rate is moderate, and not zero for
    a pilot without positives (or without negatives), which Wald's would promise from two items."""
    z, p = _z(confidence), pilot.positive_rate
    return z / (1 + z**2 / items) * math.sqrt(p * (1 - p) / items + z**2 / (4 * items**2))


def spearman_half_width(rho: float, items: int, confidence: float) -> float:
    if items <= 3:
        return math.inf
    spread = _z(confidence) * math.sqrt((1 + rho**2 / 2) / (items - 3))
    return (math.tanh(math.atanh(rho) + spread) - math.tanh(math.atanh(rho) - spread)) / 2


def interval_alpha(scores: np.ndarray) -> np.ndarray:
    """Krippendorff's interval alpha of complete designs (``scores``: designs × items × replicas):
    ``1 - D_o / D_e`` with ``D_o`` the within-item and ``D_e`` the overall pairwise squared difference."""
    _, n, r = scores.shape
    total = n * r
    within = ((scores - scores.mean(axis=2, keepdims=True)) ** 2).sum(axis=(1, 2))
    overall = ((scores - scores.mean(axis=(1, 2), keepdims=True)) ** 2).sum(axis=(1, 2))
    observed = 2 * r / (r - 1) * within / total
    expected = 2 * overall / (total - 1)
    return 1 - observed / expected


def alpha_half_width(pilot: Pilot, items: int, replicas: int, settings: PlanSettings, seed: int) -> tuple[float, float]:
    """The expected alpha and its interval's half width, from ``resamples`` simulated designs."""
    rng = generator(seed, "plan-alpha", pilot.task_type, str(items), str(replicas))
    true = pilot.mean + pilot.item_sd * rng.standard_normal((settings.resamples, items, 1))
    alphas = interval_alpha(true + pilot.rater_sd * rng.standard_normal((settings.resamples, items, replicas)))
    return float(np.median(alphas)), _z(settings.confidence) * float(alphas.std(ddof=1))  # steadier than the draws' extreme quantiles


def _fewest(width_at: Callable[[int], float], target: float, low: int, high: int) -> int | None:
    """The smallest count in [low, high] whose width is at most ``target`` (widths fall as counts grow)."""
    if width_at(high) > target:
        return None
    while low < high:
        middle = (low + high) // 2
        low, high = (middle + 1, high) if width_at(middle) > target else (low, middle)
    return low


ITEMS_CEILING = 1_000_000


@dataclass(frozen=True)
class AlphaCurve:
    """Alpha at a design's replicas: its expected value, and its half width measured at ``items``,
    which falls as ``1 / sqrt(items)`` for other counts."""

    expected: float
    width: float
    items: int

    def at(self, items: int) -> float:
        return self.width * math.sqrt(self.items / items)

    @classmethod
    def simulate(cls, pilot: Pilot, replicas: int, settings: PlanSettings, seed: int) -> AlphaCurve:
        items = max(min(pilot.items, 2000), 50)
        return cls(*alpha_half_width(pilot, items, replicas, settings, seed), items)


def plan_type(pilot: Pilot, settings: PlanSettings, seed: int) -> dict[str, object]:
    """One type's design: replicas and items for every target, and what the design costs."""
    c = settings.confidence
    replicas = _fewest(lambda r: item_half_width(pilot, r, c), settings.item_half_width, 2, settings.max_replicas)  # agreement needs two
    planned_replicas = replicas or settings.max_replicas
    alpha = AlphaCurve.simulate(pilot, planned_replicas, settings, seed)
    needs = {
        "positive_rate": _fewest(lambda n: positive_rate_half_width(pilot, n, c), settings.positive_rate_half_width, 2, ITEMS_CEILING),
        "spearman": _fewest(
            lambda n: spearman_half_width(settings.expected_spearman, n, c), settings.spearman_half_width, 4, ITEMS_CEILING
        ),
        "alpha": _fewest(alpha.at, settings.alpha_half_width, 2, ITEMS_CEILING),
    }
    items = max((n for n in needs.values() if n is not None), default=pilot.items)
    planned: dict[str, object] = {
        "pilot": asdict(pilot),
        "replicas_for_item_target": replicas,
        "items_for": needs,
        "alpha_curve": asdict(alpha),
        "design": design(pilot, items, planned_replicas, settings, alpha),
    }
    if settings.budget_judgments:
        affordable = settings.budget_judgments // planned_replicas
        planned["budget"] = (
            design(pilot, affordable, planned_replicas, settings, alpha)
            if affordable >= 4
            else {
                "items": affordable,
                "note": f"{settings.budget_judgments} judgments buy fewer than 4 items at {planned_replicas} replicas",
            }
        )
    return planned


def design(pilot: Pilot, items: int, replicas: int, settings: PlanSettings, alpha: AlphaCurve) -> dict[str, object]:
    """What ``items`` × ``replicas`` costs and the half widths it gives."""
    c = settings.confidence
    judgments = items * replicas
    hours = judgments * pilot.seconds_per_judgment / 3600 if math.isfinite(pilot.seconds_per_judgment) else None  # a pilot without times
    return {
        "items": items,
        "replicas": replicas,
        "judgments": judgments,
        "rater_hours": None if hours is None else round(hours, 2),
        "cost": None if hours is None else round(hours * settings.pay_per_hour, 2),
        "currency": settings.currency,
        "half_widths": {
            "item_score": round(item_half_width(pilot, replicas, c), 4),
            "positive_rate": round(positive_rate_half_width(pilot, items, c), 4),
            "alpha": round(alpha.at(items), 4),
            "spearman": round(spearman_half_width(settings.expected_spearman, items, c), 4),
        },
        "expected_alpha": round(alpha.expected, 4),
    }


def plan_campaign(judgments: pd.DataFrame, settings: PlanSettings, seed: int) -> dict[str, object]:
    """The plan of every rating type in the pilot, and the totals."""
    types = {kind: plan_type(pilot, settings, seed) for kind, pilot in estimate_pilot(judgments).items()}
    designs = [t["design"] for t in types.values()]
    timed = all(d["rater_hours"] is not None for d in designs)
    return {
        "settings": asdict(settings),
        "types": types,
        "total": {
            "judgments": sum(d["judgments"] for d in designs),
            "rater_hours": round(sum(d["rater_hours"] for d in designs), 2) if timed else None,
            "cost": round(sum(d["cost"] for d in designs), 2) if timed else None,
            "currency": settings.currency,
        },
    }


def plan_from_pilot(judgments_path: str, settings: PlanSettings, seed: int) -> list[tuple[dict[str, object], bool]]:
    """The plan stage's whole-table step: the pilot's judgments read, the plan, and whether the
    pilot was simulated (the plan and its plot say so)."""
    judgments = io.read_parquet(judgments_path).to_pandas()
    return [(plan_campaign(judgments, settings, seed), bool(judgments["simulated"].any()))]


def power_curves_png(plan: Mapping[str, Any], *, simulated: bool = False) -> bytes:
    """Per type: the item score's half width against replicas, and the positive rate's, alpha's and
    the Spearman's against items, with the targets (dashed) and the planned design (dotted)."""
    from matplotlib.figure import Figure

    settings = PlanSettings(**plan["settings"])
    kinds = list(plan["types"])
    figure = Figure(figsize=(8.4, 3.6 * max(len(kinds), 1)), dpi=100)
    for row, kind in enumerate(kinds):
        entry = plan["types"][kind]
        pilot, alpha, d = Pilot(**entry["pilot"]), AlphaCurve(**entry["alpha_curve"]), entry["design"]
        left, right = figure.add_subplot(len(kinds), 2, 2 * row + 1), figure.add_subplot(len(kinds), 2, 2 * row + 2)
        replicas = np.arange(2, settings.max_replicas + 1)
        left.plot(replicas, [item_half_width(pilot, int(r), settings.confidence) for r in replicas], marker="o")
        left.axhline(settings.item_half_width, linestyle="--", color="grey")
        left.axvline(d["replicas"], linestyle=":", color="black")
        left.set(title=f"{kind}: an item's score", xlabel="replicas", ylabel=f"± ({settings.confidence:.0%} interval)")
        items = np.unique(np.geomspace(10, max(10 * d["items"], 1000), 60).astype(int))
        curves = {
            "positive rate": (
                [positive_rate_half_width(pilot, int(n), settings.confidence) for n in items],
                settings.positive_rate_half_width,
            ),
            "alpha": ([alpha.at(int(n)) for n in items], settings.alpha_half_width),
            "Spearman": (
                [spearman_half_width(settings.expected_spearman, int(n), settings.confidence) for n in items],
                settings.spearman_half_width,
            ),
        }
        for label, (widths, target) in curves.items():
            (line,) = right.plot(items, widths, label=label)
            right.axhline(target, linestyle="--", color=line.get_color(), linewidth=0.8)
        right.axvline(d["items"], linestyle=":", color="black")
        right.set(xscale="log", yscale="log", title=f"{kind}: at {d['replicas']} replicas", xlabel="items", ylabel="±")
        right.legend(fontsize="small")
    if simulated:
        figure.suptitle("from a SIMULATED pilot, not people")
    figure.tight_layout()
    return png_bytes(figure)
