"""``crisscross decoys``: every target image → its decoy, the nearest other image by the mean of
its captions' word embeddings (COCO-BISON §4.1 step 1).

``--in`` is the embed output (``text/<decoys.encoder>/cocaption_mean``), ``--items`` the ingest
output.  Outputs ``decoys.parquet`` (target, decoy, similarity, encoder, rank), ``candidates.parquet``
(``bison_decoy`` target–decoy pairs: the CHOOSE round's input to ``crisscross tasks``),
``quarantine.parquet`` and ``report.json``.
"""

from __future__ import annotations

import argparse
from collections import Counter
from typing import Any

import apache_beam as beam

from crisscross.beam.common import gather, unpacking
from crisscross.beam.decoys import FindDecoys
from crisscross.candidates.bison import DecoySettings, decoy_candidates, decoys_table
from crisscross.core import io
from crisscross.embed.sets import COCAPTION_MEAN, set_dir
from crisscross.pipelines.registry import Stage
from crisscross.pipelines.stage import Finished, StageArgs, local_path, parse_args, require, run_stage, write_quarantine

STAGE = Stage(
    name="decoys", order=70, description="embeddings + items → BISON decoys: each image's nearest image by mean caption embedding"
)


def add_flags(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--items", type=local_path, required=True, help="the ingest output (images.parquet, captions.parquet)")


def main(argv: list[str]) -> dict[str, Any]:
    stage = parse_args(STAGE, argv, DecoySettings, add_flags)
    return run_stage(stage, build, report)


def build(pipeline: beam.Pipeline, out: str, stage: StageArgs):
    settings: DecoySettings = stage.settings
    require(io.join(stage.flags.items, "images.parquet"), "ingest")
    means = set_dir(stage.inputs, "text", settings.encoder, COCAPTION_MEAN)
    require(io.join(means, "vectors.npy"), "embed", f" with text encoder {settings.encoder!r} (decoys.encoder)")
    outputs = pipeline | "Decoys" >> FindDecoys(stage.flags.items, stage.inputs, settings)
    gather("GatherDecoys", outputs.decoys) | "Write" >> beam.Map(unpacking(write), out)
    write_quarantine(outputs.rejected, out, stage.root)


def write(decoys: list[Any], out: str) -> None:
    io.write_parquet(io.join(out, "decoys.parquet"), decoys_table(decoys))
    io.write_parquet(io.join(out, "candidates.parquet"), decoy_candidates(decoys))


def report(done: Finished, stage: StageArgs) -> dict[str, Any]:
    decoys = io.read_parquet(io.join(done.out, "decoys.parquet")).to_pandas()
    images = io.read_parquet(io.join(stage.flags.items, "images.parquet")).num_rows
    reasons = Counter(r.reason for r in done.quarantine)
    similarity = decoys["similarity"]
    facts = {
        "images": images,
        "targets_with_decoy": len(decoys),
        "share_with_decoy": round(len(decoys) / images, 6) if images else 0.0,
        "encoder": stage.settings.encoder,
        "similarity": {q: round(float(similarity.quantile(v)), 6) for q, v in (("min", 0), ("median", 0.5), ("max", 1))}
        if len(decoys)
        else {},
        "mutual_pairs": int(len(decoys.merge(decoys, left_on=["target", "decoy"], right_on=["decoy", "target"]))) // 2,
        "passed_over_same_image": reasons["same-image"],
    }
    summary = {
        "decoys": f"{len(decoys):,} of {images:,} images have a decoy under text/{facts['encoder']} co-caption means",
        "rejected": stage.rejected_line(done.quarantined),
        "outputs": f"decoys.parquet, candidates.parquet in {stage.shown(stage.out)}",
    }
    if len(decoys):
        summary["similarity"] = f"median cosine {facts['similarity']['median']:.3f} (min {facts['similarity']['min']:.3f})"
    return {**facts, "rejected": done.rejected, "summary": summary}
