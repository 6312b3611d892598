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

Every decision is recorded with its look, mean and the rule's margin (:func:`replication_decisions`),
so a reviewer can see why an item stopped where it did.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass

import numpy as np
import pandas as pd

from crisscross.core.settings import setting
from crisscross.formats.schema import POSITIVE_THRESHOLDS

THRESHOLD, CI_WIDTH = "threshold", "ci-width"


@dataclass(frozen=True)
class ReplicationSettings:
    """``replication:`` in params: when an item has judgments enough."""

    rule: str = setting(THRESHOLD, choices=(THRESHOLD, CI_WIDTH))  # a name in STOP_RULES
    min_judgments: int = setting(2, low=1)
    alpha: float = setting(0.1, low=0.0, high=1.0, open_range=True)
    half_width: float = setting(0.75, low=0.0, open_range=True)  # ci-width: the interval's half width on the 0–5 scale
    rater_sd: Mapping[str, float] = setting({})  # per task type; a type without one is never stopped early


@dataclass(frozen=True)
class Look:
    """What a rule sees at one look: the judgments so far, their mean, the look's place in the sequence."""

    judgments: int
    mean: float
    looks: int  # how many looks the ceiling allows: replicas - min_judgments + 1
    rater_sd: float
    threshold: float


def _quantile(p: float) -> float:
    from scipy.stats import norm  # on use: commands that import the rules start without scipy

    return float(norm.ppf(p))


def threshold_rule(look: Look, settings: ReplicationSettings) -> tuple[bool, str]:
    z = _quantile(1 - settings.alpha / look.looks)
    margin = z * look.rater_sd / math.sqrt(look.judgments)
    side = "≥" if look.mean >= look.threshold else "<"
    decided = abs(look.mean - look.threshold) >= margin
    return decided, f"mean {look.mean:.2f} {side} {look.threshold:g} by {abs(look.mean - look.threshold):.2f} (needs {margin:.2f})"


def ci_width_rule(look: Look, settings: ReplicationSettings) -> tuple[bool, str]:
    half = _quantile(1 - settings.alpha / 2) * look.rater_sd / math.sqrt(look.judgments)
    return half <= settings.half_width, f"interval ±{half:.2f} (needs ±{settings.half_width:g})"


Rule = Callable[[Look, ReplicationSettings], tuple[bool, str]]
STOP_RULES: dict[str, Rule] = {THRESHOLD: threshold_rule, CI_WIDTH: ci_width_rule}


@dataclass(frozen=True)
class Decision:
    """Where an item stands: how many judgments it used, whether it stopped early, and why."""

    used: int
    stopped: bool
    mean: float
    reason: str


def decide(scores: np.ndarray, task_type: str, replicas: int, settings: ReplicationSettings) -> Decision:
    """One item's judgments in arrival order → where it stops (or that it needs more)."""
    threshold = POSITIVE_THRESHOLDS[task_type]
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


def rater_sd_from_repeats(scores: pd.DataFrame, raters: int) -> float:
    """One rater's spread from items published twice, each time as a mean of ``raters`` judgments
    (``scores``: item_id, score; CxC's SIS lists 2,863 test pairs in both orders): two independent
    means differ with variance ``2 * sd**2 / raters`` (their difference has mean 0, whichever comes first)."""
    twice = scores.groupby("item_id")["score"].agg(list)
    differences = np.asarray([s[0] - s[1] for s in twice if len(s) == 2], dtype=np.float64)
    if len(differences) < 2:
        raise ValueError(f"needs items with two published means, got {len(differences)}")
    return float(np.sqrt(raters * np.mean(differences**2) / 2))
