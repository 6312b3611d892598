"""``crisscross tasks``: candidate pairs → annotation tasks (STS / SIS / SITS / VERIFY items in
batches with gold items) and the files each annotation tool takes.

Outputs ``tasks.parquet`` (one row per item and batch; the gold key is in it), ``export/<format>/``
per export format (only what raters see: never the gold flags), ``answer_key.csv`` (the gold items
and their expected side: keep it from raters), ``quarantine.parquet`` and ``report.json``.

With ``--plan`` (a ``crisscross plan`` output) the round follows the campaign's design: per rating
type a seeded sample of the plan's item count (``tasks.items_per_type``; the rest go to
``held_back.parquet``, candidates for a later round), and ``replicas`` the most the plan gives any
type — a ceiling that adaptive replication (``annotate.replication``) stops short of per item.
"""

from __future__ import annotations

import argparse
from collections import Counter
from collections.abc import Mapping
from dataclasses import replace
from typing import Any

import apache_beam as beam
import pyarrow as pa

from crisscross.annotate.catalog import load_catalog
from crisscross.annotate.exports import ANSWER_KEY, answer_key, export_tasks
from crisscross.annotate.gold import gold_spaces
from crisscross.annotate.tasks import TaskParams
from crisscross.beam.tasks import BuildTasks
from crisscross.core import io
from crisscross.core.errors import InputError
from crisscross.formats.plan import ceiling, designs, read_plan
from crisscross.formats.schema import GOLD_NEGATIVE, GOLD_POSITIVE
from crisscross.pipelines.registry import Stage
from crisscross.pipelines.stage import Finished, StageArgs, local_path, parse_args, require, run_stage, write_quarantine

STAGE = Stage(name="tasks", order=90, description="candidates → annotation tasks in batches with gold items, exported per tool")
HELD_BACK = "held_back.parquet"  # items a campaign plan's sample leaves for a later round
BATCHES = "batches.parquet"  # batches formed upstream (the filter stage), used as they are


def add_flags(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--items", type=local_path, required=True, help="the ingest output (caption texts, image paths)")
    parser.add_argument(
        "--embeddings",
        type=local_path,
        required=True,
        help="the embed output (known negatives are far apart under every encoder named in params)",
    )
    parser.add_argument("--plan", type=local_path, help="a plan output: items per type and raters per item from its design")


def main(argv: list[str]) -> dict[str, Any]:
    stage = parse_args(STAGE, argv, TaskParams, add_flags)
    if stage.flags.plan:
        stage.settings = planned(stage.settings, read_plan(stage.flags.plan))
    return run_stage(stage, build, report)


def planned(settings: TaskParams, plan: Mapping[str, Any]) -> TaskParams:
    """The round's settings under a campaign plan: its items per type, and its largest replicas as the ceiling."""
    return replace(settings, items_per_type={kind: items for kind, (items, _) in designs(plan).items()}, replicas=ceiling(plan))


def build(pipeline: beam.Pipeline, out: str, stage: StageArgs):
    settings: TaskParams = stage.settings
    batches = io.join(stage.inputs, BATCHES)
    batched = io.exists(batches)  # the filter stage's VERIFY batches come formed, with their gold
    if batched and settings.items_per_type:
        raise InputError(
            f"{stage.shown(batches)} holds batches formed upstream, kept as formed: a plan's item counts do not apply (drop --plan)"
        )
    if batched:
        candidates = batches
    else:
        candidates = require(io.join(stage.inputs, "candidates.parquet"), "sample")
        gold_spaces(stage.flags.embeddings, settings.gold_text_encoders, settings.gold_image_encoders)  # fail early, with advice
    seed = stage.seed
    outputs = pipeline | "Tasks" >> BuildTasks(candidates, stage.flags.items, stage.flags.embeddings, settings, seed, batched=batched)
    outputs.tasks | "Write" >> beam.Map(write_tasks, out, stage.flags.items, settings, seed)
    if settings.items_per_type:
        outputs.held_back | "WriteHeldBack" >> beam.Map(lambda table: io.write_parquet(io.join(out, HELD_BACK), table))
    write_quarantine(outputs.rejected, out, stage.root)


def write_tasks(tasks: pa.Table, out: str, items: str, settings: TaskParams, seed: int) -> None:
    """The export folders hold only what raters may see; the gold answer key goes beside them.
    ``seed`` orders the two images of a VERIFY-TRIPLE item, as the rater app does."""
    catalog = load_catalog(items)
    io.write_parquet(io.join(out, "tasks.parquet"), tasks)
    io.write_bytes(io.join(out, ANSWER_KEY), answer_key(tasks))
    for relative, data in export_tasks(settings.formats, tasks, catalog, settings.replicas, seed):
        io.write_bytes(io.join(out, relative), data)


def report(done: Finished, stage: StageArgs) -> dict[str, Any]:
    tasks = io.read_parquet(io.join(done.out, "tasks.parquet")).to_pylist()
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
    replicas = stage.settings.replicas
    summary = {
        kind: f"{c['items']} items + {c['gold_positive']} positive / {c['gold_negative']} negative gold in {c['batches']} batches × {replicas} raters"
        for kind, c in per_type.items()
    }
    needed = len(tasks) * replicas
    summary["judgments needed"] = f"{needed:,} ({len(tasks):,} task rows × {replicas} raters)"
    held_back: dict[str, int] = {}
    if stage.settings.items_per_type:
        held = io.read_parquet(io.join(done.out, HELD_BACK)).column("task_type").to_pylist()
        held_back = dict(sorted(Counter(held).items()))
        short = {  # of the types this round holds: a plan of round one names no SITS items
            k: f"{per_type[k]['items']:,} of {n:,}"
            for k, n in stage.settings.items_per_type.items()
            if k in per_type and per_type[k]["items"] < n
        }
        summary["plan"] = (
            f"items {dict(stage.settings.items_per_type)}, {replicas} raters at most"
            + (f"; held back for a later round {held_back} → {HELD_BACK}" if held_back else "")
            + (f"; the candidates fall short of the plan ({', '.join(f'{k} {v}' for k, v in short.items())}): sample more" if short else "")
        )
    summary["rejected"] = stage.rejected_line(done.quarantined)
    summary["outputs"] = (
        f"tasks.parquet, export/{{{','.join(stage.settings.formats)}}}/ in {stage.shown(stage.out)}; answer_key.csv is for you, not raters"
    )
    planned_facts = {"held_back": held_back} if stage.settings.items_per_type else {}
    return {"task_types": per_type, "judgments_needed": needed, **planned_facts, "rejected": done.rejected, "summary": summary}
