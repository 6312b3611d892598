"""``crisscross plan``: a pilot round's judgments → how many items and raters the campaign needs.

``--in`` is an annotate output (``judgments.parquet``: people's, or the simulated panel's).  The
``plan:`` section of params names the precision wanted and the pay (:class:`PlanSettings`).  Outputs
``plan.json`` (per rating type: the pilot's estimates, the replicas and items each target needs,
the design and its cost, what a budget buys), ``power.png`` (half widths against replicas and
items) and ``report.json``.
"""

from __future__ import annotations

from typing import Any

import apache_beam as beam

from crisscross.beam.common import WholeTable
from crisscross.campaign.plan import PlanSettings, plan_from_pilot, power_curves_png
from crisscross.core import io
from crisscross.formats.plan import PLAN_FILE
from crisscross.pipelines.registry import Stage
from crisscross.pipelines.stage import Finished, StageArgs, parse_args, require, run_stage, write_quarantine

STAGE = Stage(
    name="plan", order=140, description="pilot judgments → items and raters per type for target interval widths, cost, what a budget buys"
)


def main(argv: list[str]) -> dict[str, Any]:
    stage = parse_args(STAGE, argv, PlanSettings)
    return run_stage(stage, build, report)


def build(pipeline: beam.Pipeline, out: str, stage: StageArgs) -> None:
    judgments = require(io.join(stage.inputs, "judgments.parquet"), "annotate")
    outputs = pipeline | "Plan" >> WholeTable(STAGE.name, plan_from_pilot, judgments, stage.settings, stage.seed)
    outputs.kept | "Write" >> beam.Map(write, out)
    write_quarantine(outputs.rejected, out, stage.root)


def write(planned: tuple[dict[str, Any], bool], out: str) -> None:
    plan, simulated = planned
    io.write_json(io.join(out, PLAN_FILE), io.strict_json({**plan, "simulated": simulated}))
    io.write_bytes(io.join(out, "power.png"), power_curves_png(plan, simulated=simulated))


def _cost(design: dict[str, Any]) -> str:
    if design["rater_hours"] is None:
        return "time unknown (the pilot has no seconds)"
    return f"{design['rater_hours']:,} h, {design['cost']:,} {design['currency']}"


def report(done: Finished, stage: StageArgs) -> dict[str, Any]:
    import json

    plan = json.loads(io.read_bytes(io.join(done.out, PLAN_FILE)))
    summary = {}
    for kind, entry in plan["types"].items():
        d, p = entry["design"], entry["pilot"]
        w = d["half_widths"]
        summary[kind] = (
            f"pilot {p['items']:,} items: rater sd {p['rater_sd']:.2f}, item sd {p['item_sd']:.2f} → {d['items']:,} items × "
            f"{d['replicas']} raters = {d['judgments']:,} judgments, {_cost(d)}; "
            f"± item {w['item_score']}, positive rate {w['positive_rate']}, alpha {w['alpha']}, Spearman {w['spearman']}"
        )
        if entry["replicas_for_item_target"] is None:
            summary[kind] += f" (the item target needs more than plan.max_replicas = {d['replicas']})"
        unreachable = [target for target, items in entry["items_for"].items() if items is None]
        if unreachable:
            summary[kind] += f" ({', '.join(unreachable)}: not reached with any number of items)"
        if "budget" in entry:
            b = entry["budget"]
            summary[f"{kind} budget"] = (
                b.get("note")
                or f"{b['judgments']:,} judgments buy {b['items']:,} items: ± positive rate {b['half_widths']['positive_rate']}"
            )
    total = plan["total"]
    summary["total"] = f"{total['judgments']:,} judgments, " + (
        "time unknown" if total["rater_hours"] is None else f"{total['rater_hours']:,} rater-hours, {total['cost']:,} {total['currency']}"
    )
    if plan["simulated"]:
        summary["simulated"] = "planned from a SIMULATED pilot, not people"
    summary["rejected"] = stage.rejected_line(done.quarantined)
    summary["outputs"] = f"{PLAN_FILE}, power.png in {stage.shown(stage.out)}"
    return {"total": total, "types": {k: v["design"] for k, v in plan["types"].items()}, "rejected": done.rejected, "summary": summary}
