"""``crisscross aggregate``: judgments → rated pairs, rater report, agreement and plots.

Outputs ``rated.parquet`` (canonical ids, one row per item: agg_score or agg_label, n, mean, std,
positive, simulated), CxC-shaped ``sts.csv`` / ``sis.csv`` / ``sits.csv`` (published ids,
``agg_score``, ``sampling_method``) and ``verify.csv``, ``judgments_kept.parquet``,
``raters.csv``, ``score_distribution.png``, ``item_std.png``, ``quarantine.parquet`` (judgments of
excluded raters, with the rules they failed) and ``report.json``.
"""

from __future__ import annotations

import argparse
import json
from typing import Any

import apache_beam as beam
import pandas as pd
import pyarrow as pa

from crisscross.aggregate.excluded import aggregate_files
from crisscross.aggregate.plots import item_std_png, score_distribution_png
from crisscross.aggregate.round import KEPT_JUDGMENTS, RoundResult, RoundSettings, checked
from crisscross.beam.common import WholeTable
from crisscross.core import io
from crisscross.core.errors import ParamError
from crisscross.formats.cxc import CXC_FILES, cxc_csv
from crisscross.formats.verify import verify_csv
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
from crisscross.tasktypes import rated_type_names
from crisscross.tasktypes.verify import VERIFY

STAGE = Stage(name="aggregate", order=120, description="judgments → rater QC, aggregated rated pairs (CxC shape), agreement, plots")


def add_flags(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--tasks", type=local_path, required=True, help="the tasks stage output (gold items, sampling methods)")


def main(argv: list[str]) -> dict[str, Any]:
    stage = parse_args(STAGE, argv, RoundSettings, add_flags)
    return run_stage(stage, build, report)


def build(pipeline: beam.Pipeline, out: str, stage: StageArgs):
    settings: RoundSettings = stage.settings
    try:
        checked(settings)
    except (ValueError, TypeError) as error:
        raise ParamError(f"{stage.flags.params or 'params'}: aggregate: {error}") from error
    judgments = require(io.join(stage.inputs, "judgments.parquet"), "annotate")
    tasks = require(io.join(stage.flags.tasks, "tasks.parquet"), "tasks")
    outputs = pipeline | "Aggregate" >> WholeTable(STAGE.name, aggregate_files, judgments, tasks, settings)
    outputs.kept | "Write" >> beam.Map(write, out)
    write_quarantine(outputs.rejected, out, stage.root)


def write(result: RoundResult, out: str) -> None:
    rated = result.rated
    simulated = bool(rated["simulated"].any())
    io.write_parquet(io.join(out, "rated.parquet"), _arrow(rated))
    io.write_parquet(io.join(out, KEPT_JUDGMENTS), _arrow(result.kept))
    io.write_bytes(io.join(out, "raters.csv"), io.frame_csv_bytes(result.raters))
    for kind in sorted(set(rated["task_type"]) & set(CXC_FILES)):  # CxC's file per rating type
        rows = rated[rated["task_type"] == kind]
        io.write_bytes(
            io.join(out, f"{kind.lower()}.csv"),
            cxc_csv(kind, rows[["id_a", "id_b", "agg_score", "sampling_method"]].itertuples(index=False)),
        )
    verify = rated[rated["task_type"] == VERIFY.name]  # ECCV Caption's verification file
    if not verify.empty:
        io.write_bytes(io.join(out, "verify.csv"), verify_csv(verify, "id_a", "id_b"))
    ratings = rated[rated["task_type"].isin(rated_type_names())]
    io.write_bytes(io.join(out, "score_distribution.png"), score_distribution_png(ratings, simulated=simulated))
    io.write_bytes(io.join(out, "item_std.png"), item_std_png(ratings, simulated=simulated))
    io.write_json(io.join(out, "facts.json"), result.facts)


def _arrow(frame: pd.DataFrame) -> pa.Table:
    return pa.Table.from_pandas(frame, preserve_index=False)


def report(done: Finished, stage: StageArgs) -> dict[str, Any]:
    facts = json.loads(io.read_bytes(io.join(done.out, "facts.json")))
    rated = io.read_parquet(io.join(done.out, "rated.parquet")).to_pandas()
    raters = pd.read_csv(io.join(done.out, "raters.csv"))
    simulated = bool(rated["simulated"].any())
    summary = {}
    for kind, f in facts.items():
        alpha = "n/a" if f["alpha"] is None else f"{f['alpha']:.3f}"
        line = f"{f['items']:,} items from {f['judgments']:,} judgments by {f['workers']} worker{'s' * (f['workers'] != 1)} → {f['positives']:,} positive; alpha ({f['alpha_level']}) {alpha}"
        if f["pooled_items"]:
            line += f"; {f['pooled_items']} pooled items (pair judged in both orders or batches)"
            if f.get("pooled_items_straddling_threshold"):
                line += f", {f['pooled_items_straddling_threshold']} straddling the threshold"
        summary[kind] = line
    if not facts:
        summary["judgments"] = "none to aggregate: every task type is empty (see the tasks and annotate reports for why)"
    excluded = raters[raters["excluded"]]
    summary["raters"] = f"{len(raters)} (worker, task type) rows, {len(excluded)} excluded → raters.csv"
    summary["rejected"] = stage.rejected_line(done.quarantined, "judgments of excluded raters")
    if simulated:
        summary["simulated"] = "these ratings come from SIMULATED raters, not people"
    tables = [f"{kind.lower()}.csv" for kind in sorted(set(facts) & {*CXC_FILES, VERIFY.name})]  # the papers' files; other types have none
    summary["outputs"] = (
        f"rated.parquet, {', '.join([*tables, 'raters.csv'])}, score_distribution.png, item_std.png in {stage.shown(stage.out)}"
    )
    return {
        "task_types": facts,
        "excluded_raters": len(excluded),
        "simulated": simulated,
        "rejected": done.rejected,
        "summary": summary,
    }
