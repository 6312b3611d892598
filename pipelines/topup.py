"""``crisscross topup``: a round's judgments so far → the batches that close its open items.

``--in`` is an annotate output of the round (``judgments.parquet``), ``--tasks`` the round's tasks
output, ``--items`` the ingest output; with ``--rated`` (the round's aggregate output) only the
judgments rater quality control kept count, so an item stopped on a dropped judgment reopens.  The
stop rule is ``annotate.replication`` (``--plan``: the pilot's rater spread, and the plan's ceiling
instead of ``tasks.replicas``; ``--round`` lays the round's sections over both).  The ``topup:``
section sets the raters each top-up batch asks for and the export formats
(:class:`~crisscross.campaign.topup.TopUpSettings`).  Outputs ``status.parquet`` (every item: judgments so far, how many more it may take,
open or not, why), ``tasks.parquet`` (the top-up batches' rows, as in the round's tasks),
``export/<format>/``, ``answer_key.csv``, ``quarantine.parquet`` and ``report.json``.  People's
files of every round go back through ``annotate`` against the round's own tasks, with one
``--judgments`` per file or folder.
"""

from __future__ import annotations

import argparse
from typing import Any

import apache_beam as beam
import pandas as pd
import pyarrow as pa

from crisscross.aggregate.round import KEPT_JUDGMENTS
from crisscross.annotate.catalog import load_catalog
from crisscross.annotate.exports import ANSWER_KEY, answer_key, export_tasks
from crisscross.beam.common import WholeTable
from crisscross.campaign.topup import TopUpSettings, raters_for, top_up
from crisscross.core import io
from crisscross.formats.schema import TASKS_SCHEMA
from crisscross.pipelines.annotate import AnnotateSettings, ceiling_of, replication_of
from crisscross.pipelines.registry import Stage
from crisscross.pipelines.stage import Finished, StageArgs, load_params, local_path, parse_args, require, run_stage, write_quarantine

STAGE = Stage(
    name="topup", order=110, description="a round's judgments so far → the batches that close its open items (file-based crowd tools)"
)


def add_flags(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--tasks", type=local_path, required=True, help="the round's tasks output (tasks.parquet)")
    parser.add_argument("--items", type=local_path, required=True, help="the ingest output (caption texts, image paths)")
    parser.add_argument("--rated", type=local_path, help="the round's aggregate output: only the judgments quality control kept count")
    parser.add_argument("--plan", type=local_path, help="the plan the round follows: its ceiling and its pilot's rater spread")


def main(argv: list[str]) -> dict[str, Any]:
    stage = parse_args(STAGE, argv, TopUpSettings, add_flags)
    return run_stage(stage, build, report)


def build(pipeline: beam.Pipeline, out: str, stage: StageArgs) -> None:
    annotate, _ = load_params(stage.flags.params, "annotate", AnnotateSettings, stage.flags.round)
    replication = replication_of(annotate, stage.flags.plan)
    replicas = ceiling_of(stage.flags.params, stage.flags.round, stage.flags.plan)
    require(io.join(stage.inputs, "judgments.parquet"), "annotate")
    counted = io.join(stage.flags.rated, KEPT_JUDGMENTS) if stage.flags.rated else io.join(stage.inputs, "judgments.parquet")
    inputs = {"tasks": require(io.join(stage.flags.tasks, "tasks.parquet"), "tasks"), "judgments": require(counted, "aggregate")}
    outputs = pipeline | "TopUp" >> WholeTable(STAGE.name, top_up, inputs, replicas, replication, stage.settings.step)
    outputs.kept | "Write" >> beam.Map(write, out, stage.flags.items, stage.settings, stage.seed)
    write_quarantine(outputs.rejected, out, stage.root)


def write(topped: tuple[pd.DataFrame, pd.DataFrame, int], out: str, items: str, settings: TopUpSettings, seed: int) -> None:
    status, rows, raters = topped
    tasks = pa.Table.from_pandas(rows[TASKS_SCHEMA.names], schema=TASKS_SCHEMA, preserve_index=False)
    io.write_parquet(io.join(out, "status.parquet"), pa.Table.from_pandas(status, preserve_index=False))
    io.write_parquet(io.join(out, "tasks.parquet"), tasks)
    if not raters:
        return
    catalog = load_catalog(items)
    if settings.formats:  # the answer key goes beside the task files
        io.write_bytes(io.join(out, ANSWER_KEY), answer_key(tasks))
    for relative, data in export_tasks(settings.formats, tasks, catalog, raters, seed):
        io.write_bytes(io.join(out, relative), data)


def report(done: Finished, stage: StageArgs) -> dict[str, Any]:
    status = io.read_parquet(io.join(done.out, "status.parquet")).to_pandas()
    tasks = io.read_parquet(io.join(done.out, "tasks.parquet")).to_pandas()
    raters = raters_for(status, stage.settings.step)
    per_type: dict[str, dict[str, int]] = {}
    summary: dict[str, str] = {}
    for kind, rows in status.groupby("task_type", sort=True):
        open_rows = rows[rows["open"]]
        batches = tasks.loc[tasks["task_type"] == kind, "batch_id"].nunique()
        per_type[str(kind)] = {
            "items": len(rows),
            "decided": len(rows) - len(open_rows),
            "open": len(open_rows),
            "judgments_so_far": int(rows["judgments"].sum()),
            "batches": int(batches),
            "judgments_asked": int((tasks["task_type"] == kind).sum()) * raters,
        }
        c = per_type[str(kind)]
        summary[str(kind)] = (
            f"{c['open']:,} of {c['items']:,} items open ({c['judgments_so_far']:,} judgments so far) → "
            f"{c['batches']:,} top-up batches × {raters} rater{'s' * (raters != 1)} = {c['judgments_asked']:,} judgments (gold included)"
        )
    summary["rejected"] = stage.rejected_line(done.quarantined)
    exports = f", export/{{{','.join(stage.settings.formats)}}}/, {ANSWER_KEY}" if raters else " (nothing is open: no export)"
    summary["outputs"] = f"status.parquet, tasks.parquet{exports} in {stage.shown(stage.out)}"
    return {"task_types": per_type, "raters_per_batch": raters, "rejected": done.rejected, "summary": summary}
