"""The top-up composite: a round's tasks and judgments so far → the batches that close its open items.

Which items are open needs every judgment of the round at once, so the round is one element; its
library is :mod:`crisscross.campaign.topup`.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import apache_beam as beam

from crisscross.beam.common import route
from crisscross.campaign.replication import ReplicationSettings
from crisscross.campaign.topup import raters_for, round_status, topup_tasks
from crisscross.core import io

STAGE = "topup"


class TopUpOutputs(NamedTuple):
    round: beam.PCollection  # one (item status, top-up task rows, raters per batch)
    rejected: beam.PCollection


def top_up(inputs: dict[str, str], replicas: int, replication: ReplicationSettings, step: int) -> list[Any]:
    tasks = io.read_parquet(inputs["tasks"]).to_pandas()
    status = round_status(tasks, io.read_parquet(inputs["judgments"]).to_pandas(), replicas, replication)
    return [(status, topup_tasks(tasks, status), raters_for(status, step))]


class TopUpRound(beam.PTransform):
    """``inputs``: the round's ``tasks`` and ``judgments`` (those that count) parquet paths."""

    def __init__(self, inputs: dict[str, str], replicas: int, replication: ReplicationSettings, step: int) -> None:
        super().__init__()
        self._inputs, self._replicas, self._replication, self._step = inputs, replicas, replication, step

    def expand(self, pbegin: beam.pvalue.PBegin) -> TopUpOutputs:
        inputs = pbegin | "Inputs" >> beam.Create([self._inputs])
        result, rejected = route("TopUp", inputs, STAGE, top_up, many=True, args=(self._replicas, self._replication, self._step))
        return TopUpOutputs(result, rejected)
