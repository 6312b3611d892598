"""Top-K neighbours of every row of an embedding set, as a Beam composite, by a named backend.

``exact`` — lists of upper-triangle block pairs are the elements (``Reshuffle`` spreads them
over workers); each worker reads the embedding set's ``vectors.npy`` itself, once
(:class:`~crisscross.beam.common.PerWorker`; memory-mapped from local disk, read whole from a
bucket) and normalises it with :func:`prepare`, so no side input carries the matrix.  The diagonal
pairs run first: every row's K-th best in its own block is a lower bound of its final K-th best,
and the off-diagonal pairs select against these floors (an N-float side input) from their first
entry, instead of filling every column's list from nothing; a worker raises them with every list it
merges, so its later pairs insert less.  An element's pairs run on the
worker's threads, the merged K-th bests raising the thresholds for its later pairs
(:func:`crisscross.similarity.topk.run_pairs`).  A bundle's lists are merged per row block in its
worker and written there as one Parquet shard; one step merges the shards and writes the table,
so no list crosses to the runner, and the merge is a total order, so the result is the same on
any runner.  A worker holds N×d float32, one B×B block per thread and the lists: about 0.5 GB at
N = 123,287, d = 512, B = 4,096, two threads, and it works while N·d·4 bytes fits a worker's
memory (tens of millions of rows × 512 on a 16 GB worker).

``faiss-hnsw`` — an approximate HNSW graph (faiss-cpu) built and searched in one element, for
collections too big for an exact pass; its recall against exact search is measured by the stage.
"""

from __future__ import annotations

import functools
import logging
import os
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import apache_beam as beam
import numpy as np
import pyarrow as pa
from apache_beam.utils.windowed_value import WindowedValue

from crisscross.beam.common import PerWorker, TableShards, default_threads, gather, in_global_window, read_shards, unpacking
from crisscross.core import io, numerics
from crisscross.core.registry import Registry
from crisscross.core.settings import setting
from crisscross.embed.sets import EmbeddingSet
from crisscross.similarity.neighbours import neighbours_table, prepare
from crisscross.similarity.topk import NO_NEIGHBOUR, TopK, choose_block, merge_topk, run_pairs

BACKENDS: Registry[Any] = Registry("similarity backend", options=True)  # each backend's fields are its options
LOG = logging.getLogger(__name__)


def _load_unit(set_path: str) -> np.ndarray:
    return prepare(EmbeddingSet.read(set_path), set_path).unit


class StripeTopK(beam.DoFn):
    """Candidates from lists of block pairs (:func:`stripes`), on ``threads`` threads (0: the
    worker's share of its cores among ``processes``), selecting against the side input ``floor``
    when given (:func:`floors`), raised by every list the instance has merged since: each row's K-th
    best over any columns is a lower bound of its final one, so the lists are the same and later
    elements insert less.  A bundle's lists are merged per row block as its elements finish
    and leave in ``finish_bundle``, for :func:`lists_table` shards: a worker's lists never cross to
    the runner.  The normalised matrix is loaded once per worker."""

    def __init__(self, set_path: str, k: int, block: int, threads: int, processes: int) -> None:
        self._set_path, self._k, self._block = set_path, k, block
        self._threads, self._processes = threads, processes
        self._unit = PerWorker(functools.partial(_load_unit, set_path))  # one copy for both steps

    def setup(self) -> None:
        numerics.check("similarity")
        self._threads = self._threads or default_threads(self._processes)
        self._floor: np.ndarray | None = None  # the side input raised by every list this instance has merged (None: no side input)

    def start_bundle(self) -> None:
        self._best: dict[int, TopK] = {}

    def process(self, pairs: list[tuple[int, int]], floor: np.ndarray | None = None) -> None:
        if floor is not None:  # later elements select against what earlier ones found, not the diagonal alone
            self._floor = np.array(floor, np.float32) if self._floor is None else np.maximum(self._floor, floor)
        for part in run_pairs(self._unit.get(), pairs, self._block, self._k, self._threads, self._floor):
            beam.metrics.Metrics.counter("similarity", "block-rows").inc(len(part.indices))
            merged = merge_topk(self._best[part.start], part) if part.start in self._best else part
            self._best[part.start] = merged
            if self._floor is not None:  # any rows' K-th best so far is a lower bound of their final one
                rows = slice(part.start, part.start + len(merged.scores))
                self._floor[rows] = np.maximum(self._floor[rows], merged.scores[:, -1])
        LOG.info("%s: %d block pairs from row block %d done", self._set_path, len(pairs), pairs[0][0])

    def finish_bundle(self) -> Iterable[WindowedValue]:
        best, self._best = self._best, {}
        for start in sorted(best):
            yield in_global_window(best[start])


def lists_table(parts: list[TopK]) -> pa.Table:
    """Lists as a table shard: one row per matrix row, its K neighbours and similarities."""
    ordered = sorted(parts, key=lambda part: part.start)
    indices, scores = (np.concatenate([getattr(p, name) for p in ordered]) for name in ("indices", "scores"))
    k = indices.shape[1]
    return pa.table(
        {
            "row": np.concatenate([np.arange(p.start, p.start + len(p.indices)) for p in ordered]),
            "neighbours": pa.FixedSizeListArray.from_arrays(pa.array(indices.ravel()), k),
            "similarities": pa.FixedSizeListArray.from_arrays(pa.array(scores.ravel()), k),
        }
    )


def merged_lists(shards: list[str], folder: str, n: int, k: int) -> TopK:
    """Every row's K best over the :func:`lists_table` shards; the merge is a total order, so the
    shards' number and order (the runner's bundles) do not matter.  A shard is named by its bytes,
    so a path met twice is one shard, merged once (merging a list with itself would repeat its
    neighbours)."""

    def none_yet() -> TopK:
        return TopK(0, np.full((n, k), NO_NEIGHBOUR, np.int64), np.full((n, k), -np.inf, np.float32))

    best = none_yet()
    for table in read_shards(sorted(set(shards)), folder):
        rows, shard = table.column("row").to_numpy(), none_yet()
        shard.indices[rows] = table.column("neighbours").combine_chunks().flatten().to_numpy().reshape(-1, k)
        shard.scores[rows] = table.column("similarities").combine_chunks().flatten().to_numpy().reshape(-1, k)
        best = merge_topk(best, shard)
    return best


def diagonals(n: int, block: int, per_element: int = 4) -> list[list[tuple[int, int]]]:
    """The diagonal block pairs, ``per_element`` to an element (enough for a worker's threads)."""
    pairs = [(i, i) for i in range(-(-n // block))]
    return [pairs[first : first + per_element] for first in range(0, len(pairs), per_element)]


def stripes(n: int, block: int) -> list[list[tuple[int, int]]]:
    """The off-diagonal upper-triangle block pairs, row block by row block, cut into ⌈m / 2⌉
    elements (m blocks) whose sizes differ by at most one pair, so workers handed equal numbers
    of elements finish together."""
    m = -(-n // block)
    pairs = [(i, j) for i in range(m) for j in range(i + 1, m)]
    elements = min(len(pairs), -(-m // 2))
    size, extra = divmod(len(pairs), max(1, elements))
    cuts = [first * size + min(first, extra) for first in range(elements + 1)]
    return [pairs[cuts[e] : cuts[e + 1]] for e in range(elements)]


def floors(kth_bests: list[tuple[int, np.ndarray]], n: int) -> np.ndarray:
    """Every row's K-th best in its diagonal block, a lower bound of its final K-th best: the
    threshold the off-diagonal pairs select against from their first entry."""
    floor = np.full(n, -np.inf, np.float32)
    for start, kth in kth_bests:
        floor[start : start + len(kth)] = kth
    return floor


def _kth_best(part: TopK) -> tuple[int, np.ndarray]:
    return part.start, part.scores[:, -1]


@BACKENDS.register("exact")
@dataclass(frozen=True)
class ExactBackend:
    """Exact search; at most ``block`` rows per block (memory O(N·d + threads·block²));
    ``threads`` per worker process (0: its share of the worker machine's cores)."""

    block: int = setting(4096, low=1)
    threads: int = setting(0, low=0)

    approximate = False

    def peak_bytes(self, n: int, d: int, k: int) -> int:
        """Vectors (stored and normalised), one block buffer per thread, and the K-lists (float32
        score, int64 index) of every row, merged and in flight."""
        side = choose_block(n, self.block)
        return 2 * n * d * 4 + (self.threads or os.cpu_count() or 1) * side * side * 4 + 2 * n * k * 12

    def neighbours(self, pbegin: beam.pvalue.PBegin, set_path: str, n: int, k: int, processes: int, scratch: str) -> beam.PCollection:
        block = choose_block(n, self.block)
        top_k, to_shards = StripeTopK(set_path, k, block, self.threads, processes), TableShards(scratch, lists_table)
        diagonal = (
            pbegin
            | "Diagonals" >> beam.Create(diagonals(n, block))
            | "SpreadDiagonals" >> beam.Reshuffle()
            | "DiagonalTopK" >> beam.ParDo(top_k)
        )
        work = stripes(n, block)
        if not work:  # one block: its diagonal pair holds every row's list, no floors or shards needed
            return diagonal
        floor = gather("GatherKthBests", diagonal | "KthBests" >> beam.Map(_kth_best)) | "Floors" >> beam.Map(unpacking(floors), n)
        off_diagonal = (
            pbegin
            | "Stripes" >> beam.Create(work)
            | "Spread" >> beam.Reshuffle()
            | "StripeTopK" >> beam.ParDo(top_k, floor=beam.pvalue.AsSingleton(floor))
        )
        shards = (
            diagonal | "DiagonalShards" >> beam.ParDo(to_shards),
            off_diagonal | "StripeShards" >> beam.ParDo(to_shards),
        ) | "AllShards" >> beam.Flatten()
        return gather("GatherShards", shards) | "Merge" >> beam.Map(unpacking(merged_lists), scratch, n, k)


def hnsw_topk(set_path: str, k: int, m: int, ef_construction: int, ef_search: int, processes: int) -> TopK:
    """HNSW search of every row for its k nearest other rows, re-ordered by (score, id), on the
    worker's share of its cores."""
    import faiss

    faiss.omp_set_num_threads(default_threads(processes))
    unit = _load_unit(set_path)
    index = faiss.IndexHNSWFlat(unit.shape[1], m, faiss.METRIC_INNER_PRODUCT)
    index.hnsw.efConstruction = ef_construction
    index.add(unit)
    index.hnsw.efSearch = max(ef_search, k + 1)
    scores, indices = index.search(unit, k + 1)
    rows = np.arange(len(unit))[:, None]
    self_hit = indices == rows
    indices = np.where(self_hit, NO_NEIGHBOUR, indices)
    scores = np.where(self_hit | (indices < 0), -np.inf, scores).astype(np.float32)
    order = np.lexsort((np.where(indices < 0, np.iinfo(np.int64).max, indices), -scores), axis=1)[:, :k]
    indices = np.take_along_axis(indices, order, axis=1).astype(np.int64)
    scores = np.take_along_axis(scores, order, axis=1)
    indices[~np.isfinite(scores)] = NO_NEIGHBOUR
    return TopK(0, indices, scores)


@BACKENDS.register("faiss-hnsw")
@dataclass(frozen=True)
class FaissHnswBackend:
    """Approximate search with faiss HNSW (``m`` links per node, ``ef_*`` beam widths)."""

    m: int = setting(32, low=2)
    ef_construction: int = setting(200, low=1)
    ef_search: int = setting(128, low=1)

    approximate = True

    def peak_bytes(self, n: int, d: int, k: int) -> int:
        """Vectors (stored, normalised, and the index's copy), the graph links and the K + 1 results."""
        return 3 * n * d * 4 + n * self.m * 2 * 8 + n * (k + 1) * 12

    def neighbours(self, pbegin: beam.pvalue.PBegin, set_path: str, n: int, k: int, processes: int, scratch: str) -> beam.PCollection:
        return (
            pbegin
            | "One" >> beam.Create([set_path])
            | "HNSW" >> beam.Map(hnsw_topk, k, self.m, self.ef_construction, self.ef_search, processes)
        )


class WriteNeighbours(beam.PTransform):
    """One space's neighbour table at ``target``: the backend's lists (one element holding every
    row's) over the set's ``ids``, written in id order where they are made (``scratch``: a folder
    for the backend's partial lists while the job runs).  A space with fewer than two rows (a
    text-only build's S^V) has no neighbours: its table is written empty, so later stages see
    zero pairs and the report says why."""

    def __init__(self, backend: Any, set_path: str, ids: list[str], k: int, processes: int, target: str, scratch: str) -> None:
        super().__init__()
        self._backend, self._set_path, self._ids, self._k, self._processes = backend, set_path, ids, k, processes
        self._target, self._scratch = target, scratch

    def expand(self, pbegin: beam.pvalue.PBegin) -> beam.PCollection:
        n = len(self._ids)
        lists = (
            self._backend.neighbours(pbegin, self._set_path, n, self._k, self._processes, self._scratch)
            if n >= 2
            else pbegin | "NoRows" >> beam.Create([TopK(0, np.zeros((0, self._k), np.int64), np.zeros((0, self._k), np.float32))])
        )
        return lists | "Write" >> beam.Map(_write_table, self._ids, self._target)


def _write_table(lists: TopK, ids: list[str], target: str) -> None:
    io.write_parquet(target, neighbours_table(ids, [lists]))
