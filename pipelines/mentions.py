"""``crisscross mentions``: captions → noun-phrase mentions with their types (Flickr30k Entities §2.1).

``--in`` is an ingest output (captions.parquet, images.parquet; mentions from the rule chunker) or
``entities:<folder>``, a Flickr30k Entities release whose ``Sentences/*.txt`` give the mentions,
their chains and types (a replay).  Writes mentions.parquet, captions.parquet (each caption with
its Sentences line), quarantine.parquet and report.json.
"""

from __future__ import annotations

import json
from collections import Counter
from typing import Any

import apache_beam as beam
from apache_beam.io.filesystems import FileSystems

from crisscross.beam.mentions import ExtractMentions
from crisscross.core import io
from crisscross.core.errors import InputError
from crisscross.entities.mentions import MentionSettings, captions_table, mentions_table
from crisscross.pipelines.registry import Stage
from crisscross.pipelines.stage import Finished, StageArgs, parse_args, require, run_stage, write_quarantine

STAGE = Stage(name="mentions", order=180, description="captions or Flickr30k Entities Sentences → typed noun-phrase mentions")
ENTITIES_PREFIX = "entities:"


def main(argv: list[str]) -> dict[str, Any]:
    stage = parse_args(STAGE, argv, MentionSettings)
    return run_stage(stage, build, report)


def source(inputs: str) -> ExtractMentions:
    if inputs.startswith(ENTITIES_PREFIX):
        folder = io.join(inputs[len(ENTITIES_PREFIX) :], "Sentences")
        paths = sorted(m.path for r in FileSystems.match([io.join(folder, "*.txt")]) for m in r.metadata_list)
        if not paths:
            raise InputError(f"no {folder}/*.txt: {inputs} must be a Flickr30k Entities folder with Sentences/")
        return ExtractMentions(sentences=paths)
    require(io.join(inputs, "captions.parquet"), "ingest")
    return ExtractMentions(items=inputs)


def build(pipeline: beam.Pipeline, out: str, stage: StageArgs):
    outputs = pipeline | "Mentions" >> source(stage.inputs)
    (
        outputs.mentions
        | "GatherMentions" >> beam.combiners.ToList()
        | "WriteMentions" >> beam.Map(lambda rows: io.write_parquet(io.join(out, "mentions.parquet"), mentions_table(rows)))
    )
    (
        outputs.captions
        | "GatherCaptions" >> beam.combiners.ToList()
        | "WriteCaptions" >> beam.Map(lambda rows: io.write_parquet(io.join(out, "captions.parquet"), captions_table(rows)))
    )
    outputs.skipped | "WriteSkipped" >> beam.Map(lambda counts: io.write_json(io.join(out, "skipped.json"), counts))
    write_quarantine(outputs.rejected, out, stage.root)


def report(done: Finished, stage: StageArgs) -> dict[str, Any]:
    mentions = io.read_parquet(io.join(done.out, "mentions.parquet"))
    captions = io.read_parquet(io.join(done.out, "captions.parquet"))
    skipped = json.loads(io.read_bytes(io.join(done.out, "skipped.json")))
    kinds = Counter(t.split("/")[0] for t in mentions.column("types").to_pylist())
    n_captions = max(captions.num_rows, 1)
    summary = {
        "mentions": f"{mentions.num_rows:,} in {captions.num_rows:,} captions ({mentions.num_rows / n_captions:.2f} per caption)",
        "types": ", ".join(f"{k} {n:,}" for k, n in sorted(kinds.items())),
        "left out": ", ".join(f"{n:,} {why}" for why, n in sorted(skipped.items())) or "nothing",
        "rejected": stage.rejected_line(done.quarantined),
    }
    return {
        "mentions": mentions.num_rows,
        "captions": captions.num_rows,
        "images": len(set(captions.column("image_id").to_pylist())),
        "types": dict(sorted(kinds.items())),
        "skipped": skipped,
        "rejected": done.rejected,
        "summary": summary,
    }
