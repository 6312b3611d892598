"""The two tables an annotation round passes around: tasks (what to judge) and judgments.

An *item* is one pair to judge under one task type; its ``item_id`` is stable and, for the
symmetric types (STS, SIS), independent of the order the pair was sampled in, so a pair is never
sent to raters twice and replayed judgments find their item whichever order they were written in.

Task types (CxC §3 and its Table 2; ECCV Caption §3.2):

* ``STS``  caption–caption, 0–5 continuous (semantic textual similarity);
* ``SIS``  image–image, 0–5 continuous (semantic image similarity);
* ``SITS`` caption–image, 0–5 continuous (semantic image–text similarity);
* ``VERIFY`` image–caption, one of four answers (ECCV Caption's verification round);
* ``CHOOSE`` target image–decoy image (BISON §4.1 step 2): the rater sees both images and the
  target's captions and answers the caption id that describes the target but not the decoy, or
  :data:`CHOOSE_NONE`;
* ``VERIFY-TRIPLE`` caption–decoy image (BISON §4.1 step 3; the caption's own image is the
  target): a different rater sees both images in a seeded order and answers one of
  :data:`TRIPLE_ANSWERS`.

Both tables are long and flat (one row per item, one row per judgment) so they go through
pandas, Arrow and Beam alike.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass

import numpy as np
import pandas as pd
import pyarrow as pa

from crisscross.core.ids import CAPTION_KIND, IMAGE_KIND, IdFormError, split_id
from crisscross.core.rng import generator

STS = "STS"
SIS = "SIS"
SITS = "SITS"
VERIFY = "VERIFY"
CHOOSE = "CHOOSE"
VERIFY_TRIPLE = "VERIFY-TRIPLE"
RATING_TYPES = (STS, SIS, SITS)
BISON_TYPES = (CHOOSE, VERIFY_TRIPLE)
TASK_TYPES = (*RATING_TYPES, VERIFY, *BISON_TYPES)
SCORE_MIN = 0.0
SCORE_MAX = 5.0
# ECCV Caption §3.2, best to worst; the order is the ordinal scale Dawid–Skene and alpha see.
VERIFY_ANSWERS = ("100% yes", "partially yes", "mostly no", "100% no")

# CxC §3: a rated pair is positive at or above these aggregated scores.
POSITIVE_THRESHOLDS = {STS: 3.0, SIS: 2.5, SITS: 3.0}
# ECCV Caption §3.3: the answers that make a verified pair positive.
VERIFY_POSITIVE = frozenset(VERIFY_ANSWERS[:2])
# BISON §4.1: "none of the above" when no caption tells the target from the decoy.
CHOOSE_NONE = "none"
# BISON §4.1 step 3: the chosen caption describes the target, the decoy, both or neither.
TRIPLE_TARGET = "target"
TRIPLE_DECOY = "decoy"
TRIPLE_ANSWERS = (TRIPLE_TARGET, TRIPLE_DECOY, "both", "neither")

GOLD_POSITIVE = "positive"
GOLD_NEGATIVE = "negative"
NOT_GOLD = ""

# Provenance of judgments (``source`` column): people, or the provider that filled the step.
SOURCE_PEOPLE = "people"
SOURCE_SIMULATED = "simulate"
SOURCE_REPLAY = "replay"


@dataclass(frozen=True)
class TaskType:
    name: str
    kinds: tuple[str, str]  # id kinds of (id_a, id_b)
    symmetric: bool
    rated: bool  # 0–5 score; otherwise a categorical answer


TASK_TYPE_INFO = {
    STS: TaskType(STS, (CAPTION_KIND, CAPTION_KIND), symmetric=True, rated=True),
    SIS: TaskType(SIS, (IMAGE_KIND, IMAGE_KIND), symmetric=True, rated=True),
    SITS: TaskType(SITS, (CAPTION_KIND, IMAGE_KIND), symmetric=False, rated=True),
    VERIFY: TaskType(VERIFY, (IMAGE_KIND, CAPTION_KIND), symmetric=False, rated=False),
    CHOOSE: TaskType(CHOOSE, (IMAGE_KIND, IMAGE_KIND), symmetric=False, rated=False),
    VERIFY_TRIPLE: TaskType(VERIFY_TRIPLE, (CAPTION_KIND, IMAGE_KIND), symmetric=False, rated=False),
}


def _is_choice(answer: object) -> bool:
    try:
        return answer == CHOOSE_NONE or (isinstance(answer, str) and split_id(answer)[1] == CAPTION_KIND)
    except IdFormError:
        return False


@dataclass(frozen=True)
class AnswerRule:
    """Which answers the judgments table stores for a categorical type, and how to ask for them."""

    fits: Callable[[object], bool]
    wanted: str


# One home for the answer rule: import validation, the rater app's store and rater QC all check against it.
ANSWER_RULES: dict[str, AnswerRule] = {
    VERIFY: AnswerRule(VERIFY_ANSWERS.__contains__, f"one of the four answers ({', '.join(VERIFY_ANSWERS)})"),
    CHOOSE: AnswerRule(_is_choice, f"a caption id of the target or {CHOOSE_NONE!r}"),
    VERIFY_TRIPLE: AnswerRule(TRIPLE_ANSWERS.__contains__, ", ".join(TRIPLE_ANSWERS[:-1]) + f" or {TRIPLE_ANSWERS[-1]}"),
}


# The default bound on the time one judgment took: over an hour on one item, a clock or a tool was left running.
MAX_SECONDS_PER_ITEM = 3600.0
Problem = tuple[str, str]  # (reason code, what is wrong): the reason is the quarantine's, the detail a person reads


@dataclass(frozen=True)
class JudgmentRules:
    """The values a stored judgment may hold, one rule set for the rater app, its store and file
    import alike: each check returns a :data:`Problem`, or None when the value may be stored."""

    max_seconds: float = MAX_SECONDS_PER_ITEM

    def value_problem(self, kind: str, score: float | None, answer: object) -> Problem | None:
        """Whether ``score`` / ``answer`` is the kind of value ``kind`` stores, in its range or among its answers."""
        info = task_type(kind)
        if info.rated:
            if answer is not None:
                return "wrong-value-kind", f"{info.name} takes a score, not an answer"
            if score is None:
                return "missing-field", f"no score: {info.name} needs a score from {SCORE_MIN:g} to {SCORE_MAX:g}"
            if isinstance(score, bool) or not isinstance(score, int | float) or not math.isfinite(score):
                return "bad-score", f"score {score!r} is not a finite number"
            if not SCORE_MIN <= score <= SCORE_MAX:
                return "score-out-of-range", f"score {score:g} is outside {SCORE_MIN:g}–{SCORE_MAX:g}"
            return None
        rule = ANSWER_RULES[info.name]
        if score is not None:
            return "wrong-value-kind", f"{info.name} takes an answer, not a score"
        return None if answer is not None and rule.fits(answer) else ("bad-answer", f"answer {answer!r} is not {rule.wanted}")

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


def task_type(name: str) -> TaskType:
    info = TASK_TYPE_INFO.get(str(name).upper())
    if info is None:
        raise ValueError(f"unknown task type {name!r}; known: {', '.join(TASK_TYPES)}")
    return info


def decoy_first(item: str, seed: int) -> bool:
    """Whether a VERIFY-TRIPLE item shows the decoy before the target (BISON: the verifier must
    not learn which image the caption was chosen for from where it stands)."""
    return bool(generator(seed, "triple-order", item).random() < 0.5)


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
    prefix = info.name.lower()
    if info.symmetric:
        return [f"{prefix}:{min(a, b)}|{max(a, b)}" for a, b in pairs]
    return [f"{prefix}:{a}|{b}" for a, b in pairs]


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

# One row per judgment: one worker's score (ratings) or answer (VERIFY) for one item.
JUDGMENTS_SCHEMA = pa.schema(
    [
        ("item_id", pa.string()),
        ("task_type", pa.string()),
        ("id_a", pa.string()),
        ("id_b", pa.string()),
        ("worker", pa.string()),
        ("score", pa.float64()),  # 0–5 for ratings, null for VERIFY
        ("answer", pa.string()),  # VERIFY_ANSWERS, a caption id or CHOOSE_NONE, TRIPLE_ANSWERS; null for ratings
        ("seconds", pa.float64()),  # time spent on the item (null when the tool does not say)
        ("time", pa.string()),  # ISO-8601 submission time (null when unknown)
        ("batch_id", pa.string()),
        ("source", pa.string()),  # people | replay | simulate
        ("simulated", pa.bool_()),
    ]
)
