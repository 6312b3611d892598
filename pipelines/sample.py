"""``crisscross sample``: neighbour lists → CxC intramodal candidate pairs (i2i_csim, c2c_isim,
c2c_cocaption) with provenance, as a table and as CxC-shaped CSV files without scores."""

from __future__ import annotations

import argparse
from collections import Counter
from typing import Any

import apache_beam as beam
import pyarrow as pa
import pyarrow.compute as pc

from crisscross.beam.sample import SampleCandidates
from crisscross.candidates.cxc import C2C_COCAPTION, C2C_ISIM, METHODS, SampleSettings, candidate_csvs
from crisscross.core import io
from crisscross.embed.sets import COCAPTION_MEAN, IMAGES, set_dir
from crisscross.pipelines.registry import Stage
from crisscross.pipelines.stage import Finished, StageArgs, local_path, parse_args, run_stage, write_quarantine

CANDIDATE_SHARDS = ".candidate-shards"  # the drawn candidates while the job runs, deleted by the check
STAGE = Stage(
    name="sample",
    order=40,
    description="neighbours → CxC intramodal candidates (i2i_csim, c2c_isim, c2c_cocaption)",
    # Its findings are Arrow columns, so a second local process adds more in start-up and shipped
    # tables than it takes over (all of COCO on 2 cores, paired: 14.5 s on two processes, 13.5 s on one).
    one_local_process=True,
)


def add_flags(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--items", type=local_path, required=True, help="the ingest output (captions.parquet, images.parquet)")


def main(argv: list[str]) -> dict[str, Any]:
    stage = parse_args(STAGE, argv, SampleSettings, add_flags)
    return run_stage(stage, build, report)


def neighbour_tables(similarity_dir: str, modality: str, encoders: tuple[str, ...], kind: str) -> dict[str, str]:
    spaces = {set_dir("", modality, spec, kind).lstrip("/"): spec for spec in encoders}
    return {space: io.join(similarity_dir, space, "neighbours.parquet") for space in spaces}


def build(pipeline: beam.Pipeline, out: str, stage: StageArgs):
    settings: SampleSettings = stage.settings
    i2i = neighbour_tables(stage.inputs, "text", settings.i2i_text_encoders, COCAPTION_MEAN)
    c2c = neighbour_tables(stage.inputs, "image", settings.c2c_image_encoders, IMAGES)
    for path in (*i2i.values(), *c2c.values()):
        if not io.exists(path):
            raise FileNotFoundError(f"no neighbour table {path}: run the similarity stage with that encoder first")
    outputs = pipeline | "Sample" >> SampleCandidates(
        i2i,
        c2c,
        io.join(stage.flags.items, "captions.parquet"),
        settings.i2i_top,
        settings.c2c_top,
        settings.cocaption_ratio,
        stage.seed,
        settings.allow_cross_method,
        io.join(out, CANDIDATE_SHARDS),
    )
    outputs.candidates | "Write" >> beam.Map(write_candidates, out)
    write_quarantine(outputs.rejected, out, stage.root)
    return i2i, c2c


def write_candidates(table: pa.Table, out: str) -> None:
    io.write_parquet(io.join(out, "candidates.parquet"), table)
    for name, data in candidate_csvs(table).items():
        io.write_bytes(io.join(out, name), data)


def report(done: Finished, stage: StageArgs) -> dict[str, Any]:
    i2i, c2c = done.built
    candidates = io.read_parquet(io.join(done.out, "candidates.parquet"))
    per_method = Counter(candidates.column("method").to_pylist())
    counts = {method: per_method.get(method, 0) for method in METHODS}
    images = io.read_parquet(io.join(stage.flags.items, "images.parquet"))
    n_images = images.num_rows
    pixels = Counter(images.column("pixels").to_pylist())
    coverage = {}
    for space, path in {**i2i, **c2c}.items():
        queries = pc.count_distinct(io.read_parquet(path).column("query_id")).as_py()
        coverage[space] = {"images": queries, "left_out": n_images - queries}
    summary = {method: f"{n} candidates" for method, n in counts.items()}
    empty_image_spaces = [s for s in c2c if coverage[s]["images"] == 0]
    if not counts[C2C_ISIM] and empty_image_spaces:
        summary[C2C_ISIM] += f" (S^V is empty in {', '.join(empty_image_spaces)}: no image has pixels there)"
    if not c2c:
        summary[C2C_ISIM] += " (sample.c2c_image_encoders is empty: no image space to draw from)"
    if not counts[C2C_COCAPTION]:
        summary[C2C_COCAPTION] += f" (the quota is sample.cocaption_ratio × the {counts[C2C_ISIM]} c2c_isim pairs)"
    for space, facts in coverage.items():
        line = f"covers {facts['images']} of {n_images} images"
        if facts["left_out"]:
            why = (
                ", ".join(f"{n} with pixels {status}" for status, n in sorted(pixels.items()) if status != "ok")
                if space.startswith("image/")
                else "excluded in similarity (see its quarantine)"
            )
            line += f"; {facts['left_out']} left out ({why})"
        summary[space] = line
    summary["rejected"] = stage.rejected_line(done.quarantined)
    summary["outputs"] = f"candidates.parquet, sts_candidates.csv, sis_candidates.csv in {stage.shown(stage.out)}"
    return {"candidates": counts, "coverage": coverage, "rejected": done.rejected, "summary": summary}
