"""The evaluate composite: one element per (model, ground truth) job, spread over workers.

Each job loads its model's embedding sets (memory-mapped), the gallery and the ground truth in the
worker that runs it (cached per process, so several jobs of one worker share them), works out the
model's gallery (its ``gallery`` rule: the whole gallery or the sub-gallery it covers) and returns
``(model, truth, {protocol: {metric: {direction: value}}})``.  Nothing large crosses the runner.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any

import apache_beam as beam
import pyarrow as pa
from apache_beam.metrics import Metrics

from crisscross.beam.common import default_threads
from crisscross.core import io
from crisscross.scoring.models import Gallery, gallery_rule, load_model
from crisscross.scoring.protocol import Settings, evaluate, model_gallery
from crisscross.scoring.truths import GROUND_TRUTHS, GroundTruth, Report

STAGE = "evaluate"


@dataclass(frozen=True)
class EvaluationInputs:
    """Everything a job needs, by path and value (picklable for any runner)."""

    embeddings: str
    items: str
    models: Mapping[str, Mapping[str, Any]]
    settings: Settings
    labels: Mapping[str, tuple[int, ...]] = field(default_factory=dict)
    bison: pa.Table | None = None
    root: str | None = None  # the launching directory: relative files in ``models`` are its
    processes: int = 1  # worker processes sharing a machine: a job's score blocks take its share of the cores


@lru_cache(maxsize=4)
def captions_table(items: str) -> pa.Table:
    return io.read_parquet(io.join(items, "captions.parquet"))


@lru_cache(maxsize=4)
def gallery_of(items: str) -> Gallery:
    return Gallery.from_items(io.read_parquet(io.join(items, "images.parquet")), captions_table(items))


@lru_cache(maxsize=8)
def load_truth(spec: str, items: str) -> tuple[GroundTruth, Report]:
    """A ground truth by name; loaders that merge original pairs get the items' captions."""
    return GROUND_TRUTHS.create(spec, captions=captions_table(items))


def run_job(job: tuple[str, str], inputs: EvaluationInputs) -> tuple[str, str, dict[str, Any]]:
    model_name, truth_spec = job
    truth, _ = load_truth(truth_spec, inputs.items)
    spec = inputs.models[model_name]
    model = load_model(model_name, spec, inputs.embeddings, inputs.root)
    chosen = model_gallery(model, gallery_of(inputs.items), inputs.settings, gallery_rule(spec))
    results = evaluate(
        model,
        truth,
        truth.name,
        chosen.gallery,
        inputs.settings,
        inputs.labels or None,
        inputs.bison,
        partial=chosen.partial,
        threads=default_threads(inputs.processes),
    )
    Metrics.counter(STAGE, "jobs").inc()
    return model_name, truth.name, results


class EvaluateModels(beam.PTransform):
    """Every model against every ground truth; output: one result tuple per pair."""

    def __init__(self, truths: list[str], inputs: EvaluationInputs) -> None:
        super().__init__()
        self._jobs = sorted((model, truth) for model in inputs.models for truth in truths)
        self._inputs = inputs

    def expand(self, pbegin: beam.pvalue.PBegin) -> beam.PCollection:
        return pbegin | "Jobs" >> beam.Create(self._jobs) | "Spread" >> beam.Reshuffle() | "Evaluate" >> beam.Map(run_job, self._inputs)
