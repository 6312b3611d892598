"""Metrics of paired values: model scores against people's (Spearman, CxC's bootstrap Spearman,
Kendall's tau-b), a target's score against its decoy's (BISON accuracy), and one set of positive
pairs against another (precision and recall).

Rates (BISON accuracy, precision, recall) are fractions in [0, 1], not percent.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import numpy as np
from numpy.typing import ArrayLike

BOOTSTRAP_CHUNK = 64  # bootstrap samples drawn together (fixed: results depend on it per seed)


# --------------------------------------------------------------------------- correlation


def spearman(x: ArrayLike, y: ArrayLike) -> np.ndarray | float:
    """Spearman's rho along the last axis: Pearson's r of average ranks (NaN for constant input)."""
    a, b = np.asarray(x), np.asarray(y)
    if a.shape != b.shape or a.ndim == 0 or a.shape[-1] < 2:
        raise ValueError(f"spearman needs two arrays of one shape with >= 2 values, got {a.shape} and {b.shape}")
    from scipy.stats import rankdata  # scipy (0.6 s) loads only in the stages that correlate

    rx, ry = rankdata(a, method="average", axis=-1), rankdata(b, method="average", axis=-1)
    dx = rx - rx.mean(axis=-1, keepdims=True)
    dy = ry - ry.mean(axis=-1, keepdims=True)
    with np.errstate(invalid="ignore", divide="ignore"):
        rho = (dx * dy).sum(-1) / np.sqrt((dx * dx).sum(-1) * (dy * dy).sum(-1))
    return float(rho) if np.ndim(rho) == 0 else rho


def bootstrap_spearman(
    query_ids: ArrayLike,
    item_ids: ArrayLike,
    human: ArrayLike,
    model: ArrayLike,
    n_samples: int = 1000,
    rng: np.random.Generator | None = None,
) -> tuple[float, float]:
    """CxC §4 sampled bootstrap Spearman: (mean, population std) over ``n_samples`` samples.

    Dense annotations make pairs sharing a query correlated, so each sample takes half the
    distinct queries (floor, without replacement) and one rated item per chosen query, uniformly,
    then Spearman (average ranks) between human and model scores.  Samples are drawn in fixed
    chunks of :data:`BOOTSTRAP_CHUNK`, so one seed always gives the same result.
    """
    q, it = np.asarray(query_ids).ravel(), np.asarray(item_ids).ravel()
    h, m = np.asarray(human, dtype=np.float64).ravel(), np.asarray(model, dtype=np.float64).ravel()
    if not (q.size == it.size == h.size == m.size):
        raise ValueError(f"query_ids, item_ids, human, model differ in length: {q.size}, {it.size}, {h.size}, {m.size}")
    if np.isnan(h).any() or np.isnan(m).any():
        raise ValueError("human and model scores must not contain NaN")
    if int(n_samples) < 1:
        raise ValueError(f"n_samples must be >= 1, got {n_samples}")
    rng = np.random.default_rng() if rng is None else rng
    _, q_idx = np.unique(q, return_inverse=True)
    items, i_idx = np.unique(it, return_inverse=True)
    if np.unique(q_idx.astype(np.int64) * items.size + i_idx).size != q.size:
        raise ValueError("a (query, item) pair is rated more than once; aggregate ratings first")
    counts = np.bincount(q_idx)
    n_queries = counts.size
    half = n_queries // 2
    if half < 2:
        raise ValueError(f"need at least 4 distinct queries (half of them >= 2), got {n_queries}")
    by_query = np.argsort(q_idx, kind="stable")
    first_row = np.cumsum(counts) - counts
    rhos = np.empty(int(n_samples))
    for lo in range(0, int(n_samples), BOOTSTRAP_CHUNK):
        c = min(BOOTSTRAP_CHUNK, int(n_samples) - lo)
        chosen = np.argpartition(rng.random((c, n_queries)), half - 1, axis=1)[:, :half]
        offset = np.minimum((rng.random((c, half)) * counts[chosen]).astype(np.int64), counts[chosen] - 1)
        rows = by_query[first_row[chosen] + offset]
        rhos[lo : lo + c] = spearman(h[rows], m[rows])
    return float(rhos.mean()), float(rhos.std())


def kendall_tau_b(x: ArrayLike, y: ArrayLike) -> float:
    """Kendall's tau-b (ECCV Caption Table 5 compares model rankings under two metrics):
    (concordant - discordant) / sqrt((n0 - ties_x)(n0 - ties_y)), by scipy.  NaN if either is constant."""
    a, b = np.asarray(x, dtype=np.float64).ravel(), np.asarray(y, dtype=np.float64).ravel()
    if a.size != b.size or a.size < 2:
        raise ValueError(f"kendall_tau_b needs two equal-length sequences of >= 2 values, got {a.size} and {b.size}")
    if np.isnan(a).any() or np.isnan(b).any():
        raise ValueError("kendall_tau_b inputs must not contain NaN")
    if np.all(a == a[0]) or np.all(b == b[0]):
        return float("nan")
    from scipy.stats import kendalltau  # scipy (0.6 s) loads only in the stages that correlate

    return float(kendalltau(a, b, variant="b").statistic)


# --------------------------------------------------------------------------- selection, agreement


def bison_accuracy(score_target: ArrayLike, score_decoy: ArrayLike) -> float:
    """BISON accuracy (§4.3): share of (caption, target, decoy) triples where the target scores
    strictly higher.  A tie counts as wrong: a model that cannot tell the images apart did not
    select the target."""
    t, d = np.asarray(score_target, dtype=np.float64), np.asarray(score_decoy, dtype=np.float64)
    if t.shape != d.shape or t.ndim != 1 or t.size == 0:
        raise ValueError(f"score_target and score_decoy must be equal-length non-empty 1-D arrays, got {t.shape}, {d.shape}")
    if np.isnan(t).any() or np.isnan(d).any():
        raise ValueError("BISON scores must not contain NaN")
    return float(np.mean(t > d))


def precision_recall(
    predicted_pairs: Iterable[tuple[object, object]], verified_pairs: Iterable[tuple[object, object]]
) -> tuple[float, float]:
    """Precision and recall of one benchmark's positive (query, item) pairs against verified
    positives (ECCV Caption Table 2: CxC precise but incomplete, PM complete but imprecise).
    Duplicates count once; NaN when the corresponding set is empty."""
    predicted = {tuple(p) for p in _pairs(predicted_pairs)}
    verified = {tuple(p) for p in _pairs(verified_pairs)}
    common = len(predicted & verified)
    precision = common / len(predicted) if predicted else float("nan")
    recall = common / len(verified) if verified else float("nan")
    return precision, recall


def _pairs(pairs: Iterable[tuple[object, object]]) -> Iterable[Sequence[object]]:
    if isinstance(pairs, np.ndarray):
        if pairs.ndim != 2 or pairs.shape[1] != 2:
            raise ValueError(f"a pair array must have shape (n, 2), got {pairs.shape}")
        return pairs.tolist()
    out = list(pairs)
    if any(len(p) != 2 for p in out):  # type: ignore[arg-type]
        raise ValueError("every pair must be (query, item)")
    return out
