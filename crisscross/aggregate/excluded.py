"""A round aggregated from its stage files: the result of :func:`crisscross.aggregate.round.aggregate_round`,
and each judgment of a rater quality control excluded as a reject naming the rule it failed, so the
quarantine holds every judgment the round left out."""

from __future__ import annotations

from typing import Any

from crisscross.aggregate.round import RoundSettings, aggregate_round
from crisscross.core import io
from crisscross.core.quarantine import reject


def aggregate_files(judgments_path: str, tasks_path: str, settings: RoundSettings) -> list[Any]:
    """The round's result, then one Rejected per judgment of an excluded rater."""
    judgments = io.read_parquet(judgments_path).to_pandas()
    result = aggregate_round(judgments, io.read_parquet(tasks_path).to_pandas(), settings)
    dropped = [
        reject("judgment", row["item_id"], row["reason"], row["detail"], judgments_path, {k: row[k] for k in judgments.columns})
        for row in result.excluded.to_dict("records")
    ]
    return [result, *dropped]
