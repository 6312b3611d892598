"""``crisscross ingest``: a source dataset → canonical ``images.parquet``, ``captions.parquet``, quarantine."""

from __future__ import annotations

import argparse
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Annotated, Any

import apache_beam as beam

from crisscross.beam.common import gather, unpacking
from crisscross.beam.ingest import IngestItems
from crisscross.core import io
from crisscross.core.settings import Options, setting
from crisscross.ingest.readers import READERS
from crisscross.ingest.records import CAPTIONS_SCHEMA, IMAGES_SCHEMA, sorted_by_id
from crisscross.ingest.validate import DEFAULT_MAX_TEXT_LENGTH
from crisscross.pipelines.registry import Stage
from crisscross.pipelines.stage import (
    Finished,
    StageArgs,
    local_path,
    named_runner,
    parse_args,
    run_stage,
    worker_processes,
    write_quarantine,
)

REMOTE_READ_PARTS = 8  # parts of a line source on a runner whose workers the command does not count

STAGE = Stage(
    name="ingest",
    order=10,
    description="source dataset → canonical images/captions tables + quarantine",
    # One process parses while its threads check and decode the files on the other cores; a second
    # local process reads half the source but ships every record through the runner to the join,
    # which cost more than it took over (all of COCO on 2 cores, paired: 32.7 s on two processes, 30.8 s on one).
    one_local_process=True,
)


@dataclass(frozen=True)
class IngestSettings:
    reader: str = setting("coco-karpathy-jsonl", choices=tuple(READERS.names()))
    reader_options: Annotated[Mapping[str, Any], Options(READERS, "reader")] = setting({})  # the reader's fields
    max_text_length: int = setting(DEFAULT_MAX_TEXT_LENGTH, low=1)  # characters after whitespace normalisation; longer → text-too-long
    strict: bool = False


def add_flags(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--images", default=None, type=local_path, help="directory holding the image files (optional: text-only builds)")
    parser.add_argument("--strict", action="store_true", default=None, help="fail if any record is rejected")


def main(argv: list[str]) -> dict[str, Any]:
    stage = parse_args(STAGE, argv, IngestSettings, add_flags)
    return run_stage(stage, build, report)


def read_parts(beam_args: list[str]) -> int:
    """How many parts a line source is read in: one per local worker process (one in process, where
    there is nothing to share), :data:`REMOTE_READ_PARTS` on a runner the flags name."""
    if named_runner(beam_args):
        return REMOTE_READ_PARTS
    return worker_processes(beam_args)


def build(pipeline: beam.Pipeline, out: str, stage: StageArgs):
    settings: IngestSettings = stage.settings
    reader = READERS.create(settings.reader, **settings.reader_options)
    images_dir = stage.flags.images or None
    processes = worker_processes(stage.beam_args)
    parts = read_parts(stage.beam_args)
    ingest = IngestItems(reader, stage.inputs, images_dir, settings.max_text_length, root=stage.root, processes=processes, parts=parts)
    outputs = pipeline | "Ingest" >> ingest
    for name, tables, schema in (("images", outputs.images, IMAGES_SCHEMA), ("captions", outputs.captions, CAPTIONS_SCHEMA)):
        path = io.join(out, f"{name}.parquet")
        gather(f"Gather{name.title()}", tables) | f"Write{name.title()}" >> beam.Map(
            unpacking(lambda parts, path=path, schema=schema: io.write_parquet(path, sorted_by_id(parts, schema)))
        )
    write_quarantine(outputs.rejected, out, stage.root)


def report(done: Finished, stage: StageArgs) -> dict[str, Any]:
    images = io.read_parquet(io.join(done.out, "images.parquet"))
    captions = io.read_parquet(io.join(done.out, "captions.parquet"))
    images_dir = stage.flags.images or None
    quarantined, rejected = done.quarantined, done.rejected
    pixels = dict(sorted(Counter(images.column("pixels").to_pylist()).items()))
    without_pixels = [row["image_id"] for row in images.select(["image_id", "pixels"]).to_pylist() if row["pixels"] != "ok"]
    warnings = []
    if images_dir and not io.exists(images_dir):
        warnings.append(f"--images {stage.shown(images_dir)} does not exist: every image is without pixels (a text-only build)")
    if images.num_rows == 0 and not quarantined:
        warnings.append(f"{stage.shown(stage.inputs)} holds no records")
    rejected_line = "; ".join(f"{kind} {reason} {n}" for kind, reasons in rejected.items() for reason, n in reasons.items())
    return {
        "source": stage.shown(stage.inputs),
        "reader": stage.settings.reader,
        "images_dir": images_dir and stage.shown(images_dir),
        "images": images.num_rows,
        "captions": captions.num_rows,
        "pixels": pixels,
        "images_without_pixels_examples": without_pixels[:20],
        "rejected": rejected,
        "rejected_total": quarantined,
        "summary": {
            "read": f"{stage.shown(stage.inputs)} with reader {stage.settings.reader}",
            "kept": f"{images.num_rows} images ({', '.join(f'{n} {k}' for k, n in pixels.items())} pixels), {captions.num_rows} captions",
            "rejected": f"{quarantined} ({rejected_line or 'none'}) → {stage.shown(io.join(stage.out, 'quarantine.parquet'))}",
            **({"WARNING": "; ".join(warnings)} if warnings else {}),
        },
        "warnings": warnings,
    }
