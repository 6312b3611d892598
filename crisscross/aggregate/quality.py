"""Rater quality control: per-rater statistics, exclusion rules, and the split they imply.

A round's judgments go through three steps before aggregation:

1. :func:`rater_report` — one row per (worker, task type), since a rater's STS and VERIFY work
   are different skills: judgments, gold accuracy, leave-one-out correlation with the other
   raters, median seconds per item, straight-lining; then the exclusion rules of
   :class:`QualityRules`, with every failed rule listed in ``reasons``;
2. :func:`split_by_exclusion` — the judgments of excluded (worker, task type) pairs leave, with
   a ``reason`` and ``detail`` for the quarantine, so nothing is silently lost;
3. :func:`split_gold` — gold judgments leave too: they served quality control, but gold items
   are planted checks, not part of the dataset, so they are never aggregated.

Statistics (one pass; an excluded rater still counts in the others' leave-one-out means):

* gold accuracy over the gold items judged: a rating passes a positive gold when
  ``score >= positive_min_score`` and a negative one when ``score <= negative_max_score``; a
  VERIFY answer passes a positive gold when it is "100% yes" or "partially yes", a negative one
  when it is "mostly no" or "100% no";
* leave-one-out correlation: Pearson's r between the rater's values and the mean of the OTHER
  raters of the same items, over non-gold items with at least one other rating (gold items are
  easy by design and would inflate it); VERIFY answers count as 3 ("100% yes") down to 0
  ("100% no"), BISON answers as 1 or 0 (CHOOSE: a caption or none; VERIFY-TRIPLE: target or
  not).  NaN when the rater's or the others' values do not vary (BISON's single CHOOSE rater);
* median seconds per item, over judgments whose time is known;
* straight-lining: the share of the rater's judgments equal to their most frequent value.

Straight-lining and the leave-one-out correlation are reported but are no exclusion rules for
BISON's types: a careful rater answers "target" (or picks a caption) for nearly every item, as the
paper's 95% yield shows, so the values hardly vary and a good rater's r is low on 0/1 answers
(on the demo a rater with 31 of 36 "target" answers had r = 0.14).

A statistic is used for exclusion only when it rests on enough judgments (``min_gold_items``
gold items for gold accuracy, ``min_judgments`` for the others) and is not NaN, so a rater with
little work is kept rather than judged on noise.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np
import pandas as pd

from crisscross.aggregate.aggregators import sorted_codes, task_type_codes
from crisscross.core.settings import setting, settings_from_params
from crisscross.formats.schema import GOLD_NEGATIVE, GOLD_POSITIVE, NOT_GOLD
from crisscross.tasktypes import task_type
from crisscross.tasktypes.base import SCORE_MAX, SCORE_MIN

JUDGMENT_COLUMNS = ("item_id", "task_type", "worker", "score", "answer", "seconds")
EXCLUDED_RATER = "excluded-rater"  # quarantine reason of an excluded rater's judgments
CONSTANT_STD = 1e-9  # values whose spread is below this do not vary (no correlation)


@dataclass(frozen=True)
class QualityRules:
    """Thresholds of the exclusion rules, with their defaults.

    * ``positive_min_score`` 3, ``negative_max_score`` 2: on the 0–5 scale, 3 and above is the
      CxC positive range ("roughly equivalent"), 2 and below clearly dissimilar;
    * ``min_gold_accuracy`` 0.7: ECCV Caption re-checks any HIT with a wrong gold answer; with
      two gold items per batch, 0.7 tolerates an occasional slip but not guessing;
    * ``min_loo_correlation`` 0.3: careful raters agree with the others far above it, a rater
      answering at random is near 0;
    * ``min_median_seconds`` 2: CxC's raters took 17–37 s per item; under 2 s nobody reads
      a pair;
    * ``max_straightline_share`` 0.9: 90% of judgments on one value is not a judgment of each pair;
    * ``min_gold_items`` 5 and ``min_judgments`` 20: below these, a statistic is not used.
    """

    positive_min_score: float = setting(3.0, low=SCORE_MIN, high=SCORE_MAX)
    negative_max_score: float = setting(2.0, low=SCORE_MIN, high=SCORE_MAX)
    min_gold_accuracy: float = setting(0.7, low=0.0, high=1.0)
    min_loo_correlation: float = setting(0.3, low=-1.0, high=1.0)
    min_median_seconds: float = setting(2.0, low=0.0)
    max_straightline_share: float = setting(0.9, low=0.0, high=1.0)
    min_gold_items: int = setting(5, low=0)
    min_judgments: int = setting(20, low=1)

    @classmethod
    def from_params(cls, params: Mapping[str, float] | None) -> QualityRules:
        """Rules from a params mapping (``aggregate.rules``); keys left out keep their default."""
        return settings_from_params(cls, params or {}, "rules", "")


# --------------------------------------------------------------------------- inputs


def _check_judgments(judgments: pd.DataFrame) -> tuple[np.ndarray, pd.Index, np.ndarray]:
    """Task type codes, their sorted names, and the value of every judgment as its type counts it
    (``TaskType.qc_values``: a score, a VERIFY answer as 3 ("100% yes") down to 0, a BISON answer
    as 1 or 0); a judgment its type would not store is an error."""
    if not isinstance(judgments, pd.DataFrame):
        raise TypeError(f"judgments must be a pandas DataFrame, got {type(judgments).__name__}")
    missing = [c for c in JUDGMENT_COLUMNS if c not in judgments.columns]
    if missing:
        raise ValueError(f"judgments lack column(s) {', '.join(missing)} (has: {', '.join(map(str, judgments.columns))})")
    for column in ("item_id", "worker"):
        null = judgments[column].isna().to_numpy()
        if null.any():
            raise ValueError(f"{int(null.sum())} of {len(judgments)} judgments have no {column}")
    kind, kinds = task_type_codes(judgments["task_type"])
    score = judgments["score"].to_numpy(dtype=np.float64, na_value=np.nan)
    value = np.full(len(judgments), np.nan)
    for code, name in enumerate(kinds):
        rows = kind == code
        info = task_type(name)
        answers = judgments["answer"][rows]
        if info.scale is not None:
            bad = ~((score[rows] >= info.scale.low) & (score[rows] <= info.scale.high))
            wanted = f"no score in [{info.scale.low:g}, {info.scale.high:g}]"
        else:
            bad = ~answers.map(info.fits).to_numpy(dtype=bool)
            wanted = f"an answer that is not {info.wanted}"
        if bad.any():
            raise ValueError(
                f"{int(bad.sum())} {name} judgments have {wanted}, first at items {judgments['item_id'].to_numpy()[rows][bad][:3].tolist()}"
            )
        value[rows] = info.qc_values(score[rows], answers)
    return kind, kinds, value


def _gold_passed(
    judgments: pd.DataFrame, kind: np.ndarray, kinds: pd.Index, value: np.ndarray, positive: bool, rules: QualityRules
) -> np.ndarray:
    """Whether each judgment would pass a positive (or a negative) gold item, by its type's rule."""
    passed = np.zeros(len(judgments), dtype=bool)
    for code, name in enumerate(kinds):
        rows = kind == code
        passed[rows] = task_type(name).passes_gold(
            value[rows], judgments["answer"][rows], positive, rules.positive_min_score, rules.negative_max_score
        )
    return passed


def gold_items(gold: pd.DataFrame) -> pd.Series:
    """``gold`` ("positive"/"negative") by ``item_id``, from a frame with those two columns
    (the tasks table will do: its non-gold rows, gold = "", are left out)."""
    missing = [c for c in ("item_id", "gold") if c not in gold.columns]
    if missing:
        raise ValueError(f"gold table lacks column(s) {', '.join(missing)} (has: {', '.join(map(str, gold.columns))})")
    marked = gold[gold["gold"].fillna(NOT_GOLD) != NOT_GOLD]
    wrong = sorted(set(marked["gold"]) - {GOLD_POSITIVE, GOLD_NEGATIVE})
    if wrong:
        raise ValueError(f"gold values must be {GOLD_POSITIVE!r} or {GOLD_NEGATIVE!r} (or {NOT_GOLD!r}), got {wrong}")
    marked = marked.drop_duplicates(["item_id", "gold"])
    clash = marked["item_id"][marked["item_id"].duplicated()]
    if not clash.empty:
        raise ValueError(f"{clash.size} gold items are marked both positive and negative, e.g. {clash.iloc[:3].tolist()}")
    return pd.Series(marked["gold"].to_numpy(), index=pd.Index(marked["item_id"], name="item_id"), name="gold").sort_index()


# --------------------------------------------------------------------------- report


# rater_report's columns and their dtypes
RATER_COLUMNS = {
    "worker": object,
    "task_type": object,
    "judgments": np.int64,
    "gold_seen": np.int64,
    "gold_passed": np.int64,
    "gold_accuracy": np.float64,
    "loo_items": np.int64,
    "loo_correlation": np.float64,
    "seconds_known": np.int64,
    "median_seconds": np.float64,
    "straightline_share": np.float64,
    "excluded": bool,
    "reasons": object,
}


def rater_report(judgments: pd.DataFrame, gold: pd.DataFrame, rules: QualityRules | Mapping[str, float] | None = None) -> pd.DataFrame:
    """One row per (worker, task type), sorted by worker then task type, with the statistics of
    the module docstring, ``excluded`` and ``reasons`` (every failed rule, "; "-joined)."""
    rules = rules if isinstance(rules, QualityRules) else QualityRules.from_params(rules)
    if judgments.empty:  # a round nobody could judge (e.g. a text-only build's image tasks): no raters
        return pd.DataFrame({c: pd.Series(dtype=d) for c, d in RATER_COLUMNS.items()})
    kind, kind_names, value = _check_judgments(judgments)
    gold_of = gold_items(gold)
    worker, workers = sorted_codes(judgments["worker"], "worker")
    group_key = worker * len(kind_names) + kind
    keys, group = np.unique(group_key, return_inverse=True)
    size = keys.size
    n = np.bincount(group, minlength=size)
    item, _ = pd.factorize(judgments["item_id"])
    _refuse_repeats(judgments, item.astype(np.int64) * len(workers) + worker)

    # Gold accuracy.
    label = judgments["item_id"].map(gold_of).to_numpy(dtype=object, na_value=NOT_GOLD)
    positive, negative = label == GOLD_POSITIVE, label == GOLD_NEGATIVE
    passed_positive = _gold_passed(judgments, kind, kind_names, value, True, rules)
    passed_negative = _gold_passed(judgments, kind, kind_names, value, False, rules)
    is_gold = positive | negative
    gold_seen = np.bincount(group, weights=is_gold, minlength=size).astype(np.int64)
    gold_passed = np.bincount(group, weights=(positive & passed_positive) | (negative & passed_negative), minlength=size).astype(np.int64)

    # Leave-one-out correlation over non-gold items rated by others too.
    regular = ~is_gold
    per_item = np.bincount(item[regular], minlength=item.max() + 1)
    sums = np.bincount(item[regular], weights=value[regular], minlength=per_item.size)
    with_others = regular & (per_item[item] >= 2)
    x, g = value[with_others], group[with_others]
    others = (sums[item[with_others]] - x) / (per_item[item[with_others]] - 1)
    loo_items = np.bincount(g, minlength=size)
    loo = _pearson(x, others, g, loo_items)

    # Median seconds and straight-lining.
    seconds = pd.Series(judgments["seconds"].to_numpy(dtype=np.float64, na_value=np.nan)).groupby(group)
    seconds_known = seconds.count().reindex(range(size), fill_value=0).to_numpy()
    median_seconds = seconds.median().reindex(range(size)).to_numpy()
    straightline = _modal_share(group, value, n)

    report = pd.DataFrame(
        {
            "worker": workers.to_numpy()[keys // len(kind_names)],
            "task_type": kind_names.to_numpy()[keys % len(kind_names)],
            "judgments": n.astype(np.int64),
            "gold_seen": gold_seen,
            "gold_passed": gold_passed,
            "gold_accuracy": np.divide(gold_passed, gold_seen, out=np.full(size, np.nan), where=gold_seen > 0),
            "loo_items": loo_items.astype(np.int64),
            "loo_correlation": loo,
            "seconds_known": seconds_known.astype(np.int64),
            "median_seconds": median_seconds,
            "straightline_share": straightline,
        }
    )
    reasons = _reasons(report, rules)
    report["excluded"] = reasons != ""
    report["reasons"] = reasons
    return report


def _refuse_repeats(judgments: pd.DataFrame, pair: np.ndarray) -> None:
    """A worker judges an item once; crisscross.annotate.validate keeps the first and rejects the others."""
    order = np.argsort(pair, kind="stable")
    repeated = order[1:][pair[order][1:] == pair[order][:-1]]
    if repeated.size:
        row = judgments.iloc[repeated[0]]
        raise ValueError(
            f"{repeated.size} judgments repeat a (worker, item) pair, e.g. worker {row['worker']!r} on item {row['item_id']!r}; "
            "deduplicate first (crisscross.annotate.validate.validate does)"
        )


def _pearson(x: np.ndarray, y: np.ndarray, group: np.ndarray, count: np.ndarray) -> np.ndarray:
    """Pearson's r of x and y within each group (two-pass, centred); NaN where either is constant."""
    size = count.size
    with np.errstate(invalid="ignore", divide="ignore"):
        dx = x - (np.bincount(group, weights=x, minlength=size) / count)[group]
        dy = y - (np.bincount(group, weights=y, minlength=size) / count)[group]
    sxx = np.bincount(group, weights=dx * dx, minlength=size)
    syy = np.bincount(group, weights=dy * dy, minlength=size)
    sxy = np.bincount(group, weights=dx * dy, minlength=size)
    varies = (sxx > count * CONSTANT_STD**2) & (syy > count * CONSTANT_STD**2)
    return np.divide(sxy, np.sqrt(sxx * syy), out=np.full(size, np.nan), where=varies)


def _modal_share(group: np.ndarray, value: np.ndarray, n: np.ndarray) -> np.ndarray:
    """Share of each group's judgments equal to its most frequent value."""
    code, distinct = pd.factorize(value)
    pairs, counts = np.unique(group.astype(np.int64) * len(distinct) + code, return_counts=True)
    owner = pairs // len(distinct)
    starts = np.flatnonzero(np.r_[True, owner[1:] != owner[:-1]])
    modal = np.zeros(n.size)
    modal[owner[starts]] = np.maximum.reduceat(counts, starts)
    return modal / n


def _variation_rules(kind: str) -> bool:
    """Whether straight-lining and the leave-one-out correlation may exclude a rater of ``kind``."""
    return task_type(kind).variation_rules


def _reasons(report: pd.DataFrame, rules: QualityRules) -> np.ndarray:
    """Every failed rule of every row, "; "-joined ("" when none fails)."""
    checks = [
        (
            (report["gold_seen"] >= rules.min_gold_items) & (report["gold_accuracy"] < rules.min_gold_accuracy),
            lambda r: (
                f"gold-accuracy {r.gold_accuracy:.2f} < {rules.min_gold_accuracy:g} ({r.gold_passed}/{r.gold_seen} gold items passed)"
            ),
        ),
        (
            (report["loo_items"] >= rules.min_judgments)
            & (report["loo_correlation"] < rules.min_loo_correlation)
            & report["task_type"].map(_variation_rules),
            lambda r: f"loo-correlation {r.loo_correlation:.2f} < {rules.min_loo_correlation:g} (over {r.loo_items} items)",
        ),
        (
            (report["seconds_known"] >= rules.min_judgments) & (report["median_seconds"] < rules.min_median_seconds),
            lambda r: f"median-seconds {r.median_seconds:.1f} < {rules.min_median_seconds:g} (over {r.seconds_known} timed judgments)",
        ),
        (
            (report["judgments"] >= rules.min_judgments)
            & (report["straightline_share"] > rules.max_straightline_share)
            & report["task_type"].map(_variation_rules),
            lambda r: f"straight-lining {r.straightline_share:.2f} of judgments on one value > {rules.max_straightline_share:g}",
        ),
    ]
    reasons = [[] for _ in range(len(report))]
    for failed, describe in checks:
        for i, row in zip(np.flatnonzero(failed.to_numpy()), report[failed.to_numpy()].itertuples(index=False), strict=True):
            reasons[i].append(describe(row))
    return np.array(["; ".join(r) for r in reasons], dtype=object)


# --------------------------------------------------------------------------- splits


def split_by_exclusion(judgments: pd.DataFrame, report: pd.DataFrame) -> tuple[pd.DataFrame, pd.DataFrame]:
    """``(kept, dropped)``: the judgments of raters the report keeps, and those of excluded
    (worker, task type) pairs with ``reason`` = ``excluded-rater`` and ``detail`` = who and why.

    Both keep the input's columns, index and row order.  A judgment whose (worker, task type)
    the report does not cover is an error: the report must come from the same judgments.
    """
    missing = [c for c in ("worker", "task_type", "excluded", "reasons") if c not in report.columns]
    if missing:
        raise ValueError(f"report lacks column(s) {', '.join(missing)}: pass the frame rater_report returned")
    key = pd.MultiIndex.from_frame(report[["worker", "task_type"]])
    if key.has_duplicates:
        raise ValueError("report has more than one row for some (worker, task_type): pass the frame rater_report returned")
    worker, workers = sorted_codes(judgments["worker"], "worker")
    kind, kinds = task_type_codes(judgments["task_type"])
    # One report row per distinct (worker, task type) of the judgments.
    pair, pair_row = np.unique(worker * len(kinds) + kind, return_inverse=True)
    found = key.get_indexer(pd.MultiIndex.from_arrays([workers.to_numpy()[pair // len(kinds)], kinds.to_numpy()[pair % len(kinds)]]))
    if (found < 0).any():
        absent = [(workers[p // len(kinds)], kinds[p % len(kinds)]) for p in pair[found < 0][:3]]
        raise ValueError(f"{int((found < 0).sum())} (worker, task_type) pairs of the judgments are not in the report, e.g. {absent}")
    row = found[pair_row]
    excluded = report["excluded"].to_numpy(dtype=bool)[row]
    dropped = judgments[excluded].copy()
    detail = (report["worker"].astype(str) + " " + report["task_type"].astype(str) + ": " + report["reasons"].astype(str)).to_numpy()
    dropped["reason"] = EXCLUDED_RATER
    dropped["detail"] = detail[row[excluded]]
    return judgments[~excluded], dropped


def split_gold(judgments: pd.DataFrame, gold: pd.DataFrame) -> tuple[pd.DataFrame, pd.DataFrame]:
    """``(regular, gold_judgments)``: gold judgments are for quality control only and must not
    be aggregated, since gold items are not part of the dataset.  Index and order are kept."""
    is_gold = judgments["item_id"].isin(gold_items(gold).index).to_numpy()
    return judgments[~is_gold], judgments[is_gold]
