"""Machine in the loop (ECCV Caption §6): the machine labels the pairs its signals decide, people the rest.

Per task type, on a seeded audit sample that people rated (:func:`audit_sample`), the pairs'
machine signals (:mod:`crisscross.campaign.signals`) are combined by an L2-regularised logistic
regression into one score for "people call it positive".  Two cuts on that score are then
certified on the audit (:func:`certified_cut`): above the positive cut, the Clopper–Pearson upper
bound (confidence ``1 - delta``) on the share of pairs people call negative is at most
``max_error``; below the negative cut, likewise for positives.  Cuts are tried in a fixed sequence,
from the most extreme audit score inward in steps of ``step`` pairs, starting at the count where one
disagreement can still pass (:func:`fewest_audited`), and the first that fails ends the sequence, so the chance that the accepted cut's error rate exceeds ``max_error`` is at most
``delta`` with no correction for the many cuts tried (the fixed-sequence procedure).

The audit's scores are cross-fitted (``folds``): each audited pair is scored by a fit that did not
see it, so the certificate does not take credit for the fit's own optimism, and every other pair
is scored by the average of those fits (a linear score: the fits' weights averaged), so the scores
cut are of the kind the cuts were certified on.  Pairs beyond a cut are labelled by the machine,
each with its score, the cut and the bound as the reason a reviewer can check (:class:`TypeTriage`).
Each side's cut is certified on its own, at ``delta``: the positive and the negative labels are
disjoint sets, each with its error rate bounded.  Pairs between the cuts, pairs without a signal,
and every pair of a type whose audit is too small to certify a cut, go to people.  For the graded
types, people's scores on the audit also give each pair an *expected score* (a ridge regression on
the same signals, clipped to the scale), so a machine-labelled pair can stand in a correlation; it
is an estimate, never a rating.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace

import numpy as np
import pandas as pd

from crisscross.campaign.signals import TextSpace, pair_signals, signal_types
from crisscross.core.rng import generator
from crisscross.core.settings import setting
from crisscross.tasktypes.base import SCORE_MAX, SCORE_MIN

POSITIVE, NEGATIVE, LEFT_TO_PEOPLE = 1, 0, -1  # a pair's triage label: the machine's (people's on the audit), or none: left to people
SIDES = {POSITIVE: "positive", NEGATIVE: "negative"}


@dataclass(frozen=True)
class TriageSettings:
    """How much the audit costs and how sure the machine must be (``triage:`` in params)."""

    audit_share: float = setting(0.1, low=0.0, high=1.0, open_range=True)  # of each type's pairs, rated by people first
    max_error: float = setting(0.015, low=0.0, high=0.5, open_range=True)  # the error rate a machine label may have ...
    delta: float = setting(0.05, low=0.0, high=0.5, open_range=True)  # ... with this chance of exceeding it
    folds: int = setting(5, low=2)  # cross-fitting of the audit's scores
    l2: float = setting(1.0, low=0.0)  # ridge penalty of the logistic regression on standardised signals
    step: int = setting(10, low=1)  # audited pairs between cuts tried
    turns: int = setting(1, low=1)  # audit → fit → label rounds; each later one audits the band the last left, refits on every label
    band_audit_share: float = setting(
        0.25, low=0.0, high=1.0, open_range=True
    )  # of the band, audited by a later turn: people rate the band anyway
    encoders: tuple[str, ...] = ("use-m3", "bow-glove50")  # whose signals (crisscross.campaign.signals) the triage stage reads


def audit_sample(item_ids: pd.Series, share: float, seed: int, task_type: str, turn: int = 1) -> np.ndarray:
    """Which items people rate first: a seeded ``share`` of the type's items, each item's draw its
    own (a hash of the seed, the type, the turn and its id), so the sample depends neither on row
    order nor on which other items exist: items added later leave the audit of the earlier ones as
    it was.  A later turn draws afresh, so its audit is a uniform sample of the band it is drawn from."""
    key = f"{seed}/audit/{task_type}" + (f"/turn{turn}" if turn > 1 else "")
    draws = [int.from_bytes(hashlib.blake2b(f"{key}/{item}".encode(), digest_size=8).digest()) for item in item_ids]
    return np.asarray(draws, dtype=np.float64) / 2.0**64 < share


def logistic_fit(x: np.ndarray, y: np.ndarray, l2: float, iterations: int = 50) -> tuple[np.ndarray, float]:
    """Weights and intercept minimising ``sum(logloss) + l2 / 2 * |w|^2`` (the intercept is not
    penalised): scikit-learn's ``LogisticRegression(C=1 / l2)``, by Newton's method."""
    n, d = x.shape
    design = np.hstack([x, np.ones((n, 1))])
    penalty = np.full(d + 1, l2)
    penalty[-1] = 0.0
    theta = np.zeros(d + 1)
    for _ in range(iterations):
        p = 1.0 / (1.0 + np.exp(-(design @ theta)))
        gradient = design.T @ (p - y) + penalty * theta
        hessian = (design * (p * (1 - p))[:, None]).T @ design + np.diag(penalty) + 1e-12 * np.eye(d + 1)
        update = np.linalg.solve(hessian, gradient)
        theta -= update
        if np.abs(update).max() < 1e-10:
            break
    return theta[:-1], float(theta[-1])


def error_bound(errors: int, n: int, delta: float) -> float:
    """Clopper–Pearson upper bound, confidence ``1 - delta``, on an error rate seen as ``errors`` of ``n``."""
    from scipy.stats import beta  # on use: the stage command starts without scipy

    return 1.0 if errors >= n else float(beta.ppf(1 - delta, errors + 1, n - errors))


@dataclass(frozen=True)
class Cut:
    """A certified cut: the machine labels pairs scoring at or beyond ``score``; of the ``audited``
    audit pairs there, people disagreed on ``errors``, so the error rate is at most ``bound``."""

    side: int
    score: float
    audited: int
    errors: int
    bound: float


def fewest_audited(settings: TriageSettings) -> int:
    """Where the sequence of cuts starts: the fewest audit pairs on which one disagreement still
    passes (315 at the defaults; a flawless cut would pass from 199), so that a single early
    disagreement cannot end the sequence at its first cut.  It depends on the settings alone, as a
    fixed sequence must."""
    low = math.ceil(math.log(settings.delta) / math.log(1 - settings.max_error))  # a flawless cut's fewest
    high = 2 * low
    while error_bound(1, high, settings.delta) > settings.max_error:
        high *= 2
    while low < high:
        middle = (low + high) // 2
        low, high = (middle + 1, high) if error_bound(1, middle, settings.delta) > settings.max_error else (low, middle)
    return low


def certified_cut(scores: np.ndarray, positive: np.ndarray, side: int, settings: TriageSettings) -> Cut | None:
    """The most inclusive cut of the fixed sequence whose bound is at most ``max_error`` (None when
    even the most extreme fails, or the audit is too small for any cut to pass).  A cut takes in
    every audit pair tied with its last one, as labelling will."""
    order = np.argsort(-scores if side == POSITIVE else scores, kind="stable")
    ranked = scores[order]
    wrong = np.cumsum(positive[order] != (side == POSITIVE))
    accepted = None
    for step in range(fewest_audited(settings), len(order) + 1, settings.step):
        k = step
        while k < len(ranked) and ranked[k] == ranked[k - 1]:
            k += 1  # the cut takes in every pair tied with its last one
        bound = error_bound(int(wrong[k - 1]), k, settings.delta)
        if bound > settings.max_error:
            break
        accepted = Cut(side, float(ranked[k - 1]), k, int(wrong[k - 1]), bound)
    return accepted


@dataclass(frozen=True)
class TypeTriage:
    """One task type's fitted triage: the signals' standardisation, the regression and the cuts."""

    task_type: str
    signals: tuple[str, ...]
    mean: np.ndarray
    scale: np.ndarray
    weights: np.ndarray
    intercept: float
    cuts: dict[int, Cut] = field(default_factory=dict)
    audited: int = 0
    audited_positive: int = 0
    note: str = ""  # why no cut could be certified, when none was

    def score(self, signals: pd.DataFrame) -> np.ndarray:
        """The log-odds that people call each pair positive (NaN where a signal is missing)."""
        z = (signals[list(self.signals)].to_numpy(np.float64) - self.mean) / self.scale
        return z @ self.weights + self.intercept

    def label(self, scores: np.ndarray) -> np.ndarray:
        """POSITIVE or NEGATIVE beyond a cut, else LEFT_TO_PEOPLE (also for NaN scores)."""
        with np.errstate(invalid="ignore"):
            above = scores >= self.cuts[POSITIVE].score if POSITIVE in self.cuts else np.zeros(len(scores), dtype=bool)
            below = scores <= self.cuts[NEGATIVE].score if NEGATIVE in self.cuts else np.zeros(len(scores), dtype=bool)
        out = np.full(len(scores), LEFT_TO_PEOPLE, dtype=np.int8)
        out[above & ~below] = POSITIVE  # cuts that cross leave their overlap to people
        out[below & ~above] = NEGATIVE
        return out

    def reason(self, score: float, label: int) -> str:
        """Why a pair got its label: the score against the cut, and what the audit says of that cut."""
        if label == LEFT_TO_PEOPLE:
            return "no signal" if math.isnan(score) else self.note or f"score {score:.3f} between the cuts"
        cut = self.cuts[label]
        sign = "≥" if label == POSITIVE else "≤"
        return (
            f"score {score:.3f} {sign} {SIDES[label]} cut {cut.score:.3f}: {cut.errors} of {cut.audited} audited pairs "
            f"there rated otherwise, error ≤ {cut.bound:.4f}"
        )

    def summary(self) -> dict[str, object]:
        """What the triage decided, for reports and the audit trail."""
        return {
            "audited": self.audited,
            "audited_positive": self.audited_positive,
            "signals": dict(zip(self.signals, (round(float(w), 6) for w in self.weights), strict=True)),
            "intercept": round(self.intercept, 6),
            "note": self.note,
            "cuts": {
                SIDES[side]: {"score": round(cut.score, 6), "audited": cut.audited, "errors": cut.errors, "bound": round(cut.bound, 6)}
                for side, cut in sorted(self.cuts.items())
            },
        }


def spread(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Each signal's mean and standard deviation over ``x``'s rows (a constant signal's as 1, so it standardises to 0)."""
    mean, scale = x.mean(axis=0), x.std(axis=0)
    scale[scale == 0] = 1.0
    return mean, scale


def expected_scores(signals: pd.DataFrame, fitted: np.ndarray, scores: np.ndarray, l2: float) -> np.ndarray:
    """People's expected 0–5 score of every pair from its signals: a ridge regression (penalty ``l2``
    on standardised signals, the intercept free) fitted on the ``fitted`` pairs' scores, clipped to
    the scale; NaN for pairs without every signal, or all of them when fewer than two pairs are fitted."""
    x = signals.to_numpy(np.float64)
    if fitted.sum() < 2:
        return np.full(len(x), np.nan)
    mean, scale = spread(x[fitted])
    z = (x - mean) / scale
    y = scores[fitted]
    weights = np.linalg.solve(z[fitted].T @ z[fitted] + l2 * np.eye(z.shape[1]), z[fitted].T @ (y - y.mean()))
    return np.clip(z @ weights + y.mean(), SCORE_MIN, SCORE_MAX)


def fit_triage(
    task_type: str, signals: pd.DataFrame, positive: np.ndarray, settings: TriageSettings, seed: int, certify: np.ndarray | None = None
) -> TypeTriage:
    """Fit on the labelled pairs (``signals`` rows with every signal, ``positive`` people's label of each)
    and certify the cuts on those of them in ``certify`` (default: all), the current turn's audit.
    An audit too small for any cut, or of one class only, gives a triage that sends every pair to people."""
    x = signals.to_numpy(np.float64)
    y = np.asarray(positive, dtype=np.float64)
    on = np.ones(len(x), dtype=bool) if certify is None else np.asarray(certify, dtype=bool)
    if np.isnan(x).any():
        raise ValueError(
            f"{task_type}: triage fits on audited pairs with every signal; {int(np.isnan(x).any(axis=1).sum())} rows have a gap"
        )
    names, labels = tuple(signals.columns), y.astype(bool)
    if on.sum() < fewest_audited(settings) or labels.all() or not labels.any():
        note = (
            f"audit too small: {int(on.sum())} audited pairs with every signal ({int(labels[on].sum())} positive); "
            f"a cut needs at least {fewest_audited(settings)} and both labels"
        )
        zeros = np.zeros(len(names))
        return TypeTriage(task_type, names, zeros, np.ones(len(names)), zeros, 0.0, {}, int(on.sum()), int(labels[on].sum()), note)
    mean, scale = spread(x)
    z = (x - mean) / scale
    folds = generator(seed, "triage-folds", task_type).integers(settings.folds, size=len(z))
    held_out = np.empty(len(z))
    fits = []
    for fold in range(settings.folds):
        test = folds == fold
        weights, intercept = logistic_fit(z[~test], y[~test], settings.l2)
        held_out[test] = z[test] @ weights + intercept
        fits.append((weights, intercept))
    weights = np.mean([w for w, _ in fits], axis=0)
    intercept = float(np.mean([b for _, b in fits]))
    cuts = {side: cut for side in (POSITIVE, NEGATIVE) if (cut := certified_cut(held_out[on], labels[on], side, settings)) is not None}
    note = (
        ""
        if cuts
        else f"no cut certified: the audit's {int(on.sum())} pairs do not bound an error rate of {settings.max_error} at either end"
    )
    return TypeTriage(task_type, names, mean, scale, weights, intercept, cuts, int(on.sum()), int(labels[on].sum()), note)


@dataclass(frozen=True)
class Triaged:
    """Every pair's fate (``decisions``: item_id, task_type, audit, turn, score, expected_score, label,
    reason) and each type's fits, one per turn fitted."""

    decisions: pd.DataFrame
    turns: dict[str, tuple[TypeTriage, ...]]


@dataclass(frozen=True)
class TypePairs:
    """One task type's pairs in item order, with their signals and what people have said of them so far."""

    task_type: str
    item_ids: pd.Series
    signals: pd.DataFrame
    complete: np.ndarray  # the pair has every signal
    rated_by_people: np.ndarray  # people have labelled the pair
    people_positive: np.ndarray  # ... and called it positive (False while unrated)
    people_score: np.ndarray  # their 0–5 score (NaN where they gave none)


@dataclass(frozen=True)
class TurnsState:
    """Where a type's turns have left its pairs."""

    band: np.ndarray  # neither decided by the machine nor audited yet
    audited: np.ndarray
    machine_labels: np.ndarray  # POSITIVE / NEGATIVE beyond a cut, else LEFT_TO_PEOPLE
    turn_of: np.ndarray  # the turn that audited or labelled the pair, or whose fit scored it last
    scores: np.ndarray
    fits: tuple[TypeTriage, ...] = ()


def type_pairs(
    task_type: str,
    rows: pd.DataFrame,
    people_positive: Mapping[str, bool],
    people_score: Mapping[str, float],
    spaces: Sequence[TextSpace],
    image_of: Mapping[str, str],
) -> TypePairs:
    """One type's pairs sorted by item id, so the triage does not depend on row order, with their signals and people's verdicts."""
    rows = rows.sort_values("item_id", kind="stable")
    items = rows["item_id"]
    signals = pair_signals(task_type, rows["id_a"], rows["id_b"], spaces, image_of)
    return TypePairs(
        task_type,
        items,
        signals,
        complete=~signals.isna().any(axis=1).to_numpy(),
        rated_by_people=np.asarray([item in people_positive for item in items], dtype=bool),
        people_positive=np.asarray([bool(people_positive.get(item, False)) for item in items], dtype=bool),
        people_score=np.asarray([people_score.get(item, np.nan) for item in items], dtype=np.float64),
    )


def first_state(pairs: TypePairs) -> TurnsState:
    """Before turn one every pair is in the band, none audited, labelled or scored."""
    n = len(pairs.item_ids)
    return TurnsState(
        band=np.ones(n, dtype=bool),
        audited=np.zeros(n, dtype=bool),
        machine_labels=np.full(n, LEFT_TO_PEOPLE, dtype=np.int8),
        turn_of=np.zeros(n, dtype=np.int64),
        scores=np.full(n, np.nan),
    )


def turn_audit(pairs: TypePairs, band: np.ndarray, turn: int, settings: TriageSettings, seed: int) -> np.ndarray:
    """A turn's audit: a seeded share of the band, a smaller one after turn one since people rate the band anyway."""
    share = settings.audit_share if turn == 1 else settings.band_audit_share
    return band & audit_sample(pairs.item_ids, share, seed, pairs.task_type, turn)


def with_audit(state: TurnsState, audit: np.ndarray, turn: int) -> TurnsState:
    """Record a turn's audit, so its pairs keep people's label and name the turn that drew them."""
    return replace(state, audited=state.audited | audit, turn_of=np.where(audit, turn, state.turn_of))


def fit_turn(pairs: TypePairs, state: TurnsState, audit: np.ndarray, settings: TriageSettings, seed: int) -> TypeTriage:
    """Fit on every audited pair people labelled so far, but certify on this turn's audit alone: a uniform sample of the band it labels."""
    fitted = state.audited & pairs.rated_by_people & pairs.complete
    return fit_triage(pairs.task_type, pairs.signals[fitted], pairs.people_positive[fitted], settings, seed, certify=audit[fitted])


def label_beyond_cuts(state: TurnsState, fit: TypeTriage, audit: np.ndarray, signals: pd.DataFrame, turn: int) -> TurnsState:
    """Score the band and this turn's audit by the fit, and give the band's pairs beyond its cuts the machine's label."""
    scores = np.where(state.band | audit, fit.score(signals), state.scores)
    labels = fit.label(scores)
    machine = state.band & (labels != LEFT_TO_PEOPLE)
    return replace(
        state,
        scores=scores,
        machine_labels=np.where(machine, labels, state.machine_labels),
        turn_of=np.where(state.band, turn, state.turn_of),
        band=state.band & ~machine,
    )


def run_turns(pairs: TypePairs, settings: TriageSettings, seed: int) -> TurnsState:
    """Audit, fit and label turn after turn, until the turns run out or an audit awaits people."""
    certifying = replace(settings, delta=settings.delta / settings.turns)  # a union bound over the turns
    state = first_state(pairs)
    for turn in range(1, settings.turns + 1):
        audit = turn_audit(pairs, state.band, turn, settings, seed)
        state = with_audit(state, audit, turn)
        awaiting = bool((audit & ~pairs.rated_by_people).any())
        if turn > 1 and awaiting:
            break  # this turn's audit awaits people: the band stays as the last fit left it
        fit = fit_turn(pairs, state, audit, certifying, seed)
        state = replace(state, fits=(*state.fits, fit), band=state.band & ~audit)
        if turn == 1 or fit.cuts:  # a later turn that certifies nothing leaves the band, with the last fit's scores, to the next
            state = label_beyond_cuts(state, fit, audit, pairs.signals, turn)
        if awaiting:
            break  # the first audit awaits people: its partial fit labels, and the next turn waits for it
    return state


def final_labels(pairs: TypePairs, state: TurnsState) -> np.ndarray:
    """Audited pairs carry people's label (none while it is awaited), the others the machine's if it gave one."""
    by_people = np.where(pairs.people_positive, POSITIVE, NEGATIVE)
    labels = np.where(state.audited, by_people, state.machine_labels)
    return np.where(state.audited & ~pairs.rated_by_people, LEFT_TO_PEOPLE, labels).astype(np.int8)


def audit_reason(turn: int, rated: bool) -> str:
    """Why an audited pair has its label: people rated it, or are yet to."""
    return f"audit{f' (turn {turn})' if turn > 1 else ''}: " + ("rated by people" if rated else "awaiting people's rating")


def type_decisions(pairs: TypePairs, state: TurnsState, l2: float) -> pd.DataFrame:
    """One type's rows of ``Triaged.decisions``, each with the reason a reviewer can check."""
    labels = final_labels(pairs, state)
    reasons = [
        audit_reason(int(turn), bool(rated)) if audited else state.fits[turn - 1].reason(float(score), int(label))
        for audited, rated, turn, score, label in zip(
            state.audited, pairs.rated_by_people, state.turn_of, state.scores, labels, strict=True
        )
    ]
    scored = state.audited & pairs.complete & ~np.isnan(pairs.people_score)
    return pd.DataFrame(
        {
            "item_id": pairs.item_ids.to_numpy(),
            "task_type": pairs.task_type,
            "audit": state.audited,
            "turn": state.turn_of,
            "score": state.scores,
            "expected_score": expected_scores(pairs.signals, scored, pairs.people_score, l2),
            "label": labels,
            "reason": reasons,
        }
    )


def triage(
    pairs: pd.DataFrame,
    people_positive: Mapping[str, bool],
    spaces: Sequence[TextSpace],
    image_of: Mapping[str, str],
    settings: TriageSettings,
    seed: int,
    people_score: Mapping[str, float] | None = None,
) -> Triaged:
    """Triage rated pairs (``pairs``: item_id, task_type, id_a, id_b) given people's verdicts
    (``people_positive``: item id → whether they call the pair positive; audit items without one are
    left out of the fit).

    Turn 1 audits a seeded share of every pair, fits, certifies its cuts on that audit and labels
    the pairs beyond them.  Each later turn (``settings.turns``) audits a fresh seeded share
    (``band_audit_share``) of the band the last turn left — no extra cost, since people rate the
    band anyway — and waits until people rated all of it: the fit then takes every label people
    gave so far, the cuts are certified on this turn's audit alone (a uniform sample of the band, so
    the bound holds for the band's labels), and the band shrinks; a turn that certifies nothing
    leaves the band to the next.  Each turn certifies at ``delta / turns``, so over all turns the
    chance that a side's labels exceed ``max_error`` anywhere is at most ``delta`` (a union bound).
    Audited pairs keep people's label (``label`` is theirs, ``audit`` true); the others are labelled
    by the machine beyond a cut, or left to people (``LEFT_TO_PEOPLE``).  ``turn`` is the turn that
    audited or labelled a pair, or whose fit scored it last.
    With ``people_score`` (people's 0–5 scores by item id) every pair gets ``expected_score``
    (:func:`expected_scores`, fitted on the audited pairs people scored); NaN otherwise.
    """
    parts, turns = [], {}
    for task_type, rows in pairs.groupby("task_type", sort=True):
        typed = type_pairs(task_type, rows, people_positive, people_score or {}, spaces, image_of)
        state = run_turns(typed, settings, seed)
        parts.append(type_decisions(typed, state, settings.l2))
        turns[task_type] = state.fits
    return Triaged(pd.concat(parts, ignore_index=True), turns)


DECIDED_BY_PEOPLE, DECIDED_BY_MACHINE, UNDECIDED = "people", "machine", "open"  # an item's ``decided_by``: who decided it, if anyone yet
PAIR_COLUMNS = ["item_id", "task_type", "id_a", "id_b"]
DECISION_COLUMNS = [*PAIR_COLUMNS, "audit", "turn", "score", "expected_score", "label", "decided_by", "checked", "reason"]


@dataclass(frozen=True)
class TriagedRound:
    """A round's items after triage: every item's fate, the machine's labels, the rows still for people."""

    decisions: pd.DataFrame  # DECISION_COLUMNS
    machine_labels: pd.DataFrame  # the machine's labels in use (items people did not rate), with their provenance
    open_tasks: pd.DataFrame  # tasks rows people get next (an audit awaiting them first), with their batches' gold items
    turns: dict[str, tuple[TypeTriage, ...]]  # each type's fit per turn fitted


def items_to_decide(tasks: pd.DataFrame) -> tuple[pd.DataFrame, pd.DataFrame]:
    """A round's items once each, those of types with machine signals apart from the rest; gold items serve quality control and stay out."""
    items = tasks[tasks["gold"] == ""]
    signalled = items["task_type"].isin(signal_types())  # the types the machine has signals for
    return items[signalled].drop_duplicates("item_id"), items[~signalled].drop_duplicates("item_id")


def left_whole_to_people(unsignalled: pd.DataFrame) -> pd.DataFrame:
    """Decisions for items of types the machine has no signals for (VERIFY, BISON's): people decide them all."""
    return unsignalled[PAIR_COLUMNS].assign(
        audit=False,
        turn=0,
        score=np.nan,
        expected_score=np.nan,
        label=np.int8(LEFT_TO_PEOPLE),
        reason="no machine signals for this task type",
    )


def labelled_by_machine(decisions: pd.DataFrame) -> np.ndarray:
    """Which items the machine labelled beyond a cut, whether or not people have rated them since."""
    return ~decisions["audit"].to_numpy() & (decisions["label"].to_numpy() != LEFT_TO_PEOPLE)


def with_who_decided(decisions: pd.DataFrame, people_positive: Mapping[str, bool]) -> pd.DataFrame:
    """Who decided each item: people once they labelled it (their label stands, and ``checked`` says whether the
    machine agreed), the machine beyond a certified cut, else nobody yet."""
    rated_by_people = decisions["item_id"].isin(list(people_positive)).to_numpy()
    machine = labelled_by_machine(decisions)
    rated_later = rated_by_people & ~decisions["audit"].to_numpy()
    return decisions.assign(
        decided_by=np.where(rated_by_people, DECIDED_BY_PEOPLE, np.where(machine, DECIDED_BY_MACHINE, UNDECIDED)),
        checked=[
            bool(people_positive[item]) == (label == POSITIVE) if by_machine and item in people_positive else None
            for item, label, by_machine in zip(decisions["item_id"], decisions["label"], machine, strict=True)
        ],
        reason=[
            (f"rated by people; the machine said: {why}" if by_machine else "rated by people") if later else why
            for why, by_machine, later in zip(decisions["reason"], machine, rated_later, strict=True)
        ],
    )


def machine_label_table(decisions: pd.DataFrame, turns: Mapping[str, tuple[TypeTriage, ...]]) -> pd.DataFrame:
    """The machine's labels in use, each with the cut, bound and signals a reviewer needs to check it."""
    labelled = decisions[decisions["decided_by"] == DECIDED_BY_MACHINE]
    cuts = [
        turns[kind][turn - 1].cuts[side]
        for kind, turn, side in zip(labelled["task_type"], labelled["turn"], labelled["label"], strict=True)
    ]
    return labelled[PAIR_COLUMNS].assign(
        positive=labelled["label"] == POSITIVE,
        score=labelled["score"],
        expected_score=labelled["expected_score"],
        cut=[cut.score for cut in cuts],
        bound=[cut.bound for cut in cuts],
        audited=[cut.audited for cut in cuts],
        turn=labelled["turn"],
        signals=[",".join(turns[kind][0].signals) for kind in labelled["task_type"]],
        reason=labelled["reason"],
    )


def tasks_for_people(tasks: pd.DataFrame, decisions: pd.DataFrame) -> pd.DataFrame:
    """The task rows people get next: a type's pending audit alone, since the next fit needs all of it, else its
    undecided items; with the gold items of their batches, for quality control."""
    undecided = decisions["decided_by"] == UNDECIDED
    auditing = set(decisions.loc[undecided & decisions["audit"], "task_type"])
    still_open = set(decisions.loc[undecided & (decisions["audit"] | ~decisions["task_type"].isin(auditing)), "item_id"])
    batches = set(tasks.loc[tasks["item_id"].isin(still_open), "batch_id"])
    return tasks[tasks["item_id"].isin(still_open) | ((tasks["gold"] != "") & tasks["batch_id"].isin(batches))]


def triage_round(
    tasks: pd.DataFrame,
    people_positive: Mapping[str, bool],
    spaces: Sequence[TextSpace],
    image_of: Mapping[str, str],
    settings: TriageSettings,
    seed: int,
    people_score: Mapping[str, float] | None = None,
) -> TriagedRound:
    """Triage a round's tasks table (its gold items serve quality control and stay out; types without
    machine signals go to people whole) given what people have labelled so far (``people_positive``:
    item id → whether they call the pair positive).  An item is decided by people once they labelled
    it, by the machine beyond a certified cut, and is otherwise undecided: the audit first, then the
    band between the cuts.  Where people rated an item the machine would have labelled, their label
    stands and ``checked`` says whether the machine agreed.  ``people_score`` (their 0–5 scores)
    gives the machine's labels an ``expected_score`` for the graded types."""
    signalled, unsignalled = items_to_decide(tasks)
    done = triage(signalled[PAIR_COLUMNS], people_positive, spaces, image_of, settings, seed, people_score)
    decisions = done.decisions.merge(signalled[["item_id", "id_a", "id_b"]], on="item_id", how="left")
    if len(unsignalled):
        decisions = pd.concat([decisions, left_whole_to_people(unsignalled)], ignore_index=True)
    decisions = with_who_decided(decisions, people_positive)
    return TriagedRound(
        decisions[DECISION_COLUMNS].sort_values("item_id", kind="stable").reset_index(drop=True),
        machine_label_table(decisions, done.turns).sort_values("item_id").reset_index(drop=True),
        tasks_for_people(tasks, decisions),
        done.turns,
    )
