"""The annotate composite: a tasks table → judgments from the chosen source, with rejects routed.

The source (:data:`crisscross.annotate.sources.JUDGMENT_SOURCES`) is built inside the worker from
its name and settings; what it refuses goes to the quarantine with a reason.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import apache_beam as beam

from crisscross.annotate.sources import JUDGMENT_SOURCES, SourceSettings
from crisscross.beam.common import route
from crisscross.core import io

STAGE = "annotate"


class AnnotateOutputs(NamedTuple):
    collected: beam.PCollection  # one (judgments, unjudged, facts)
    rejected: beam.PCollection


def collect(tasks_path: str, source: str, settings: SourceSettings) -> list[Any]:
    """The source's (judgments, unjudged, facts), then its rejects."""
    collected = JUDGMENT_SOURCES.create(source, settings=settings)(io.read_parquet(tasks_path))
    return [(collected.judgments, collected.unjudged, collected.facts), *collected.rejected]


class CollectJudgments(beam.PTransform):
    def __init__(self, tasks_path: str, source: str, settings: SourceSettings) -> None:
        super().__init__()
        self._tasks, self._source, self._settings = tasks_path, source, settings

    def expand(self, pbegin: beam.pvalue.PBegin) -> AnnotateOutputs:
        tasks = pbegin | "Tasks" >> beam.Create([self._tasks])
        collected, rejected = route("Collect", tasks, STAGE, collect, many=True, args=(self._source, self._settings))
        return AnnotateOutputs(collected, rejected)
