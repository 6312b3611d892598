"""Adaptive replication: ``replicas`` is a ceiling; an item stops once its label is decided.

An item's judgments arrive in order.  From ``min_judgments`` on, each new judgment is a *look*:
the item stops at the first look where its stop rule (:data:`STOP_RULES`) says it is decided, and
at ``replicas`` judgments in any case.  The rules know the type's rater spread ``rater_sd`` (the
standard deviation of one rater's score around the item's mean, measured on a pilot round, see
:func:`rater_sd_from_repeats`):

* ``threshold`` (the default): a sequential z-test of the item's mean against the type's positive
  threshold.  At look ``n`` the item stops when ``|mean - threshold| >= z * rater_sd / sqrt(n)``
  with ``z`` the ``1 - alpha / looks`` normal quantile: by the union bound over the looks, an item
  whose true mean lies on one side of the threshold stops on the other side with probability at
  most ``alpha``.  Its label is then decided; the score has fewer judgments behind it.
* ``ci-width``: stops when the normal ``1 - alpha`` interval of the mean is at most ``2 * half_width``
  wide: a fixed precision for every item, whatever its label.
* ``fixed`` (the default in params): never early; every item gets ``replicas`` judgments, as CxC
  and ECCV Caption asked.

Arrival order is the judgments' ``time`` (the rater app and crowd files stamp it), ties and
unstamped judgments (simulated, replayed) in their table order: :func:`arrival_order`.

Every decision is recorded with its look, mean and the rule's margin (:func:`replication_decisions`),
so a reviewer can see why an item stopped where it did.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa

from crisscross.core import io
from crisscross.core.settings import setting
from crisscross.formats.plan import pilot_rater_sd
from crisscross.formats.schema import NOT_GOLD, SOURCE_PEOPLE
from crisscross.tasktypes import default_thresholds, rated_type_names

THRESHOLD, CI_WIDTH, FIXED = "threshold", "ci-width", "fixed"


@dataclass(frozen=True)
class ReplicationSettings:
    """``annotate.replication`` in params: when an item has judgments enough (``tasks.replicas`` is the ceiling)."""

    rule: str = setting(FIXED, choices=(FIXED, THRESHOLD, CI_WIDTH))  # a name in STOP_RULES
    min_judgments: int = setting(2, low=1)
    alpha: float = setting(0.1, low=0.0, high=1.0, open_range=True)
    half_width: float = setting(0.75, low=0.0, open_range=True)  # ci-width: the interval's half width on the 0–5 scale
    rater_sd: Mapping[str, float] = setting({}, low=0.0, open_range=True, choices=rated_type_names)  # per rating type


@dataclass(frozen=True)
class Look:
    """What a rule sees at one look: the judgments so far, their mean, the look's place in the sequence."""

    judgments: int
    mean: float
    looks: int  # how many looks the ceiling allows: replicas - min_judgments + 1
    rater_sd: float
    threshold: float


def normal_quantile(p: float) -> float:
    """The standard normal's ``p`` quantile: ``scipy.special.ndtri``, the function ``scipy.stats.norm.ppf``
    computes, to the bit, without loading ``scipy.stats`` (0.4 s more of a stage command's start)."""
    from scipy.special import ndtri  # on use: commands that import the rules start without scipy

    return float(ndtri(p))


def threshold_rule(look: Look, settings: ReplicationSettings) -> tuple[bool, str]:
    z = normal_quantile(1 - settings.alpha / look.looks)
    margin = z * look.rater_sd / math.sqrt(look.judgments)
    side = "≥" if look.mean >= look.threshold else "<"
    decided = abs(look.mean - look.threshold) >= margin
    return decided, f"mean {look.mean:.2f} {side} {look.threshold:g} by {abs(look.mean - look.threshold):.2f} (needs {margin:.2f})"


def ci_width_rule(look: Look, settings: ReplicationSettings) -> tuple[bool, str]:
    half = normal_quantile(1 - settings.alpha / 2) * look.rater_sd / math.sqrt(look.judgments)
    return half <= settings.half_width, f"interval ±{half:.2f} (needs ±{settings.half_width:g})"


def fixed_rule(look: Look, settings: ReplicationSettings) -> tuple[bool, str]:
    return False, "fixed design"


Rule = Callable[[Look, ReplicationSettings], tuple[bool, str]]
STOP_RULES: dict[str, Rule] = {FIXED: fixed_rule, THRESHOLD: threshold_rule, CI_WIDTH: ci_width_rule}


@dataclass(frozen=True)
class Decision:
    """Where an item stands: how many judgments it used, whether it stopped early, and why."""

    used: int
    stopped: bool
    mean: float
    reason: str


def decide(scores: np.ndarray, task_type: str, replicas: int, settings: ReplicationSettings) -> Decision:
    """One item's judgments in arrival order → where it stops (or that it needs more)."""
    threshold = default_thresholds()[task_type]
    rater_sd = settings.rater_sd.get(task_type)
    rule = STOP_RULES[settings.rule]
    first = min(settings.min_judgments, replicas)
    looks = replicas - first + 1
    for n in range(first, min(len(scores), replicas) + 1):
        mean = float(np.mean(scores[:n]))
        if n >= replicas:
            return Decision(n, False, mean, f"the ceiling of {replicas} judgments")
        if rater_sd is None:
            continue
        decided, why = rule(Look(n, mean, looks, rater_sd, threshold), settings)
        if decided:
            return Decision(n, True, mean, f"{settings.rule} after {n}: {why}")
    mean = float(np.mean(scores)) if len(scores) else math.nan
    return Decision(len(scores), False, mean, f"open: {len(scores)} of at most {replicas} judgments, not decided")


def replication_decisions(judgments: pd.DataFrame, replicas: int, settings: ReplicationSettings) -> pd.DataFrame:
    """Per item (``judgments``: item_id, task_type, score, in arrival order per item): judgments
    used, whether it stopped early, its mean over those, the reason, and whether it is still open."""
    rows = []
    for (item, kind), group in judgments.groupby(["item_id", "task_type"], sort=True):
        d = decide(group["score"].to_numpy(np.float64), kind, replicas, settings)
        is_open = not d.stopped and d.used < replicas
        rows.append(
            {"item_id": item, "task_type": kind, "used": d.used, "stopped": d.stopped, "open": is_open, "mean": d.mean, "reason": d.reason}
        )
    return pd.DataFrame(rows, columns=["item_id", "task_type", "used", "stopped", "open", "mean", "reason"])


def arrival_order(judgments: pd.DataFrame) -> pd.DataFrame:
    """Judgments in the order they arrived: by ``time`` where stamped (as instants: ISO-8601 text
    with and without fractions of a second does not sort as text), unstamped ones after, ties in
    their table order (a stable sort)."""
    moment = pd.to_datetime(judgments["time"], utc=True, format="ISO8601")
    return (
        judgments.assign(_unstamped=moment.isna(), _moment=moment)
        .sort_values(["_unstamped", "_moment"], kind="stable")
        .drop(columns=["_unstamped", "_moment"])
    )


def rated_judgments(judgments: pd.DataFrame, gold: Collection[str] = ()) -> pd.DataFrame:
    """The judgments the stop rules look at: scores of rating types, in arrival order; never those of
    ``gold`` items, which every rater of a batch judges so that raters can be checked."""
    rated = judgments[judgments["task_type"].isin(rated_type_names()) & judgments["score"].notna() & ~judgments["item_id"].isin(gold)]
    return arrival_order(rated)


def asked_for(judgments: pd.DataFrame, decisions: pd.DataFrame) -> pd.Series:
    """A mask over ``judgments`` (in any order): True for the judgments an adaptive campaign would
    have asked for, the first ``used`` of each item in arrival order.  Items without a decision
    (gold, answer types) keep every judgment."""
    ordered = arrival_order(judgments)
    rank = ordered.groupby(["item_id", "task_type"], sort=False).cumcount() + 1
    used = ordered.merge(decisions[["item_id", "task_type", "used"]], on=["item_id", "task_type"], how="left")["used"]
    keep = pd.Series((used.isna() | (rank.to_numpy() <= used.to_numpy())).to_numpy(), index=ordered.index)
    return keep.reindex(judgments.index)


DECISIONS_FILE = "replication.parquet"  # the annotate stage's decisions, read by topup and the release


def adapt_round(
    judgments: pd.DataFrame, gold: Collection[str], replicas: int, settings: ReplicationSettings
) -> tuple[np.ndarray, pd.DataFrame]:
    """A round's judgments under the stop rule → (a mask of the judgments kept, each rated item's decision).

    People's judgments are all kept (they were made; the decisions say which items are still open).
    Simulated and replayed judgments stand in for a campaign that would have stopped asking: those
    after an item's stop are left out, as if never asked."""
    decisions = replication_decisions(rated_judgments(judgments, gold), replicas, settings)
    keep = asked_for(judgments, decisions) | (judgments["source"] == SOURCE_PEOPLE)
    return keep.to_numpy(bool), decisions


def with_pilot_spread(settings: ReplicationSettings, plan: Mapping[str, Any]) -> ReplicationSettings:
    """``settings`` with each type's ``rater_sd`` taken from a plan's pilot where params give none."""
    return replace(settings, rater_sd={**pilot_rater_sd(plan), **settings.rater_sd})


def rater_sd_from_repeats(scores: pd.DataFrame, raters: int) -> float:
    """One rater's spread from items published twice, each time as a mean of ``raters`` judgments
    (``scores``: item_id, score; CxC's SIS lists 2,863 test pairs in both orders): two independent
    means differ with variance ``2 * sd**2 / raters`` (their difference has mean 0, whichever comes first)."""
    twice = scores.groupby("item_id")["score"].agg(list)
    differences = np.asarray([s[0] - s[1] for s in twice if len(s) == 2], dtype=np.float64)
    if len(differences) < 2:
        raise ValueError(f"needs items with two published means, got {len(differences)}")
    return float(np.sqrt(raters * np.mean(differences**2) / 2))


def replicated(
    collected: tuple[pa.Table, pa.Table, dict[str, Any]], tasks_path: str, replication: tuple[ReplicationSettings, int] | None
) -> tuple[pa.Table, pa.Table, dict[str, Any], pa.Table | None]:
    """A judgment source's (judgments, unjudged, facts) under the stop rule (``replication``: its
    settings and the ceiling, ``tasks.replicas``), with the decisions; as collected under the fixed design."""
    judgments, unjudged, facts = collected
    if replication is None:
        return judgments, unjudged, facts, None
    settings, replicas = replication
    tasks = io.read_parquet(tasks_path).select(["item_id", "gold"]).to_pandas()
    gold = set(tasks.loc[tasks["gold"] != NOT_GOLD, "item_id"])
    keep, decisions = adapt_round(judgments.to_pandas(), gold, replicas, settings)
    return judgments.filter(pa.array(keep)), unjudged, facts, pa.Table.from_pandas(decisions, preserve_index=False)
