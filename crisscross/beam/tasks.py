"""The tasks composite: candidates → items → the tasks table (seeded batches with gold items).

Candidate rows are checked against the catalog in ranges of :data:`ITEM_RANGE` rows, side by side
(each worker reads the candidates and the catalog once, ``common.PerWorker``; rejects are routed to
the quarantine where they are made), then one step keeps the first row of each item.  Gold drawing
and batching need every item of a task type at once, so the item table travels as one element to a
step whose workers open the catalog (the same one) and the memory-mapped gold spaces themselves.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable, Iterator
from typing import Any, NamedTuple

import apache_beam as beam
import pyarrow as pa

from crisscross.annotate.catalog import Catalog, load_catalog
from crisscross.annotate.gold import gold_spaces
from crisscross.annotate.inputs import formed_batches
from crisscross.annotate.items import ITEMS_SCHEMA, checked_candidates, first_items
from crisscross.annotate.tasks import TaskParams, build_tasks, planned_items
from crisscross.beam.common import PerWorker, WholeTable, gather, route, unpacking
from crisscross.core import io, numerics

STAGE = "tasks"


class TasksOutputs(NamedTuple):
    tasks: beam.PCollection  # one pa.Table (TASKS_SCHEMA)
    rejected: tuple[beam.PCollection, ...]  # each step's rejects apart, so each is quarantined where it is made
    held_back: beam.PCollection  # one pa.Table (ITEMS_SCHEMA): items a campaign plan's sample leaves for later; empty without one


CANDIDATES_SOURCE = "candidates.parquet"  # how rejects name the candidates table
ITEM_RANGE = 65_536  # candidate rows checked per element: all of COCO's 750k are a dozen


def _check_range(bounds: tuple[int, int], inputs: PerWorker[tuple[pa.Table, Catalog]]) -> Iterator[Any]:
    """One range of candidate rows checked: its rejects (one batch) and the items it makes (one
    table, ``MADE_SCHEMA``: moved as Arrow buffers, where objects per item cost more to pickle
    than to make)."""
    candidates, catalog = inputs.get()
    made, rejected = checked_candidates(candidates, catalog, *bounds, CANDIDATES_SOURCE)
    if rejected.table.num_rows:
        yield rejected
    if made.num_rows:
        yield made


def _first_items(made: list[pa.Table], inputs: PerWorker[tuple[pa.Table, Catalog]]) -> Iterator[Any]:
    """The ranges' items, one per item; a duplicate's record is read from the candidates (loaded
    in this worker only if there is one)."""
    items, duplicates = first_items(made, lambda: inputs.get()[0], CANDIDATES_SOURCE)
    yield items
    yield from duplicates


class _Batches(beam.DoFn):
    """Gold items and seeded batches for an item table; catalog and gold spaces open per worker."""

    def __init__(self, catalog: PerWorker[Catalog], embeddings: str, settings: TaskParams, seed: int) -> None:
        self._catalog_of, self._embeddings, self._settings, self._seed = catalog, embeddings, settings, seed

    def setup(self) -> None:
        numerics.check("tasks")
        self._catalog = self._catalog_of.get()
        self._spaces = gold_spaces(self._embeddings, self._settings.gold_text_encoders, self._settings.gold_image_encoders)

    def process(self, items: Any) -> Iterable[Any]:
        yield build_tasks(items, self._catalog, self._spaces, self._settings, self._seed)


class BuildTasks(beam.PTransform):
    """Candidates → items → gold and batches; or, with ``batched``, batches formed upstream
    (the machine-annotator filter's VERIFY batches) checked and kept as they are."""

    def __init__(
        self, candidates_path: str, items: str, embeddings: str, settings: TaskParams, seed: int, *, batched: bool = False
    ) -> None:
        super().__init__()
        self._candidates, self._items, self._embeddings, self._settings, self._seed = candidates_path, items, embeddings, settings, seed
        self._batched = batched

    def expand(self, pbegin: beam.pvalue.PBegin) -> TasksOutputs:
        if self._batched:
            tasks, rejected = pbegin | "Batches" >> WholeTable(STAGE, formed_batches, self._candidates, self._items)
            return TasksOutputs(tasks, (rejected,), pbegin | "NoneHeldBack" >> beam.Create([ITEMS_SCHEMA.empty_table()]))
        catalog = PerWorker(functools.partial(load_catalog, self._items))
        inputs = PerWorker(functools.partial(_candidates_and_catalog, self._candidates, catalog))
        n_rows = io.parquet_rows(self._candidates)
        ranges = [(start, min(start + ITEM_RANGE, n_rows)) for start in range(0, n_rows, ITEM_RANGE)] or [(0, 0)]
        made, refused = route("CheckItems", pbegin | "Ranges" >> beam.Create(ranges), STAGE, _check_range, many=True, args=(inputs,))
        items, repeated = route("FirstItems", gather("GatherItems", made), STAGE, unpacking(_first_items), many=True, args=(inputs,))
        sampled = items | "PlanSample" >> beam.Map(planned_items, self._settings.items_per_type, self._seed)
        tasks = (sampled | "Planned" >> beam.Map(lambda pair: pair[0])) | "GoldAndBatches" >> beam.ParDo(
            _Batches(catalog, self._embeddings, self._settings, self._seed)
        )
        return TasksOutputs(tasks, (refused, repeated), sampled | "HeldBack" >> beam.Map(lambda pair: pair[1]))


def _candidates_and_catalog(candidates: str, catalog: PerWorker[Catalog]) -> tuple[pa.Table, Catalog]:
    return io.read_parquet(candidates), catalog.get()
