"""Exact top-K cosine neighbours, blockwise: never more than one block of the N×N matrix in memory.

The similarity matrix of N unit rows is symmetric, so only the block pairs (i, j) with j ≥ i
are multiplied; each block gives top-K candidates both to the rows of block i (over the columns
of block j) and to the rows of block j (over the columns of block i: the block's columns).
Partial results are merged with :func:`merge_topk`, which orders by (similarity descending,
column index ascending): a total order, so ties are broken by id (rows are sorted by id) and
the result does not depend on the order in which block pairs finish.  Self-pairs never count.

Block pairs run on a thread pool, each with single-threaded BLAS writing into a buffer the
thread keeps (no page faults of a fresh block per pair), see :func:`run_pairs`.  Selection is one
compiled pass (numba) over the block for its rows and its columns together: an entry is looked
at only when it beats its row's or its column's threshold, tested a SPAN of entries at a time,
branch-free.  A threshold is the larger of the list's own K-th best so far and the row's K-th
best over the blocks already merged (a lower bound of its final K-th best, published by the
merging thread; entries equal to it still get in, for the tie rule).  Diagonal pairs run first,
so after them about K / B of each block's entries pass the test and the pass costs about two
vectorised comparisons per entry.  Entries arrive in increasing id order and equal values never displace
earlier ones, which is the tie rule.  Memory: O(N·d) for the vectors, O(N·K) for the lists and
one B×B buffer per thread.
"""

from __future__ import annotations

import os
import threading
from collections import deque
from collections.abc import Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass

import numpy as np
from threadpoolctl import threadpool_limits

from crisscross.core.kernels import njit

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


@njit
def _insert(scores: np.ndarray, indices: np.ndarray, value: float, index: int) -> None:
    """Insert into a row's best-first list; equal values stay behind earlier (lower) ids."""
    position = scores.shape[0] - 1
    while position > 0 and scores[position - 1] < value:
        scores[position] = scores[position - 1]
        indices[position] = indices[position - 1]
        position -= 1
    scores[position] = value
    indices[position] = index


@njit
def _select(
    block: np.ndarray,
    row_start: int,
    column_start: int,
    row_lower: np.ndarray,
    column_lower: np.ndarray,
    row_scores: np.ndarray,
    row_indices: np.ndarray,
    column_scores: np.ndarray,
    column_indices: np.ndarray,
) -> None:
    """Top-K of every row and every column of ``block`` in one row-major pass.

    Only entries above ``*_lower`` (per row / column; +inf switches that side off) or the list's
    own K-th best are inserted; a SPAN is skipped when none of its entries beats its row's or
    its column's threshold.
    """
    k = row_scores.shape[1]
    width = block.shape[1]
    column_floor = column_lower.copy()
    for row in range(block.shape[0]):
        row_floor = row_lower[row]
        entries = block[row]
        for first in range(0, width, SPAN):
            values, floors = entries[first : first + SPAN], column_floor[first : first + SPAN]
            above = False
            for column in range(len(values)):  # branch-free test on 1-D slices: vectorised
                above |= (values[column] > row_floor) | (values[column] > floors[column])
            if not above:
                continue
            for column in range(first, first + len(values)):
                value = entries[column]
                if value > row_floor:
                    _insert(row_scores[row], row_indices[row], value, column_start + column)
                    row_floor = max(row_lower[row], row_scores[row, k - 1])
                if value > column_floor[column]:
                    _insert(column_scores[column], column_indices[column], value, row_start + row)
                    column_floor[column] = max(column_lower[column], column_scores[column, k - 1])


def _empty_lists(n: int, k: int) -> tuple[np.ndarray, np.ndarray]:
    return np.full((n, k), -np.inf, np.float32), np.full((n, k), NO_NEIGHBOUR, np.int64)


def _lower_bounds(floor: np.ndarray) -> np.ndarray:
    """Thresholds that let values equal to ``floor`` in (a tie may still win on its id)."""
    return np.nextafter(floor, np.float32(-np.inf))


def block_topk(block: np.ndarray, start: int, k: int, *, transposed: bool = False) -> tuple[np.ndarray, np.ndarray]:
    """Top ``k`` of each row of a similarity block whose columns start at ``start``.

    With ``transposed``, the top ``k`` of each *column* (whose rows start at ``start``): the
    lists for the other block of a pair, read in place instead of copying the transpose.
    Entries to ignore (self-pairs) must already be ``-inf``.
    """
    block = np.ascontiguousarray(block, dtype=np.float32)
    height, width = block.shape
    every, no_list = np.float32(-np.inf), _empty_lists(1, k)  # thresholds: -inf selects, +inf switches a side off
    if transposed:
        lists = _empty_lists(width, k)
        _select(block, start, start, np.full(height, np.inf, np.float32), np.full(width, every), *no_list, *lists)
    else:
        lists = _empty_lists(height, k)
        _select(block, start, start, np.full(height, every), np.full(width, np.inf, np.float32), *lists, *no_list)
    return lists[1], lists[0]


@njit
def _merge(
    a_scores: np.ndarray, a_indices: np.ndarray, b_scores: np.ndarray, b_indices: np.ndarray, scores: np.ndarray, indices: np.ndarray
) -> None:
    """Linear merge of two best-first lists per row under (score desc, id asc, missing last)."""
    rows, k = scores.shape
    for row in range(rows):
        i = j = 0
        for out in range(k):
            sa, sb = a_scores[row, i], b_scores[row, j]
            ia, ib = a_indices[row, i], b_indices[row, j]
            key_a = ia if ia != NO_NEIGHBOUR else np.iinfo(np.int64).max
            key_b = ib if ib != NO_NEIGHBOUR else np.iinfo(np.int64).max
            if sa > sb or (sa == sb and key_a <= key_b):
                scores[row, out], indices[row, out] = sa, ia
                i += 1
            else:
                scores[row, out], indices[row, out] = sb, ib
                j += 1


def merge_topk(a: TopK, b: TopK) -> TopK:
    """Best K of two best-first candidate lists for the same rows (associative and commutative)."""
    if a.start != b.start or a.indices.shape != b.indices.shape:
        raise ValueError("merge_topk needs candidates for the same rows")
    scores, indices = np.empty_like(a.scores, np.float32), np.empty_like(a.indices, np.int64)
    _merge(
        np.ascontiguousarray(a.scores, np.float32),
        np.ascontiguousarray(a.indices, np.int64),
        np.ascontiguousarray(b.scores, np.float32),
        np.ascontiguousarray(b.indices, np.int64),
        scores,
        indices,
    )
    return TopK(a.start, indices, scores)


def block_pairs(n: int, block: int) -> Iterator[tuple[int, int]]:
    """Row-block pairs (i, j), j ≥ i, covering the upper triangle of an n×n matrix."""
    n_blocks = -(-n // block)
    for i in range(n_blocks):
        for j in range(i, n_blocks):
            yield i, j


def block_rows(index: int, block: int, n: int) -> slice:
    """The rows of row block ``index`` of an n-row matrix cut into blocks of ``block`` rows."""
    return slice(index * block, min((index + 1) * block, n))


def similarities(unit: np.ndarray, rows_i: slice, rows_j: slice, buffer: np.ndarray) -> np.ndarray:
    """The cosines between two runs of unit rows, written over the first entries of ``buffer``:
    a block pair's one product, the arithmetic whose bytes the numeric policy's kernels fix (the
    caller limits BLAS to one thread)."""
    height, width = rows_i.stop - rows_i.start, rows_j.stop - rows_j.start
    similarity = buffer[: height * width].reshape(height, width)
    np.matmul(unit[rows_i], unit[rows_j].T, out=similarity)
    return similarity


def pair_topk(unit: np.ndarray, i: int, j: int, block: int, k: int, floor: np.ndarray, buffer: np.ndarray) -> list[TopK]:
    """Candidates from block pair (i, j): for the rows of block i, and (if j ≠ i) of block j.

    ``floor`` holds each row's K-th best over the blocks merged so far (-inf: none yet);
    ``buffer`` has room for one block (its first |block i|·|block j| entries are overwritten).
    """
    rows_i, rows_j = block_rows(i, block, len(unit)), block_rows(j, block, len(unit))
    similarity = similarities(unit, rows_i, rows_j, buffer)
    height, width = similarity.shape
    row_scores, row_indices = _empty_lists(height, k)
    if i == j:
        np.fill_diagonal(similarity, -np.inf)
        column_lower = np.full(width, np.inf, np.float32)
        column_scores, column_indices = _empty_lists(1, k)
    else:
        column_lower = _lower_bounds(floor[rows_j])
        column_scores, column_indices = _empty_lists(width, k)
    _select(
        similarity,
        rows_i.start,
        rows_j.start,
        _lower_bounds(floor[rows_i]),
        column_lower,
        row_scores,
        row_indices,
        column_scores,
        column_indices,
    )
    out = [TopK(rows_i.start, row_indices, row_scores)]
    if i != j:
        out.append(TopK(rows_j.start, column_indices, column_scores))
    return out


def run_pairs(
    unit: np.ndarray, pairs: Sequence[tuple[int, int]], block: int, k: int, threads: int, floor: np.ndarray | None = None
) -> list[TopK]:
    """Candidates of many block pairs, one pair per thread, each single-threaded, merged per row
    block (ordered by first row); pairs are taken in the given order.  ``floor``, if given, holds
    a lower bound of every row's final K-th best (its K-th best in its diagonal block, say), so the
    pairs select against it from the start; it only saves work, the lists are the same.

    Single-threaded matrix products are what make the output independent of the runner: a
    multi-threaded BLAS may round a dot product differently from a single-threaded one, and
    near-equal similarities would then swap.  Threads over pairs use the cores instead, without
    BLAS and selection threads spinning against each other.  Pairs are submitted a few at a
    time; this thread merges what they return and publishes every row's K-th best so far, the
    threshold later pairs select against (see the module docstring).
    """
    local = threading.local()
    floor = np.full(len(unit), -np.inf, np.float32) if floor is None else np.array(floor, np.float32)
    best: dict[int, TopK] = {}

    def one(pair: tuple[int, int]) -> list[TopK]:
        if not hasattr(local, "buffer"):
            local.buffer = np.empty(block * block, np.float32)
        return pair_topk(unit, *pair, block, k, floor, local.buffer)

    def merge(parts: list[TopK]) -> None:
        for part in parts:
            merged = merge_topk(best[part.start], part) if part.start in best else part
            best[part.start] = merged
            rows = slice(part.start, part.start + len(merged.scores))
            floor[rows] = np.maximum(floor[rows], merged.scores[:, k - 1])

    threads = max(1, threads)
    with threadpool_limits(1, user_api="blas"), ThreadPoolExecutor(threads) as pool:
        pending: deque[Future[list[TopK]]] = deque()
        for pair in pairs:
            pending.append(pool.submit(one, pair))
            if len(pending) > 2 * threads:
                merge(pending.popleft().result())
        while pending:
            merge(pending.popleft().result())
    return [best[start] for start in sorted(best)]


def choose_block(n: int, largest: int) -> int:
    """Rows per block: ``largest`` for big N; for small N about N/2 (a multiple of 256, at least
    1,024), so the diagonal blocks, half of whose products are wasted, stay a small share and
    there are enough pairs to keep the threads busy."""
    return max(1, min(largest, max(1024, -(-(n // 2) // 256) * 256)))


def exact_topk(unit: np.ndarray, k: int, block: int = 4096, threads: int | None = None) -> tuple[np.ndarray, np.ndarray]:
    """In-process exact top-K of every row of ``unit`` (unit rows, float32): (indices, scores);
    ``block`` is the largest block (see :func:`choose_block`).  Diagonal pairs first: they give
    every row a threshold before the off-diagonal ones run."""
    unit = np.ascontiguousarray(unit, dtype=np.float32)
    block = choose_block(len(unit), block)
    pairs = sorted(block_pairs(len(unit), block), key=lambda pair: (pair[1] - pair[0], pair[0]))
    parts = run_pairs(unit, pairs, block, k, threads or os.cpu_count() or 1)
    if not parts:
        return np.zeros((0, k), np.int64), np.zeros((0, k), np.float32)
    return np.concatenate([t.indices for t in parts]), np.concatenate([t.scores for t in parts])
