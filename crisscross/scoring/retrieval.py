"""Retrieval metrics: where each query's positives rank in a score matrix, and R@K, mAP@R, R-Precision and PMRP from that.

Retrieval (CxC §4, ECCV Caption §4.1) is computed from a dense score matrix ``scores`` of shape
(queries, gallery), higher = more similar, and the positives of every query.  Positives are held
in a CSR-like :class:`Positives` (``indptr``, ``indices``): 25,000 queries × 5,000 gallery items
would cost 125 MB as a dense boolean mask, but only a few bytes per positive in this form.  A dense
boolean (queries, gallery) mask is accepted anywhere a :class:`Positives` is.

Tie rule (pessimistic, one total order): gallery items are ordered by score descending, and
among items of equal score every non-positive comes before every positive.  The ``j``-th best
positive (1-based) therefore has rank ``j + #{non-positives scoring >= its score}``: a model
gains nothing from constant or tied scores, and the ranks of one query's positives are distinct,
so precision at a rank (mAP@R, R-Precision) is well defined.

Exclusion rule: ``exclude_self[q]`` is the gallery column holding query ``q`` itself (T2T, I2I),
or -1 when the query is not in the gallery.  That column is removed from the gallery for that
query: it never takes a rank and never counts as a hit.  Listing a query as its own positive is
an error.

R rule (mAP@R, R-Precision): by default R is the number of a query's positives *in the gallery*.
A :class:`PositiveRanks` may carry ``totals`` instead, every positive of the query in or out of
the gallery (eccv-caption's rule, ``compat``): a positive outside the gallery never ranks, so it
only lowers the query's mAP@R and R-Precision.  R@K and ranks never depend on it.

Queries without any positive in the gallery are left out of every average and their number is
returned beside the value.  Rates (R@K, mAP@R, R-Precision, PMRP) are fractions in [0, 1], not percent.
Loops run over blocks of rows or samples (bounded memory), never per query in Python; the ranks
of positives, and PMRP's matches among each query's top R, are counted by compiled (numba) passes
over each score row.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np
from numpy.typing import ArrayLike

from crisscross.core.kernels import njit

NO_POSITIVE = 0  # first-positive rank of a query without positives (real ranks start at 1)
NO_SELF = -1  # exclude_self entry of a query that is not in the gallery
BLOCK_ELEMENTS = 1 << 22  # elements of one temporary (rows × gallery) block
SPAN = 64  # scores tested together before any is looked at (rank counting)


@dataclass(frozen=True)
class Positives:
    """Positives per query in CSR form: query ``q`` owns ``indices[indptr[q]:indptr[q + 1]]``
    (gallery columns, sorted ascending, no duplicates: a duplicate would inflate R)."""

    indptr: np.ndarray  # (queries + 1,) int64
    indices: np.ndarray  # (positives,) int64

    def __post_init__(self) -> None:
        indptr = np.asarray(self.indptr, dtype=np.int64)
        indices = np.asarray(self.indices, dtype=np.int64)
        object.__setattr__(self, "indptr", indptr)
        object.__setattr__(self, "indices", indices)
        if indptr.ndim != 1 or indices.ndim != 1 or indptr.size == 0:
            raise ValueError("Positives needs a 1-D indptr of length queries + 1 and 1-D indices")
        if indptr[0] != 0 or indptr[-1] != indices.size or (np.diff(indptr) < 0).any():
            raise ValueError("Positives.indptr must start at 0, never decrease and end at len(indices)")
        if indices.size and indices.min() < 0:
            raise ValueError(f"Positives.indices holds a negative gallery index ({indices.min()})")
        same_row = np.repeat(np.arange(self.n_queries), np.diff(indptr))
        if indices.size > 1 and ((np.diff(indices) <= 0) & (same_row[1:] == same_row[:-1])).any():
            raise ValueError("Positives.indices must be sorted ascending without duplicates within a query")

    @property
    def n_queries(self) -> int:
        return self.indptr.size - 1

    @property
    def counts(self) -> np.ndarray:
        """Number of positives of every query (R in mAP@R)."""
        return np.diff(self.indptr)

    @property
    def rows(self) -> np.ndarray:
        """Query of every stored positive."""
        return np.repeat(np.arange(self.n_queries, dtype=np.int64), self.counts)

    def rows_slice(self, lo: int, hi: int) -> Positives:
        """The positives of queries ``lo:hi``, renumbered from 0 (for scoring a block of rows)."""
        start, stop = self.indptr[lo], self.indptr[hi]
        return Positives(self.indptr[lo : hi + 1] - start, self.indices[start:stop])

    @classmethod
    def from_pairs(cls, query_index: ArrayLike, gallery_index: ArrayLike, n_queries: int) -> Positives:
        """From parallel (query row, gallery column) arrays; duplicate pairs are merged."""
        q = np.asarray(query_index, dtype=np.int64).ravel()
        g = np.asarray(gallery_index, dtype=np.int64).ravel()
        if q.shape != g.shape:
            raise ValueError(f"query_index has {q.size} entries but gallery_index has {g.size}")
        if q.size and (q.min() < 0 or q.max() >= n_queries):
            raise ValueError(f"query_index must lie in [0, {n_queries}) (rows of the score matrix)")
        if g.size and g.min() < 0:
            raise ValueError(f"gallery_index holds a negative gallery index ({g.min()})")
        order = np.lexsort((g, q))
        q, g = q[order], g[order]
        keep = np.ones(q.size, dtype=bool)
        keep[1:] = (q[1:] != q[:-1]) | (g[1:] != g[:-1])
        q, g = q[keep], g[keep]
        indptr = np.zeros(n_queries + 1, dtype=np.int64)
        np.cumsum(np.bincount(q, minlength=n_queries), out=indptr[1:])
        return cls(indptr, g)

    @classmethod
    def from_lists(cls, lists: Sequence[Iterable[int]]) -> Positives:
        """From one iterable of gallery columns per query."""
        groups = [np.asarray(list(items), dtype=np.int64) for items in lists]
        q = np.repeat(np.arange(len(groups), dtype=np.int64), [len(x) for x in groups])
        g = np.concatenate(groups) if groups else np.zeros(0, np.int64)
        return cls.from_pairs(q, g, len(groups))

    @classmethod
    def from_dense(cls, mask: ArrayLike) -> Positives:
        """From a boolean (queries, gallery) mask."""
        m = np.asarray(mask)
        if m.ndim != 2 or m.dtype != np.bool_:
            raise ValueError(f"a dense positives mask must be a 2-D boolean array, got {m.dtype} {m.shape}")
        q, g = np.nonzero(m)
        return cls.from_pairs(q, g, m.shape[0])


@dataclass(frozen=True)
class PositiveRanks:
    """1-based ranks of every query's positives, ascending within each query (CSR like
    :class:`Positives`; ``ranks[indptr[q]:indptr[q + 1]]`` belong to query ``q``).

    ``totals`` (optional, one per query, >= its ranked positives): R of mAP@R and R-Precision when
    positives outside the gallery count too (see the module's R rule); ``None``: R = ``counts``."""

    indptr: np.ndarray  # (queries + 1,) int64
    ranks: np.ndarray  # (positives,) int64
    totals: np.ndarray | None = None  # (queries,) int64

    def __post_init__(self) -> None:
        if self.totals is None:
            return
        totals = np.asarray(self.totals)
        if totals.shape != (self.indptr.size - 1,) or not np.issubdtype(totals.dtype, np.integer):
            raise ValueError(f"totals must be one integer per query ({self.indptr.size - 1}), got {totals.dtype} {totals.shape}")
        totals = totals.astype(np.int64)
        if (totals < self.counts).any():
            bad = int(np.argmax(totals < self.counts))
            raise ValueError(f"totals of query {bad} is {int(totals[bad])}, below its {int(self.counts[bad])} ranked positives")
        object.__setattr__(self, "totals", totals)

    @property
    def counts(self) -> np.ndarray:
        return np.diff(self.indptr)

    @property
    def r(self) -> np.ndarray:
        """R of every query for mAP@R and R-Precision: ``totals`` when given, else ``counts``."""
        return self.counts if self.totals is None else self.totals

    def with_totals(self, totals: ArrayLike | None) -> PositiveRanks:
        """The same ranks with R = ``totals`` (every positive of each query, in or out of the gallery)."""
        return PositiveRanks(self.indptr, self.ranks, None if totals is None else np.asarray(totals))

    @classmethod
    def concatenate(cls, parts: Sequence[PositiveRanks]) -> PositiveRanks:
        """Blocks of consecutive query rows, in order, as one (``totals`` kept when every part has them)."""
        counts = np.concatenate([p.counts for p in parts]) if parts else np.zeros(0, np.int64)
        indptr = np.zeros(counts.size + 1, dtype=np.int64)
        np.cumsum(counts, out=indptr[1:])
        ranks = np.concatenate([p.ranks for p in parts]) if parts else np.zeros(0, np.int64)
        with_totals = [p.totals is not None for p in parts]
        if any(with_totals) and not all(with_totals):
            raise ValueError("cannot concatenate ranks with and without totals")
        totals = np.concatenate([p.totals for p in parts]) if parts and all(with_totals) else None
        return cls(indptr, ranks, totals)

    @property
    def first(self) -> np.ndarray:
        """Rank of each query's best positive; :data:`NO_POSITIVE` (0) when it has none."""
        counts = self.counts
        first = np.full(counts.size, NO_POSITIVE, dtype=np.int64)
        has = counts > 0
        first[has] = self.ranks[self.indptr[:-1][has]]
        return first


# --------------------------------------------------------------------------- validation


def _check_scores(scores: ArrayLike, nan: bool = True) -> np.ndarray:
    """Shape and dtype; with ``nan``, no NaN either (a pass over every score)."""
    s = np.asarray(scores)
    if s.ndim != 2:
        raise ValueError(f"scores must be a 2-D (queries, gallery) matrix, got shape {s.shape}")
    if not (np.issubdtype(s.dtype, np.floating) or np.issubdtype(s.dtype, np.integer)):
        raise ValueError(f"scores must be numeric, got dtype {s.dtype}")
    if nan and np.issubdtype(s.dtype, np.floating) and np.isnan(s).any():
        rows = np.unique(np.nonzero(np.isnan(s))[0])
        raise ValueError(f"scores contain NaN (first in query rows {rows[:5].tolist()}); NaN cannot be ranked")
    return s


def _as_positives(positives: Positives | ArrayLike, shape: tuple[int, int]) -> Positives:
    """Normalise to :class:`Positives` and check it against the (queries, gallery) score shape."""
    n_queries, n_gallery = shape
    if not isinstance(positives, Positives):
        mask = np.asarray(positives)
        if mask.ndim == 2 and mask.shape != shape:
            hint = " (it looks transposed)" if mask.shape == shape[::-1] else ""
            raise ValueError(
                f"positives mask has shape {mask.shape} but scores is (queries={n_queries}, "
                f"gallery={n_gallery}){hint}: rows are queries, columns gallery items"
            )
        positives = Positives.from_dense(mask)
    if positives.n_queries != n_queries:
        hint = " (scores looks transposed)" if positives.n_queries == n_gallery else ""
        raise ValueError(
            f"scores has {n_queries} rows (axis 0 = queries) but positives describe "
            f"{positives.n_queries} queries{hint}; pass scores as (queries, gallery)"
        )
    if positives.indices.size and positives.indices.max() >= n_gallery:
        raise ValueError(
            f"positives index gallery item {int(positives.indices.max())} but scores has only {n_gallery} columns (axis 1 = gallery items)"
        )
    return positives


def _check_exclude(exclude_self: ArrayLike | None, n_queries: int, n_gallery: int) -> np.ndarray | None:
    if exclude_self is None:
        return None
    e = np.asarray(exclude_self)
    if e.shape != (n_queries,) or not np.issubdtype(e.dtype, np.integer):
        raise ValueError(
            f"exclude_self must be {n_queries} integer gallery columns (one per query row, -1 = none), got {e.dtype} {e.shape}"
        )
    e = e.astype(np.int64)
    if ((e < NO_SELF) | (e >= n_gallery)).any():
        raise ValueError(f"exclude_self entries must lie in [-1, {n_gallery}) (gallery columns)")
    return e


# --------------------------------------------------------------------------- retrieval


def ranks_of_positives(scores: ArrayLike, positives: Positives | ArrayLike, exclude_self: ArrayLike | None = None) -> PositiveRanks:
    """Pessimistic 1-based rank of every positive of every query (see the module's tie rule).

    The ``j``-th best positive of a query ranks ``j + #{non-positive, non-excluded gallery items
    with score >= its score}``, counted for all of a query's positives in one compiled pass over
    its score row (:func:`_count_ranks`): no sort of the row, no copy of it.
    """
    s = _check_scores(scores, nan=False)
    pos = _as_positives(positives, s.shape)
    n_queries, n_gallery = s.shape
    excl = _check_exclude(exclude_self, n_queries, n_gallery)
    rows = pos.rows
    if excl is not None and (pos.indices == excl[rows]).any():
        bad = int(rows[np.argmax(pos.indices == excl[rows])])
        raise ValueError(f"query {bad} lists itself (exclude_self column) as a positive")
    s = np.ascontiguousarray(s, dtype=np.float32 if s.dtype == np.float16 else s.dtype)
    ranks = np.empty(pos.indices.size, dtype=np.int64)
    every = np.full(n_queries, NO_SELF, dtype=np.int64) if excl is None else excl
    if _count_ranks(s, pos.indptr, pos.indices, every, ranks) >= 0:
        _check_scores(s)  # raises, naming the rows with NaN
    return PositiveRanks(pos.indptr.copy(), ranks)


@njit
def _count_ranks(scores: np.ndarray, indptr: np.ndarray, indices: np.ndarray, exclude: np.ndarray, ranks: np.ndarray) -> int:
    """Ranks of every query's positives, best first, into ``ranks`` (laid out as ``indices``).

    Per row: its positives' scores sorted descending, then one pass over the row a SPAN at a
    time: a SPAN with no entry >= the worst positive is skipped by one branch-free test;
    otherwise its entries >= each positive's score are counted, from the worst positive up until
    none is (each count a branch-free loop).  The positives and self are then taken out of those
    counts.  Returns the first row holding NaN (-1: none), which cannot be ranked.
    """
    width = scores.shape[1]
    for q in range(scores.shape[0]):
        row = scores[q]
        lo, m = indptr[q], indptr[q + 1] - indptr[q]
        best_first = np.sort(row[indices[lo : lo + m]])[::-1]
        at_or_above = np.zeros(m, dtype=np.int64)
        for first in range(0, width, SPAN):
            values = row[first : first + SPAN]
            flagged = False
            for c in range(len(values)):  # branch-free tests on 1-D slices: vectorised
                flagged |= values[c] != values[c]
            if flagged:
                return q
            for t in range(m - 1, -1, -1):
                count = 0
                threshold = best_first[t]
                for c in range(len(values)):
                    count += values[c] >= threshold
                if count == 0:
                    break
                at_or_above[t] += count
        if m == 0:
            continue
        if exclude[q] >= 0:
            for t in range(m):
                at_or_above[t] -= row[exclude[q]] >= best_first[t]
        run_end = m  # positives scoring >= best_first[t]: the end of t's tie run
        for t in range(m - 1, -1, -1):
            if t < m - 1 and best_first[t] != best_first[t + 1]:
                run_end = t + 1
            ranks[lo + t] = t + 1 + at_or_above[t] - run_end
    return -1


def recall_at_k(first_positive_rank: ArrayLike, ks: Sequence[int] = (1, 5, 10)) -> tuple[dict[int, float], int]:
    """Share of queries whose best positive ranks <= K (Karpathy & Li; CxC §4).

    Queries with rank :data:`NO_POSITIVE` (0) are left out; returns ({K: rate}, their number).
    """
    ranks, missing = _present_ranks(first_positive_rank)
    if any(int(k) < 1 for k in ks):
        raise ValueError(f"every K must be >= 1, got {tuple(ks)}")
    rates = {int(k): (float(np.mean(ranks <= k)) if ranks.size else float("nan")) for k in ks}
    return rates, missing


def median_rank(first_positive_rank: ArrayLike) -> tuple[float, int]:
    """Median rank of the best positive (CxC "med. r"; mean of the two middle ranks when the count
    is even); returns (value, queries without positive)."""
    ranks, missing = _present_ranks(first_positive_rank)
    return (float(np.median(ranks)) if ranks.size else float("nan")), missing


def mean_rank(first_positive_rank: ArrayLike) -> tuple[float, int]:
    """Mean rank of the best positive; returns (value, queries without positive)."""
    ranks, missing = _present_ranks(first_positive_rank)
    return (float(np.mean(ranks)) if ranks.size else float("nan")), missing


def _present_ranks(first_positive_rank: ArrayLike) -> tuple[np.ndarray, int]:
    r = np.asarray(first_positive_rank)
    if r.ndim != 1 or not np.issubdtype(r.dtype, np.integer) or (r < 0).any():
        raise ValueError("first_positive_rank must be a 1-D array of ranks >= 1 (0 = query without positive)")
    present = r != NO_POSITIVE
    return r[present], int(r.size - np.count_nonzero(present))


def _hits_within_r(ranked: PositiveRanks) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Per stored positive: query row, 1-based index j among the query's positives, whether its
    rank is <= R; per query: R (module's R rule) and whether it has a ranked positive."""
    counts = ranked.counts
    r = ranked.r
    rows = np.repeat(np.arange(counts.size, dtype=np.int64), counts)
    j = np.arange(ranked.ranks.size, dtype=np.int64) - ranked.indptr[rows] + 1
    return rows, j, ranked.ranks <= r[rows], r, counts > 0


def map_at_r(ranked: PositiveRanks) -> tuple[float, int]:
    """mAP@R (Musgrave et al.; ECCV Caption §4.1): per query (1/R) Σ_{i<=R} P(i)·rel(i) with R its
    number of positives (module's R rule); rewards putting *all* positives first, not just one.
    Returns (mean over queries with a positive in the gallery, queries without)."""
    rows, j, inside, r, has = _hits_within_r(ranked)
    precision = np.where(inside, j / ranked.ranks, 0.0)
    per_query = np.bincount(rows, weights=precision, minlength=r.size)[has] / r[has]
    return (float(per_query.mean()) if per_query.size else float("nan")), int(np.count_nonzero(~has))


def r_precision(ranked: PositiveRanks) -> tuple[float, int]:
    """R-Precision: share of a query's top R (R = its positives, module's R rule) that are
    positive; returns (mean over queries with a positive in the gallery, queries without)."""
    rows, _, inside, r, has = _hits_within_r(ranked)
    per_query = np.bincount(rows, weights=inside, minlength=r.size)[has] / r[has]
    return (float(per_query.mean()) if per_query.size else float("nan")), int(np.count_nonzero(~has))


def retrieval_metrics(
    scores: ArrayLike,
    positives: Positives | ArrayLike,
    exclude_self: ArrayLike | None = None,
    ks: Sequence[int] = (1, 5, 10),
) -> dict[str, float]:
    """R@K, median / mean rank of the best positive, mAP@R and R-Precision in one pass.

    ``queries`` counts the queries that have a positive (the denominator of every value);
    ``queries_without_positive`` the ones left out.
    """
    return metrics_from_ranks(ranks_of_positives(scores, positives, exclude_self), ks)


def metrics_from_ranks(ranked: PositiveRanks, ks: Sequence[int] = (1, 5, 10)) -> dict[str, float]:
    """The :func:`retrieval_metrics` values from ranks already computed (e.g. block by block)."""
    first = ranked.first
    recalls, missing = recall_at_k(first, ks)
    out = {f"R@{k}": v for k, v in recalls.items()}
    out["median_rank"] = median_rank(first)[0]
    out["mean_rank"] = mean_rank(first)[0]
    out["mAP@R"] = map_at_r(ranked)[0]
    out["R-Precision"] = r_precision(ranked)[0]
    out["queries"] = float(first.size - missing)
    out["queries_without_positive"] = float(missing)
    return out


def plausible_matches(query_labels: ArrayLike, gallery_labels: ArrayLike, zeta: int) -> np.ndarray:
    """Boolean (queries, gallery) mask of plausible matches (Chun et al., via ECCV Caption §2.1):
    label vectors y1, y2 in {0,1}^C that differ in at most ``zeta`` positions."""
    q, g = _check_labels(query_labels, gallery_labels)
    return _hamming_distances(q, g) <= _check_zeta(zeta)


def _hamming_distances(query_labels: np.ndarray, gallery_labels: np.ndarray) -> np.ndarray:
    """(queries, gallery) Hamming distances of boolean label rows, as float32: float32 products go
    through BLAS (integer ones do not) and are exact for 0/1 entries up to 2^24 classes."""
    qf, gf = query_labels.astype(np.float32), gallery_labels.astype(np.float32)
    return qf.sum(1)[:, None] + gf.sum(1)[None, :] - 2 * (qf @ gf.T)


def _check_labels(query_labels: ArrayLike, gallery_labels: ArrayLike) -> tuple[np.ndarray, np.ndarray]:
    q, g = np.asarray(query_labels), np.asarray(gallery_labels)
    if q.ndim != 2 or g.ndim != 2 or q.dtype != np.bool_ or g.dtype != np.bool_:
        raise ValueError("labels must be 2-D boolean (items, classes) matrices")
    if q.shape[1] != g.shape[1]:
        raise ValueError(f"query labels have {q.shape[1]} classes but gallery labels {g.shape[1]}")
    return q, g


def _check_zeta(zeta: int) -> int:
    if int(zeta) < 0:
        raise ValueError(f"zeta must be >= 0, got {zeta}")
    return int(zeta)


@dataclass(frozen=True)
class LabelMatches:
    """What PMRP needs of the class labels of some queries and a gallery, prepared once per task:
    the labels packed eight classes to a byte (the compiled pass measures the distance of the few
    items it looks at, not of the whole gallery), and per ζ the number of gallery items within ζ
    of each query (R before the cap; an excluded column is still counted here)."""

    zetas: tuple[int, ...]
    query_bits: np.ndarray  # (queries, bytes) uint8
    gallery_bits: np.ndarray  # (gallery, bytes) uint8
    counts: np.ndarray  # (zetas, queries) int64

    @classmethod
    def of(cls, query_labels: ArrayLike, gallery_labels: ArrayLike, zetas: Sequence[int]) -> LabelMatches:
        """Counted between distinct label sets (a few thousand in COCO, whatever the gallery's
        size), so the distances cost a product of those, not of every query and item."""
        q, g = _check_labels(query_labels, gallery_labels)
        zetas = tuple(_check_zeta(z) for z in zetas)
        query_bits, gallery_bits = np.packbits(q, axis=1), np.packbits(g, axis=1)
        _, query_first, query_set = np.unique(query_bits, axis=0, return_index=True, return_inverse=True)  # packed: a short sort
        _, gallery_first, set_sizes = np.unique(gallery_bits, axis=0, return_index=True, return_counts=True)
        query_sets, gallery_sets = q[query_first], g[gallery_first]
        counts = np.empty((len(zetas), len(query_sets)), np.int64)
        step = max(1, BLOCK_ELEMENTS // max(len(gallery_sets), 1))
        for lo in range(0, len(query_sets), step):
            distances = _hamming_distances(query_sets[lo : lo + step], gallery_sets)
            for row, zeta in enumerate(zetas):
                counts[row, lo : lo + step] = (distances <= zeta) @ set_sizes
        return cls(zetas, query_bits, gallery_bits, counts[:, query_set.reshape(-1)])

    def rows(self, lo: int, hi: int) -> LabelMatches:
        """The same for queries ``lo:hi`` (a block of score rows)."""
        return LabelMatches(self.zetas, self.query_bits[lo:hi], self.gallery_bits, self.counts[:, lo:hi])


def pmrp(
    scores: ArrayLike,
    query_labels: ArrayLike,
    gallery_labels: ArrayLike,
    zeta: int = 0,
    r_cap: int = 50,
    exclude_self: ArrayLike | None = None,
) -> tuple[float, int]:
    """Plausible-Match R-Precision with R = min(#plausible matches, r_cap) (ECCV Caption §4.1,
    which caps R at 50 because pseudo-positives can number in the thousands).

    A gallery item is a plausible match when its label vector differs from the query's in at most
    ``zeta`` classes (ζ = 0: identical label sets).  Per query: plausible items among the top R
    under the pessimistic tie rule, divided by R (:func:`pmrp_hits`).  Returns (mean over queries
    with R > 0, queries with no plausible match).
    """
    s = _check_scores(scores, nan=False)
    q_lab, g_lab = _check_labels(query_labels, gallery_labels)
    n_queries, n_gallery = s.shape
    if q_lab.shape[0] != n_queries or g_lab.shape[0] != n_gallery:
        raise ValueError(
            f"scores is (queries={n_queries}, gallery={n_gallery}) but labels describe "
            f"{q_lab.shape[0]} queries and {g_lab.shape[0]} gallery items"
        )
    hits, r = pmrp_hits(s, LabelMatches.of(q_lab, g_lab, (zeta,)), r_cap, exclude_self)
    return mean_pmrp(hits[0], r[0])


def pmrp_hits(
    scores: np.ndarray, matches: LabelMatches, r_cap: int, exclude_self: ArrayLike | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """Per ζ and query (row of ``scores``): the plausible matches among its top R under the
    pessimistic tie rule, and R = min(its plausible matches outside the excluded column, r_cap);
    two (len(zetas), queries) integer arrays, computed without copying or sorting a row.

    One compiled pass per row (:func:`_count_pmrp`) keeps its best min(r_cap, gallery) scores;
    the R-th best is the threshold t: the items above t all count, the slots left at t go to
    non-matches first.  Only when the ties at t may run past the kept scores is the row read again.
    """
    working = np.float32 if scores.dtype in (np.float16, np.float32) else np.float64  # exact for the input
    s = np.ascontiguousarray(scores, dtype=working)
    n_queries, n_gallery = s.shape
    if matches.query_bits.shape[0] != n_queries or matches.gallery_bits.shape[0] != n_gallery:
        described = (matches.query_bits.shape[0], matches.gallery_bits.shape[0])
        raise ValueError(f"scores is (queries={n_queries}, gallery={n_gallery}) but the label matches describe {described}")
    if int(r_cap) < 1:
        raise ValueError(f"r_cap must be >= 1, got {r_cap}")
    excl = _check_exclude(exclude_self, n_queries, n_gallery)  # the compiled pass trusts its columns
    exclude = np.full(n_queries, NO_SELF, np.int64) if excl is None else excl
    hits = np.empty((len(matches.zetas), n_queries), np.int64)
    r = np.empty_like(hits)
    zetas = np.asarray(matches.zetas, np.int64)
    counts = np.ascontiguousarray(matches.counts)
    if _count_pmrp(s, matches.query_bits, matches.gallery_bits, exclude, counts, zetas, min(int(r_cap), n_gallery), hits, r) >= 0:
        _check_scores(s)  # raises, naming the rows with NaN
    return hits, r


def mean_pmrp(hits: np.ndarray, r: np.ndarray) -> tuple[float, int]:
    """PMRP of one ζ from :func:`pmrp_hits`: the mean of hits / R over the queries with R > 0, and
    the number of queries without."""
    has = r > 0
    return (float((hits[has] / r[has]).mean()) if has.any() else float("nan")), int(np.count_nonzero(~has))


_BITS_SET = np.array([bin(byte).count("1") for byte in range(256)], dtype=np.int64)  # per byte value


@njit
def _label_distance(a: np.ndarray, b: np.ndarray) -> int:
    """Hamming distance of two packed label rows."""
    distance = 0
    for byte in range(a.shape[0]):
        distance += _BITS_SET[a[byte] ^ b[byte]]
    return distance


@njit
def _count_pmrp(
    scores: np.ndarray,
    query_bits: np.ndarray,
    gallery_bits: np.ndarray,
    exclude: np.ndarray,
    counts: np.ndarray,
    zetas: np.ndarray,
    cap: int,
    hits: np.ndarray,
    r: np.ndarray,
) -> int:
    """:func:`pmrp_hits` into ``hits`` and ``r``; returns the first row holding NaN (-1: none).

    Per row: one branch-free pass takes the maximum of every SPAN of scores; the ``length``-th
    largest of those maxima (``length`` = min(cap, items)) is a floor no kept score lies below,
    since that many items reach it.  Only the SPANs whose maximum reaches the floor are read
    again, keeping the best ``length`` scores unordered with the slot of the lowest (the floor
    rises to it).  An item equal to the floor that is left out, or put out by a better one,
    marks that value as tied beyond the kept scores.  The kept scores are then sorted and, per ζ,
    read at R: t = the R-th best, the items above t, the matches among them and the non-matches
    tied at t; only when t is a value marked so is the row read again to count its ties.
    """
    width = scores.shape[1]
    n_spans = -(-width // SPAN)
    span_max = np.empty(n_spans, scores.dtype)
    best = np.empty(cap, scores.dtype)
    columns = np.empty(cap, np.int64)
    distances = np.empty(cap, np.int64)
    bounds = np.array([-np.inf, np.nan]).astype(scores.dtype)  # in the scores' type: comparisons stay vectorised
    for q in range(scores.shape[0]):
        row, query, skip = scores[q], query_bits[q], exclude[q]
        for span in range(n_spans):
            values = row[span * SPAN : (span + 1) * SPAN]
            flagged, most = False, values[0]
            for c in range(len(values)):  # branch-free on a 1-D slice: vectorised
                flagged |= values[c] != values[c]
                most = values[c] if values[c] > most else most
            if flagged:
                return q
            span_max[span] = most
        if skip >= 0:  # its own SPAN's maximum without it
            most = bounds[0]
            for column in range(skip - skip % SPAN, min(skip - skip % SPAN + SPAN, width)):
                if column != skip and row[column] > most:
                    most = row[column]
            span_max[skip // SPAN] = most
        length = min(cap, width - (1 if skip >= 0 else 0))
        floor = np.partition(span_max, n_spans - length)[n_spans - length] if 0 < length <= n_spans else bounds[0]
        kept, lowest = 0, 0
        dropped_tie = bounds[1]  # the floor when an item equal to it was left out (NaN: none; equals no score)
        for span in range(n_spans):
            if span_max[span] < floor:
                continue
            for column in range(span * SPAN, min((span + 1) * SPAN, width)):
                value = row[column]
                if column == skip or value < floor:
                    continue
                if kept < length:
                    best[kept], columns[kept] = value, column
                    kept += 1
                elif value > floor:
                    dropped_tie = floor  # the lowest kept score is put out
                    best[lowest], columns[lowest] = value, column
                else:
                    dropped_tie = floor
                    continue
                if kept == length:
                    lowest = np.argmin(best[:length])
                    floor = best[lowest]
        order = np.argsort(best[:length])[::-1]
        top = best[:length][order]
        for i in range(length):
            distances[i] = _label_distance(query, gallery_bits[columns[order[i]]])
        self_distance = _label_distance(query, gallery_bits[skip]) if skip >= 0 else -1
        for z in range(zetas.shape[0]):
            zeta = zetas[z]
            big_r = min(counts[z, q] - (1 if 0 <= self_distance <= zeta else 0), cap)
            r[z, q] = big_r
            hits[z, q] = 0
            if big_r == 0:
                continue
            t = top[big_r - 1]
            run_start = big_r - 1  # the items above t are top[:run_start]
            while run_start > 0 and top[run_start - 1] == t:
                run_start -= 1
            matched = 0
            for i in range(run_start):
                matched += distances[i] <= zeta
            tied_negatives = 0
            if t == dropped_tie:
                for column in range(width):
                    if row[column] == t and column != skip:
                        tied_negatives += _label_distance(query, gallery_bits[column]) > zeta
            else:
                for i in range(run_start, length):
                    if top[i] != t:
                        break
                    tied_negatives += distances[i] > zeta
            hits[z, q] = matched + max(big_r - run_start - tied_negatives, 0)
    return -1
