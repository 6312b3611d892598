"""The two tables an annotation round passes around: tasks (what to judge) and judgments.

An *item* is one pair to judge under one task type (:mod:`crisscross.tasktypes`); its ``item_id``
is stable and, for the symmetric types (STS, SIS), independent of the order the pair was sampled
in, so a pair is never sent to raters twice and replayed judgments find their item whichever order
they were written in.

Both tables are long and flat (one row per item, one row per judgment) so they go through
pandas, Arrow and Beam alike.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa

from crisscross.tasktypes import task_type
from crisscross.tasktypes.base import Problem  # the 0–5 scale of CxC's rating types and their files

GOLD_POSITIVE = "positive"
GOLD_NEGATIVE = "negative"
NOT_GOLD = ""

# Provenance of judgments (``source`` column): people, or the provider that filled the step.
SOURCE_PEOPLE = "people"
SOURCE_SIMULATED = "simulate"
SOURCE_REPLAY = "replay"


# The default bound on the time one judgment took: over an hour on one item, a clock or a tool was left running.
MAX_SECONDS_PER_ITEM = 3600.0


@dataclass(frozen=True)
class JudgmentRules:
    """The values a stored judgment may hold, one rule set for the rater app, its store and file
    import alike: each check returns a :data:`Problem`, or None when the value may be stored."""

    max_seconds: float = MAX_SECONDS_PER_ITEM

    def value_problem(self, kind: str, score: float | None, answer: object) -> Problem | None:
        """Whether ``score`` / ``answer`` is the kind of value ``kind`` stores, in its range or among its answers."""
        return task_type(kind).value_problem(score, answer)

    def seconds_problem(self, seconds: float | None) -> Problem | None:
        """Whether the time a judgment took (None: not known) is a finite number of seconds within the bound."""
        if seconds is None:
            return None
        if isinstance(seconds, bool) or not isinstance(seconds, int | float) or not math.isfinite(seconds) or seconds < 0:
            return "bad-seconds", f"seconds {seconds!r} is not a finite number >= 0"
        if seconds > self.max_seconds:
            return (
                "seconds-over-limit",
                f"{seconds:g} seconds on one item is over the limit of {self.max_seconds:g} (annotate.max_seconds_per_item)",
            )
        return None


DEFAULT_RULES = JudgmentRules()


def ordered_pair(kind: str, id_a: str, id_b: str) -> tuple[str, str]:
    """The pair in its item order: sorted for symmetric types, as given otherwise."""
    return (min(id_a, id_b), max(id_a, id_b)) if task_type(kind).symmetric else (id_a, id_b)


def item_id(kind: str, id_a: str, id_b: str) -> str:
    """``sts:<a>|<b>`` with the pair in :func:`ordered_pair` order."""
    return item_ids(kind, ((id_a, id_b),))[0]


def item_ids(kind: str, pairs: Iterable[tuple[str, str]]) -> list[str]:
    """:func:`item_id` of many pairs of one type, the type looked up once: gold pools run to every
    caption of a collection."""
    info = task_type(kind)
    prefix = info.prefix
    if info.symmetric:
        return [f"{prefix}:{min(a, b)}|{max(a, b)}" for a, b in pairs]
    return [f"{prefix}:{a}|{b}" for a, b in pairs]


def numbered_rows_of(rows: Iterable[Mapping[str, Any]], kind: str) -> list[tuple[int, Mapping[str, Any]]]:
    """The rows of one task type, each with its line in the whole table (from 1): a round's stage that
    reads one type's output names where a row came from."""
    return [(n, row) for n, row in enumerate(rows, start=1) if row["task_type"] == kind]


def threshold_votes(items: pd.Series, scores: pd.Series, threshold: float) -> pd.DataFrame:
    """Per item (sorted): how many scores it has (``size``), how many reach ``threshold``
    (``passing``) and whether they fall on both sides of it (``straddles``).

    The one rule for pairs rated more than once (both orders, two batches, a replayed release)
    whose ratings disagree about being positive.
    """
    votes = np.asarray(scores, dtype=np.float64) >= threshold
    counted = pd.Series(votes, index=pd.Index(np.asarray(items, dtype=object))).groupby(level=0, sort=True).agg(["sum", "size"])
    passing, size = counted["sum"].astype(np.int64), counted["size"].astype(np.int64)
    return pd.DataFrame({"size": size, "passing": passing, "straddles": (passing > 0) & (passing < size)})


# One row per item to judge (before replication to raters).
TASKS_SCHEMA = pa.schema(
    [
        ("item_id", pa.string()),
        ("task_type", pa.string()),
        ("id_a", pa.string()),
        ("id_b", pa.string()),
        ("sampling_method", pa.string()),  # e.g. c2c_isim, i2i_csim, gold
        ("gold", pa.string()),  # "", "positive", "negative"
        ("batch_id", pa.string()),
        ("position", pa.int32()),  # place in the batch after the seeded shuffle
    ]
)

# One row per judgment: one worker's score (rated types) or answer (the others) for one item.
JUDGMENTS_SCHEMA = pa.schema(
    [
        ("item_id", pa.string()),
        ("task_type", pa.string()),
        ("id_a", pa.string()),
        ("id_b", pa.string()),
        ("worker", pa.string()),
        ("score", pa.float64()),  # rated types' score, else null
        ("answer", pa.string()),  # the other types' answer (TaskType.fits), else null
        ("seconds", pa.float64()),  # time spent on the item (null when the tool does not say)
        ("time", pa.string()),  # ISO-8601 submission time (null when unknown)
        ("batch_id", pa.string()),
        ("source", pa.string()),  # people | replay | simulate
        ("simulated", pa.bool_()),
    ]
)
