"""Metrics of paired values: correlation, CxC's bootstrap, BISON accuracy and precision / recall,
from hand-computed cases, scipy and a one-sample-at-a-time reference."""

from __future__ import annotations

import math

import numpy as np
import pytest

from benchmarks.reference import reference_bootstrap
from crisscross.scoring.paired import bison_accuracy, bootstrap_spearman, kendall_tau_b, precision_recall, spearman

# --------------------------------------------------------------------------- Spearman, Kendall


def test_average_ranks_and_spearman_hand_case():
    # x ranks 1,2,3,4; y = 1,3,2,4: d² = 0,1,1,0 -> rho = 1 - 6·2/(4·15) = 0.8
    assert spearman([1, 2, 3, 4], [1, 3, 2, 4]) == pytest.approx(0.8, abs=1e-15)
    rows = spearman(np.array([[1, 2, 3], [1, 2, 3]]), np.array([[3, 2, 1], [1, 2, 3]]))
    np.testing.assert_array_equal(rows, [-1.0, 1.0])


def test_spearman_matches_scipy_with_ties():
    stats = pytest.importorskip("scipy.stats")
    rng = np.random.default_rng(5)
    x, y = rng.integers(0, 5, (20, 30)), rng.integers(0, 4, (20, 30))
    got = spearman(x, y)
    np.testing.assert_allclose(got, [stats.spearmanr(a, b).statistic for a, b in zip(x, y)], rtol=1e-12)


def test_kendall_tau_b_hand_cases():
    # one discordant pair (2,3) out of 6: (5 - 1) / 6
    assert kendall_tau_b([1, 2, 3, 4], [1, 3, 2, 4]) == pytest.approx(4 / 6, abs=1e-15)
    # ties: x ties pair (0,1), y ties pair (1,2); 4 concordant, 0 discordant; 5 untied pairs each
    # tau-b = 4 / sqrt(5 · 5) = 0.8
    assert kendall_tau_b([1, 1, 2, 3], [1, 2, 2, 3]) == pytest.approx(0.8, abs=1e-15)
    assert kendall_tau_b([1, 2, 3], [3, 2, 1]) == -1.0
    assert math.isnan(kendall_tau_b([1, 1, 1], [1, 2, 3]))


def test_kendall_tau_b_matches_scipy():
    stats = pytest.importorskip("scipy.stats")
    rng = np.random.default_rng(11)
    for _ in range(20):
        x, y = rng.integers(0, 6, 25), rng.integers(0, 6, 25)
        assert kendall_tau_b(x, y) == pytest.approx(stats.kendalltau(x, y, variant="b").statistic, rel=1e-12)


# --------------------------------------------------------------------------- bootstrap


def rating_table(seed: int, n_queries: int = 30):
    rng = np.random.default_rng(seed)
    per_query = rng.integers(1, 5, n_queries)
    q = np.repeat(np.arange(n_queries), per_query)
    items = np.concatenate([rng.choice(100, k, replace=False) for k in per_query])
    human = rng.integers(0, 6, q.size).astype(float)
    model = human + rng.standard_normal(q.size)
    return q, items, human, model


def test_bootstrap_matches_one_sample_at_a_time():
    q, items, human, model = rating_table(0)
    got = bootstrap_spearman(q, items, human, model, n_samples=150, rng=np.random.default_rng(7))
    ref = reference_bootstrap(q, items, human, model, 150, np.random.default_rng(7))
    assert got == pytest.approx(ref, rel=1e-12)
    assert 0.5 < got[0] < 1.0 and got[1] > 0


def test_bootstrap_sample_structure():
    """Each sample uses half the queries, one rated item each: with a query-constant human score
    and a model that is the query id, every sample has rho exactly 1 -> mean 1, std 0."""
    q, items, _, _ = rating_table(1, n_queries=11)
    human = q.astype(float) * 2.0
    model = q.astype(float) + np.random.default_rng(0).random(q.size) * 0.5  # within-query noise < gap
    assert bootstrap_spearman(q, items, human, model, n_samples=70, rng=np.random.default_rng(1)) == (1.0, 0.0)


def test_bootstrap_is_deterministic_for_a_seed_and_exact_for_identical_scores():
    q, items, human, model = rating_table(2)
    a = bootstrap_spearman(q, items, human, model, n_samples=200, rng=np.random.default_rng(3))
    b = bootstrap_spearman(q, items, human, model, n_samples=200, rng=np.random.default_rng(3))
    c = bootstrap_spearman(q, items, human, model, n_samples=200, rng=np.random.default_rng(4))
    assert a == b and a != c
    assert bootstrap_spearman(q, items, human, human.copy(), n_samples=200, rng=np.random.default_rng(3)) == (1.0, 0.0)


def test_bootstrap_guards():
    q, items, human, model = rating_table(3)
    with pytest.raises(ValueError, match="rated more than once"):
        bootstrap_spearman(np.r_[q, q[:1]], np.r_[items, items[:1]], np.r_[human, 1.0], np.r_[model, 1.0], rng=np.random.default_rng(0))
    with pytest.raises(ValueError, match="at least 4 distinct queries"):
        bootstrap_spearman([0, 1, 2], [0, 0, 0], [1, 2, 3], [1, 2, 3], rng=np.random.default_rng(0))
    with pytest.raises(ValueError, match="NaN"):
        bootstrap_spearman(q, items, human, np.where(q == 0, np.nan, model), rng=np.random.default_rng(0))


# --------------------------------------------------------------------------- BISON, precision/recall


def test_bison_accuracy_counts_ties_as_wrong():
    # right, wrong, tie (wrong), right -> 2 / 4
    assert bison_accuracy([0.9, 0.1, 0.5, 0.3], [0.1, 0.9, 0.5, 0.2]) == 0.5
    with pytest.raises(ValueError, match="NaN"):
        bison_accuracy([np.nan], [0.0])
    with pytest.raises(ValueError, match="equal-length"):
        bison_accuracy([1.0, 2.0], [0.0])


def test_precision_recall_hand_case():
    predicted = [("c1", "i1"), ("c1", "i2"), ("c2", "i1"), ("c2", "i1")]  # duplicate counts once
    verified = [("c1", "i1"), ("c2", "i1"), ("c3", "i9"), ("c4", "i4")]
    # 3 distinct predicted, 2 verified among them -> P = 2/3; 4 verified -> R = 2/4
    assert precision_recall(predicted, verified) == (pytest.approx(2 / 3), 0.5)
    assert precision_recall(np.array([[1, 2], [3, 4]]), [(1, 2)]) == (0.5, 1.0)
    p, r = precision_recall([], [(1, 2)])
    assert math.isnan(p) and r == 0.0
