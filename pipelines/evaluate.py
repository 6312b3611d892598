"""``crisscross evaluate``: models (embedding sets or score matrices) × ground truths → metrics.

Outputs ``metrics.json`` (``results``: ``{model: {truth: {protocol: {metric: {direction: value}}}}}``;
``galleries``: the gallery each model was scored on, e.g. ``covered: 370 of 5,000 images`` for an
image model with vectors for part of it), ``report.md``, ``recall_at_k.png`` and ``report.json``;
unusable rows of the ground truths and of the optional label / BISON tables go to
``quarantine.parquet``.  A model entry's ``gallery`` (``auto`` | ``full`` | ``covered``) is
explained in :mod:`crisscross.scoring.protocol`.
"""

from __future__ import annotations

import argparse
import json
from typing import Any

import apache_beam as beam

from crisscross.beam.common import gather, unpacking
from crisscross.beam.evaluate import (
    EvaluateModels,
    EvaluationInputs,
    gallery_of,
    load_truth,
)
from crisscross.core import io
from crisscross.core.errors import ParamError
from crisscross.core.quarantine import Rejected
from crisscross.evaluate.report import markdown, recall_at_k_png
from crisscross.evaluate.tables import read_bison, read_labels
from crisscross.pipelines.registry import Stage
from crisscross.pipelines.stage import (
    Finished,
    StageArgs,
    local_path,
    parse_args,
    run_stage,
    source_spec,
    worker_processes,
    write_quarantine,
)
from crisscross.scoring.models import (
    ALL,
    AUTO,
    FOLDS,
    RATING_KINDS,
    TASK_KINDS,
    NoCoverageError,
    embedded_models,
    gallery_rule,
    load_model,
)
from crisscross.scoring.protocol import EvaluateSettings, Settings, model_gallery, model_ranking_agreement, positives_agreement, runnable

STAGE = Stage(name="evaluate", order=220, description="models × ground truths → retrieval, correlation and selection metrics, report, plot")
HEADLINE = ("R@1", "R@5", "R@10", "median_rank")


def add_flags(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--items", type=local_path, required=True, help="the ingest output: the gallery (every image and caption, in source order)"
    )
    parser.add_argument(
        "--truth",
        type=source_spec,
        action="append",
        required=True,
        help="ground truth by name, repeatable: coco, eccv (eccv-caption's R), eccv-gallery, cxc:<folder> (CxC paper), "
        "cxc-eccv:<folder> (eccv-caption's CxC), release:<folder>",
    )
    parser.add_argument(
        "--labels",
        type=local_path,
        help="optional class labels for PMRP: parquet/CSV with image_id and labels (class numbers, ';'-separated in CSV)",
    )
    parser.add_argument(
        "--bison",
        type=local_path,
        help="optional BISON triples: parquet/CSV with caption, target, decoy (canonical ids), or COCO-BISON's JSON "
        "(bison_annotations.cocoval2014.json, the bison stage's bison_annotations.json)",
    )


def main(argv: list[str]) -> dict[str, Any]:
    stage = parse_args(STAGE, argv, EvaluateSettings, add_flags)
    return run_stage(stage, build, report)


def _shown_note(stage: StageArgs, key: str, value: str) -> str:
    """A truth's note for the report; its ``source`` (files, comma-joined) relative to the project."""
    return ",".join(stage.shown(path) for path in value.split(",")) if key == "source" else value


def build(pipeline: beam.Pipeline, out: str, stage: StageArgs):
    settings: EvaluateSettings = stage.settings
    where = stage.flags.params or "params"
    specs = {**embedded_models(stage.inputs, settings.encoders, where), **settings.models}
    if not specs:
        raise ParamError(f"{where}: nothing to evaluate: evaluate.models is empty and evaluate.encoders finds no vectors in {stage.inputs}")
    items = stage.flags.items
    gallery = gallery_of(items)
    rejected: list[Rejected] = []
    truths = {}
    for spec in stage.flags.truth:
        truth, truth_report = load_truth(spec, items)
        truths[truth.name] = truth
        rejected += truth_report.get("rejected", [])
    plan = {}
    galleries = {}
    skipped: dict[str, str] = {}  # models with nothing to score under the automatic gallery rule
    for name, spec in sorted(specs.items()):
        model = load_model(name, spec, stage.inputs)
        try:
            chosen = model_gallery(model, gallery, settings, gallery_rule(spec))
        except NoCoverageError as error:
            if gallery_rule(spec) != AUTO:
                raise
            skipped[name] = f"{error}: not evaluated (a build without pixels?)"
            continue
        tasks, ratings = runnable(model, settings)
        plan[name] = {"tasks": tasks, "ratings": ratings, "gallery": chosen.note}
        galleries[name] = chosen.summary()
    labels: dict[str, tuple[int, ...]] = {}
    if stage.flags.labels:
        labels, bad = read_labels(stage.flags.labels)
        rejected += bad
    bison = None
    if stage.flags.bison:
        bison, bad = read_bison(stage.flags.bison, gallery.caption_image, frozenset(gallery.image_ids))
        rejected += bad
    positives = positives_agreement(truths, settings.verified, gallery) if settings.verified in truths else []
    models = {name: spec for name, spec in specs.items() if name not in skipped}
    inputs = EvaluationInputs(stage.inputs, items, models, settings, labels, bison, stage.root, worker_processes(stage.beam_args))
    results = pipeline | "Evaluate" >> EvaluateModels(list(stage.flags.truth), inputs)
    truth_notes = {
        f"{name} {key}": _shown_note(stage, key, value)
        for name, truth in sorted(truths.items())
        for key, value in sorted(truth.notes.items())
    }
    gather("GatherResults", results) | "Write" >> beam.Map(unpacking(write_outputs), out, positives, settings, truth_notes, galleries)
    write_quarantine(pipeline | "TruthRejects" >> beam.Create(sorted(rejected)), out, stage.root)
    return gallery, plan, skipped


def nest(results: list[tuple[str, str, dict[str, Any]]]) -> dict[str, dict[str, Any]]:
    nested: dict[str, dict[str, Any]] = {}
    for model, truth, values in sorted(results, key=lambda r: (r[0], r[1])):
        if values:
            nested.setdefault(model, {})[truth] = values
    return nested


def write_outputs(
    results: list[tuple[str, str, dict[str, Any]]],
    out: str,
    positives: list[dict[str, Any]],
    settings: Settings,
    truth_notes: dict[str, str],
    galleries: dict[str, dict[str, Any]],
) -> None:
    nested = nest(results)
    agreement = model_ranking_agreement(nested)
    document = {"results": nested, "galleries": galleries, "model_ranking_agreement": agreement, "positives_agreement": positives}
    io.write_bytes(io.join(out, "metrics.json"), (json.dumps(document, indent=1, sort_keys=True, allow_nan=True) + "\n").encode())
    notes = {
        "folds": f"{settings.folds} image folds in source order",
        "bootstrap": f"{settings.bootstrap_samples} samples, seed {settings.seed}",
        **truth_notes,
    }
    io.write_bytes(io.join(out, "report.md"), markdown(nested, agreement, positives, notes, galleries).encode())
    io.write_bytes(io.join(out, "recall_at_k.png"), recall_at_k_png(nested))


def report(done: Finished, stage: StageArgs) -> dict[str, Any]:
    gallery, plan, skipped = done.built
    document = json.loads(io.read_bytes(io.join(done.out, "metrics.json")))
    summary = {"gallery": f"{len(gallery.image_ids)} images, {len(gallery.caption_ids)} captions"}
    summary |= {f"{model} gallery": plan[model]["gallery"] for model in sorted(plan) if not plan[model]["gallery"].startswith("full")}
    for model, by_truth in document["results"].items():
        for truth, protocols in by_truth.items():
            parts = []
            metrics = protocols.get(ALL, {})
            for direction in TASK_KINDS:
                if direction in metrics.get("R@1", {}):
                    r = [metrics[m][direction] for m in HEADLINE]
                    parts.append(f"{direction} R@1/5/10 {100 * r[0]:.1f}/{100 * r[1]:.1f}/{100 * r[2]:.1f} medr {r[3]:g}")
            for kind in RATING_KINDS:
                if kind in metrics.get("spearman", {}):
                    parts.append(f"{kind} ρ {100 * metrics['spearman'][kind]:.1f}±{100 * metrics['spearman_std'][kind]:.1f}")
            summary[f"{model} / {truth}"] = "; ".join(parts) or "nothing this model can score"
    summary |= {f"{name} skipped": why for name, why in skipped.items()}
    summary["rejected"] = stage.rejected_line(done.quarantined)
    summary["outputs"] = f"metrics.json, report.md, recall_at_k.png in {stage.shown(stage.out)}"
    protocols = sorted({p for by_truth in document["results"].values() for t in by_truth.values() for p in t})
    return {
        "models": plan,
        "protocols": [p for p in (ALL, FOLDS) if p in protocols],
        "rejected": done.rejected,
        "skipped_models": skipped,
        "summary": summary,
    }
