"""The annotate composite: a tasks table → judgments from the chosen source, with rejects routed.

The source (:data:`crisscross.annotate.sources.JUDGMENT_SOURCES`) is built inside the worker from
its name and settings (:func:`~crisscross.annotate.sources.collect`); what it refuses goes to the
quarantine with a reason.  Under adaptive replication (:mod:`crisscross.campaign.replication`) each
rated item's stop decision comes with the judgments, and simulated or replayed judgments after an
item's stop are left out (:func:`~crisscross.campaign.replication.replicated`).
"""

from __future__ import annotations

from typing import NamedTuple

import apache_beam as beam

from crisscross.annotate.sources import SourceSettings, collect
from crisscross.beam.common import WholeTable
from crisscross.campaign.replication import ReplicationSettings, replicated

STAGE = "annotate"


class AnnotateOutputs(NamedTuple):
    collected: beam.PCollection  # one (judgments, unjudged, facts, decisions or None)
    rejected: beam.PCollection


class CollectJudgments(beam.PTransform):
    """``replication``: the stop rule's settings and ceiling, or None for the fixed design."""

    def __init__(
        self, tasks_path: str, source: str, settings: SourceSettings, replication: tuple[ReplicationSettings, int] | None = None
    ) -> None:
        super().__init__()
        self._tasks, self._source, self._settings, self._replication = tasks_path, source, settings, replication

    def expand(self, pbegin: beam.pvalue.PBegin) -> AnnotateOutputs:
        collected, rejected = pbegin | "Collect" >> WholeTable(STAGE, collect, self._tasks, self._source, self._settings)
        return AnnotateOutputs(collected | "Replication" >> beam.Map(replicated, self._tasks, self._replication), rejected)
