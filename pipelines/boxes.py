"""``crisscross boxes``: coreference chains → boxes per chain, merged, as a Flickr30k Entities release.

``--in`` is a coref output, ``--mentions`` the mentions output, ``--items`` the ingest output
(images with their sizes).  The simulated crowd runs each chain through box requirement,
drawing, quality and coverage (``boxes:`` error rates); ``--import FILE`` takes the boxes from a
Label Studio JSON export of the box tasks instead, and ``--release FOLDER`` (without ``--items``)
replays a Flickr30k Entities release's ``Annotations/*.xml`` (image sizes, boxes, scene and
no-box chains), so a release read by ``mentions --in entities:FOLDER`` is written back out.  Writes boxes.parquet (merged boxes and their
chains), chains.parquet (final chains, outcome), ``release/Sentences/*.txt`` and
``release/Annotations/*.xml`` (the Entities format), ``label_studio/`` (config.xml, tasks.json and
annotations.json: the box tasks, and the boxes they got in Label Studio's export format),
quarantine.parquet and report.json.
"""

from __future__ import annotations

import argparse
import json
from typing import Any

import apache_beam as beam

from crisscross.beam.boxes import AnnotateBoxes, ImportedBoxes, ReleaseBoxes
from crisscross.core import io
from crisscross.core.errors import InputError
from crisscross.entities.boxes import TASKS, BoxSettings
from crisscross.entities.outputs import write_results
from crisscross.pipelines.registry import Stage
from crisscross.pipelines.stage import (
    Finished,
    StageArgs,
    local_path,
    parse_args,
    require,
    run_stage,
    write_quarantine,
)

STAGE = Stage(
    name="boxes", order=200, description="chains → boxes by a per-chain state machine, merged; Entities files, Label Studio tasks"
)


def add_flags(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--mentions", type=local_path, required=True, help="the mentions output (mentions.parquet, captions.parquet)")
    parser.add_argument("--items", type=local_path, default=None, help="the ingest output (images.parquet with sizes); not with --release")
    parser.add_argument("--import", type=local_path, dest="imported", default=None, help="a Label Studio JSON export of the box tasks")
    parser.add_argument(
        "--release", type=local_path, default=None, help="a Flickr30k Entities folder: replay its Annotations/*.xml (sizes and boxes)"
    )
    parser.add_argument("--strict", action="store_true", default=None, help="fail if any chain or box is rejected")


def main(argv: list[str]) -> dict[str, Any]:
    stage = parse_args(STAGE, argv, BoxSettings, add_flags)
    return run_stage(stage, build, report)


def build(pipeline: beam.Pipeline, out: str, stage: StageArgs):
    settings: BoxSettings = stage.settings
    flags = stage.flags
    if flags.release and (flags.items or flags.imported):
        raise InputError("--release replays a release's boxes and sizes: give it without --items and --import")
    if not flags.release and not flags.items:
        raise InputError("give --items (the ingest output), or --release to replay a Flickr30k Entities folder")
    chains = require(io.join(stage.inputs, "chains.parquet"), "coref")
    mentions = require(io.join(flags.mentions, "mentions.parquet"), "mentions")
    captions = require(io.join(flags.mentions, "captions.parquet"), "mentions")
    rejected = [pipeline | "NoImportRejects" >> beam.Create([])]
    imported = None
    if flags.release:
        images, imported = pipeline | "Release" >> ReleaseBoxes(flags.release)
    else:
        images = require(io.join(flags.items, "images.parquet"), "ingest")
        if flags.imported:
            if not io.exists(flags.imported):
                raise InputError(f"no Label Studio export {flags.imported}")
            imported, import_rejects = pipeline | "Import" >> ImportedBoxes(flags.imported)
            rejected.append(import_rejects)
    results, annotate_rejects = pipeline | "Boxes" >> AnnotateBoxes(chains, mentions, captions, images, settings, stage.seed, imported)
    results | "GatherImages" >> beam.combiners.ToList() | "Write" >> beam.Map(write_results, out)
    write_quarantine((*rejected, annotate_rejects), out, stage.root)


def report(done: Finished, stage: StageArgs) -> dict[str, Any]:
    counts = json.loads(io.read_bytes(io.join(done.out, "counts.json")))
    boxes = io.read_parquet(io.join(done.out, "boxes.parquet"))
    outcomes = {k.split(":", 1)[1]: v for k, v in counts.items() if k.startswith("outcome:")}
    tasks = {t: counts.get(t, 0) for t in TASKS}
    summary = {
        "chains": ", ".join(f"{n:,} {k}" for k, n in sorted(outcomes.items())),
        "boxes": f"{boxes.num_rows:,} after merging ({counts.get('boxes_drawn', 0):,} drawn, {counts.get('merged_boxes', 0):,} merged away, "
        f"{counts.get('merged_chains', 0):,} chains merged)",
        "answers": ", ".join(f"{t} {n:,}" for t, n in tasks.items()),
        "rejected": stage.rejected_line(done.quarantined),
        "outputs": f"release/Sentences, release/Annotations, label_studio/, boxes.parquet, chains.parquet in {stage.shown(stage.out)}",
    }
    return {
        "boxes": boxes.num_rows,
        "outcomes": dict(sorted(outcomes.items())),
        "answers": tasks,
        "merging": {k: counts.get(k, 0) for k in ("boxes_drawn", "merged_boxes", "merged_chains")},
        "rejected": done.rejected,
        "summary": summary,
    }
