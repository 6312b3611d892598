"""One annotation round, judgments → rated pairs: quality control, aggregation, agreement, positives.

Steps (each a function of :mod:`crisscross.aggregate.quality`, :mod:`crisscross.aggregate.aggregators`,
:mod:`crisscross.aggregate.agreement`):

1. the rater report over every judgment, gold included, and the exclusion it implies;
2. excluded raters' judgments leave (returned for the quarantine), then gold judgments leave
   (they served quality control; gold items are not part of the dataset);
3. per task type, one aggregator (``mean`` for ratings, as CxC; ``majority-vote`` for VERIFY
   answers by default) gives each item its ``agg_score`` or ``agg_label``, with ``n``, ``mean``
   and ``std`` of its raw ratings;
4. Krippendorff's alpha per task type (interval for ratings, ordinal for VERIFY answers, nominal
   for BISON's answers);
5. positives by each type's rule (``TaskType.positive``, with ``round_facts`` beside the counts):
   ratings by threshold (CxC §3: STS ≥ 3, SITS ≥ 3, SIS ≥ 2.5), VERIFY by the aggregated answer
   being "100% yes" or "partially yes" (ECCV Caption §3.3), CHOOSE when a caption was chosen, not
   "none", VERIFY-TRIPLE when every one of at least two verifiers answered "target" (BISON §4.1).

Duplicates rule: an item is an unordered pair for STS and SIS (:func:`crisscross.formats.schema.item_id`),
so judgments of a pair written in either order, or sampled into two batches, are *pooled* into
one item and aggregated together.  The report counts such pooled items per type — items with
more judgments than the type's usual number — and how many of them have judgments on both
sides of the positive threshold, so conflicts are visible rather than averaged away silently.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from crisscross.aggregate.aggregators import (
    AGGREGATORS,
    CATEGORICAL,
    RATINGS,
    long_frame,
    require_kind,
)
from crisscross.aggregate.agreement import krippendorff_alpha
from crisscross.aggregate.quality import (
    QualityRules,
    rater_report,
    split_by_exclusion,
    split_gold,
)
from crisscross.core import io
from crisscross.core.settings import setting
from crisscross.formats.schema import JUDGMENTS_SCHEMA, threshold_votes
from crisscross.tasktypes import default_thresholds, rated_type_names, task_types
from crisscross.tasktypes.base import SCORE_MAX, SCORE_MIN

KEPT_JUDGMENTS = "judgments_kept.parquet"  # the aggregate stage's judgments that rater quality control kept
RATED_COLUMNS = (
    "item_id",
    "task_type",
    "id_a",
    "id_b",
    "sampling_method",
    "agg_score",
    "agg_label",
    "n",
    "mean",
    "std",
    "positive",
    "simulated",
)


@dataclass(frozen=True)
class RoundSettings:
    rating_aggregator: str = "mean"
    answer_aggregator: str = "majority-vote"
    thresholds: Mapping[str, float] | None = setting(None, low=SCORE_MIN, high=SCORE_MAX, choices=rated_type_names)  # over each type's own
    rules: QualityRules = field(default_factory=QualityRules)


@dataclass(frozen=True)
class RoundResult:
    rated: pd.DataFrame  # RATED_COLUMNS, one row per non-gold item, sorted by task type then item
    kept: pd.DataFrame  # the judgments aggregated (QC passed, gold removed)
    excluded: pd.DataFrame  # judgments of excluded raters, with reason and detail
    raters: pd.DataFrame  # quality.rater_report
    facts: dict[str, Any]  # per task type: counts, alpha, pooled items


def checked(settings: RoundSettings) -> tuple[dict[str, float], dict[str, Any], QualityRules]:
    """The settings made usable: thresholds over the CxC defaults, the two aggregators, the QC
    rules; a ``ValueError`` (or an unknown name) says what is wrong before any work is done."""
    thresholds = {**default_thresholds(), **(settings.thresholds or {})}
    aggregators = {RATINGS: AGGREGATORS.create(settings.rating_aggregator), CATEGORICAL: AGGREGATORS.create(settings.answer_aggregator)}
    require_kind(aggregators[RATINGS], RATINGS)
    require_kind(aggregators[CATEGORICAL], CATEGORICAL)
    return thresholds, aggregators, settings.rules


def aggregate_round(judgments: pd.DataFrame, tasks: pd.DataFrame, settings: RoundSettings) -> RoundResult:
    """Judgments (JUDGMENTS_SCHEMA columns) of a tasks table → :class:`RoundResult`."""
    missing = sorted(set(JUDGMENTS_SCHEMA.names) - set(judgments.columns))
    if missing:
        raise ValueError(f"judgments lack column(s) {missing}")
    thresholds, aggregators, rules = checked(settings)
    raters = rater_report(judgments, tasks, rules)
    passed, excluded = split_by_exclusion(judgments, raters)
    kept, _ = split_gold(passed, tasks)
    items = tasks.drop_duplicates("item_id").set_index("item_id")  # gold items are not in `kept`
    simulated = kept.groupby("item_id")["simulated"].any()

    frames, facts = [], {}
    for info in task_types():
        long = long_frame(kept, info.name)
        if long.empty:
            continue
        aggregator = aggregators[info.aggregates].fit(long)
        stats = aggregator.stats_ if info.rated else pd.DataFrame({"n": long.groupby("task").size(), "mean": np.nan, "std": np.nan})
        frame = stats.rename_axis("item_id").join(items[["task_type", "id_a", "id_b", "sampling_method"]], how="left")
        if info.rated:
            frame["agg_score"] = aggregator.scores_.round(6)
            frame["agg_label"] = None
        else:
            frame["agg_score"] = np.nan
            frame["agg_label"] = aggregator.labels_
        frame["positive"] = info.positive(frame, long, thresholds.get(info.name))
        frame["simulated"] = simulated.reindex(frame.index).fillna(False).astype(bool)
        frames.append(frame.reset_index(names="item_id"))
        facts[info.name] = _facts(long, frame, thresholds.get(info.name), info.rated, info.alpha_level)
        facts[info.name].update(info.round_facts(frame, long))
    rated = pd.concat(frames, ignore_index=True)[list(RATED_COLUMNS)] if frames else pd.DataFrame(columns=list(RATED_COLUMNS))
    rated = rated.sort_values(["task_type", "item_id"], kind="stable").reset_index(drop=True)
    return RoundResult(rated, kept.reset_index(drop=True), excluded.reset_index(drop=True), raters, facts)


def _facts(long: pd.DataFrame, frame: pd.DataFrame, threshold: float | None, rated: bool, level: str) -> dict[str, Any]:
    alpha = krippendorff_alpha(long, level)
    usual = int(frame["n"].mode().min())
    pooled = frame["n"] > usual
    facts: dict[str, Any] = {
        "judgments": len(long),
        "items": len(frame),
        "workers": int(long["worker"].nunique()),
        "positives": int(frame["positive"].sum()),
        "alpha": io.strict_json(round(alpha.value, 6)),
        "alpha_level": alpha.level,
        "alpha_note": alpha.reason,
        "usual_judgments_per_item": usual,
        "pooled_items": int(pooled.sum()),
    }
    if rated:
        votes = threshold_votes(long["task"], long["label"], threshold)
        facts["judgments_at_or_above_threshold"] = int(votes["passing"].sum())
        facts["pooled_items_straddling_threshold"] = int((votes["straddles"] & pooled.reindex(votes.index)).sum())
        facts["threshold"] = threshold
    return facts
