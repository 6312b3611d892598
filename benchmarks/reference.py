"""Straightforward per-query reference implementations of the metrics: one query, one sample at a
time, written to be obviously right rather than fast.  The tests check the vectorised code in
:mod:`crisscross.scoring.retrieval` and :mod:`crisscross.scoring.paired` against them, and the evaluation benchmark times them beside it."""

from __future__ import annotations

import numpy as np

from crisscross.scoring.paired import BOOTSTRAP_CHUNK, spearman


def reference_ranks(scores: np.ndarray, mask: np.ndarray, exclude_self: np.ndarray | None) -> list[np.ndarray]:
    """Per query: drop the self column, order by (score desc, non-positives before positives),
    and read off the 1-based positions of the positives: the pessimistic tie rule, literally."""
    out = []
    for q in range(scores.shape[0]):
        keep = np.ones(scores.shape[1], dtype=bool)
        if exclude_self is not None and exclude_self[q] >= 0:
            keep[exclude_self[q]] = False
        s, p = scores[q, keep], mask[q, keep]
        order = np.lexsort((p, -s))  # primary: score descending; then False (negative) first
        out.append(np.flatnonzero(p[order]) + 1)
    return out


def reference_map_r(ranks: list[np.ndarray]) -> tuple[float, float]:
    """mAP@R and R-Precision by walking positions 1..R of every query."""
    aps, rps = [], []
    for r in ranks:
        big_r = len(r)
        if big_r == 0:
            continue
        rel = np.zeros(big_r + 1, dtype=bool)
        rel[[x for x in r if x <= big_r]] = True
        hits, ap = 0, 0.0
        for i in range(1, big_r + 1):
            if rel[i]:
                hits += 1
                ap += hits / i
        aps.append(ap / big_r)
        rps.append(hits / big_r)
    return float(np.mean(aps)), float(np.mean(rps))


def reference_pmrp_hits(scores, q_lab, g_lab, zeta, cap, exclude_self) -> list[tuple[int, int]]:
    """Per query (hits, R): drop the self column, mark the items whose labels differ in at most
    ``zeta`` classes, order by (score desc, non-matches before matches) and count the matches in
    the first R = min(matches, cap) places."""
    out = []
    for q in range(scores.shape[0]):
        pm = np.array([np.count_nonzero(q_lab[q] != g) <= zeta for g in g_lab], dtype=bool)
        keep = np.ones(scores.shape[1], dtype=bool)
        if exclude_self is not None and exclude_self[q] >= 0:
            keep[exclude_self[q]] = False
        s, p = scores[q, keep], pm[keep]
        r = min(int(p.sum()), cap)
        order = np.lexsort((p, -s))
        out.append((int(p[order][:r].sum()), r))
    return out


def reference_pmrp(scores, q_lab, g_lab, zeta, cap, exclude_self) -> tuple[float, int]:
    per_query = reference_pmrp_hits(scores, q_lab, g_lab, zeta, cap, exclude_self)
    values = [hits / r for hits, r in per_query if r]
    return float(np.mean(values)), sum(1 for _, r in per_query if not r)


def reference_bootstrap(q, items, human, model, n_samples, rng):
    """One sample at a time with the same draws as the vectorised code (chunks of 64)."""
    uq, q_idx = np.unique(q, return_inverse=True)
    half = uq.size // 2
    rows_of = [np.flatnonzero(q_idx == k) for k in range(uq.size)]
    rhos = []
    for lo in range(0, n_samples, BOOTSTRAP_CHUNK):
        c = min(BOOTSTRAP_CHUNK, n_samples - lo)
        keys, u = rng.random((c, uq.size)), rng.random((c, half))
        for s in range(c):
            chosen = np.argpartition(keys[s], half - 1)[:half]
            rows = [rows_of[k][int(u[s, i] * len(rows_of[k]))] for i, k in enumerate(chosen)]
            rhos.append(spearman(human[rows], model[rows]))
    return float(np.mean(rhos)), float(np.std(rhos))


def reference_retrieval(
    scores: np.ndarray, mask: np.ndarray, exclude_self: np.ndarray | None, ks: tuple[int, ...] = (1, 5, 10)
) -> dict[str, float]:
    """R@K, median / mean rank of the first positive, mAP@R and R-Precision, query by query."""
    ranks = [r for r in reference_ranks(scores, mask, exclude_self) if len(r)]
    first = np.array([r[0] for r in ranks])
    out = {f"R@{k}": float(np.mean(first <= k)) for k in ks}
    out["median_rank"] = float(np.median(first))
    out["mean_rank"] = float(np.mean(first))
    out["mAP@R"], out["R-Precision"] = reference_map_r(ranks)
    return out
