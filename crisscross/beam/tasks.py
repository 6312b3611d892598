"""The tasks composite: candidates → items → the tasks table (seeded batches with gold items).

Items are checked against the catalog (rejects routed to the quarantine); gold drawing and
batching need every item of a task type at once, so the item table travels as one element to a
step whose workers open the catalog and the memory-mapped gold spaces themselves (``setup``).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, NamedTuple

import apache_beam as beam

from crisscross.annotate.catalog import load_catalog
from crisscross.annotate.gold import gold_spaces
from crisscross.annotate.inputs import candidate_items, formed_batches
from crisscross.annotate.items import ITEMS_SCHEMA
from crisscross.annotate.tasks import TaskParams, build_tasks, planned_items
from crisscross.beam.common import WholeTable
from crisscross.core import numerics

STAGE = "tasks"


class TasksOutputs(NamedTuple):
    tasks: beam.PCollection  # one pa.Table (TASKS_SCHEMA)
    rejected: beam.PCollection
    held_back: beam.PCollection  # one pa.Table (ITEMS_SCHEMA): items a campaign plan's sample leaves for later; empty without one


class _Batches(beam.DoFn):
    """Gold items and seeded batches for an item table; catalog and gold spaces open per worker."""

    def __init__(self, items: str, embeddings: str, settings: TaskParams, seed: int) -> None:
        self._items, self._embeddings, self._settings, self._seed = items, embeddings, settings, seed

    def setup(self) -> None:
        numerics.check("tasks")
        self._catalog = load_catalog(self._items)
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
            return TasksOutputs(tasks, rejected, pbegin | "NoneHeldBack" >> beam.Create([ITEMS_SCHEMA.empty_table()]))
        items, rejected = pbegin | "Items" >> WholeTable(STAGE, candidate_items, self._candidates, self._items)
        sampled = items | "PlanSample" >> beam.Map(planned_items, self._settings.items_per_type, self._seed)
        tasks = (sampled | "Planned" >> beam.Map(lambda pair: pair[0])) | "GoldAndBatches" >> beam.ParDo(
            _Batches(self._items, self._embeddings, self._settings, self._seed)
        )
        return TasksOutputs(tasks, rejected, sampled | "HeldBack" >> beam.Map(lambda pair: pair[1]))
