"""Retrieval metrics: hand-computed cases from the papers' definitions, vectorised code against
per-query references on seeded random data (with many ties), guards."""

from __future__ import annotations

import math

import numpy as np
import pytest

from benchmarks.reference import reference_map_r, reference_pmrp, reference_pmrp_hits, reference_ranks
from crisscross.scoring import retrieval
from crisscross.scoring.retrieval import (
    NO_POSITIVE,
    LabelMatches,
    Positives,
    map_at_r,
    mean_rank,
    median_rank,
    plausible_matches,
    pmrp,
    pmrp_hits,
    r_precision,
    ranks_of_positives,
    recall_at_k,
    retrieval_metrics,
)


def random_case(seed: int, n_q: int, n_g: int, tied: bool, with_self: bool):
    rng = np.random.default_rng(seed)
    scores = rng.integers(0, 4, (n_q, n_g)).astype(np.float32) if tied else rng.standard_normal((n_q, n_g))
    mask = rng.random((n_q, n_g)) < 0.15
    mask[rng.random(n_q) < 0.2] = False  # some queries without positives
    excl = None
    if with_self:
        excl = rng.integers(-1, n_g, n_q)
        mask[np.arange(n_q)[excl >= 0], excl[excl >= 0]] = False
    return scores, mask, excl


# --------------------------------------------------------------------------- Positives


def test_positives_constructors_agree_and_canonicalise():
    mask = np.array([[False, True, True], [False, False, False], [True, False, False]])
    a = Positives.from_dense(mask)
    b = Positives.from_lists([[2, 1, 2], [], [0]])  # unsorted, duplicate 2 merged
    c = Positives.from_pairs([2, 0, 0], [0, 2, 1], n_queries=3)
    for p in (a, b, c):
        np.testing.assert_array_equal(p.indptr, [0, 2, 2, 3])
        np.testing.assert_array_equal(p.indices, [1, 2, 0])
    np.testing.assert_array_equal(a.counts, [2, 0, 1])


def test_positives_reject_unsorted_or_duplicate_indices():
    with pytest.raises(ValueError, match="sorted ascending without duplicates"):
        Positives(np.array([0, 2]), np.array([3, 3]))
    with pytest.raises(ValueError, match="indptr must start at 0"):
        Positives(np.array([0, 3]), np.array([1, 2]))


# --------------------------------------------------------------------------- ranks, hand cases


def test_ranks_hand_case_with_ties_and_self_exclusion():
    scores = np.array(
        [
            [0.9, 0.5, 0.5, 0.1],  # positives {2}: ties with column 1 (negative) -> rank 3
            [0.2, 0.8, 0.8, 0.8],  # positives {1, 3}, tied with negative 2: order 2,1,3 -> ranks 2, 3
            [0.7, 0.6, 0.5, 0.4],  # no positives
            [0.3, 0.9, 0.3, 0.3],  # self = column 1 (best score, removed); positive {0} ties 2 and 3 -> rank 3
        ]
    )
    pos = Positives.from_lists([[2], [1, 3], [], [0]])
    ranked = ranks_of_positives(scores, pos, exclude_self=[-1, -1, -1, 1])
    np.testing.assert_array_equal(ranked.indptr, [0, 1, 3, 3, 4])
    np.testing.assert_array_equal(ranked.ranks, [3, 2, 3, 3])
    np.testing.assert_array_equal(ranked.first, [3, 2, NO_POSITIVE, 3])
    # without the exclusion, query 3's self column (0.9) ranks above the positive: rank 4
    assert ranks_of_positives(scores, pos).ranks[-1] == 4


def test_constant_scores_put_every_positive_last():
    scores = np.zeros((1, 5))
    ranked = ranks_of_positives(scores, Positives.from_lists([[0, 4]]))
    np.testing.assert_array_equal(ranked.ranks, [4, 5])  # 3 negatives first, then the 2 positives


def test_recall_median_mean_hand_case():
    first = np.array([1, 3, 0, 7, 2, 0])  # two queries without positive
    recalls, missing = recall_at_k(first, ks=(1, 5, 10))
    assert missing == 2
    # ranks 1, 3, 7, 2: <=1 -> 1/4, <=5 -> 3/4, <=10 -> 4/4
    assert recalls == {1: 0.25, 5: 0.75, 10: 1.0}
    assert median_rank(first) == (2.5, 2)  # sorted 1, 2, 3, 7 -> (2 + 3) / 2
    assert mean_rank(first) == (3.25, 2)  # 13 / 4


def test_all_queries_without_positive_give_nan_not_zero():
    recalls, missing = recall_at_k(np.array([0, 0]))
    assert missing == 2 and all(math.isnan(v) for v in recalls.values())
    assert math.isnan(median_rank(np.array([0]))[0])


# --------------------------------------------------------------------------- mAP@R, R-Precision


@pytest.mark.parametrize(
    ("positive_ranks", "expected_map", "expected_rp"),
    [
        # ECCV Caption §4.1 human-study cases, R = 8 positives
        # (A) only top-1 wrong: positives at 2..9; (1/8) Σ_{j=1..7} j/(j+1) = 0.66027 ("66.0")
        (list(range(2, 10)), sum(j / (j + 1) for j in range(1, 8)) / 8, 7 / 8),
        # (B) only top-1 correct: (1/8)(1/1) = 12.5
        ([1, 20, 21, 22, 23, 24, 25, 26], 1 / 8, 1 / 8),
        # (C) top-1..5 wrong, 6..8 right: (1/8)(1/6 + 2/7 + 3/8) = 10.3
        ([6, 7, 8, 20, 21, 22, 23, 24], (1 / 6 + 2 / 7 + 3 / 8) / 8, 3 / 8),
        # (D) only the 5th correct: (1/8)(1/5) = 2.5
        ([5, 20, 21, 22, 23, 24, 25, 26], (1 / 5) / 8, 1 / 8),
    ],
)
def test_map_at_r_matches_the_eccv_human_study_numbers(positive_ranks, expected_map, expected_rp):
    n_gallery = 30
    scores = np.zeros((1, n_gallery))
    scores[0] = -np.arange(n_gallery, dtype=float)  # column c has rank c + 1
    pos = Positives.from_lists([[r - 1 for r in positive_ranks]])
    ranked = ranks_of_positives(scores, pos)
    np.testing.assert_array_equal(ranked.ranks, positive_ranks)
    assert map_at_r(ranked) == (pytest.approx(expected_map, abs=1e-15), 0)
    assert r_precision(ranked) == (pytest.approx(expected_rp, abs=1e-15), 0)


def test_eccv_rounded_values():
    scores = -np.arange(30, dtype=float)[None, :]
    values = [
        map_at_r(ranks_of_positives(scores, Positives.from_lists([[r - 1 for r in case]])))[0]
        for case in (range(2, 10), [1, *range(20, 27)], [6, 7, 8, *range(20, 25)], [5, *range(20, 27)])
    ]
    assert [round(100 * v, 1) for v in values] == [66.0, 12.5, 10.3, 2.5]


def test_retrieval_metrics_facade_hand_case():
    scores = np.array(
        [
            [0.9, 0.1, 0.5],  # positives {0, 2}: ranks 1, 2 -> AP 1, RP 1
            [0.9, 0.1, 0.5],  # positives {1}: rank 3 -> AP 0, RP 0
            [0.9, 0.1, 0.5],  # no positives
        ]
    )
    out = retrieval_metrics(scores, Positives.from_lists([[0, 2], [1], []]), ks=(1, 2))
    assert out == {
        "R@1": 0.5,  # first ranks 1, 3
        "R@2": 0.5,
        "median_rank": 2.0,
        "mean_rank": 2.0,
        "mAP@R": 0.5,
        "R-Precision": 0.5,
        "queries": 2.0,
        "queries_without_positive": 1.0,
    }


# --------------------------------------------------------------------------- against references


@pytest.mark.parametrize(("seed", "tied", "with_self"), [(0, True, False), (1, True, True), (2, False, True), (3, False, False)])
def test_ranks_and_metrics_match_per_query_reference(seed, tied, with_self, monkeypatch):
    monkeypatch.setattr(retrieval, "BLOCK_ELEMENTS", 97)  # force many uneven blocks
    scores, mask, excl = random_case(seed, n_q=60, n_g=23, tied=tied, with_self=with_self)
    ranked = ranks_of_positives(scores, mask, exclude_self=excl)
    ref = reference_ranks(scores, mask, excl)
    np.testing.assert_array_equal(ranked.counts, [len(r) for r in ref])
    np.testing.assert_array_equal(ranked.ranks, np.concatenate(ref))
    first = np.array([r[0] if len(r) else 0 for r in ref])
    np.testing.assert_array_equal(ranked.first, first)

    ref_map, ref_rp = reference_map_r(ref)
    n_missing = sum(len(r) == 0 for r in ref)
    assert n_missing > 0
    assert map_at_r(ranked) == (pytest.approx(ref_map, rel=1e-12), n_missing)
    assert r_precision(ranked) == (pytest.approx(ref_rp, rel=1e-12), n_missing)
    present = first[first > 0]
    out = retrieval_metrics(scores, mask, exclude_self=excl)
    for k in (1, 5, 10):
        assert out[f"R@{k}"] == pytest.approx(np.mean(present <= k), rel=1e-12)
    assert out["median_rank"] == float(np.median(present))
    assert out["mean_rank"] == pytest.approx(present.mean(), rel=1e-12)
    assert out["queries"] == len(present) and out["queries_without_positive"] == n_missing


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int16])
def test_compiled_rank_pass_matches_reference_across_spans_and_dtypes(dtype):
    """Rows wider than the pass's SPAN (and not a multiple of it), heavy ties, self excluded,
    many positives per query (worst positive far down), in every dtype a score matrix comes in."""
    rng = np.random.default_rng(11)
    n_q, n_g = 40, 3 * retrieval.SPAN + 17
    scores = rng.integers(-3, 4, (n_q, n_g)).astype(dtype)
    mask = rng.random((n_q, n_g)) < rng.uniform(0.0, 0.5, (n_q, 1))
    excl = rng.integers(-1, n_g, n_q)
    mask[np.arange(n_q)[excl >= 0], excl[excl >= 0]] = False
    ranked = ranks_of_positives(scores, mask, exclude_self=excl)
    ref = reference_ranks(scores, mask, excl)
    np.testing.assert_array_equal(ranked.counts, [len(r) for r in ref])
    np.testing.assert_array_equal(ranked.ranks, np.concatenate(ref))


def test_nan_is_refused_even_in_a_row_without_positives():
    scores = np.zeros((3, 2 * retrieval.SPAN + 5), np.float32)
    scores[2, retrieval.SPAN + 3] = np.nan
    with pytest.raises(ValueError, match=r"scores contain NaN \(first in query rows \[2\]\)"):
        ranks_of_positives(scores, Positives.from_lists([[0], [1], []]))


# --------------------------------------------------------------------------- PMRP


def test_plausible_matches_by_hamming_distance():
    q = np.array([[1, 1, 0]], dtype=bool)
    g = np.array([[1, 1, 0], [1, 0, 0], [0, 0, 1], [1, 1, 1]], dtype=bool)
    # Hamming distances 0, 1, 3, 1
    np.testing.assert_array_equal(plausible_matches(q, g, 0), [[True, False, False, False]])
    np.testing.assert_array_equal(plausible_matches(q, g, 1), [[True, True, False, True]])


def test_pmrp_hand_case_with_tie_and_cap():
    labels = np.array([[1, 0], [1, 0], [0, 1], [1, 0], [1, 0]], dtype=bool)
    # query 0 (labels [1,0]); gallery 0..4; zeta 0 -> plausible {0, 1, 3, 4}
    scores = np.array([[0.9, 0.2, 0.8, 0.8, 0.1]])
    # R = min(4, 50) = 4; pessimistic order: 0 (0.9), 2 (0.8, non-match first), 3, 1 -> hits 0, 3, 1 = 3/4
    assert pmrp(scores, labels[:1], labels, zeta=0) == (0.75, 0)
    # cap 2: top 2 = 0, 2 -> 1/2
    assert pmrp(scores, labels[:1], labels, zeta=0, r_cap=2) == (0.5, 0)
    # query is gallery item 0 and excluded: plausible {1, 3, 4}, R = 3; order 2, 3, 1 -> hits 3, 1 = 2/3
    assert pmrp(scores, labels[:1], labels, zeta=0, exclude_self=[0]) == (pytest.approx(2 / 3), 0)


@pytest.mark.parametrize(("seed", "zeta", "cap", "tied"), [(0, 0, 50, True), (1, 1, 3, True), (2, 1, 5, False), (3, 2, 50, False)])
def test_pmrp_matches_per_query_reference(seed, zeta, cap, tied, monkeypatch):
    monkeypatch.setattr(retrieval, "BLOCK_ELEMENTS", 101)
    rng = np.random.default_rng(seed)
    n_q, n_g = 40, 30
    q_lab = rng.random((n_q, 4)) < 0.4
    g_lab = rng.random((n_g, 4)) < 0.4
    scores = rng.integers(0, 3, (n_q, n_g)).astype(float) if tied else rng.standard_normal((n_q, n_g))
    excl = rng.integers(-1, n_g, n_q)
    got = pmrp(scores, q_lab, g_lab, zeta=zeta, r_cap=cap, exclude_self=excl)
    ref = reference_pmrp(scores, q_lab, g_lab, zeta, cap, excl)
    assert got[1] == ref[1]
    assert got[0] == pytest.approx(ref[0], rel=1e-12)


def pmrp_case(seed: int, n_q: int, n_g: int, dtype: type, ties: int | None):
    """Labels with repeated sets (few classes), scores tied on a small grid (``ties`` values) or
    not, a few -inf scores, self columns excluded for most queries."""
    rng = np.random.default_rng(seed)
    q_lab = rng.random((n_q, 5)) < 0.35
    g_lab = rng.random((n_g, 5)) < 0.35
    scores = (rng.integers(0, ties, (n_q, n_g)) if ties else rng.standard_normal((n_q, n_g))).astype(dtype)
    if np.issubdtype(dtype, np.floating):
        scores[rng.random((n_q, n_g)) < 0.03] = -np.inf
    return scores, q_lab, g_lab, rng.integers(-1, n_g, n_q)


@pytest.mark.parametrize(
    ("seed", "dtype", "ties", "cap"),
    [
        (0, np.float32, 300, 50),  # ties everywhere
        (1, np.float32, 400, 2),  # runs tied at the R-th score longer than the kept scores
        (2, np.float64, None, 7),
        (3, np.float16, 200, 13),
        (4, np.int16, 100, 5),
        (5, np.float32, None, 2000),  # R up to every item
    ],
)
def test_pmrp_hits_equal_a_per_query_count_for_every_zeta(seed, dtype, ties, cap):
    """Every query's hits and R, for ζ = 0, 1, 2 in one call, against the lexsort-ordered
    per-query count; rows wider than the compiled pass's SPAN and not a multiple of it."""
    n_q, n_g = 30, 12 * retrieval.SPAN + 11
    scores, q_lab, g_lab, excl = pmrp_case(seed, n_q, n_g, dtype, ties)
    zetas = (0, 1, 2)
    hits, r = pmrp_hits(scores, LabelMatches.of(q_lab, g_lab, zetas), cap, excl)
    for row, zeta in enumerate(zetas):
        want = reference_pmrp_hits(scores, q_lab, g_lab, zeta, cap, excl)
        np.testing.assert_array_equal(hits[row], [h for h, _ in want])
        np.testing.assert_array_equal(r[row], [n for _, n in want])
    assert (hits > 0).any() and (hits < r).any()  # the case is not trivial


def test_pmrp_hits_when_the_excluded_item_scores_highest():
    """T2T and I2I: a query's own column holds its best score.  Here each SPAN has one high score
    and the query's own SPAN none but itself, so a floor that counted the query would sit above
    the R-th best of the others."""
    rng = np.random.default_rng(3)
    n_q, spans = 12, 8
    width = spans * retrieval.SPAN
    scores = rng.uniform(-1.0, -0.9, (n_q, width)).astype(np.float32)
    rows = np.arange(n_q)[:, None]
    scores[rows, np.arange(spans) * retrieval.SPAN + rng.integers(0, retrieval.SPAN, (n_q, spans))] = rng.uniform(0.3, 0.6, (n_q, spans))
    excl = rng.integers(0, width, n_q)
    own = excl - excl % retrieval.SPAN
    scores[rows, own[:, None] + np.arange(retrieval.SPAN)] = rng.uniform(-1.0, -0.9, (n_q, retrieval.SPAN))
    scores[np.arange(n_q), excl] = 1.0
    q_lab, g_lab = rng.random((n_q, 3)) < 0.5, rng.random((width, 3)) < 0.5
    hits, r = pmrp_hits(scores, LabelMatches.of(q_lab, g_lab, (0, 1, 2)), 4, excl)
    for row, zeta in enumerate((0, 1, 2)):
        want = reference_pmrp_hits(scores, q_lab, g_lab, zeta, 4, excl)
        np.testing.assert_array_equal(hits[row], [h for h, _ in want])
        np.testing.assert_array_equal(r[row], [n for _, n in want])


def test_pmrp_hits_of_a_query_whose_ties_outrun_the_kept_scores():
    """Eight items tie at the top, R = 2: the two places go to the five non-matches first, wherever
    they stand in the row; one match ranks above the tie."""
    labels = np.array([[1, 0], [0, 1]], dtype=bool)
    g_lab = labels[[0, 0, 1, 1, 0, 1, 1, 1, 0]]  # items 0, 1, 4 and 8 match query 0
    scores = np.array([[0.5, 0.9, 0.9, 0.9, 0.5, 0.9, 0.9, 0.9, 1.0]], dtype=np.float32)
    # R = min(4, 2) = 2: item 8 (1.0, a match), then the tie at 0.9 gives its slot to a non-match
    hits, r = pmrp_hits(scores, LabelMatches.of(labels[:1], g_lab, (0,)), 2)
    assert (hits.tolist(), r.tolist()) == ([[1]], [[2]])
    # the best item excluded: R = 2 again, both places at the tie, both non-matches
    hits, r = pmrp_hits(scores, LabelMatches.of(labels[:1], g_lab, (0,)), 2, np.array([8]))
    assert (hits.tolist(), r.tolist()) == ([[0]], [[2]])


def test_label_matches_count_every_gallery_item_within_zeta():
    rng = np.random.default_rng(7)
    q_lab, g_lab = rng.random((40, 6)) < 0.3, rng.random((90, 6)) < 0.3
    matches = LabelMatches.of(q_lab, g_lab, (0, 1, 3))
    for row, zeta in enumerate((0, 1, 3)):
        np.testing.assert_array_equal(matches.counts[row], plausible_matches(q_lab, g_lab, zeta).sum(1))
    part = matches.rows(5, 9)
    np.testing.assert_array_equal(part.counts, matches.counts[:, 5:9])
    np.testing.assert_array_equal(part.query_bits, np.packbits(q_lab[5:9], axis=1))
    with pytest.raises(ValueError, match="zeta must be >= 0"):
        LabelMatches.of(q_lab, g_lab, (1, -1))


def test_pmrp_hits_refuses_what_its_compiled_pass_would_read_out_of_bounds():
    labels = np.ones((3, 1), dtype=bool)
    matches = LabelMatches.of(labels[:2], labels, (0,))
    scores = np.zeros((2, 3), np.float32)
    with pytest.raises(ValueError, match=r"exclude_self entries must lie in \[-1, 3\)"):
        pmrp_hits(scores, matches, 5, np.array([0, 3]))
    with pytest.raises(ValueError, match="r_cap must be >= 1"):
        pmrp_hits(scores, matches, 0)
    with pytest.raises(ValueError, match=r"scores is \(queries=2, gallery=2\) but the label matches describe \(2, 3\)"):
        pmrp_hits(scores[:, :2], matches, 5)


def test_pmrp_refuses_nan_naming_the_row_even_in_an_excluded_column():
    labels = np.ones((3, 1), dtype=bool)
    scores = np.zeros((3, 2 * retrieval.SPAN + 5), np.float32)
    scores[1, retrieval.SPAN + 3] = np.nan
    with pytest.raises(ValueError, match=r"scores contain NaN \(first in query rows \[1\]\)"):
        pmrp(scores, labels, np.ones((scores.shape[1], 1), dtype=bool), exclude_self=[-1, retrieval.SPAN + 3, -1])


# --------------------------------------------------------------------------- guards


def test_guards_name_the_axes():
    scores = np.zeros((3, 5))
    with pytest.raises(
        ValueError, match=r"scores has 3 rows \(axis 0 = queries\) but positives describe 5 queries \(scores looks transposed\)"
    ):
        ranks_of_positives(scores, Positives.from_lists([[0]] * 5))
    with pytest.raises(ValueError, match=r"shape \(5, 3\).*it looks transposed"):
        ranks_of_positives(scores, np.zeros((5, 3), dtype=bool))
    with pytest.raises(ValueError, match=r"positives index gallery item 7 but scores has only 5 columns \(axis 1 = gallery items\)"):
        ranks_of_positives(scores, Positives.from_lists([[0], [7], []]))
    bad = scores.copy()
    bad[1, 2] = np.nan
    with pytest.raises(ValueError, match=r"scores contain NaN \(first in query rows \[1\]\)"):
        retrieval_metrics(bad, Positives.from_lists([[0], [1], [2]]))
    with pytest.raises(ValueError, match="lists itself"):
        ranks_of_positives(scores, Positives.from_lists([[0], [1], [2]]), exclude_self=[-1, 1, -1])
    with pytest.raises(ValueError, match=r"exclude_self entries must lie in \[-1, 5\)"):
        ranks_of_positives(scores, Positives.from_lists([[0], [1], [2]]), exclude_self=[-1, 5, -1])
    with pytest.raises(ValueError, match="2-D"):
        retrieval_metrics(np.zeros(5), np.zeros(5, dtype=bool))
    labels = np.zeros((3, 2), dtype=bool)
    with pytest.raises(ValueError, match=r"scores is \(queries=3, gallery=5\) but labels describe 3 queries and 3 gallery"):
        pmrp(scores, labels, labels)
    with pytest.raises(ValueError, match="every K must be >= 1"):
        recall_at_k(np.array([1, 2]), ks=(0,))
