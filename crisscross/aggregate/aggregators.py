"""Aggregators: many raters' judgments of an item → one score (rated types) or one answer (the others).

Every aggregator reads the same long frame, one row per judgment, with columns ``task`` (item
id), ``worker`` and ``label`` (a 0–5 float for ratings, an answer string for categorical
tasks); :func:`long_frame` builds it from the judgments table.  Aggregators follow the estimator
style of crowd-kit: hyper-parameters in the constructor, ``fit(df)`` returns the aggregator,
results are in trailing-underscore attributes indexed by task (sorted), so a result never
depends on the order of the input rows: rows are put in (task, worker) order before any sum.

Each class says in ``kind`` whether it aggregates :data:`RATINGS` or :data:`CATEGORICAL`
answers; :func:`require_kind` turns a mismatch into a clear error, and ``fit`` refuses string
labels for ratings and float labels for answers.  A worker judges an item once: a repeated
(task, worker) pair is an error, not a silent extra vote.  The 0–5 range is not checked here:
``crisscross.annotate.validate`` rejects out-of-range scores before they reach a judgments table.

Dawid–Skene is implemented here rather than taken from crowd-kit 1.4.2: crowd-kit installs
cleanly with the pinned stack but would be a run-time dependency (plus nltk) for ~60 lines of
EM; its pandas joins take seconds per iteration at CxC scale where numpy over factorised codes
takes a fraction, and its tie rule (alphabetical labels) and row-order-dependent output
order differ from ours.  ``tests/aggregate/test_aggregators.py`` checks both agree where crowd-kit
is installed.  A new aggregator is a registered class here.
"""

from __future__ import annotations

import warnings
from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cached_property
from typing import Any, ClassVar, Self

import numpy as np
import pandas as pd

from crisscross.core.registry import Registry
from crisscross.tasktypes import task_type, task_types, type_names
from crisscross.tasktypes.base import CATEGORICAL, RATINGS, SCORE_MAX, SCORE_MIN

COLUMNS = ("task", "worker", "label")
EPS = 1e-10  # floor of Dawid–Skene probabilities before logs and normalisation (as crowd-kit)
TIE = 1e-9  # label probabilities this close to the best are a tie


# --------------------------------------------------------------------------- the long frame


@dataclass(frozen=True)
class Coded:
    """A validated long frame as integer codes, rows in (task, worker) order.

    ``values`` holds the float ratings, or for categorical frames the position of each answer
    in ``labels``.  ``tasks``, ``workers`` (sorted) and ``labels`` map codes back to names.
    """

    task: np.ndarray  # (n,) int64 code into tasks
    worker: np.ndarray  # (n,) int64 code into workers
    values: np.ndarray  # (n,) float64 ratings or int64 label codes
    tasks: pd.Index
    workers: pd.Index
    labels: pd.Index | None  # categorical only: every label, in tie-breaking order

    @cached_property
    def counts(self) -> np.ndarray:
        """Judgments per task."""
        return np.bincount(self.task, minlength=len(self.tasks))

    @cached_property
    def starts(self) -> np.ndarray:
        """Row where each task's judgments start (rows are grouped by task)."""
        return np.concatenate(([0], np.cumsum(self.counts)[:-1]))


def long_frame(judgments: pd.DataFrame, kind: str) -> pd.DataFrame:
    """The ``task``/``worker``/``label`` frame of one task type from a judgments table.

    Rated types take ``score`` as label, the others ``answer``; other types' rows are left out,
    since scores and answers cannot share one aggregation.
    """
    info = task_type(kind)
    missing = [c for c in ("item_id", "task_type", "worker", "score" if info.rated else "answer") if c not in judgments.columns]
    if missing:
        raise ValueError(f"judgments table lacks column(s) {', '.join(missing)} (has: {', '.join(map(str, judgments.columns))})")
    codes, names = task_type_codes(judgments["task_type"])
    rows = judgments[codes == names.get_indexer([info.name])[0]]
    label = rows["score"].astype(np.float64) if info.rated else rows["answer"]
    return pd.DataFrame({"task": rows["item_id"].to_numpy(), "worker": rows["worker"].to_numpy(), "label": label.to_numpy()})


def label_order(observed: Sequence[Any], labels: Sequence[Any] | None = None) -> pd.Index:
    """The label order ties break in: ``labels`` if given, else the ordinal answers of the task
    types (VERIFY's, best first) followed by any other labels sorted."""
    seen = pd.unique(np.asarray(observed, dtype=object))
    if labels is None:
        present = set(seen)
        known = list(dict.fromkeys(a for kind in task_types() if kind.alpha_level == "ordinal" for a in kind.answers if a in present))
        return pd.Index([*known, *sorted(present - set(known))], name="label")
    order = pd.Index(list(labels), name="label")
    if order.has_duplicates:
        raise ValueError(f"labels list {list(labels)} repeats {order[order.duplicated()].tolist()}")
    unknown = sorted(map(str, set(seen) - set(order)))
    if unknown:
        raise ValueError(f"{len(unknown)} label(s) are not in the given labels {list(labels)}: {unknown[:5]}")
    return order


def sorted_codes(column: pd.Series, what: str) -> tuple[np.ndarray, pd.Index]:
    """Codes of a column into its sorted distinct values (code -1: a missing value).

    Factorising in order of appearance and then sorting only the distinct values is several
    times faster than ``pd.factorize(sort=True)`` on a million object strings.
    """
    codes, uniques = pd.factorize(column)
    try:
        order = np.argsort(np.asarray(uniques, dtype=object), kind="stable")
    except TypeError as error:
        raise ValueError(f"{what} values cannot be sorted ({error}); use one type, e.g. strings") from None
    rank = np.empty(order.size, np.int64)
    rank[order] = np.arange(order.size)
    return np.where(codes < 0, -1, rank[codes]), pd.Index(uniques.take(order), name=what)


def task_type_codes(column: pd.Series) -> tuple[np.ndarray, pd.Index]:
    """Codes of a ``task_type`` column into its sorted canonical (upper-case) names.

    Only the distinct spellings are upper-cased and checked, not every row.
    """
    codes, spellings = pd.factorize(column)
    if (codes < 0).any():
        raise ValueError(f"{int((codes < 0).sum())} of {len(column)} judgments have no task_type")
    upper = [str(spelling).upper() for spelling in spellings]
    unknown = sorted(set(upper) - set(type_names()))
    if unknown:
        raise ValueError(f"judgments have unknown task type(s) {unknown}; known: {', '.join(type_names())}")
    names = pd.Index(sorted(set(upper)), name="task_type")
    return names.get_indexer(upper)[codes], names


def code_long(df: pd.DataFrame, kind: str, labels: Sequence[Any] | None = None) -> Coded:
    """Validate a long frame and factorise it (tasks and workers sorted, rows in (task, worker) order)."""
    if not isinstance(df, pd.DataFrame):
        raise TypeError(f"expected a pandas DataFrame with columns {', '.join(COLUMNS)}, got {type(df).__name__}")
    missing = [c for c in COLUMNS if c not in df.columns]
    if missing:
        raise ValueError(f"judgments frame lacks column(s) {', '.join(missing)} (has: {', '.join(map(str, df.columns))})")
    if df.empty:
        raise ValueError("judgments frame is empty: nothing to aggregate")
    task, tasks = sorted_codes(df["task"], "task")
    worker, workers = sorted_codes(df["worker"], "worker")
    _refuse_missing(df, task < 0, "task")
    _refuse_missing(df, worker < 0, "worker")
    raw = df["label"]
    if kind == RATINGS:
        if not pd.api.types.is_numeric_dtype(raw) or pd.api.types.is_bool_dtype(raw):
            raise ValueError(
                f"ratings need numeric labels but 'label' is {raw.dtype} (e.g. {raw.iloc[0]!r}); "
                "answers go to a categorical aggregator (majority-vote, dawid-skene)"
            )
        values = raw.to_numpy(dtype=np.float64)
        _refuse_missing(df, np.isnan(values), "label")
        _refuse_missing(df, np.isinf(values), "finite label")
        order_of_labels = None
    elif kind == CATEGORICAL:
        if pd.api.types.is_float_dtype(raw):
            raise ValueError(
                f"categorical aggregators need answers, but 'label' holds floats (e.g. {raw.iloc[0]!r}): ratings go to a ratings aggregator"
            )
        _refuse_missing(df, raw.isna().to_numpy(), "label")
        order_of_labels = label_order(raw.to_numpy(), labels)
        values = order_of_labels.get_indexer(raw.to_numpy()).astype(np.int64)
    else:
        raise ValueError(f"unknown aggregation kind {kind!r}; known: {RATINGS}, {CATEGORICAL}")
    order = np.argsort(task * len(workers) + worker)  # keys are unique unless a pair repeats (refused below)
    task, worker, values = task[order], worker[order], values[order]
    repeated = np.flatnonzero((task[1:] == task[:-1]) & (worker[1:] == worker[:-1]))
    if repeated.size:
        first = repeated[0]
        raise ValueError(
            f"{repeated.size} (task, worker) pairs occur more than once (first: task {tasks[task[first]]!r}, "
            f"worker {workers[worker[first]]!r}); a worker judges an item once, deduplicate first"
        )
    return Coded(task, worker, values, tasks, workers, order_of_labels)


def _refuse_missing(df: pd.DataFrame, bad: np.ndarray, what: str) -> None:
    if bad.any():
        where = f", first at tasks {df['task'].to_numpy()[bad][:3].tolist()}" if what != "task" else ""
        raise ValueError(f"{int(bad.sum())} of {len(df)} rows have no {what} (NaN/None/inf){where}")


# --------------------------------------------------------------------------- base classes


class Aggregator(ABC):
    """Fits on a long ``task``/``worker``/``label`` frame; ``kind`` says which labels it takes."""

    name: ClassVar[str]
    kind: ClassVar[str]

    @abstractmethod
    def fit(self, df: pd.DataFrame) -> Self:
        """Aggregate the judgments of ``df``; results go to trailing-underscore attributes."""


def require_kind(aggregator: Aggregator, kind: str) -> None:
    """Refuse an aggregator of the wrong kind (a mean of VERIFY answers, a vote over scores)."""
    if aggregator.kind != kind:
        other = ", ".join(name for name in AGGREGATORS.names() if KINDS[name] == kind)
        raise ValueError(f"aggregator {aggregator.name!r} aggregates {aggregator.kind}, not {kind}; for {kind} use one of: {other}")


def rating_stats(coded: Coded) -> pd.DataFrame:
    """Per task: ``n`` judgments, ``mean`` and ``std`` of the raw ratings.

    ``std`` uses ddof=1 (the sample standard deviation, as pandas' ``std``; NaN for a task with
    one rating): CxC's appendix Fig. 2 plots this spread per item.  Two passes (mean, then
    squared deviations), so it is exact to rounding for any offset.
    """
    n = coded.counts
    mean = np.bincount(coded.task, weights=coded.values, minlength=n.size) / n
    squares = np.bincount(coded.task, weights=(coded.values - mean[coded.task]) ** 2, minlength=n.size)
    std = np.sqrt(np.divide(squares, n - 1, out=np.full(n.size, np.nan), where=n > 1))
    return pd.DataFrame({"n": n.astype(np.int64), "mean": mean, "std": std}, index=coded.tasks)


class RatingAggregator(Aggregator):
    """Ratings (0–5 floats) → ``scores_`` (Series ``agg_score`` by task) and ``stats_``."""

    kind = RATINGS
    scores_: pd.Series
    stats_: pd.DataFrame

    def fit(self, df: pd.DataFrame) -> Self:
        coded = code_long(df, RATINGS)
        self.stats_ = rating_stats(coded)
        self.scores_ = pd.Series(self._scores(coded), index=coded.tasks, name="agg_score")
        return self

    @abstractmethod
    def _scores(self, coded: Coded) -> np.ndarray:
        """One score per task code."""


class CategoricalAggregator(Aggregator):
    """Answers → ``labels_`` (Series ``agg_label`` by task) and ``probas_`` (task × label).

    ``labels`` fixes the label columns and the tie order (first listed wins; probabilities
    within 1e-9 of the best count as tied); by default the observed answers of the ordinal task
    types in their order (VERIFY's, best first), then other labels sorted.
    """

    kind = CATEGORICAL
    labels_: pd.Series
    probas_: pd.DataFrame

    def __init__(self, labels: Sequence[Any] | None = None) -> None:
        self.labels = labels

    def _finish(self, coded: Coded, probas: np.ndarray) -> None:
        assert coded.labels is not None
        self.probas_ = pd.DataFrame(probas, index=coded.tasks, columns=coded.labels)
        # The first label within TIE of the best: rounding in EM must not break a symmetric tie.
        best = np.argmax(probas >= probas.max(axis=1, keepdims=True) - TIE, axis=1)
        self.labels_ = pd.Series(coded.labels.to_numpy()[best], index=coded.tasks, name="agg_label")


# --------------------------------------------------------------------------- ratings


class MeanAggregator(RatingAggregator):
    """The plain mean: CxC's ``agg_score`` is the average of five raters' scores."""

    name = "mean"

    def _scores(self, coded: Coded) -> np.ndarray:
        return self.stats_["mean"].to_numpy()


class MedianAggregator(RatingAggregator):
    """The median (mean of the two middle values for an even count): robust to one wild rater."""

    name = "median"

    def _scores(self, coded: Coded) -> np.ndarray:
        n, starts = coded.counts, coded.starts
        ordered = coded.values[np.lexsort((coded.values, coded.task))]
        return (ordered[starts + (n - 1) // 2] + ordered[starts + n // 2]) / 2


class TrimmedMeanAggregator(RatingAggregator):
    """Mean after dropping ``int(proportion × n)`` lowest and as many highest ratings per task.

    The cut rounds down, as ``scipy.stats.trim_mean``: with the default 0.2, five ratings lose
    one at each end, but four or fewer lose none (the plain mean), and a single rating is kept.
    """

    name = "trimmed-mean"

    def __init__(self, proportion: float = 0.2) -> None:
        if not 0 <= proportion < 0.5:
            raise ValueError(f"trimmed-mean proportion must lie in [0, 0.5), got {proportion}")
        self.proportion = proportion

    def _scores(self, coded: Coded) -> np.ndarray:
        n, starts = coded.counts, coded.starts
        cut = (self.proportion * n).astype(np.int64)
        ordered = coded.values[np.lexsort((coded.values, coded.task))]
        rank = np.arange(coded.task.size) - starts[coded.task]  # coded.task is already grouped
        keep = (rank >= cut[coded.task]) & (rank < (n - cut)[coded.task])
        return np.bincount(coded.task[keep], weights=ordered[keep], minlength=n.size) / (n - 2 * cut)


class BiasCalibratedMeanAggregator(RatingAggregator):
    """Item scores corrected for each rater's constant offset (a harsh or lenient rater).

    Model: ``label = score[task] + bias[worker] + noise``, fitted by least squares with
    alternating updates (task means of ``label - bias``, then worker means of
    ``label - score``), biases re-centred to mean zero over workers after each update, until
    no score moves by more than ``tol``.  Biases are identified only through items that
    workers share; where groups of workers share no item, each group's level is not
    comparable.  Scores are clipped to ``bounds`` (the 0–5 scale by default, ``None`` keeps
    them raw), since an item rated 5 by harsh raters would otherwise leave the scale.
    Results: ``scores_``, ``biases_`` (Series by worker), ``n_iter_``, ``converged_``.
    """

    name = "bias-calibrated-mean"
    biases_: pd.Series
    n_iter_: int
    converged_: bool

    def __init__(self, n_iter: int = 100, tol: float = 1e-6, bounds: tuple[float, float] | None = (SCORE_MIN, SCORE_MAX)) -> None:
        if n_iter < 1 or tol <= 0:
            raise ValueError(f"bias-calibrated-mean needs n_iter >= 1 and tol > 0, got n_iter={n_iter}, tol={tol}")
        if bounds is not None and not bounds[0] < bounds[1]:
            raise ValueError(f"bias-calibrated-mean bounds must be (low, high) with low < high, got {bounds}")
        self.n_iter, self.tol, self.bounds = n_iter, tol, bounds

    def _scores(self, coded: Coded) -> np.ndarray:
        per_task = coded.counts
        per_worker = np.bincount(coded.worker, minlength=len(coded.workers))
        bias = np.zeros(len(coded.workers))
        score = np.bincount(coded.task, weights=coded.values, minlength=per_task.size) / per_task
        self.converged_ = False
        for iteration in range(1, self.n_iter + 1):
            self.n_iter_ = iteration
            bias = np.bincount(coded.worker, weights=coded.values - score[coded.task], minlength=bias.size) / per_worker
            bias -= bias.mean()
            new = np.bincount(coded.task, weights=coded.values - bias[coded.worker], minlength=per_task.size) / per_task
            change = float(np.abs(new - score).max())
            score = new
            if change <= self.tol:
                self.converged_ = True
                break
        if not self.converged_:
            warnings.warn(
                f"bias-calibrated-mean: scores still moved by {change:.2g} > tol={self.tol} after {self.n_iter} iterations",
                RuntimeWarning,
                stacklevel=3,
            )
        self.biases_ = pd.Series(bias, index=coded.workers, name="bias")
        return score if self.bounds is None else np.clip(score, *self.bounds)


# --------------------------------------------------------------------------- answers


def vote_counts(coded: Coded) -> np.ndarray:
    """(tasks, labels) number of judgments giving each label."""
    assert coded.labels is not None
    k = len(coded.labels)
    return np.bincount(coded.task * k + coded.values, minlength=len(coded.tasks) * k).reshape(-1, k).astype(np.float64)


class MajorityVoteAggregator(CategoricalAggregator):
    """The most frequent answer; a tie goes to the label listed first (``100% yes`` first for
    VERIFY by default).  ``probas_`` holds each label's share of the votes."""

    name = "majority-vote"

    def fit(self, df: pd.DataFrame) -> Self:
        coded = code_long(df, CATEGORICAL, self.labels)
        votes = vote_counts(coded)
        self._finish(coded, votes / votes.sum(axis=1, keepdims=True))
        return self


class DawidSkeneAggregator(CategoricalAggregator):
    """Dawid & Skene (1979): each worker has a confusion matrix, the truth is a latent class.

    EM from the vote shares (soft majority vote): the M-step estimates class priors and every
    worker's ``P(answer | true class)``, the E-step every task's class posterior; it stops when
    the mean log-likelihood per judgment rises by less than ``tol``.  Probabilities are floored
    at 1e-10 before normalising, as crowd-kit does, so an answer never seen for a class keeps a
    finite log.  Workers who always give one answer carry no weight; consistent confusions
    (e.g. a rater who swaps yes and no) are learnt and inverted.

    Results: ``labels_``, ``probas_``, ``priors_`` (Series by label), ``errors_`` (DataFrame
    indexed by (worker, observed label), one column per true label: ``P(observed | true)``, the
    layout of crowd-kit), ``log_likelihood_`` (per judgment), ``n_iter_``, ``converged_``.
    """

    name = "dawid-skene"
    priors_: pd.Series
    errors_: pd.DataFrame
    log_likelihood_: float
    n_iter_: int
    converged_: bool

    def __init__(self, n_iter: int = 100, tol: float = 1e-5, labels: Sequence[Any] | None = None) -> None:
        if n_iter < 1 or tol <= 0:
            raise ValueError(f"dawid-skene needs n_iter >= 1 and tol > 0, got n_iter={n_iter}, tol={tol}")
        super().__init__(labels)
        self.n_iter, self.tol = n_iter, tol

    def fit(self, df: pd.DataFrame) -> Self:
        coded = code_long(df, CATEGORICAL, self.labels)
        assert coded.labels is not None
        k, n_workers = len(coded.labels), len(coded.workers)
        votes = vote_counts(coded)
        posterior = votes / votes.sum(axis=1, keepdims=True)
        cell = coded.worker * k + coded.values  # (worker, observed label) of every judgment
        previous = -np.inf
        self.converged_ = False
        for iteration in range(1, self.n_iter + 1):
            self.n_iter_ = iteration
            priors, errors = self._m_step(posterior, coded.task, cell, n_workers, k)
            # E-step: log P(task's answers, class c) summed per task over its (grouped) rows.
            per_row = np.log(errors).reshape(n_workers * k, k)[cell]
            joint = np.log(priors) + np.add.reduceat(per_row, coded.starts, axis=0)
            top = joint.max(axis=1, keepdims=True)
            likelihood = np.exp(joint - top)
            total = likelihood.sum(axis=1, keepdims=True)
            posterior = likelihood / total
            log_likelihood = float((top + np.log(total)).sum()) / coded.task.size
            if log_likelihood - previous < self.tol:
                self.converged_ = True
                break
            previous = log_likelihood
        if not self.converged_:
            warnings.warn(
                f"dawid-skene: log-likelihood still rose by {log_likelihood - previous:.2g} >= tol={self.tol} after {self.n_iter} iterations",
                RuntimeWarning,
                stacklevel=2,
            )
        priors, errors = self._m_step(posterior, coded.task, cell, n_workers, k)
        index = pd.MultiIndex.from_product([coded.workers, coded.labels], names=["worker", "label"])
        self.priors_ = pd.Series(priors, index=coded.labels, name="prior")
        self.errors_ = pd.DataFrame(errors.reshape(n_workers * k, k), index=index, columns=coded.labels)
        self.log_likelihood_ = log_likelihood
        self._finish(coded, posterior)
        return self

    @staticmethod
    def _m_step(posterior: np.ndarray, task: np.ndarray, cell: np.ndarray, n_workers: int, k: int) -> tuple[np.ndarray, np.ndarray]:
        """Class priors (k,) and confusion matrices (workers, observed, true), columns sum to 1."""
        priors = np.clip(posterior.mean(axis=0), EPS, None)
        weights = posterior[task]
        counts = np.stack([np.bincount(cell, weights=weights[:, c], minlength=n_workers * k) for c in range(k)], axis=1)
        counts = np.clip(counts.reshape(n_workers, k, k), EPS, None)
        return priors, counts / counts.sum(axis=1, keepdims=True)


# --------------------------------------------------------------------------- registry


def _proportion(argument: str) -> TrimmedMeanAggregator:
    try:
        proportion = float(argument)
    except ValueError:
        raise ValueError(f"trimmed-mean:<proportion> needs a number in [0, 0.5), got {argument!r}") from None
    return TrimmedMeanAggregator(proportion)


_WITHOUT_ARGUMENT = (MeanAggregator, MedianAggregator, BiasCalibratedMeanAggregator, MajorityVoteAggregator, DawidSkeneAggregator)
AGGREGATORS: Registry[Aggregator] = Registry("aggregator")
for _cls in _WITHOUT_ARGUMENT:
    AGGREGATORS.register(_cls.name)(_cls)
AGGREGATORS.register(TrimmedMeanAggregator.name, takes_argument=True, default="0.2")(_proportion)
# What each name aggregates, so callers can refuse a mismatch before fitting.
KINDS = {c.name: c.kind for c in (*_WITHOUT_ARGUMENT, TrimmedMeanAggregator)}
