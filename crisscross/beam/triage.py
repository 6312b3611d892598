"""The triage composite: a round's tasks, people's labels so far and the text encoders → who decides each item.

The audit's fit needs every audited pair of a task type at once, so the round is one element; its
library is :func:`crisscross.campaign.triage.triage_round`.  A rated item that is not in the round's
tasks is rejected (``not-in-tasks``): its label cannot be used, and is not dropped silently.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any, NamedTuple

import apache_beam as beam
import numpy as np
import pandas as pd

from crisscross.beam.common import route
from crisscross.campaign.signals import TextSpace
from crisscross.campaign.triage import TriageSettings, triage_round
from crisscross.core import io
from crisscross.core.quarantine import reject
from crisscross.ingest.records import caption_images

STAGE = "triage"


class TriageOutputs(NamedTuple):
    result: beam.PCollection  # one TriagedRound
    rejected: beam.PCollection


def run_triage(inputs: dict[str, Any], settings: TriageSettings, seed: int) -> list[Any]:
    tasks = io.read_parquet(inputs["tasks"]).to_pandas()
    image_of = caption_images(io.read_parquet(io.join(inputs["items"], "captions.parquet")))
    spaces = [TextSpace.read(inputs["embeddings"], encoder, image_of) for encoder in settings.encoders]
    people_positive: dict[str, bool] = {}
    people_score: dict[str, float] = {}
    rejected = []
    simulated = False  # whether the labels the machine learnt from came from a simulated panel
    for path in inputs["rated"]:
        rated = io.read_parquet(path).to_pandas()
        simulated |= bool(rated["simulated"].any()) if "simulated" in rated else False
        graded = rated["agg_score"] if "agg_score" in rated else pd.Series(np.nan, index=rated.index)  # a labels-only table has none
        for item, positive, score in zip(rated["item_id"], rated["positive"], graded, strict=True):
            people_positive[item] = bool(positive)
            people_score[item] = float(score)
    unknown = sorted(set(people_positive) - set(tasks["item_id"]))
    for item in unknown:
        rejected.append(
            reject(
                "rated", item, "not-in-tasks", "a rated item the round's tasks do not hold", ",".join(inputs["rated"]), {"item_id": item}
            )
        )
        del people_positive[item], people_score[item]
    done = triage_round(tasks, people_positive, spaces, image_of, settings, seed, people_score)
    return [replace(done, machine_labels=done.machine_labels.assign(simulated_audit=simulated)), *rejected]


class TriageRound(beam.PTransform):
    def __init__(self, inputs: dict[str, Any], settings: TriageSettings, seed: int) -> None:
        super().__init__()
        self._inputs, self._settings, self._seed = inputs, settings, seed

    def expand(self, pbegin: beam.pvalue.PBegin) -> TriageOutputs:
        inputs = pbegin | "Inputs" >> beam.Create([self._inputs])
        result, rejected = route("Triage", inputs, STAGE, run_triage, many=True, args=(self._settings, self._seed))
        return TriageOutputs(result, rejected)
