"""Top-K neighbours of every row of an embedding set, as a Beam composite, by a named backend.

``exact`` — stripes of upper-triangle block pairs are the elements (``Reshuffle`` spreads them
over workers); each worker reads the embedding set's ``vectors.npy`` itself in ``setup``
(memory-mapped from local disk, read whole from a bucket) and normalises it with :func:`prepare`,
so no side input carries the matrix.  A stripe's pairs run on the worker's threads, and their
lists are merged per row block in the worker, the merged K-th bests serving as thresholds for the
stripe's later pairs (:func:`crisscross.similarity.topk.run_pairs`).  A worker holds N×d float32,
one B×B block per thread and the lists: about 0.4 GB at N = 123,287, d = 512, B = 4,096, two
threads, and it works while N·d·4 bytes fits a worker's memory (tens of millions of rows × 512 on
a 16 GB worker).  Partial lists are merged per row block with ``CombinePerKey``; the merge is a
total order, so the result is the same on any runner.

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

from crisscross.beam.common import default_threads, gather, unpacking
from crisscross.core import io, numerics
from crisscross.core.registry import Registry
from crisscross.core.settings import setting
from crisscross.embed.sets import EmbeddingSet
from crisscross.similarity.neighbours import neighbours_table, prepare
from crisscross.similarity.topk import NO_NEIGHBOUR, TopK, block_pairs, choose_block, merge_topk, run_pairs

BACKENDS: Registry[Any] = Registry("similarity backend", options=True)  # each backend's fields are its options
LOG = logging.getLogger(__name__)


def _load_unit(set_path: str) -> np.ndarray:
    return prepare(EmbeddingSet.read(set_path), set_path).unit


class StripeTopK(beam.DoFn):
    """Candidates from the block pairs of one stripe (:func:`stripes`), on ``threads`` threads (0: the
    worker's share of its cores among ``processes``); the normalised matrix is loaded once per worker."""

    def __init__(self, set_path: str, k: int, block: int, threads: int, processes: int, n_stripes: int) -> None:
        self._set_path, self._k, self._block = set_path, k, block
        self._threads, self._processes, self._n_stripes = threads, processes, n_stripes

    def setup(self) -> None:
        numerics.check("similarity")
        self._unit = _load_unit(self._set_path)
        self._threads = self._threads or default_threads(self._processes)

    def process(self, stripe: list[tuple[int, int]]) -> Iterable[tuple[int, TopK]]:
        for part in run_pairs(self._unit, stripe, self._block, self._k, self._threads):
            beam.metrics.Metrics.counter("similarity", "block-rows").inc(len(part.indices))
            yield part.start, part
        LOG.info("%s: stripe %d of %d done (%d block pairs)", self._set_path, stripe[0][0] + 1, self._n_stripes, len(stripe))


def stripes(n: int, block: int) -> list[list[tuple[int, int]]]:
    """The upper-triangle block pairs as Beam elements of equal work: the pairs of first block i
    (one per block from i on) with those of first block m - 1 - i, m blocks in all, so each element
    holds m + 1 pairs (the middle one about half that), and workers handed equal numbers of
    elements finish together."""
    grouped: dict[int, list[tuple[int, int]]] = {}
    for i, j in block_pairs(n, block):
        grouped.setdefault(i, []).append((i, j))
    m = len(grouped)
    return [grouped[i] + (grouped[m - 1 - i] if m - 1 - i != i else []) for i in range(-(-m // 2))]


def _merge_all(parts: Iterable[TopK]) -> TopK:
    return functools.reduce(merge_topk, parts)


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

    def neighbours(self, pbegin: beam.pvalue.PBegin, set_path: str, n: int, k: int, processes: int) -> beam.PCollection:
        block = choose_block(n, self.block)
        work = stripes(n, block)
        return (
            pbegin
            | "Stripes" >> beam.Create(work)
            | "Spread" >> beam.Reshuffle()
            | "StripeTopK" >> beam.ParDo(StripeTopK(set_path, k, block, self.threads, processes, len(work)))
            | "MergePerBlock" >> beam.CombinePerKey(_merge_all)
            | "Lists" >> beam.Values()
        )


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

    def neighbours(self, pbegin: beam.pvalue.PBegin, set_path: str, n: int, k: int, processes: int) -> beam.PCollection:
        return (
            pbegin
            | "One" >> beam.Create([set_path])
            | "HNSW" >> beam.Map(hnsw_topk, k, self.m, self.ef_construction, self.ef_search, processes)
        )


class WriteNeighbours(beam.PTransform):
    """One space's neighbour table at ``target``: the backend's lists over the set's ``ids``, gathered
    and written in id order.  A space with fewer than two rows (a text-only build's S^V) has no
    neighbours: its table is written empty, so later stages see zero pairs and the report says why."""

    def __init__(self, backend: Any, set_path: str, ids: list[str], k: int, processes: int, target: str) -> None:
        super().__init__()
        self._backend, self._set_path, self._ids, self._k, self._processes, self._target = backend, set_path, ids, k, processes, target

    def expand(self, pbegin: beam.pvalue.PBegin) -> beam.PCollection:
        n = len(self._ids)
        lists = (
            self._backend.neighbours(pbegin, self._set_path, n, self._k, self._processes)
            if n >= 2
            else pbegin | "NoRows" >> beam.Create([])
        )
        return gather("Gather", lists) | "Write" >> beam.Map(unpacking(_write_table), self._ids, self._target)


def _write_table(parts: list, ids: list[str], target: str) -> None:
    io.write_parquet(target, neighbours_table(ids, parts))
