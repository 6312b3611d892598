"""The positives composite: verified pairs + original pairs (+ merged truths) → one ground truth,
and the bias audit's model scores.

The merge is one step (it reads the VERIFY rows, the gallery and the merged truths and routes
unusable rows to the quarantine); the audit scores one model per element, spread over workers,
each ranking its scores against every truth variant (a side input: the full truth and one per
annotator without its sole finds); the audit itself is assembled in one place.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from functools import lru_cache
from typing import Any, NamedTuple

import apache_beam as beam
from apache_beam.metrics import Metrics

from crisscross.aggregate.positives import (
    AuditScores,
    Merged,
    Pair,
    audit_scores,
    bias_audit,
    finders,
    merge_positives,
    truth_variants,
    verified_pairs,
)
from crisscross.beam.common import gather, route, unpacking
from crisscross.beam.evaluate import gallery_of, load_truth
from crisscross.candidates.annotators import load_annotators
from crisscross.candidates.machine import read_queries, settings_of_annotators
from crisscross.core import io, numerics
from crisscross.formats.eccv import I2T, T2I
from crisscross.scoring.models import Model, load_model

STAGE = "positives"


@dataclass(frozen=True)
class PositivesInputs:
    """Paths and values every step needs (picklable for any runner)."""

    rated: str  # the VERIFY round's rated.parquet
    filter: str  # the filter stage's output: candidates, queries, annotators
    items: str
    embeddings: str
    merge: tuple[str, ...]  # ground-truth specs whose i2t / t2i positives join the truth
    annotator_specs: Mapping[str, Any]
    audit_models: Mapping[str, Mapping[str, Any]]
    audit_annotators: bool
    root: str | None = None  # the launching directory: relative files in model entries are its

    def model_names(self) -> list[str]:
        names = sorted(self.audit_models)
        if self.audit_annotators:
            settings = settings_of_annotators(self.annotator_specs)
            names += [n for n in settings.annotator_names() if n not in self.audit_models]
        return sorted(names)


class PositivesOutputs(NamedTuple):
    merged: beam.PCollection  # one Merged
    audit: beam.PCollection  # one bias-audit report
    rejected: beam.PCollection


@lru_cache(maxsize=2)
def found_by(filter_dir: str) -> dict[Pair, frozenset[str]]:
    return finders(io.read_parquet(io.join(filter_dir, "candidates.parquet")))


def merge_step(_: Any, inputs: PositivesInputs) -> Iterable[Any]:
    loaded = [load_truth(spec, inputs.items) for spec in inputs.merge]
    verified = verified_pairs(io.read_parquet(inputs.rated))
    merged = merge_positives(verified, gallery_of(inputs.items), {truth.name: truth for truth, _ in loaded}, inputs.rated)
    yield beam.pvalue.TaggedOutput("merged", merged)
    yield from merged.rejected
    for _, report in loaded:
        yield from report.get("rejected", [])


def audit_model(name: str, inputs: PositivesInputs) -> Model:
    """An audit model by name: one of ``audit_models``, or one of the filter's annotators."""
    if name in inputs.audit_models:
        return load_model(name, inputs.audit_models[name], inputs.embeddings, inputs.root)
    annotators = load_annotators(settings_of_annotators(inputs.annotator_specs), inputs.embeddings, gallery_of(inputs.items), inputs.root)
    return annotators[name]


class ScoreModel(beam.DoFn):
    """One model's audit scores over the filter's queries against every truth variant."""

    def __init__(self, inputs: PositivesInputs) -> None:
        self._inputs = inputs
        self._models = Metrics.counter(STAGE, "audit_models")

    def setup(self) -> None:
        numerics.check("positives")

    def process(self, name: str, variants: Mapping[str, frozenset[Pair]]) -> Iterable[tuple[str, AuditScores]]:
        queries = read_queries(io.read_parquet(io.join(self._inputs.filter, "queries.parquet")))
        by_direction = {I2T: queries.images, T2I: queries.captions}
        self._models.inc()
        yield name, audit_scores(audit_model(name, self._inputs), gallery_of(self._inputs.items), by_direction, variants)


def assemble_audit(scores: list[tuple[str, AuditScores]], merged: Merged, filter_dir: str) -> dict[str, Any]:
    return bias_audit(merged, found_by(filter_dir), dict(sorted(scores)))


class BuildPositives(beam.PTransform):
    def __init__(self, inputs: PositivesInputs) -> None:
        super().__init__()
        self._inputs = inputs

    def expand(self, pbegin: beam.pvalue.PBegin) -> PositivesOutputs:
        inputs = self._inputs
        merged = route("Merge", pbegin | "Once" >> beam.Create([None]), STAGE, merge_step, many=True, args=(inputs,), tags=("merged",))
        variants = merged.merged | "Variants" >> beam.Map(lambda m: truth_variants(m, found_by(inputs.filter)))
        scores = (
            pbegin
            | "Models" >> beam.Create(inputs.model_names())
            | "Spread" >> beam.Reshuffle()
            | "Score" >> beam.ParDo(ScoreModel(inputs), beam.pvalue.AsSingleton(variants))
        )
        audit = gather("GatherScores", scores) | "Audit" >> beam.Map(
            unpacking(assemble_audit), beam.pvalue.AsSingleton(merged.merged), inputs.filter
        )
        return PositivesOutputs(merged=merged.merged, audit=audit, rejected=merged.rejected)
