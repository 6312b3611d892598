"""A triage round over its stage files: people's labels so far (the audit the machine learns from),
read from rated tables, and :func:`crisscross.campaign.triage.triage_round` over them.

A rated item that the round's tasks do not hold cannot be used: it is rejected (``not-in-tasks``),
never dropped silently.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
import pandas as pd

from crisscross.campaign.signals import TextSpace
from crisscross.campaign.triage import TriageSettings, triage_round
from crisscross.core import io
from crisscross.core.quarantine import Rejected, reject
from crisscross.ingest.records import caption_images


@dataclass(frozen=True)
class PeopleLabels:
    """What people said of each rated item: positive or not, and its score (NaN in a labels-only table)."""

    positive: dict[str, bool]
    scores: dict[str, float]
    simulated: bool  # any label from a simulated panel: the machine then learnt from no people
    rejected: list[Rejected]


def people_labels(rated_paths: Sequence[str], task_items: Collection[str]) -> PeopleLabels:
    """The labels of the rated tables (a later table's over an earlier's), those of items not in
    ``task_items`` rejected."""
    positive: dict[str, bool] = {}
    scores: dict[str, float] = {}
    simulated = False
    for path in rated_paths:
        rated = io.read_parquet(path).to_pandas()
        simulated |= bool(rated["simulated"].any()) if "simulated" in rated else False
        graded = rated["agg_score"] if "agg_score" in rated else pd.Series(np.nan, index=rated.index)
        for item, is_positive, score in zip(rated["item_id"], rated["positive"], graded, strict=True):
            positive[item] = bool(is_positive)
            scores[item] = float(score)
    rejected = []
    for item in sorted(set(positive) - set(task_items)):
        rejected.append(
            reject("rated", item, "not-in-tasks", "a rated item the round's tasks do not hold", ",".join(rated_paths), {"item_id": item})
        )
        del positive[item], scores[item]
    return PeopleLabels(positive, scores, simulated, rejected)


def triage_files(inputs: Mapping[str, Any], settings: TriageSettings, seed: int) -> list[Any]:
    """The triage stage's whole-table step: ``inputs``' ``tasks`` table, ``items`` and ``embeddings``
    folders and ``rated`` tables read; the triaged round (its machine labels marked with whether the
    audit was simulated), then the rejects."""
    tasks = io.read_parquet(inputs["tasks"]).to_pandas()
    image_of = caption_images(io.read_parquet(io.join(inputs["items"], "captions.parquet")))
    spaces = [TextSpace.read(inputs["embeddings"], encoder, image_of) for encoder in settings.encoders]
    people = people_labels(inputs["rated"], set(tasks["item_id"]))
    done = triage_round(tasks, people.positive, spaces, image_of, settings, seed, people.scores)
    return [replace(done, machine_labels=done.machine_labels.assign(simulated_audit=people.simulated)), *people.rejected]
