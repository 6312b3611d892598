import warnings

import numpy as np
import pandas as pd
import pytest
from scipy import stats

from crisscross.aggregate.aggregators import (
    AGGREGATORS,
    CATEGORICAL,
    KINDS,
    RATINGS,
    BiasCalibratedMeanAggregator,
    DawidSkeneAggregator,
    MajorityVoteAggregator,
    MeanAggregator,
    MedianAggregator,
    TrimmedMeanAggregator,
    long_frame,
    require_kind,
)
from crisscross.tasktypes.names import VERIFY_ANSWERS

YES, PARTLY, MOSTLY_NO, NO = VERIFY_ANSWERS


def frame(rows: list[tuple[str, str, object]]) -> pd.DataFrame:
    return pd.DataFrame(rows, columns=["task", "worker", "label"])


def random_ratings(seed: int, tasks: int = 200, workers: int = 30) -> pd.DataFrame:
    """1–7 distinct raters per task, rows shuffled."""
    rng = np.random.default_rng(seed)
    per_task = rng.integers(1, 8, tasks)
    task = np.repeat(np.arange(tasks), per_task)
    worker = np.concatenate([rng.choice(workers, k, replace=False) for k in per_task])
    df = frame([])
    df["task"], df["worker"] = [f"t{i:03d}" for i in task], [f"w{i:02d}" for i in worker]
    df["label"] = np.round(rng.uniform(0, 5, task.size), 2)
    return df.sample(frac=1.0, random_state=seed).reset_index(drop=True)


SMALL = frame([("b", "x", 1.0), ("b", "y", 2.0), ("a", "x", 3.0), ("a", "y", 4.0), ("a", "z", 5.0), ("c", "z", 2.5)])


# --------------------------------------------------------------------------- ratings


def test_mean_scores_and_stats_by_hand():
    agg = MeanAggregator().fit(SMALL)
    assert agg.scores_.index.tolist() == ["a", "b", "c"] and agg.scores_.name == "agg_score"
    assert agg.scores_.tolist() == [4.0, 1.5, 2.5]
    assert agg.stats_["n"].tolist() == [3, 2, 1]
    # ddof = 1: a = {3, 4, 5} → 1; b = {1, 2} → √0.5; one rating → NaN.
    np.testing.assert_allclose(agg.stats_["std"].to_numpy(), [1.0, np.sqrt(0.5), np.nan])


def test_mean_and_stats_match_pandas_and_ignore_row_order():
    df = random_ratings(1)
    agg = MeanAggregator().fit(df)
    reference = df.groupby("task")["label"].agg(["count", "mean", "std"])
    np.testing.assert_allclose(agg.scores_.to_numpy(), reference["mean"].to_numpy(), rtol=1e-12)
    np.testing.assert_array_equal(agg.stats_["n"].to_numpy(), reference["count"].to_numpy())
    np.testing.assert_allclose(agg.stats_["std"].to_numpy(), reference["std"].to_numpy(), rtol=1e-9)
    shuffled = MeanAggregator().fit(df.sample(frac=1.0, random_state=7))
    pd.testing.assert_series_equal(agg.scores_, shuffled.scores_)  # bit for bit: sums run in (task, worker) order


def test_median_odd_and_even_counts():
    df = frame(
        [
            ("odd", "a", 1.0),
            ("odd", "b", 5.0),
            ("odd", "c", 2.0),
            ("even", "a", 10.0),
            ("even", "b", 1.0),
            ("even", "c", 4.0),
            ("even", "d", 2.0),
        ]
    )
    assert MedianAggregator().fit(df).scores_.to_dict() == {"even": 3.0, "odd": 2.0}


@pytest.mark.parametrize("proportion", [0.0, 0.1, 0.2, 0.3, 0.45])
def test_trimmed_mean_matches_scipy_per_task(proportion):
    df = random_ratings(2)
    agg = TrimmedMeanAggregator(proportion).fit(df)
    expected = df.groupby("task")["label"].apply(lambda x: stats.trim_mean(x.to_numpy(), proportion))
    np.testing.assert_allclose(agg.scores_.to_numpy(), expected.to_numpy(), rtol=1e-12)


def test_trimmed_mean_cuts_round_down():
    five = [("t", w, v) for w, v in zip("abcde", [0.0, 1.0, 2.0, 3.0, 5.0], strict=True)]
    four = [("u", w, v) for w, v in zip("abcd", [0.0, 1.0, 2.0, 5.0], strict=True)]
    scores = TrimmedMeanAggregator(0.2).fit(frame([*five, *four, ("v", "a", 4.0)])).scores_
    # 5 ratings: int(0.2·5) = 1 off each end → mean(1, 2, 3); 4: int(0.8) = 0 → plain mean; 1: kept.
    assert scores.to_dict() == {"t": 2.0, "u": 2.0, "v": 4.0}


def test_bias_calibrated_mean_recovers_additive_offsets():
    rng = np.random.default_rng(3)
    truth = rng.uniform(1, 4, 40)
    bias = np.array([-0.6, -0.2, 0.0, 0.3, 0.5])
    rows = [(f"t{j:02d}", f"w{w}", truth[j] + bias[w]) for j in range(40) for w in range(5) if (j + w) % 5 != 0]
    agg = BiasCalibratedMeanAggregator(n_iter=500, tol=1e-12).fit(frame(rows))
    assert agg.converged_
    np.testing.assert_allclose(agg.scores_.to_numpy(), truth, atol=1e-8)
    np.testing.assert_allclose(agg.biases_.to_numpy(), bias - bias.mean(), atol=1e-8)
    # The plain mean of four raters is off by the missing rater's share of the offsets.
    assert np.abs(MeanAggregator().fit(frame(rows)).scores_.to_numpy() - truth).max() > 0.1


def test_bias_calibrated_mean_clips_to_the_scale_and_warns_when_not_converged():
    # x is 1 below y on shared items; "top" only x rated, with 5: its calibrated score is 5.5.
    rows = [(t, "x", s - 0.5) for t, s in [("t1", 2.0), ("t2", 3.0), ("t3", 4.0)]]
    rows += [(t, "y", s + 0.5) for t, s in [("t1", 2.0), ("t2", 3.0), ("t3", 4.0)]] + [("top", "x", 5.0)]
    clipped = BiasCalibratedMeanAggregator(n_iter=1000, tol=1e-12).fit(frame(rows))
    raw = BiasCalibratedMeanAggregator(n_iter=1000, tol=1e-12, bounds=None).fit(frame(rows))
    np.testing.assert_allclose(raw.scores_.to_numpy(), [2.0, 3.0, 4.0, 5.5], atol=1e-8)
    np.testing.assert_allclose(clipped.scores_.to_numpy(), [2.0, 3.0, 4.0, 5.0], atol=1e-8)
    np.testing.assert_allclose(raw.biases_.to_numpy(), [-0.5, 0.5], atol=1e-8)
    with pytest.warns(RuntimeWarning, match=r"still moved by .* after 1 iterations"):
        assert not BiasCalibratedMeanAggregator(n_iter=1, tol=1e-12).fit(frame(rows)).converged_


# --------------------------------------------------------------------------- answers


def test_majority_vote_ties_follow_the_answer_order():
    df = frame(
        [("t1", "a", NO), ("t1", "b", YES), ("t2", "a", MOSTLY_NO), ("t2", "b", PARTLY), ("t3", "a", NO), ("t3", "b", NO), ("t3", "c", YES)]
    )
    agg = MajorityVoteAggregator().fit(df)
    assert agg.labels_.to_dict() == {"t1": YES, "t2": PARTLY, "t3": NO}
    assert agg.probas_.columns.tolist() == list(VERIFY_ANSWERS)
    np.testing.assert_allclose(agg.probas_.loc["t3"].to_numpy(), [1 / 3, 0, 0, 2 / 3])
    reverse = MajorityVoteAggregator(labels=VERIFY_ANSWERS[::-1]).fit(df)
    assert reverse.labels_.to_dict() == {"t1": NO, "t2": MOSTLY_NO, "t3": NO}


def test_majority_vote_orders_other_labels_after_known_answers():
    df = frame([("t", "a", "zebra"), ("t", "b", "apple"), ("u", "a", YES), ("u", "b", "apple")])
    agg = MajorityVoteAggregator().fit(df)
    assert agg.probas_.columns.tolist() == [YES, "apple", "zebra"]
    assert agg.labels_.to_dict() == {"t": "apple", "u": YES}
    with pytest.raises(ValueError, match=r"1 label\(s\) are not in the given labels .*\['zebra'\]"):
        MajorityVoteAggregator(labels=[YES, "apple"]).fit(df)


def spammers_and_a_swapper(seed: int = 0, tasks: int = 400) -> tuple[pd.DataFrame, np.ndarray]:
    """Two careful raters (90% right), three who always say "100% yes" and one who swaps the
    scale (yes ↔ no): majority vote says "100% yes" whenever the truth is anything else."""
    rng = np.random.default_rng(seed)
    truth = rng.integers(0, 4, tasks)
    answers = {
        "good1": np.where(rng.random(tasks) < 0.9, truth, rng.integers(0, 4, tasks)),
        "good2": np.where(rng.random(tasks) < 0.9, truth, rng.integers(0, 4, tasks)),
        "spam1": np.zeros(tasks, int),
        "spam2": np.zeros(tasks, int),
        "spam3": np.zeros(tasks, int),
        "swap": 3 - truth,
    }
    rows = [(f"t{j:03d}", w, VERIFY_ANSWERS[a[j]]) for w, a in answers.items() for j in range(tasks)]
    df = frame(rows).sample(frac=1.0, random_state=seed).reset_index(drop=True)
    return df, np.asarray(VERIFY_ANSWERS, dtype=object)[truth]


def test_dawid_skene_recovers_the_truth_where_majority_vote_fails():
    df, truth = spammers_and_a_swapper()
    majority = (MajorityVoteAggregator().fit(df).labels_.to_numpy() == truth).mean()
    ds = DawidSkeneAggregator().fit(df)
    assert majority < 0.35
    assert (ds.labels_.to_numpy() == truth).mean() == 1.0
    assert ds.converged_ and ds.n_iter_ < 100
    errors = ds.errors_
    # Columns are P(observed | true): each worker's column sums to 1.
    np.testing.assert_allclose(errors.groupby(level="worker").sum().to_numpy(), 1.0)
    # A spammer answers "100% yes" whatever the truth; the swapper's "100% no" means "100% yes".
    np.testing.assert_allclose(errors.loc[("spam1", YES)].to_numpy(), 1.0, atol=1e-6)
    assert errors.loc[("swap", NO), YES] > 0.99
    np.testing.assert_allclose(ds.probas_.sum(axis=1).to_numpy(), 1.0)


def test_dawid_skene_is_deterministic_and_ignores_row_order():
    df, _ = spammers_and_a_swapper(seed=1, tasks=120)
    first = DawidSkeneAggregator().fit(df)
    again = DawidSkeneAggregator().fit(df.sample(frac=1.0, random_state=5))
    pd.testing.assert_frame_equal(first.probas_, again.probas_)
    pd.testing.assert_frame_equal(first.errors_, again.errors_)
    assert first.labels_.equals(again.labels_) and first.n_iter_ == again.n_iter_


def test_dawid_skene_on_unanimous_answers():
    df = frame([(t, w, a) for t, a in [("t1", YES), ("t2", NO), ("t3", NO)] for w in "abc"])
    ds = DawidSkeneAggregator().fit(df)
    assert ds.labels_.to_dict() == {"t1": YES, "t2": NO, "t3": NO}
    np.testing.assert_allclose(ds.priors_.to_numpy(), [1 / 3, 2 / 3], atol=1e-6)
    assert ds.probas_.loc["t2", NO] > 1 - 1e-6


def test_dawid_skene_breaks_a_symmetric_tie_by_label_order():
    # x and y agree on a (yes) and b (no) and split on c: c is 50/50 whatever the rounding.
    df = frame([("a", "x", YES), ("a", "y", YES), ("b", "x", NO), ("b", "y", NO), ("c", "x", YES), ("c", "y", NO)])
    for labels, first in ((VERIFY_ANSWERS, YES), (VERIFY_ANSWERS[::-1], NO)):
        ds = DawidSkeneAggregator(labels=labels).fit(df)
        np.testing.assert_allclose(ds.probas_.loc["c", [YES, NO]].to_numpy(), 0.5, atol=1e-9)
        assert ds.labels_.to_dict() == {"a": YES, "b": NO, "c": first}
        assert ds.probas_.columns.tolist() == list(labels)


def test_dawid_skene_warns_when_not_converged():
    df, _ = spammers_and_a_swapper(seed=3, tasks=60)
    with pytest.warns(RuntimeWarning, match=r"dawid-skene: log-likelihood still rose by .* after 2 iterations"):
        ds = DawidSkeneAggregator(n_iter=2, tol=1e-12).fit(df)
    assert not ds.converged_ and ds.n_iter_ == 2


def test_dawid_skene_agrees_with_crowd_kit():
    crowdkit = pytest.importorskip("crowdkit.aggregation", reason="crowd-kit is not installed (optional cross-check)")
    df, _ = spammers_and_a_swapper(seed=2, tasks=150)
    ours = DawidSkeneAggregator(n_iter=200, tol=1e-10).fit(df)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        theirs = crowdkit.DawidSkene(n_iter=200, tol=1e-10).fit(df)
    probas = theirs.probas_.reindex(index=ours.probas_.index, columns=ours.probas_.columns)
    np.testing.assert_allclose(ours.probas_.to_numpy(), probas.to_numpy(), atol=1e-6)
    assert (theirs.labels_.reindex(ours.labels_.index) == ours.labels_).all()
    # crowd-kit leaves out (worker, answer) rows the worker never gave; ours hold ~1e-12 there.
    errors = theirs.errors_.reindex(index=ours.errors_.index, columns=ours.errors_.columns).fillna(0.0)
    np.testing.assert_allclose(ours.errors_.to_numpy(), errors.to_numpy(), atol=1e-6)


# --------------------------------------------------------------------------- checks and registry


@pytest.mark.parametrize(
    ("df", "message"),
    [
        (SMALL.drop(columns="label"), r"lacks column\(s\) label \(has: task, worker\)"),
        (SMALL.iloc[:0], "empty: nothing to aggregate"),
        (SMALL.assign(label=[1.0, np.nan, 3.0, 4.0, 5.0, 2.5]), r"1 of 6 rows have no label \(NaN/None/inf\), first at tasks \['b'\]"),
        (SMALL.assign(label=[1.0, np.inf, 3.0, 4.0, 5.0, 2.5]), "1 of 6 rows have no finite label"),
        (SMALL.assign(worker=["x", None, "x", "y", "z", "z"]), "1 of 6 rows have no worker"),
        (SMALL.assign(label=[YES] * 6), r"ratings need numeric labels .* \(majority-vote, dawid-skene\)"),
        (pd.concat([SMALL, SMALL.iloc[[2]]]), r"1 \(task, worker\) pairs occur more than once \(first: task 'a', worker 'x'\)"),
    ],
)
def test_bad_frames_are_refused_with_the_reason(df, message):
    with pytest.raises(ValueError, match=message):
        MeanAggregator().fit(df)


def test_float_labels_are_refused_by_categorical_aggregators():
    with pytest.raises(ValueError, match="holds floats"):
        MajorityVoteAggregator().fit(SMALL)
    with pytest.raises(TypeError, match="expected a pandas DataFrame"):
        MeanAggregator().fit(SMALL.to_numpy())


def test_registry_names_kinds_and_arguments():
    assert AGGREGATORS.names() == ["bias-calibrated-mean", "dawid-skene", "majority-vote", "mean", "median", "trimmed-mean"]
    assert AGGREGATORS.create("trimmed-mean").proportion == 0.2
    assert AGGREGATORS.create("trimmed-mean:0.1").proportion == 0.1
    with pytest.raises(ValueError, match=r"trimmed-mean:<proportion> needs a number in \[0, 0.5\), got 'x'"):
        AGGREGATORS.create("trimmed-mean:x")
    with pytest.raises(ValueError, match=r"must lie in \[0, 0.5\), got 0.5"):
        AGGREGATORS.create("trimmed-mean:0.5")
    for name in AGGREGATORS.names():
        assert AGGREGATORS.create(name).kind == KINDS[name]
    assert {KINDS[n] for n in ("mean", "median", "trimmed-mean", "bias-calibrated-mean")} == {RATINGS}
    assert {KINDS[n] for n in ("majority-vote", "dawid-skene")} == {CATEGORICAL}
    require_kind(AGGREGATORS.create("median"), RATINGS)
    with pytest.raises(
        ValueError,
        match=r"'dawid-skene' aggregates categorical, not ratings; for ratings use one of: bias-calibrated-mean, mean, median, trimmed-mean",
    ):
        require_kind(AGGREGATORS.create("dawid-skene"), RATINGS)


def test_long_frame_takes_scores_or_answers_by_task_type():
    judgments = pd.DataFrame(
        {
            "item_id": ["sts:a|b", "sts:a|b", "verify:i|c", "sis:x|y"],
            "task_type": ["STS", "STS", "VERIFY", "SIS"],
            "worker": ["w1", "w2", "w1", "w1"],
            "score": [1.5, 2.0, None, 4.0],
            "answer": [None, None, YES, None],
        }
    )
    sts = long_frame(judgments, "sts")
    assert sts.to_dict("list") == {"task": ["sts:a|b", "sts:a|b"], "worker": ["w1", "w2"], "label": [1.5, 2.0]}
    assert long_frame(judgments, "VERIFY").to_dict("list") == {"task": ["verify:i|c"], "worker": ["w1"], "label": [YES]}
    with pytest.raises(ValueError, match=r"lacks column\(s\) answer"):
        long_frame(judgments.drop(columns="answer"), "VERIFY")
