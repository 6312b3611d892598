"""``crisscross ingest``: a source dataset → canonical ``images.parquet``, ``captions.parquet``, quarantine."""

from __future__ import annotations

import argparse
from collections import Counter
from typing import Any

import apache_beam as beam

from crisscross import io
from crisscross.beam.common import gather
from crisscross.beam.ingest import IngestItems
from crisscross.ingest.readers import READERS
from crisscross.ingest.records import captions_table, images_table
from crisscross.quarantine import RejectionError, count_reasons
from pipelines.stage import StageArgs, parse_args, read_quarantine, run_stage, write_quarantine

DESCRIPTION = "Read a captioned-image dataset with a named reader, validate it, and write canonical tables."
DEFAULTS: dict[str, Any] = {
    "reader": "coco-karpathy-jsonl",
    "reader_options": {},
    "strict": False,
}


def add_flags(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--images", default=None, help="directory holding the image files (optional: text-only builds)")
    parser.add_argument("--strict", action="store_true", default=None, help="fail if any record is rejected")


def main(argv: list[str]) -> dict[str, Any]:
    stage = parse_args("ingest", DESCRIPTION, argv, DEFAULTS, add_flags)
    return run_stage(stage, lambda pipeline, out: build(pipeline, out, stage))


def build(pipeline: beam.Pipeline, out: str, stage: StageArgs):
    reader = READERS.create(stage.params["reader"], **stage.params["reader_options"])
    images_dir = stage.flags.images or None
    outputs = pipeline | "Ingest" >> IngestItems(reader, stage.inputs, images_dir)
    paths = {name: io.join(out, f"{name}.parquet") for name in ("images", "captions")}
    gather("GatherImages", outputs.images) | "WriteImages" >> beam.Map(lambda rows: io.write_parquet(paths["images"], images_table(rows)))
    gather("GatherCaptions", outputs.captions) | "WriteCaptions" >> beam.Map(lambda rows: io.write_parquet(paths["captions"], captions_table(rows)))
    write_quarantine(outputs.rejected, out)

    def finish(result: Any) -> dict[str, Any]:
        summary = report(out, stage, images_dir)
        strict = stage.flags.strict if stage.flags.strict is not None else stage.params["strict"]
        if strict and summary["rejected_total"]:
            raise RejectionError("ingest", summary["rejected"], str(io.failed_path(stage.out) / "quarantine.parquet"))
        return summary

    return finish


def report(out: str, stage: StageArgs, images_dir: str | None) -> dict[str, Any]:
    images = io.read_parquet(io.join(out, "images.parquet"))
    captions = io.read_parquet(io.join(out, "captions.parquet"))
    quarantine = read_quarantine(out)
    rejected = count_reasons(quarantine)
    pixels = dict(sorted(Counter(images.column("pixels").to_pylist()).items()))
    without_pixels = [row["image_id"] for row in images.select(["image_id", "pixels"]).to_pylist() if row["pixels"] != "ok"]
    rejected_line = "; ".join(f"{kind} {reason} {n}" for kind, reasons in rejected.items() for reason, n in reasons.items())
    return {
        "source": stage.inputs,
        "reader": stage.params["reader"],
        "images_dir": images_dir,
        "images": images.num_rows,
        "captions": captions.num_rows,
        "pixels": pixels,
        "images_without_pixels_examples": without_pixels[:20],
        "rejected": rejected,
        "rejected_total": len(quarantine),
        "summary": {
            "read": f"{stage.inputs} with reader {stage.params['reader']}",
            "kept": f"{images.num_rows} images ({', '.join(f'{n} {k}' for k, n in pixels.items())} pixels), {captions.num_rows} captions",
            "rejected": f"{len(quarantine)} ({rejected_line or 'none'}) → {stage.out}/quarantine.parquet",
        },
    }
