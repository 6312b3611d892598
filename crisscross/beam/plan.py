"""The plan composite: a pilot round's judgments → the campaign plan.

The estimates need every judgment of a task type at once, so the plan is one element; its library
is :func:`crisscross.campaign.plan.plan_campaign`.  Items without two ratings cannot say anything of
the raters' spread; they are used for the item spread only, never rejected.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import apache_beam as beam

from crisscross.beam.common import route
from crisscross.campaign.plan import PlanSettings, plan_campaign
from crisscross.core import io

STAGE = "plan"


class PlanOutputs(NamedTuple):
    plan: beam.PCollection  # one plan document
    rejected: beam.PCollection


def make_plan(path: str, settings: PlanSettings, seed: int) -> list[Any]:
    judgments = io.read_parquet(path).to_pandas()
    return [(plan_campaign(judgments, settings, seed), bool(judgments["simulated"].any()))]


class PlanCampaign(beam.PTransform):
    def __init__(self, judgments_path: str, settings: PlanSettings, seed: int) -> None:
        super().__init__()
        self._path, self._settings, self._seed = judgments_path, settings, seed

    def expand(self, pbegin: beam.pvalue.PBegin) -> PlanOutputs:
        inputs = pbegin | "Inputs" >> beam.Create([self._path])
        plan, rejected = route("Plan", inputs, STAGE, make_plan, many=True, args=(self._settings, self._seed))
        return PlanOutputs(plan, rejected)
