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
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import pandas as pd

from crisscross.aggregate.quality import QualityRules, rater_report
from crisscross.annotate.store import Store, TypeProgress, now_iso
from crisscross.campaign.replication import ReplicationSettings
from crisscross.campaign.triage import DECIDED_BY_MACHINE, DECIDED_BY_PEOPLE, UNDECIDED
from crisscross.formats.plan import budgets, designs

HOUR = 3600.0
HOURS_SHOWN = 12
RECENT_CLOSURES = 10
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


def campaign_report(
    store: Store, now: float, replicas: int, timeout: float, replication: ReplicationSettings, inputs: CampaignInputs
) -> dict[str, Any]:
    """Every figure of the module docstring, as JSON-ready values, from the store as it is at ``now``."""
    judgments = pd.DataFrame(store.judgments(), columns=list(STORE_JUDGMENT_COLUMNS))
    gold = store.gold()
    closures = store.closures()
    batches = store.progress(replicas, now, timeout)
    return {
        "time": now_iso(now),
        "replicas": replicas,
        "progress": progress_rows(batches, judgments, gold, closures, replicas, inputs.plan),
        "pace": pace(judgments["time"], now),
        "stops": {"rule": replication.rule, "recent": closures[:RECENT_CLOSURES]},
        "machine": None if inputs.triage is None else [{"task_type": kind, **counts} for kind, counts in sorted(inputs.triage.items())],
        "raters": rater_rows(judgments, gold, inputs.rules),
        "budget": None if inputs.plan is None else budget_rows(judgments, inputs.plan),
    }


def progress_rows(
    batches: Sequence[TypeProgress],
    judgments: pd.DataFrame,
    gold: Mapping[str, str],
    closures: Sequence[Mapping[str, str]],
    replicas: int,
    plan: Mapping[str, Any] | None,
) -> list[dict[str, Any]]:
    """Per task type loaded (then per type only the plan names): the store's batch progress, and
    items and judgments done against what is planned."""
    planned = designs(plan) if plan is not None else {}
    rated = judgments[~judgments["item_id"].isin(list(gold))]
    loaded = {p.task_type: p for p in batches}
    rows = []
    for kind in [*loaded, *(k for k in planned if k not in loaded)]:
        p = loaded.get(kind, TypeProgress(kind, 0, 0, 0, 0, 0, items=0, closed=0, saved=0))
        items, wanted = planned.get(kind, (p.items, replicas))
        counts = rated[rated["task_type"] == kind].groupby("item_id").size()
        done = set(counts.index[counts >= wanted]) | {c["item_id"] for c in closures if c["task_type"] == kind}
        rows.append(
            {
                **p.__dict__,
                "against": "plan" if kind in planned else "tasks",
                "replicas": wanted,
                "items_planned": items,
                "items_done": len(done),
                "judgments_planned": items * wanted,
                "judgments_rated": int(counts.sum()),
            }
        )
    return rows


def pace(times: pd.Series, now: float) -> dict[str, Any]:
    """Judgments in the last hour, per hour since the first, and per clock hour (UTC) lately."""
    stamps = (pd.to_datetime(times, utc=True, format="ISO8601") - pd.Timestamp(0, tz="UTC")) / pd.Timedelta(seconds=1)
    first = float(stamps.min()) if len(stamps) else None
    top = math.floor(now / HOUR) * HOUR
    starts = [top - k * HOUR for k in range(HOURS_SHOWN - 1, -1, -1)]
    return {
        "judgments": len(stamps),
        "last_hour": int(((stamps > now - HOUR) & (stamps <= now)).sum()),
        "first": None if first is None else now_iso(first),
        "per_hour": None if first is None else round(len(stamps) / (max(now - first, HOUR) / HOUR), 1),
        "hours": [{"hour": now_iso(start), "judgments": int(((stamps >= start) & (stamps < start + HOUR)).sum())} for start in starts],
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


def budget_rows(judgments: pd.DataFrame, plan: Mapping[str, Any]) -> dict[str, Any]:
    """Per type the plan names: judgments it allows and their cost, what people spent, what is left."""
    spent = judgments.groupby("task_type").size()
    types = []
    for kind, (allowed, from_budget, per_judgment, currency) in budgets(plan).items():
        used = int(spent.get(kind, 0))
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
    currencies = {t["currency"] for t in types}
    return {
        "types": types,
        "total": {
            "judgments": sum(t["judgments"] for t in types),
            "spent_judgments": sum(t["spent_judgments"] for t in types),
            "left_judgments": sum(t["left_judgments"] for t in types),
            "left_cost": round(sum(t["left_cost"] for t in types), 2) if priced and len(currencies) == 1 else None,
            "currency": currencies.pop() if len(currencies) == 1 else None,
            "unplanned_judgments": int(spent[~spent.index.isin([t["task_type"] for t in types])].sum()),  # of types the plan leaves out
        },
    }
