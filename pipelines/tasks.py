"""``crisscross tasks``: candidate pairs → annotation tasks (STS / SIS / SITS / VERIFY items in
batches with gold items) and the files each annotation tool takes.

Outputs ``tasks.parquet`` (one row per item and batch; the gold key is in it), ``export/<format>/``
per export format (only what raters see: never the gold flags), ``answer_key.csv`` (the gold items
and their expected side: keep it from raters), ``quarantine.parquet`` and ``report.json``.
"""

from __future__ import annotations

import argparse
from collections import Counter
from collections.abc import Mapping
from dataclasses import asdict, fields
from typing import Any

import apache_beam as beam
import pyarrow as pa

from crisscross import io
from crisscross.annotation import GOLD_NEGATIVE, GOLD_POSITIVE, SIS, SITS, STS, VERIFY
from crisscross.beam.common import route
from crisscross.embeddings import (
    CAPTIONS,
    COCAPTION_MEAN,
    IMAGES,
    EmbeddingSet,
    set_dir,
)
from crisscross.exchange import ANSWER_KEY, answer_key, export_tasks
from crisscross.quarantine import Rejected, count_reasons
from crisscross.tasks import (
    Catalog,
    Space,
    TaskParams,
    build_tasks,
    items_from_candidates,
)
from pipelines.stage import (
    StageArgs,
    parse_args,
    read_quarantine,
    run_stage,
    write_quarantine,
)

STAGE = "tasks"
DESCRIPTION = "Turn candidate pairs into annotation tasks: items in seeded batches with known-positive and known-negative gold, exported per tool."
DEFAULTS: dict[str, Any] = {
    "formats": ["jsonl", "crowd-csv", "label-studio"],
    **asdict(TaskParams()),
    "gold_text_encoders": ["use-m3", "bow-glove50"],
    "gold_image_encoders": ["efficientnet-lite0"],
}


def add_flags(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--items", required=True, help="the ingest output (caption texts, image paths)")
    parser.add_argument("--embeddings", required=True, help="the embed output (known negatives are far apart under every encoder named in params)")


def main(argv: list[str]) -> dict[str, Any]:
    stage = parse_args(STAGE, DESCRIPTION, argv, DEFAULTS, add_flags)
    return run_stage(stage, lambda pipeline, out: build(pipeline, out, stage))


def gold_spaces(embeddings: str, text_encoders: list[str], image_encoders: list[str]) -> dict[str, list[Space]]:
    """Per task type, the vector spaces a known negative must be far apart in (tasks.Space)."""

    def read(modality: str, spec: str, rows: str) -> EmbeddingSet:
        directory = set_dir(embeddings, modality, spec, rows)
        if not io.exists(io.join(directory, "vectors.npy")):
            raise FileNotFoundError(f"no embedding set {directory}: run the embed stage with {spec!r} or drop it from tasks.gold_*_encoders")
        return EmbeddingSet.read(directory)

    spaces: dict[str, list[Space]] = {STS: [], SIS: [], SITS: [], VERIFY: []}
    for spec in text_encoders:
        captions, means = read("text", spec, CAPTIONS), read("text", spec, COCAPTION_MEAN)
        spaces[STS].append(Space(f"text/{spec}", captions, captions))
        spaces[SIS].append(Space(f"text/{spec}/cocaption_mean", means, means))
        spaces[SITS].append(Space(f"text/{spec}", captions, means))
        spaces[VERIFY].append(Space(f"text/{spec}", means, captions))
    for spec in image_encoders:
        images = read("image", spec, IMAGES)
        spaces[SIS].append(Space(f"image/{spec}", images, images))
    return spaces


def task_params(params: Mapping[str, Any]) -> TaskParams:
    return TaskParams(**{f.name: params[f.name] for f in fields(TaskParams)})


def build(pipeline: beam.Pipeline, out: str, stage: StageArgs):
    params = stage.params
    catalog = Catalog.from_tables(io.read_parquet(io.join(stage.flags.items, "captions.parquet")), io.read_parquet(io.join(stage.flags.items, "images.parquet")))
    spaces = gold_spaces(stage.flags.embeddings, list(params["gold_text_encoders"]), list(params["gold_image_encoders"]))
    settings = task_params(params)
    seed = int(stage.base.get("seed", 0))
    candidates_path = io.join(stage.inputs, "candidates.parquet")

    def to_items(path: str) -> list[Any]:
        items, rejected = items_from_candidates(io.read_parquet(path), catalog)
        return [items, *rejected]

    items, rejected = route("Items", pipeline | "Candidates" >> beam.Create([candidates_path]), STAGE, to_items, many=True)
    (
        items
        | "Tasks" >> beam.Map(build_tasks, catalog, spaces, settings, seed)
        | "Write" >> beam.Map(write_tasks, out, list(params["formats"]), catalog, settings.replicas)
    )
    write_quarantine(rejected, out)

    def finish(result: Any) -> dict[str, Any]:
        return report(out, stage)

    return finish


def write_tasks(tasks: pa.Table, out: str, formats: list[str], catalog: Catalog, replicas: int) -> None:
    """The export folders hold only what raters may see; the gold answer key goes beside them."""
    io.write_parquet(io.join(out, "tasks.parquet"), tasks)
    io.write_bytes(io.join(out, ANSWER_KEY), answer_key(tasks))
    for spec in formats:
        files = export_tasks(spec, tasks, catalog, replicas)
        del files[ANSWER_KEY]
        for relative, data in files.items():
            io.write_bytes(io.join(out, "export", spec, relative), data)


def report(out: str, stage: StageArgs) -> dict[str, Any]:
    tasks = io.read_parquet(io.join(out, "tasks.parquet")).to_pylist()
    quarantine: list[Rejected] = read_quarantine(out)
    per_type: dict[str, dict[str, int]] = {}
    for kind in sorted({t["task_type"] for t in tasks}):
        rows = [t for t in tasks if t["task_type"] == kind]
        gold = Counter(t["gold"] for t in rows)
        per_type[kind] = {
            "items": gold[""],
            "gold_positive": gold[GOLD_POSITIVE],
            "gold_negative": gold[GOLD_NEGATIVE],
            "batches": len({t["batch_id"] for t in rows}),
        }
    replicas = int(stage.params["replicas"])
    summary = {
        kind: f"{c['items']} items + {c['gold_positive']} positive / {c['gold_negative']} negative gold in {c['batches']} batches × {replicas} raters"
        for kind, c in per_type.items()
    }
    needed = len(tasks) * replicas
    summary["judgments needed"] = f"{needed:,} ({len(tasks):,} task rows × {replicas} raters)"
    summary["rejected"] = f"{len(quarantine)} → {io.join(stage.out, 'quarantine.parquet')}"
    summary["outputs"] = f"tasks.parquet, export/{{{','.join(stage.params['formats'])}}}/ in {stage.out}; answer_key.csv is for you, not raters"
    return {"task_types": per_type, "judgments_needed": needed, "rejected": count_reasons(quarantine), "summary": summary}
