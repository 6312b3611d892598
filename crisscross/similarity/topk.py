"""Exact top-K cosine neighbours, blockwise: never more than one block of the N×N matrix in memory.

The similarity matrix of N unit rows is symmetric, so only the block pairs (i, j) with j ≥ i
are multiplied; each block gives top-K candidates both to the rows of block i (over the columns
of block j) and to the rows of block j (over the columns of block i, through the transpose).
Partial results are merged with :func:`merge_topk`, which orders by (similarity descending,
column index ascending): a total order, so ties are broken by id (rows are sorted by id) and
the result does not depend on the order in which block pairs finish.  Self-pairs never count.

Block pairs run on a thread pool, each with single-threaded BLAS (see :func:`run_pairs`).
Selection inside a block is one compiled pass (numba) per side: each row (or column) keeps a
sorted list of its K best and only values above its current K-th best are inserted, so the
pass costs about one comparison per entry, against the ~7 ns per entry that numpy's
``argpartition`` and gathers cost (more than the matrix product itself).  Entries arrive in
increasing id order and equal values never displace earlier ones, which is the tie rule.
Memory: O(N·d) for the vectors plus O(B²) for one block.
"""

from __future__ import annotations

import os
from collections import deque
from collections.abc import Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass

import numba
import numpy as np
from threadpoolctl import threadpool_limits

NO_NEIGHBOUR = -1
SPAN = 64  # entries tested together before any is inserted


@dataclass(frozen=True)
class TopK:
    """Neighbours of a run of consecutive rows: ``indices`` / ``scores`` are (rows, K), best first;
    missing entries (fewer than K other rows) have index -1 and score -inf."""

    start: int
    indices: np.ndarray  # int64 column (row) indices into the whole matrix
    scores: np.ndarray  # float32 cosine similarities


def _order_keys(scores: np.ndarray, columns: np.ndarray) -> np.ndarray:
    """int64 keys that sort ascending as (score descending, column ascending); -inf sorts last."""
    negated = -(scores.astype(np.float32, copy=False) + np.float32(0.0))  # +0.0 folds -0.0 into 0.0
    bits = negated.view(np.int32)
    monotone = bits ^ ((bits >> 31) & np.int32(0x7FFFFFFF))  # float order as signed int order
    return (monotone.astype(np.int64) << 32) | columns.astype(np.int64)


def _rank(scores: np.ndarray, columns: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """Best ``k`` per row of candidate arrays (rows, m), padded with (-1, -inf) when m < k."""
    keys = _order_keys(scores, columns)
    rows, m = keys.shape
    take = min(k, m)
    part = np.argpartition(keys, take - 1, axis=1)[:, :take] if take < m else np.broadcast_to(np.arange(m), (rows, m))
    order = np.take_along_axis(part, np.argsort(np.take_along_axis(keys, part, axis=1), axis=1), axis=1)
    out_idx = np.full((rows, k), NO_NEIGHBOUR, np.int64)
    out_score = np.full((rows, k), -np.inf, np.float32)
    out_idx[:, :take] = np.take_along_axis(columns, order, axis=1)
    out_score[:, :take] = np.take_along_axis(scores, order, axis=1)
    out_idx[~np.isfinite(out_score)] = NO_NEIGHBOUR
    return out_idx, out_score


def block_topk_dense(block: np.ndarray, column_start: int, k: int) -> tuple[np.ndarray, np.ndarray]:
    """The same selection with numpy sorting: the reference the compiled pass is tested against."""
    rows, width = block.shape
    columns = np.broadcast_to(np.arange(column_start, column_start + width, dtype=np.int64), (rows, width))
    return _rank(block, columns, k)


@numba.njit(cache=True, nogil=True)
def _insert(scores: np.ndarray, indices: np.ndarray, value: float, index: int) -> None:
    """Insert into a row's best-first list; equal values stay behind earlier (lower) ids."""
    position = scores.shape[0] - 1
    while position > 0 and scores[position - 1] < value:
        scores[position] = scores[position - 1]
        indices[position] = indices[position - 1]
        position -= 1
    scores[position] = value
    indices[position] = index


@numba.njit(cache=True, nogil=True)
def _rows_topk(block: np.ndarray, column_start: int, scores: np.ndarray, indices: np.ndarray) -> None:
    k = scores.shape[1]
    width = block.shape[1]
    for row in range(block.shape[0]):
        floor = -np.inf  # the row's K-th best so far; only larger values get in
        for first in range(0, width, SPAN):
            last = min(first + SPAN, width)
            peak = block[row, first]
            for column in range(first + 1, last):  # a branch-free maximum: vectorised
                peak = max(peak, block[row, column])
            if peak <= floor:
                continue
            for column in range(first, last):
                value = block[row, column]
                if value > floor:
                    _insert(scores[row], indices[row], value, column_start + column)
                    floor = scores[row, k - 1]


@numba.njit(cache=True, nogil=True)
def _columns_topk(block: np.ndarray, row_start: int, scores: np.ndarray, indices: np.ndarray) -> None:
    """Top-K of every column, walking rows in order inside stripes of columns."""
    k = scores.shape[1]
    width = block.shape[1]
    n_stripes = (width + SPAN - 1) // SPAN
    for s in range(n_stripes):
        first, last = s * SPAN, min((s + 1) * SPAN, width)
        floors = np.full(last - first, -np.inf, np.float32)  # each column's K-th best so far
        for row in range(block.shape[0]):
            above = False
            for column in range(first, last):  # branch-free test first: vectorised
                above |= block[row, column] > floors[column - first]
            if not above:
                continue
            for column in range(first, last):
                value = block[row, column]
                if value > floors[column - first]:
                    _insert(scores[column], indices[column], value, row_start + row)
                    floors[column - first] = scores[column, k - 1]


def block_topk(block: np.ndarray, start: int, k: int, *, transposed: bool = False) -> tuple[np.ndarray, np.ndarray]:
    """Top ``k`` of each row of a similarity block whose columns start at ``start``.

    With ``transposed``, the top ``k`` of each *column* (whose rows start at ``start``): the
    lists for the other block of a pair, read in place instead of copying the transpose.
    Entries to ignore (self-pairs) must already be ``-inf``.
    """
    block = np.ascontiguousarray(block, dtype=np.float32)
    n = block.shape[1] if transposed else block.shape[0]
    scores = np.full((n, k), -np.inf, np.float32)
    indices = np.full((n, k), NO_NEIGHBOUR, np.int64)
    if transposed:
        _columns_topk(block, start, scores, indices)
    else:
        _rows_topk(block, start, scores, indices)
    return indices, scores


def merge_topk(a: TopK, b: TopK) -> TopK:
    """Best K of two candidate lists for the same rows (associative and commutative)."""
    if a.start != b.start or a.indices.shape != b.indices.shape:
        raise ValueError("merge_topk needs candidates for the same rows")
    k = a.indices.shape[1]
    indices = np.concatenate([a.indices, b.indices], axis=1)
    scores = np.concatenate([a.scores, b.scores], axis=1)
    return TopK(a.start, *_rank(scores, np.where(indices == NO_NEIGHBOUR, np.iinfo(np.int32).max, indices), k))


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
        out.append(TopK(rows_j.start, *block_topk(similarity, rows_i.start, k, transposed=True)))
    return out


def run_pairs(unit: np.ndarray, pairs: Sequence[tuple[int, int]], block: int, k: int, threads: int) -> Iterator[TopK]:
    """Candidates of many block pairs, one pair per thread, each single-threaded, in pair order.

    Single-threaded matrix products are what make the output independent of the runner: a
    multi-threaded BLAS may round a dot product differently from a single-threaded one, and
    near-equal similarities would then swap.  Threads over pairs use the cores instead, without
    BLAS and selection threads spinning against each other.  Pairs are submitted a few at a
    time, so only a few blocks' candidates wait in memory for the caller to merge them.
    """

    def one(pair: tuple[int, int]) -> list[TopK]:
        return pair_topk(unit, *pair, block, k)

    threads = max(1, threads)
    with threadpool_limits(1, user_api="blas"), ThreadPoolExecutor(threads) as pool:
        pending: deque[Future[list[TopK]]] = deque()
        for pair in pairs:
            pending.append(pool.submit(one, pair))
            if len(pending) > 2 * threads:
                yield from pending.popleft().result()
        while pending:
            yield from pending.popleft().result()


def choose_block(n: int, largest: int) -> int:
    """Rows per block: ``largest`` for big N; for small N about N/2 (a multiple of 256, at least
    1,024), so the diagonal blocks, half of whose products are wasted, stay a small share and
    there are enough pairs to keep the threads busy."""
    return max(1, min(largest, max(1024, -(-(n // 2) // 256) * 256)))


def exact_topk(unit: np.ndarray, k: int, block: int = 4096, threads: int | None = None) -> tuple[np.ndarray, np.ndarray]:
    """In-process exact top-K of every row of ``unit`` (unit rows, float32): (indices, scores);
    ``block`` is the largest block (see :func:`choose_block`)."""
    unit = np.ascontiguousarray(unit, dtype=np.float32)
    block = choose_block(len(unit), block)
    best: dict[int, TopK] = {}
    for part in run_pairs(unit, list(block_pairs(len(unit), block)), block, k, threads or os.cpu_count() or 1):
        best[part.start] = merge_topk(best[part.start], part) if part.start in best else part
    if not best:
        return np.zeros((0, k), np.int64), np.zeros((0, k), np.float32)
    ordered = [best[s] for s in sorted(best)]
    return np.concatenate([t.indices for t in ordered]), np.concatenate([t.scores for t in ordered])
