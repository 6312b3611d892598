"""The top-up composite: a round's tasks and judgments so far → the batches that close its open items.

Which items are open needs every judgment of the round at once, so the round is one element; its
library is :mod:`crisscross.campaign.topup`.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import apache_beam as beam

from crisscross.beam.common import route
from crisscross.campaign.topup import item_status, topup_tasks
from crisscross.core import io

STAGE = "topup"


class TopUpOutputs(NamedTuple):
    round: beam.PCollection  # one (item status, top-up task rows, raters per batch)
    rejected: beam.PCollection


def top_up(inputs: dict[str, Any], replicas: int, step: int) -> list[Any]:
    tasks = io.read_parquet(inputs["tasks"]).to_pandas()
    judgments = io.read_parquet(inputs["judgments"]).to_pandas()
    decisions = io.read_parquet(inputs["decisions"]).to_pandas() if inputs["decisions"] else None
    status = item_status(tasks, judgments, decisions, replicas)
    rows, raters = topup_tasks(tasks, status, step)
    return [(status, rows, raters)]


class TopUpRound(beam.PTransform):
    """``inputs``: the round's ``tasks`` and ``judgments`` parquet paths and its ``decisions`` (or None: the fixed design)."""

    def __init__(self, inputs: dict[str, Any], replicas: int, step: int) -> None:
        super().__init__()
        self._inputs, self._replicas, self._step = inputs, replicas, step

    def expand(self, pbegin: beam.pvalue.PBegin) -> TopUpOutputs:
        inputs = pbegin | "Inputs" >> beam.Create([self._inputs])
        result, rejected = route("TopUp", inputs, STAGE, top_up, many=True, args=(self._replicas, self._step))
        return TopUpOutputs(result, rejected)
