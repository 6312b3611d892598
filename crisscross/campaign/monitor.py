"""A running campaign as its operator sees it, read from the rater app's store while people rate.

One computation behind ``serve status`` and the app's operator page (:func:`campaign_report`):

* progress per task type against the plan (``plan.json``: each type's items × replicas), or,
  without one, against the loaded tasks' items × the round's replicas: items done (their type's
  replicas reached, or closed by the stop rule), judgments of rated items, batches done / assigned / open;
* the pace: judgments in the last hour, per hour since the first judgment (a campaign younger
  than an hour counts as one hour), and per clock hour for the last :data:`HOURS_SHOWN` hours;
* the items the stop rule closed, the judgments that saved against the ceiling, the latest closures
  with their reasons;
* the machine's share, from a triage output's ``decisions.parquet`` (who decided each item) when the
  round came out of one (:func:`machine_share`); without one no share is claimed;
* per rater and task type, :func:`crisscross.aggregate.quality.rater_report` under the round's QC
  rules: gold accuracy, leave-one-out agreement, median seconds per item, and the rules' verdict;
* the budget: the plan's judgments per type (its budget, else its design) at its cost per judgment,
  less the judgments people made (gold included: raters are paid for those too).

A statistic that does not exist yet (gold accuracy before any gold, agreement without others) is
None, never a number made up to fill the cell.

The app polls this every few seconds while people rate, in the workers that serve them, so the
counts (progress, pace, budget) come from the store's aggregate queries (:meth:`Store.judged_items`,
:meth:`Store.judgment_times`), never from reading every judgment; the QC report, which must read
them all, is kept between polls by a :class:`RaterReportCache` and rebuilt only after new judgments.
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import pandas as pd

from crisscross.aggregate.quality import QualityRules, rater_report
from crisscross.annotate.store import JudgedItems, JudgmentTimes, Store, TypeProgress, now_iso
from crisscross.campaign.replication import ReplicationSettings
from crisscross.campaign.triage import DECIDED_BY_MACHINE, DECIDED_BY_PEOPLE, UNDECIDED
from crisscross.formats.plan import budgets, designs

HOUR = 3600.0
HOURS_SHOWN = 12
RECENT_CLOSURES = 10
# The QC report is rebuilt at most once a minute, and so that building it takes at most 5% of the
# worker's time (at CxC's size one build takes seconds): a QC verdict moves over tens of judgments,
# so a minute-old report misleads nobody, while the counts beside it stay live.
QC_REFRESH = 60.0  # the app's default (AppConfig.qc_refresh)
QC_SHARE = 0.05
STORE_JUDGMENT_COLUMNS = ("worker", "batch_id", "position", "item_id", "task_type", "score", "answer", "seconds", "time")


@dataclass(frozen=True)
class CampaignInputs:
    """What the figures read besides the store: the plan the round follows, a triage's machine
    share (:func:`machine_share`), and the QC rules raters are judged by."""

    plan: Mapping[str, Any] | None = None
    triage: Mapping[str, Mapping[str, int]] | None = None
    rules: QualityRules = field(default_factory=QualityRules)


def machine_share(decisions: pd.DataFrame) -> dict[str, dict[str, int]]:
    """Per task type of a triage's ``decisions.parquet``: its items, those the machine labelled,
    those people decided, and those still open for people."""
    missing = [c for c in ("task_type", "decided_by") if c not in decisions.columns]
    if missing:
        raise ValueError(f"triage decisions lack column(s) {', '.join(missing)}: give a triage stage output")
    out = {}
    for kind, rows in decisions.groupby("task_type", sort=True):
        by = rows["decided_by"].value_counts()
        out[str(kind)] = {
            "items": len(rows),
            "machine": int(by.get(DECIDED_BY_MACHINE, 0)),
            "people": int(by.get(DECIDED_BY_PEOPLE, 0)),
            "open": int(by.get(UNDECIDED, 0)),
        }
    return out


class RaterReportCache:
    """The raters' QC report (:func:`rater_rows`) kept between polls.  It is the one figure that
    reads every judgment (leave-one-out agreement and medians need them; at CxC's 1.3 million
    judgments it takes seconds), so it is rebuilt only when the judgments changed (their count or
    latest time: judgments are only ever added), and then at most every :attr:`refresh` seconds
    and at most :attr:`share` of the time: the worker that rebuilds it also serves raters."""

    def __init__(self, refresh: float = QC_REFRESH, share: float = QC_SHARE) -> None:
        self.refresh = refresh
        self.share = share
        self._lock = threading.Lock()
        self._key: tuple[int, str | None] | None = None
        self._rows: list[dict[str, Any]] = []
        self._at = -math.inf  # the ``now`` it was built at
        self._took = 0.0  # seconds the last build took

    def rows(self, store: Store, key: tuple[int, str | None], now: float, rules: QualityRules) -> tuple[list[dict[str, Any]], float]:
        """The report for judgments ``key`` (count, latest time) and the ``now`` it was built at."""
        with self._lock:  # polls at once build it once
            wait = max(self.refresh, self._took / self.share)
            if self._key != key and (self._key is None or now - self._at >= wait):
                started = time.perf_counter()
                self._rows = rater_rows(_judgments(store), store.gold(), rules)
                self._took = time.perf_counter() - started
                self._key, self._at = key, now
            return self._rows, self._at


def _judgments(store: Store) -> pd.DataFrame:
    return pd.DataFrame(store.judgments(), columns=list(STORE_JUDGMENT_COLUMNS))


def campaign_report(
    store: Store,
    now: float,
    replicas: int,
    timeout: float,
    replication: ReplicationSettings,
    inputs: CampaignInputs,
    cache: RaterReportCache | None = None,
) -> dict[str, Any]:
    """Every figure of the module docstring, as JSON-ready values, from the store as it is at
    ``now``; counts come from the store's aggregate queries, never from reading every judgment.
    The raters' QC report comes from ``cache`` when given (``raters_as_of``: the time it was
    built), else is built now."""
    judged = store.judged_items()
    batches = store.progress(replicas, now, timeout)
    times = pace_times(store, now)
    key = (times.total, times.latest)
    if cache is None:
        raters, built = rater_rows(_judgments(store), store.gold(), inputs.rules), now
    else:
        raters, built = cache.rows(store, key, now, inputs.rules)
    return {
        "time": now_iso(now),
        "replicas": replicas,
        "progress": progress_rows(batches, judged, replicas, inputs.plan),
        "pace": pace(times, now),
        "stops": {"rule": replication.rule, "recent": store.closures(RECENT_CLOSURES)},
        "machine": None if inputs.triage is None else [{"task_type": kind, **counts} for kind, counts in sorted(inputs.triage.items())],
        "raters": raters,
        "raters_as_of": now_iso(built),
        "budget": None if inputs.plan is None else budget_rows(judged, inputs.plan),
    }


def progress_rows(
    batches: Sequence[TypeProgress], judged: Sequence[JudgedItems], replicas: int, plan: Mapping[str, Any] | None
) -> list[dict[str, Any]]:
    """Per task type loaded (then per type only the plan names): the store's batch progress, and
    items (their replicas reached, or closed early) and judgments of rated items done against what
    is planned."""
    planned = designs(plan) if plan is not None else {}
    loaded = {p.task_type: p for p in batches}
    rows = []
    for kind in [*loaded, *(k for k in planned if k not in loaded)]:
        p = loaded.get(kind, TypeProgress(kind, 0, 0, 0, 0, 0, items=0, closed=0, saved=0))
        items, wanted = planned.get(kind, (p.items, replicas))
        rated = [c for c in judged if c.task_type == kind and not c.gold]
        rows.append(
            {
                **p.__dict__,
                "against": "plan" if kind in planned else "tasks",
                "replicas": wanted,
                "items_planned": items,
                "items_done": sum(c.items for c in rated if c.closed or (c.judgments and c.judgments >= wanted)),
                "judgments_planned": items * wanted,
                "judgments_rated": sum(c.judgments * c.items for c in rated),
            }
        )
    return rows


def pace_times(store: Store, now: float) -> JudgmentTimes:
    """What :func:`pace` reads of the store: the clock hours (UTC) of the last :data:`HOURS_SHOWN`."""
    top = math.floor(now / HOUR) * HOUR
    return store.judgment_times(now, HOUR, [top - k * HOUR for k in range(HOURS_SHOWN - 1, -1, -1)], HOUR)


def pace(times: JudgmentTimes, now: float) -> dict[str, Any]:
    """Judgments in the last hour, per hour since the first, and per clock hour (UTC) lately."""
    first = None if times.first is None else (pd.Timestamp(times.first) - pd.Timestamp(0, tz="UTC")) / pd.Timedelta(seconds=1)
    top = math.floor(now / HOUR) * HOUR
    starts = [top - k * HOUR for k in range(HOURS_SHOWN - 1, -1, -1)]
    return {
        "judgments": times.total,
        "last_hour": times.recent,
        "first": None if first is None else now_iso(first),
        "per_hour": None if first is None else round(times.total / (max(now - first, HOUR) / HOUR), 1),
        "hours": [{"hour": now_iso(start), "judgments": count} for start, count in zip(starts, times.buckets, strict=True)],
    }


def _number(value: Any) -> float | None:
    """A statistic as JSON takes it: None where there is none (NaN)."""
    return None if value is None or math.isnan(value) else float(value)


def rater_rows(judgments: pd.DataFrame, gold: Mapping[str, str], rules: QualityRules) -> list[dict[str, Any]]:
    """Per rater and task type: the aggregate stage's QC report (:func:`rater_report`) under ``rules``."""
    if judgments.empty:
        return []
    report = rater_report(judgments, pd.DataFrame({"item_id": list(gold), "gold": list(gold.values())}), rules)
    return [
        {
            "worker": str(r["worker"]),
            "task_type": str(r["task_type"]),
            "judgments": int(r["judgments"]),
            "gold_seen": int(r["gold_seen"]),
            "gold_passed": int(r["gold_passed"]),
            "gold_accuracy": _number(r["gold_accuracy"]),
            "loo_items": int(r["loo_items"]),
            "loo_correlation": _number(r["loo_correlation"]),
            "median_seconds": _number(r["median_seconds"]),
            "straightline_share": _number(r["straightline_share"]),
            "excluded": bool(r["excluded"]),
            "reasons": str(r["reasons"]),
        }
        for r in report.to_dict("records")
    ]


def budget_rows(judged: Sequence[JudgedItems], plan: Mapping[str, Any]) -> dict[str, Any]:
    """Per type the plan names: judgments it allows and their cost, what people spent (gold
    included), what is left."""
    spent: dict[str, int] = {}
    for c in judged:
        spent[c.task_type] = spent.get(c.task_type, 0) + c.judgments * c.items
    types = []
    for kind, (allowed, from_budget, per_judgment, currency) in budgets(plan).items():
        used = spent.get(kind, 0)
        types.append(
            {
                "task_type": kind,
                "judgments": allowed,
                "from_budget": from_budget,
                "currency": currency,
                "cost_per_judgment": None if per_judgment is None else round(per_judgment, 4),
                "spent_judgments": used,
                "spent_cost": None if per_judgment is None else round(used * per_judgment, 2),
                "left_judgments": allowed - used,
                "left_cost": None if per_judgment is None else round((allowed - used) * per_judgment, 2),
            }
        )
    priced = all(t["cost_per_judgment"] is not None for t in types)
    planned = {t["task_type"] for t in types}
    currencies = {t["currency"] for t in types}
    return {
        "types": types,
        "total": {
            "judgments": sum(t["judgments"] for t in types),
            "spent_judgments": sum(t["spent_judgments"] for t in types),
            "left_judgments": sum(t["left_judgments"] for t in types),
            "left_cost": round(sum(t["left_cost"] for t in types), 2) if priced and len(currencies) == 1 else None,
            "currency": currencies.pop() if len(currencies) == 1 else None,
            "unplanned_judgments": sum(n for kind, n in spent.items() if kind not in planned),  # of types the plan leaves out
        },
    }
