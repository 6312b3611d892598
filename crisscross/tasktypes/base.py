"""What a task type is: one class holds every part of it the pipeline asks about.

A task type says what an answer is (a 0–5 :class:`Scale` or fixed answers, how a page's pick maps
to the stored answer, the rule import, the store and the app check), what raters see
(instructions, the scale's labels, worked examples, the item on the page, the options in their
seeded order), how a simulated rater answers it, how its items aggregate and what a positive is,
which machine signals it has, and what the release's card says of it.  The pipeline asks these
questions through the registry (:mod:`crisscross.tasktypes`), never by a type's name.

The class attributes are the type's facts; the methods have defaults for the common case (a pair
shown side by side, answered on a scale or by one of fixed answers), which the types that show
more (BISON's CHOOSE and VERIFY-TRIPLE) override.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar, Protocol

import numpy as np
import pandas as pd

from crisscross.core.ids import CAPTION_KIND

Problem = tuple[str, str]  # (reason code, what is wrong): the reason is the quarantine's, the detail a person reads
RATINGS, CATEGORICAL = "ratings", "categorical"  # what an aggregator takes: scores, or answers
SCORE_MIN, SCORE_MAX = 0.0, 5.0  # CxC's scale: the one the judgments table, its plots and the stop rules hold


class Shown(Protocol):
    """What raters can be shown (:class:`crisscross.annotate.catalog.Catalog`), as a type uses it."""

    texts: Any
    image_of: Any
    paths: Any
    captions_by_image: Any

    def captions_of(self, image: str) -> tuple[str, ...]: ...

    def image(self, value: str) -> str: ...

    def problem(self, value: str) -> Problem | None: ...

    def showable(self, kind: str) -> list[str]: ...


@dataclass(frozen=True)
class Option:
    """Something a rater picks: the id it shows (a caption or an image) and the answer stored for it."""

    shows: str
    answer: str


class AnswerError(ValueError):
    """A rater's pick that is none of the item's options; the message says what it needs."""


@dataclass(frozen=True)
class Scale:
    """A continuous score from ``low`` to ``high``; an item is positive when its aggregated score
    reaches ``threshold`` (the build may set another: ``aggregate.thresholds``)."""

    threshold: float
    points: dict[int, tuple[str, str]]  # score → (label along the slider, the criterion it stands for)
    low: float = SCORE_MIN
    high: float = SCORE_MAX
    hover: bool = False  # the criteria show when the rater hovers a point, not under the scale


@dataclass(frozen=True)
class ExampleSide:
    kind: str  # "text" or "image"
    value: str  # caption text, or image id (served through the example image route, never as a path)


@dataclass(frozen=True)
class Example:
    a: ExampleSide
    b: ExampleSide
    verdict: str


@dataclass(frozen=True)
class Seen:
    """What a simulated rater of a many-caption type weighs: captions against two images."""

    captions: tuple[str, ...]
    target: str
    decoy: str


@dataclass(frozen=True)
class RaterDraws:
    """One item's draws per simulated rater: a careless pick, the rater's bias and constant, a normal and a uniform."""

    pick: np.ndarray
    bias: np.ndarray
    constant: np.ndarray
    normal: np.ndarray
    unit: np.ndarray


SimulatedAnswers = tuple[np.ndarray, np.ndarray, np.ndarray]  # attentive, careless, straight-lining


class TaskType:
    """One judgment type.  Subclasses set the facts below and override what their raters see differently."""

    name: ClassVar[str]  # upper case; item ids start with its lower case
    kinds: ClassVar[tuple[str, str]]  # id kinds of (id_a, id_b)
    symmetric: ClassVar[bool] = False  # (a, b) and (b, a) are one item
    title: ClassVar[str]  # one line for the card and the Croissant metadata: what raters judged
    source: ClassVar[str] = ""  # where the type comes from (a paper and section), for the card
    methods: ClassVar[tuple[str, ...]] = ()  # sampling-method prefixes of candidate pairs that become this type's items
    sampling: ClassVar[str] = ""  # how its pairs were sampled, a paragraph of the release card
    retrieval: ClassVar[bool] = (
        False  # the card shows the retrieval evaluation of its release (the papers' truths read STS, SIS, SITS, VERIFY)
    )

    # --- what an answer is
    scale: ClassVar[Scale | None] = None  # rated types; otherwise the answer is a word
    answers: ClassVar[tuple[str, ...]] = ()  # fixed answers, best first (empty: an item offers its own)
    meanings: ClassVar[dict[str, str]] = {}  # answer → what it means, shown beside it
    positive_answers: ClassVar[frozenset[str]] = frozenset()  # fixed-answer types: the answers that make a pair positive
    alpha_level: ClassVar[str] = "nominal"  # Krippendorff's alpha over the answers (rated types: interval)

    # --- what raters see
    instructions: ClassVar[str]
    question: ClassVar[str] = ""  # asked above the scale
    side_labels: ClassVar[tuple[str, str]]
    plants_gold: ClassVar[bool] = True  # known positives and negatives can be planted among its items
    variation_rules: ClassVar[bool] = True  # rater QC may exclude by straight-lining and leave-one-out correlation

    # --- the simulated panel
    anchors: ClassVar[tuple[float, float]]  # reference cosine at score 0 and at score 5
    seconds_mean: ClassVar[float]  # mean seconds per item
    simulated_from_pairs: ClassVar[bool] = True  # a rater perceives the pair's cosine (else: :meth:`seen`)

    @property
    def rated(self) -> bool:
        return self.scale is not None

    @property
    def aggregates(self) -> str:
        """Which aggregator it takes: :data:`RATINGS` (scores) or :data:`CATEGORICAL` (answers)."""
        return RATINGS if self.rated else CATEGORICAL

    @property
    def prefix(self) -> str:
        """The start of its item ids and batch ids, and its export files' names."""
        return self.name.lower()

    def __repr__(self) -> str:
        return f"<task type {self.name}>"

    def __reduce__(self) -> str | tuple[Any, ...]:
        """Pickled by name, so a worker finds the type its registry holds."""
        from crisscross.tasktypes import task_type

        return task_type, (self.name,)

    # ------------------------------------------------------------------ answers

    def fits(self, answer: object) -> bool:
        """Whether the judgments table may store ``answer`` for this (answered) type."""
        return answer in self.answers

    @property
    def wanted(self) -> str:
        """What an answer must be, for the message that refuses one."""
        return ", ".join(self.answers[:-1]) + f" or {self.answers[-1]}"

    def value_problem(self, score: float | None, answer: object) -> Problem | None:
        """Whether ``score`` / ``answer`` is the kind of value the type stores, in its range or among its answers."""
        if self.scale is not None:
            low, high = self.scale.low, self.scale.high
            if answer is not None:
                return "wrong-value-kind", f"{self.name} takes a score, not an answer"
            if score is None:
                return "missing-field", f"no score: {self.name} needs a score from {low:g} to {high:g}"
            if isinstance(score, bool) or not isinstance(score, int | float) or not math.isfinite(score):
                return "bad-score", f"score {score!r} is not a finite number"
            if not low <= score <= high:
                return "score-out-of-range", f"score {score:g} is outside {low:g}–{high:g}"
            return None
        if score is not None:
            return "wrong-value-kind", f"{self.name} takes an answer, not a score"
        return None if answer is not None and self.fits(answer) else ("bad-answer", f"answer {answer!r} is not {self.wanted}")

    # ------------------------------------------------------------------ what raters see

    def shown(self, id_a: str, id_b: str, catalog: Shown) -> tuple[str, ...]:
        """Every id raters see for the item."""
        return (id_a, id_b)

    def options(self, item_id: str, id_a: str, id_b: str, catalog: Shown, seed: int) -> tuple[Option, ...]:
        """What raters pick from per item, in the order shown (numbered from 1); none for a pair type."""
        return ()

    def unshowable(self, id_a: str, id_b: str, catalog: Shown) -> Problem | None:
        """Why the item cannot be shown as the type needs it (reason code, detail), beyond its own ids."""
        return None

    def canonical(self, given: str | None, options: tuple[Option, ...]) -> str | None:
        """The answer as stored, from the pick a page sends (an option's number, or a word)."""
        return given

    def batch_answers(self) -> list[dict[str, str]] | None:
        """The answers every item of a batch offers, with their meanings (None: a scale, or per-item options)."""
        return [{"answer": a, "meaning": self.meanings[a]} for a in self.answers] if self.answers else None

    def page_item(
        self, view: dict[str, Any], options: tuple[Option, ...], catalog: Shown, image_url: Callable[[str], str]
    ) -> dict[str, Any]:
        """One item as the rater page gets it: ``view`` holds its position and both sides
        (``image_url(side)`` is the address of a side's image); a type that shows more adds it."""
        return view

    def image_sides(self) -> dict[str, int]:
        """The page's names for the item's images → their place among :meth:`page_images`."""
        return {"a": 0, "b": 1}

    def page_images(self, id_a: str, id_b: str, options: tuple[Option, ...]) -> tuple[str, ...]:
        """The images the page may fetch for an item, in :meth:`image_sides` order."""
        return (id_a, id_b)

    def examples(self, catalog: Shown, asked_pairs: set[frozenset[str]], asked_ids: set[str]) -> tuple[Example, ...]:
        """Worked examples shown above the batch; none unless the type has some.  ``asked_pairs``:
        the round's pairs (no example may be one); ``asked_ids``: ids better avoided."""
        return ()

    # ------------------------------------------------------------------ simulated raters

    def simulated_answers(self, scores: np.ndarray, cuts: Sequence[float]) -> tuple[np.ndarray, np.ndarray]:
        """A pair type's simulated (score, answer) columns from each rater's noisy 0–5 reading:
        rated types keep the score; an answered type maps it to an answer (``cuts``: the panel's
        descending cut points, for types with ordered answers)."""
        if self.rated:
            return scores, np.full(scores.shape, None, dtype=object)
        return np.full(scores.shape, np.nan), self.answer_of_score(scores, cuts)

    def answer_of_score(self, scores: np.ndarray, cuts: Sequence[float]) -> np.ndarray:
        raise NotImplementedError(f"{self.name}: a fixed-answer type maps a simulated score to an answer")

    def seen(self, item_id: str, id_a: str, id_b: str, catalog: Shown, seed: int) -> Seen:
        """What a rater of a many-caption type weighs (only when not :attr:`simulated_from_pairs`)."""
        raise NotImplementedError(f"{self.name} is simulated from its pair's cosine")

    def seen_answers(
        self, seen: Seen, margin: np.ndarray, to_target: np.ndarray, draws: RaterDraws, noise: np.ndarray, params: Any
    ) -> SimulatedAnswers:
        """A many-caption type's answers: attentive, careless and straight-lining raters'.  ``margin``:
        each caption's cosine to the target's mean minus the decoy's; ``to_target``: to the target's;
        ``noise``: raters × captions, already scaled by the panel's ``noise_sd``."""
        raise NotImplementedError(f"{self.name} is simulated from its pair's cosine")

    # ------------------------------------------------------------------ quality control and aggregation

    def qc_values(self, scores: np.ndarray, answers: pd.Series) -> np.ndarray:
        """Each judgment as a number for rater QC (leave-one-out correlation, straight-lining):
        the score, or an answer's place counted from the worst (``100% yes`` → 3 … ``100% no`` → 0)."""
        if self.rated:
            return scores
        order = {a: float(len(self.answers) - 1 - i) for i, a in enumerate(self.answers)}
        return answers.map(order).to_numpy(dtype=np.float64, na_value=np.nan)

    def passes_gold(self, values: np.ndarray, answers: pd.Series, positive: bool, low: float, high: float) -> np.ndarray:
        """Whether each judgment of a gold item gets it right: a positive gold needs a score of at
        least ``low`` or a positive answer, a negative one a score of at most ``high`` or another answer."""
        if self.rated:
            return values >= low if positive else values <= high
        is_positive = answers.isin(self.positive_answers).to_numpy()
        return is_positive if positive else ~is_positive & answers.isin(self.answers).to_numpy()

    def positive(self, frame: pd.DataFrame, long: pd.DataFrame, threshold: float | None) -> pd.Series:
        """Each aggregated item's verdict (``frame``: by item id, ``agg_score`` or ``agg_label``; ``long``: its judgments)."""
        if self.rated:
            return frame["agg_score"] >= threshold
        return frame["agg_label"].isin(self.positive_answers)

    def round_facts(self, frame: pd.DataFrame, long: pd.DataFrame) -> dict[str, Any]:
        """What else a round of this type reports (``facts.json``) beyond the counts every type has."""
        return {}

    def positive_rule(self, threshold: float | None = None) -> str:
        """The rule in words, for the release card (plain text: the card escapes it); ``threshold``:
        the one a build applied, when it moved a rated type's own."""
        if self.scale is not None:
            return f"aggregated score ≥ {self.scale.threshold if threshold is None else threshold:g}"
        return "the aggregated answer is " + " or ".join(f"“{a}”" for a in self.answers if a in self.positive_answers)

    # ------------------------------------------------------------------ machine signals

    # Per pair, what the text encoders say: (ids a, ids b, text spaces, caption → image) → named
    # columns; the spaces are :class:`crisscross.campaign.signals.TextSpace`.  None: no signals.
    # A function set here must be a ``staticmethod``, or the type becomes its first argument.
    signals: ClassVar[Callable[..., dict[str, np.ndarray]] | None] = None


def cosine_to_score(cosine: np.ndarray, low: float | np.ndarray, high: float | np.ndarray, top: float = 5.0) -> np.ndarray:
    """Linear from ``low`` (score 0) to ``high`` (score ``top``), clipped: monotone, so rankings survive."""
    return top * np.clip((np.asarray(cosine, np.float64) - low) / (high - low), 0.0, 1.0)


SAME_IMAGE = "same-image"  # a machine signal: the pair's two sides describe or are one image


def cosine(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Row-wise cosines of unit rows (a machine signal's usual part)."""
    return np.einsum("ij,ij->i", a, b)


def side_field(kind: str) -> str:
    """What a side shows: ``text`` for a caption, ``image`` for an image."""
    return "text" if kind == CAPTION_KIND else "image"


def caption_image_examples(
    kind: TaskType, catalog: Shown, asked_pairs: set[frozenset[str]], asked_ids: set[str], verdicts: tuple[str, str]
) -> tuple[Example, ...]:
    """A caption–image type's two worked examples: an image with its own caption, then with another
    image's caption (each with its verdict), sides in the type's order; none of them a pair the round
    asks about, images the round shows last.  None (an empty tuple) when the collection has no such pair."""
    images = sorted(catalog.paths, key=lambda i: (i in asked_ids, i))
    captions_of = catalog.captions_by_image

    def unasked(image: str, caption: str) -> bool:
        return frozenset((image, caption)) not in asked_pairs

    pairs = [(i, c) for i in images for c in captions_of.get(i, [])]
    own = next(((i, c) for i, c in pairs if unasked(i, c)), None)
    other = next((c for i, c in pairs if own and i != own[0] and unasked(own[0], c)), None)
    if own is None or other is None:
        return ()
    picture = ExampleSide("image", own[0])
    captions = (ExampleSide("text", catalog.texts[own[1]]), ExampleSide("text", catalog.texts[other]))
    caption_first = kind.kinds[0] == CAPTION_KIND
    return tuple(
        Example(*((caption, picture) if caption_first else (picture, caption)), verdict)
        for caption, verdict in zip(captions, verdicts, strict=True)
    )


def rating_instructions(guidance: str, question: str, scale: Scale) -> str:
    """Guidance, question, the scale's criteria, and the continuous-score rule (CxC §2: raters were
    encouraged to give scores like 1.3)."""
    criteria = "\n".join(f"({score}) {criterion}" for score, (_, criterion) in sorted(scale.points.items(), reverse=True))
    continuous = (
        f"Scores are continuous: give any value from {scale.low:g} to {scale.high:g}, such as 1.3 or 3.5, "
        "between the two descriptions that fit best."
    )
    asked = f"{question}\n\n" if question else ""
    return f"{guidance}\n\n{asked}Scale\n{criteria}\n\n{continuous}"
