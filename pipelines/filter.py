"""``crisscross filter``: machine annotators' top-K lists → ECCV Caption-style VERIFY candidates.

Outputs ``candidates.parquet`` (one (image, caption) pair per row, with its provenance: which
annotators, ranks and scores), ``verify_candidates.csv`` (the same pairs in published ids),
``queries.parquet`` (direction, query id), ``annotators.json`` (the annotators' specs, for the
``positives`` stage's audit), ``batches.parquet`` (the ECCV batches: 16 candidates + 1 original
positive + 1 negative outside every annotator's top-25 for its query), ``gold.parquet`` (those gold
rows), ``diversity.json`` (annotator diversity, before anyone sees a pair), ``counts.json``
(queries, pairs before and after dedupe, batch facts), ``quarantine.parquet`` and ``report.json``.
"""

from __future__ import annotations

import argparse
import json
from typing import Any

import apache_beam as beam
import pyarrow.compute as pc

from crisscross.beam.filter import FilterCandidates, FilterResult, read_gallery
from crisscross.candidates.annotators import load_annotators
from crisscross.candidates.machine import ANNOTATORS_FILE, FilterSettings, annotator_specs, candidates_csv, queries_table
from crisscross.core import io
from crisscross.formats.schema import NOT_GOLD
from crisscross.pipelines.registry import Stage
from crisscross.pipelines.stage import Finished, StageArgs, local_path, parse_args, require, run_stage, write_quarantine

STAGE = Stage(name="filter", order=50, description="embeddings + items → ECCV machine-annotator VERIFY candidates, gold batches, diversity")


def add_flags(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--items", type=local_path, required=True, help="the ingest output (images.parquet, captions.parquet): the gallery")


def main(argv: list[str]) -> dict[str, Any]:
    stage = parse_args(STAGE, argv, FilterSettings, add_flags)
    return run_stage(stage, build, report)


def build(pipeline: beam.Pipeline, out: str, stage: StageArgs):
    settings: FilterSettings = stage.settings
    settings.check(stage.flags.params or "params")
    items = stage.flags.items
    for name in ("images.parquet", "captions.parquet"):
        require(io.join(items, name), "ingest")
    load_annotators(settings, stage.inputs, read_gallery(items))  # fail now, with a readable error, not inside a worker
    outputs = pipeline | "Filter" >> FilterCandidates(stage.inputs, items, settings, stage.seed, stage.root)
    outputs.result | "Write" >> beam.Map(write_outputs, out)
    io.write_json(io.join(out, ANNOTATORS_FILE), annotator_specs(settings))
    write_quarantine(outputs.rejected, out, stage.root)


def write_outputs(result: FilterResult, out: str) -> None:
    io.write_parquet(io.join(out, "candidates.parquet"), result.candidates)
    io.write_bytes(io.join(out, "verify_candidates.csv"), candidates_csv(result.candidates))
    io.write_parquet(io.join(out, "queries.parquet"), queries_table(result.queries))
    io.write_parquet(io.join(out, "batches.parquet"), result.plan.batches)
    gold = result.plan.batches.filter(pc.not_equal(result.plan.batches.column("gold"), NOT_GOLD))
    io.write_parquet(io.join(out, "gold.parquet"), gold)
    io.write_json(io.join(out, "diversity.json"), result.diversity)
    io.write_json(
        io.join(out, "counts.json"),
        {
            "image_queries": len(result.queries.images),
            "caption_queries": len(result.queries.captions),
            "pairs_before_dedupe": result.before_dedupe,
            "candidates": result.candidates.num_rows,
            "batches": result.plan.facts,
        },
    )


def report(done: Finished, stage: StageArgs) -> dict[str, Any]:
    counts = json.loads(io.read_bytes(io.join(done.out, "counts.json")))
    diversity = json.loads(io.read_bytes(io.join(done.out, "diversity.json")))
    settings: FilterSettings = stage.settings
    summary = {
        "queries": f"{counts['image_queries']} images, {counts['caption_queries']} captions ({settings.queries})",
        "candidates": f"{counts['pairs_before_dedupe']} top-{settings.top_k} pairs → {counts['candidates']} after dedupe",
        "batches": (
            f"{counts['batches']['batches']} of {settings.batch_candidates} + 2 gold; "
            f"negatives in some top-{settings.negative_depth}: {counts['batches']['negative_rule_violations']}"
        ),
    }
    for direction, facts in diversity.items():
        for pair in facts["pairs"]:
            summary[f"{direction} {pair['a']} vs {pair['b']}"] = (
                f"tau-b {_shown(pair['kendall_tau_b'], 3)}, top-1 rank by other {_shown(pair['mean_rank_by_b_of_a_top1'], 1)} / "
                f"{_shown(pair['mean_rank_by_a_of_b_top1'], 1)}, top-{settings.top_k} overlap {_shown(pair[f'top{settings.top_k}_overlap'], 2)}"
            )
    summary["rejected"] = stage.rejected_line(done.quarantined)
    summary["outputs"] = (
        f"candidates.parquet, verify_candidates.csv, queries.parquet, batches.parquet, gold.parquet, diversity.json in {stage.shown(stage.out)}"
    )
    return {**counts, "annotators": settings.annotator_names(), "rejected": done.rejected, "summary": summary}


def _shown(value: float | None, digits: int) -> str:
    """A diversity figure for the summary; ``n/a`` where it is undefined (e.g. τ over a gallery too
    small for the top lists)."""
    return "n/a" if value is None else f"{value:.{digits}f}"
