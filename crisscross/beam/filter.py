"""The filter composite: machine annotators' top lists → ECCV-style VERIFY candidates, batches, diversity.

Query selection runs once (its rejects, ids not in the gallery, go to the quarantine) and yields
blocks of queries; each worker loads the annotators once (``DoFn.setup``: embedding sets are
memory-mapped) and scores its blocks against the whole gallery; the per-query lists then meet in
one place, where candidates are united, batches planned with their gold and the diversity
measured.  Nothing but ids and short lists crosses the runner.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from functools import lru_cache
from typing import Any, NamedTuple

import apache_beam as beam
import pyarrow as pa
from apache_beam.metrics import Metrics

from crisscross.beam.common import route
from crisscross.candidates.annotators import load_annotators
from crisscross.candidates.diversity import diversity_report
from crisscross.candidates.machine import FilterSettings, Queries, QueryLists, candidate_pairs, candidates_table, retrieve, select_queries
from crisscross.candidates.verify_batches import BatchPlan, plan_batches
from crisscross.core import io, numerics
from crisscross.scoring.models import Gallery

STAGE = "filter"


@dataclass(frozen=True)
class FilterResult:
    queries: Queries
    candidates: pa.Table
    plan: BatchPlan
    diversity: dict[str, Any]
    before_dedupe: int


class FilterOutputs(NamedTuple):
    result: beam.PCollection  # one FilterResult
    rejected: beam.PCollection


@lru_cache(maxsize=2)
def read_gallery(items: str) -> Gallery:
    return Gallery.from_items(io.read_parquet(io.join(items, "images.parquet")), io.read_parquet(io.join(items, "captions.parquet")))


def query_blocks(_: Any, items: str, settings: FilterSettings, seed: int, root: str | None) -> Iterable[Any]:
    queries, rejected = select_queries(settings, read_gallery(items), seed, root)
    yield beam.pvalue.TaggedOutput("queries", queries)
    yield from rejected
    yield from queries.blocks(settings.query_block)


class RetrieveBlock(beam.DoFn):
    """Every annotator's lists for one block of queries; annotators load once per worker."""

    def __init__(self, embeddings: str, items: str, settings: FilterSettings, root: str | None) -> None:
        self._embeddings, self._items, self._settings, self._root = embeddings, items, settings, root
        self._queries = Metrics.counter(STAGE, "queries")

    def setup(self) -> None:
        numerics.check("filter")
        self._gallery = read_gallery(self._items)
        self._models = load_annotators(self._settings, self._embeddings, self._gallery, self._root)

    def process(self, block: tuple[str, tuple[str, ...]]) -> Iterable[QueryLists]:
        direction, query_ids = block
        self._queries.inc(len(query_ids))
        yield from retrieve(self._models, self._gallery, direction, query_ids, self._settings.negative_depth)


def assemble(lists: list[QueryLists], queries: Queries, items: str, settings: FilterSettings, seed: int) -> FilterResult:
    ordered = sorted(lists, key=lambda e: (e.direction, e.query))
    candidates = candidate_pairs(ordered, settings.top_k)
    plan = plan_batches(candidates, ordered, read_gallery(items), settings.batch_candidates, seed)
    before = sum(min(len(items_), settings.top_k) for e in ordered for items_ in e.top.values())
    return FilterResult(queries, candidates_table(candidates), plan, diversity_report(ordered, settings.top_k), before)


class FilterCandidates(beam.PTransform):
    """Machine annotators' lists → VERIFY candidates; relative files in ``settings`` are ``root``'s."""

    def __init__(self, embeddings: str, items: str, settings: FilterSettings, seed: int, root: str | None = None) -> None:
        super().__init__()
        self._embeddings, self._items, self._settings, self._seed, self._root = embeddings, items, settings, seed, root

    def expand(self, pbegin: beam.pvalue.PBegin) -> FilterOutputs:
        items, settings, seed = self._items, self._settings, self._seed
        selected = route(
            "SelectQueries",
            pbegin | "Once" >> beam.Create([None]),
            STAGE,
            query_blocks,
            many=True,
            args=(items, settings, seed, self._root),
            tags=("queries",),
        )
        lists = (
            selected.kept
            | "Spread" >> beam.Reshuffle()
            | "Retrieve" >> beam.ParDo(RetrieveBlock(self._embeddings, items, settings, self._root))
            | "Gather" >> beam.combiners.ToList()
        )
        result = lists | "Assemble" >> beam.Map(
            lambda gathered, queries: assemble(gathered, queries, items, settings, seed), beam.pvalue.AsSingleton(selected.queries)
        )
        return FilterOutputs(result=result, rejected=selected.rejected)
