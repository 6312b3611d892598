"""The annotate composite: a tasks table → judgments from the chosen source, with rejects routed.

The source (:data:`crisscross.annotate.sources.JUDGMENT_SOURCES`) is built inside the worker from
its name and settings; what it refuses goes to the quarantine with a reason.  Under adaptive
replication (:mod:`crisscross.campaign.replication`) each rated item's stop decision comes with the
judgments, and simulated or replayed judgments after an item's stop are left out.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import apache_beam as beam
import pyarrow as pa

from crisscross.annotate.sources import JUDGMENT_SOURCES, SourceSettings
from crisscross.beam.common import route
from crisscross.campaign.replication import ReplicationSettings, adapt_round
from crisscross.core import io
from crisscross.formats.schema import NOT_GOLD

STAGE = "annotate"


class AnnotateOutputs(NamedTuple):
    collected: beam.PCollection  # one (judgments, unjudged, facts, decisions or None)
    rejected: beam.PCollection


def collect(tasks_path: str, source: str, settings: SourceSettings) -> list[Any]:
    """The source's (judgments, unjudged, facts), then its rejects."""
    collected = JUDGMENT_SOURCES.create(source, settings=settings)(io.read_parquet(tasks_path))
    return [(collected.judgments, collected.unjudged, collected.facts), *collected.rejected]


def replicated(
    collected: tuple[pa.Table, pa.Table, dict[str, Any]], tasks_path: str, replication: tuple[ReplicationSettings, int] | None
) -> tuple[pa.Table, pa.Table, dict[str, Any], pa.Table | None]:
    """The collected judgments under the stop rule (``replication``: settings and the ceiling, ``tasks.replicas``)."""
    judgments, unjudged, facts = collected
    if replication is None:
        return judgments, unjudged, facts, None
    settings, replicas = replication
    tasks = io.read_parquet(tasks_path).select(["item_id", "gold"]).to_pandas()
    gold = set(tasks.loc[tasks["gold"] != NOT_GOLD, "item_id"])
    keep, decisions = adapt_round(judgments.to_pandas(), gold, replicas, settings)
    return judgments.filter(pa.array(keep)), unjudged, facts, pa.Table.from_pandas(decisions, preserve_index=False)


class CollectJudgments(beam.PTransform):
    """``replication``: the stop rule's settings and ceiling, or None for the fixed design."""

    def __init__(
        self, tasks_path: str, source: str, settings: SourceSettings, replication: tuple[ReplicationSettings, int] | None = None
    ) -> None:
        super().__init__()
        self._tasks, self._source, self._settings, self._replication = tasks_path, source, settings, replication

    def expand(self, pbegin: beam.pvalue.PBegin) -> AnnotateOutputs:
        tasks = pbegin | "Tasks" >> beam.Create([self._tasks])
        collected, rejected = route("Collect", tasks, STAGE, collect, many=True, args=(self._source, self._settings))
        return AnnotateOutputs(collected | "Replication" >> beam.Map(replicated, self._tasks, self._replication), rejected)
