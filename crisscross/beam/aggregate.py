"""The aggregate composite: judgments + tasks → one round's result; judgments of excluded raters
are routed to the quarantine with the rules they failed.

Rater QC and the aggregators need every judgment of a task type at once, so the round is one
element; its library is :func:`crisscross.aggregate.round.aggregate_round`.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import apache_beam as beam

from crisscross.aggregate.round import RoundSettings, aggregate_round
from crisscross.beam.common import route
from crisscross.core import io
from crisscross.core.quarantine import reject

STAGE = "aggregate"


class AggregateOutputs(NamedTuple):
    result: beam.PCollection  # one RoundResult
    rejected: beam.PCollection


def run_round(paths: tuple[str, str], settings: RoundSettings) -> list[Any]:
    """The round's result, then one Rejected per judgment of an excluded rater."""
    judgments_path, tasks_path = paths
    judgments = io.read_parquet(judgments_path).to_pandas()
    result = aggregate_round(judgments, io.read_parquet(tasks_path).to_pandas(), settings)
    dropped = [
        reject("judgment", row["item_id"], row["reason"], row["detail"], judgments_path, {k: row[k] for k in judgments.columns})
        for row in result.excluded.to_dict("records")
    ]
    return [result, *dropped]


class AggregateRound(beam.PTransform):
    def __init__(self, judgments_path: str, tasks_path: str, settings: RoundSettings) -> None:
        super().__init__()
        self._paths, self._settings = (judgments_path, tasks_path), settings

    def expand(self, pbegin: beam.pvalue.PBegin) -> AggregateOutputs:
        inputs = pbegin | "Inputs" >> beam.Create([self._paths])
        result, rejected = route("Round", inputs, STAGE, run_round, many=True, args=(self._settings,))
        return AggregateOutputs(result, rejected)
