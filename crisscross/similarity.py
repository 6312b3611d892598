"""Exact top-K cosine neighbours, blockwise: never more than one block of the N×N matrix in memory.

The similarity matrix of N unit rows is symmetric, so only the block pairs (i, j) with j ≥ i
are multiplied; each block gives top-K candidates both to the rows of block i (over the columns
of block j) and to the rows of block j (over the columns of block i, through the transpose).
Partial results are merged with :func:`merge_topk`, which orders by (similarity descending,
column index ascending): a total order, so ties are broken by id (rows are sorted by id) and
the result does not depend on the order in which block pairs finish.  Self-pairs never count.

Selection inside a block is two-level, because a full ``argpartition`` of every B×B block costs
about half as much as the matrix product itself: each row's block is cut into chunks of
``CHUNK`` columns; the K chunks with the largest maxima must hold the row's top K (any other
chunk's maximum is below the K-th chunk maximum, hence below the K-th best value), so only
those K·CHUNK values are ranked.  Rows where chunk maxima tie at the K-th place fall back to
ranking the whole block row.  Memory: O(N·d) for the vectors plus O(B²) for one block.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np

CHUNK = 32
NO_NEIGHBOUR = -1


@dataclass(frozen=True)
class TopK:
    """Neighbours of a run of consecutive rows: ``indices`` / ``scores`` are (rows, K), best first;
    missing entries (fewer than K other rows) have index -1 and score -inf."""

    start: int
    indices: np.ndarray  # int64 column (row) indices into the whole matrix
    scores: np.ndarray  # float32 cosine similarities


def _order_keys(scores: np.ndarray, columns: np.ndarray) -> np.ndarray:
    """int64 keys that sort ascending as (score descending, column ascending)."""
    negated = -(scores.astype(np.float32) + np.float32(0.0))  # +0.0 folds -0.0 into 0.0
    bits = negated.view(np.int32).astype(np.int64)
    monotone = np.where(bits < 0, bits ^ 0x7FFFFFFF, bits)  # float order as signed int order
    return monotone * (1 << 32) + columns.astype(np.int64)


def _keys_to_topk(keys: np.ndarray, scores: np.ndarray, columns: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """Best ``k`` per row of candidate arrays (rows, m), padded when m < k."""
    rows, m = keys.shape
    take = min(k, m)
    if take < m:
        part = np.argpartition(keys, take - 1, axis=1)[:, :take]
    else:
        part = np.broadcast_to(np.arange(m), (rows, m))
    chosen = np.take_along_axis(keys, part, axis=1)
    order = np.take_along_axis(part, np.argsort(chosen, axis=1), axis=1)
    out_idx = np.full((rows, k), NO_NEIGHBOUR, np.int64)
    out_score = np.full((rows, k), -np.inf, np.float32)
    out_idx[:, :take] = np.take_along_axis(columns, order, axis=1)
    out_score[:, :take] = np.take_along_axis(scores, order, axis=1)
    return out_idx, out_score


def block_topk(block: np.ndarray, column_start: int, k: int) -> tuple[np.ndarray, np.ndarray]:
    """Top ``k`` of each row of a similarity block whose columns start at ``column_start``.

    Entries to ignore (self-pairs) must already be ``-inf`` in ``block``.
    """
    rows, width = block.shape
    if width <= k * CHUNK * 2:  # small blocks: rank everything
        columns = np.broadcast_to(np.arange(column_start, column_start + width), (rows, width))
        valid = np.isfinite(block)
        keys = np.where(valid, _order_keys(block, columns), np.iinfo(np.int64).max)
        idx, score = _keys_to_topk(keys, block, columns, k)
        idx[~np.isfinite(score)] = NO_NEIGHBOUR
        return idx, score
    n_chunks = -(-width // CHUNK)
    padded = block
    if width % CHUNK:
        padded = np.full((rows, n_chunks * CHUNK), -np.inf, np.float32)
        padded[:, :width] = block
    chunked = padded.reshape(rows, n_chunks, CHUNK)
    maxima = chunked.max(axis=2)
    kth = np.partition(maxima, n_chunks - k, axis=1)[:, n_chunks - k]
    ties = (maxima >= kth[:, None]).sum(axis=1) > k
    best_chunks = np.argpartition(maxima, n_chunks - k, axis=1)[:, n_chunks - k :]
    best_chunks.sort(axis=1)
    candidates = np.take_along_axis(chunked, best_chunks[:, :, None], axis=1).reshape(rows, k * CHUNK)
    columns = (best_chunks[:, :, None] * CHUNK + np.arange(CHUNK)).reshape(rows, k * CHUNK) + column_start
    keys = np.where(np.isfinite(candidates), _order_keys(candidates, columns), np.iinfo(np.int64).max)
    idx, score = _keys_to_topk(keys, candidates, columns, k)
    if ties.any():
        tied = np.flatnonzero(ties)
        full_idx, full_score = block_topk_dense(block[tied], column_start, k)
        idx[tied], score[tied] = full_idx, full_score
    idx[~np.isfinite(score)] = NO_NEIGHBOUR
    return idx, score


def block_topk_dense(block: np.ndarray, column_start: int, k: int) -> tuple[np.ndarray, np.ndarray]:
    """Reference selection over whole rows (ties at the chunk level, and tests)."""
    rows, width = block.shape
    columns = np.broadcast_to(np.arange(column_start, column_start + width), (rows, width))
    keys = np.where(np.isfinite(block), _order_keys(block, columns), np.iinfo(np.int64).max)
    idx, score = _keys_to_topk(keys, block, columns, k)
    idx[~np.isfinite(score)] = NO_NEIGHBOUR
    return idx, score


def merge_topk(a: TopK, b: TopK) -> TopK:
    """Best K of two candidate lists for the same rows (associative and commutative)."""
    if a.start != b.start or a.indices.shape != b.indices.shape:
        raise ValueError("merge_topk needs candidates for the same rows")
    k = a.indices.shape[1]
    indices = np.concatenate([a.indices, b.indices], axis=1)
    scores = np.concatenate([a.scores, b.scores], axis=1)
    missing = indices == NO_NEIGHBOUR
    keys = np.where(missing, np.iinfo(np.int64).max, _order_keys(scores, np.where(missing, 0, indices)))
    idx, score = _keys_to_topk(keys, scores, indices, k)
    idx[~np.isfinite(score)] = NO_NEIGHBOUR
    return TopK(a.start, idx, score)


def block_pairs(n: int, block: int) -> Iterator[tuple[int, int]]:
    """Row-block pairs (i, j), j ≥ i, covering the upper triangle of an n×n matrix."""
    n_blocks = -(-n // block)
    for i in range(n_blocks):
        for j in range(i, n_blocks):
            yield i, j


def pair_topk(unit: np.ndarray, i: int, j: int, block: int, k: int) -> list[TopK]:
    """Candidates from block pair (i, j): for the rows of block i, and (if j ≠ i) of block j."""
    rows_i = slice(i * block, min((i + 1) * block, len(unit)))
    rows_j = slice(j * block, min((j + 1) * block, len(unit)))
    similarity = unit[rows_i] @ unit[rows_j].T
    if i == j:
        np.fill_diagonal(similarity, -np.inf)
    out = [TopK(rows_i.start, *block_topk(similarity, rows_j.start, k))]
    if i != j:
        out.append(TopK(rows_j.start, *block_topk(np.ascontiguousarray(similarity.T), rows_i.start, k)))
    return out


def exact_topk(unit: np.ndarray, k: int, block: int = 4096) -> tuple[np.ndarray, np.ndarray]:
    """In-process exact top-K of every row of ``unit`` (unit rows, float32): (indices, scores)."""
    unit = np.ascontiguousarray(unit, dtype=np.float32)
    n = len(unit)
    best: dict[int, TopK] = {}
    for i, j in block_pairs(n, block):
        for part in pair_topk(unit, i, j, block, k):
            best[part.start] = merge_topk(best[part.start], part) if part.start in best else part
    if not best:
        return np.zeros((0, k), np.int64), np.zeros((0, k), np.float32)
    ordered = [best[s] for s in sorted(best)]
    return np.concatenate([t.indices for t in ordered]), np.concatenate([t.scores for t in ordered])
