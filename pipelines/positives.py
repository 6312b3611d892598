"""``crisscross positives``: the VERIFY round's verified pairs → one ECCV-shaped ground truth and
the audit of the machine annotators' bias (ECCV Caption §3.3, App. E).

``--in`` is the VERIFY round's aggregate output (``rated.parquet``); ``--filter`` the filter
stage's output (candidates with the annotators that found them, queries, annotators).  Outputs
``eccv_image_to_caption.json`` / ``eccv_caption_to_image.json`` (the filter's queries; ``evaluate
--truth eccv:<this folder>`` reads them, as does the ``eccv-caption`` package), ``positives.parquet``
(every positive pair with its sources and finders), ``bias_audit.json``, ``quarantine.parquet`` and
``report.json``.
"""

from __future__ import annotations

import argparse
import json
from typing import Any

import apache_beam as beam

from crisscross.aggregate.positives import (
    Merged,
    PositivesSettings,
    eccv_associations,
    positives_table,
    write_eccv_json,
)
from crisscross.beam.positives import BuildPositives, PositivesInputs, found_by
from crisscross.candidates.machine import ANNOTATORS_FILE, read_queries
from crisscross.core import io
from crisscross.pipelines.registry import Stage
from crisscross.pipelines.stage import Finished, StageArgs, local_path, parse_args, require, run_stage, source_spec, write_quarantine

STAGE = Stage(
    name="positives",
    order=150,
    description="VERIFY round → ECCV-shaped ground truth (verified ∪ original ∪ merged positives), annotator bias audit",
)


def add_flags(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--filter", type=local_path, required=True, help="the filter stage's output (candidates.parquet, queries.parquet, annotators.json)"
    )
    parser.add_argument("--items", type=local_path, required=True, help="the ingest output: the gallery and its original pairs")
    parser.add_argument(
        "--embeddings", type=local_path, required=True, help="the embed output: the annotators' (and audit models') vectors"
    )
    parser.add_argument(
        "--merge",
        type=source_spec,
        action="append",
        default=[],
        help="a ground truth whose i2t / t2i positives join, repeatable (as evaluate --truth: release:build/sits/rated, cxc:<folder>)",
    )


def main(argv: list[str]) -> dict[str, Any]:
    stage = parse_args(STAGE, argv, PositivesSettings, add_flags)
    return run_stage(stage, build, report)


def build(pipeline: beam.Pipeline, out: str, stage: StageArgs):
    settings: PositivesSettings = stage.settings
    flags = stage.flags
    rated = require(io.join(stage.inputs, "rated.parquet"), "aggregate", " (of the VERIFY round: crisscross aggregate --round verify)")
    for name in ("candidates.parquet", "queries.parquet", ANNOTATORS_FILE):
        require(io.join(flags.filter, name), "filter")
    for name in ("images.parquet", "captions.parquet"):
        require(io.join(flags.items, name), "ingest")
    inputs = PositivesInputs(
        rated=rated,
        filter=flags.filter,
        items=flags.items,
        embeddings=flags.embeddings,
        merge=tuple(flags.merge),
        annotator_specs=json.loads(io.read_bytes(io.join(flags.filter, ANNOTATORS_FILE))),
        audit_models=dict(settings.audit_models),
        audit_annotators=settings.audit_annotators,
        root=stage.root,
    )
    outputs = pipeline | "Positives" >> BuildPositives(inputs)
    outputs.merged | "Write" >> beam.Map(write_truth, out, flags.filter)
    outputs.audit | "WriteAudit" >> beam.Map(lambda audit: io.write_json(io.join(out, "bias_audit.json"), audit))
    write_quarantine(outputs.rejected, out, stage.root)


def write_truth(merged: Merged, out: str, filter_dir: str) -> None:
    queries = read_queries(io.read_parquet(io.join(filter_dir, "queries.parquet")))
    i2t, t2i = eccv_associations(merged.pairs(), queries.images, queries.captions)
    write_eccv_json(out, i2t, t2i)
    io.write_parquet(io.join(out, "positives.parquet"), positives_table(merged, found_by(filter_dir)))
    io.write_json(
        io.join(out, "counts.json"),
        {
            "verified_rows": merged.verified,
            "verified_positive": merged.verified_positive,
            "positives": len(merged.sources),
            "sources": merged.per_source(),
            "image_queries": len(queries.images),
            "caption_queries": len(queries.captions),
            "i2t_queries_with_positives": len(i2t),
            "t2i_queries_with_positives": len(t2i),
            "i2t_positives": sum(map(len, i2t.values())),
            "t2i_positives": sum(map(len, t2i.values())),
        },
    )


def report(done: Finished, stage: StageArgs) -> dict[str, Any]:
    counts = json.loads(io.read_bytes(io.join(done.out, "counts.json")))
    audit = json.loads(io.read_bytes(io.join(done.out, "bias_audit.json")))
    summary = {
        "verified": f"{counts['verified_positive']:,} positive of {counts['verified_rows']:,} VERIFY pairs",
        "truth": f"{counts['positives']:,} positive pairs ("
        + ", ".join(f"{n:,} {source}" for source, n in counts["sources"].items())
        + ")",
        "eccv json": (
            f"i2t {counts['i2t_positives']:,} positives for {counts['i2t_queries_with_positives']:,} of {counts['image_queries']:,} image queries; "
            f"t2i {counts['t2i_positives']:,} for {counts['t2i_queries_with_positives']:,} of {counts['caption_queries']:,} caption queries"
        ),
        "found by one annotator": f"{audit['found_by_one_annotator']:,} of {audit['verified_positives']:,} verified positives",
    }
    for annotator, entry in audit["annotators"].items():
        taus = entry["kendall_tau_b"]
        shown = "; ".join(
            f"{direction} " + ", ".join(f"{metric} {'n/a' if tau is None else f'{tau:.2f}'}" for metric, tau in by_metric.items())
            for direction, by_metric in taus.items()
        )
        summary[f"without {annotator}"] = (
            f"{entry['positives_found_alone']:,} sole finds removed; τ-b of {len(audit['models'])} models' rankings, full vs reduced: {shown or 'n/a'}"
        )
    summary["audit models"] = ", ".join(audit["models"]) or "none"
    summary["rejected"] = stage.rejected_line(done.quarantined)
    summary["outputs"] = (
        f"eccv_image_to_caption.json, eccv_caption_to_image.json, positives.parquet, bias_audit.json in {stage.shown(stage.out)}"
    )
    return {
        "counts": counts,
        "audit": {k: v for k, v in audit.items() if k != "scores"},
        "rejected": done.rejected,
        "summary": summary,
    }
