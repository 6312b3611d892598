"""``crisscross annotate``: tasks → judgments, from people's files or from a provider.

The judgment source is chosen by name (``annotate.source``; see
:mod:`crisscross.annotate.sources`): ``import`` (people's files), ``replay`` (earlier judgments
or ``cxc:<folder>``), ``simulate`` (a seeded panel over ``--embeddings``).

Outputs ``judgments.parquet``, ``unjudged.parquet`` (task rows nobody judged yet: what still
needs people), ``source.json``, ``quarantine.parquet`` and ``report.json``.  Under adaptive
replication (``annotate.replication``, a rule other than ``fixed``; ``tasks.replicas`` is the
ceiling) also ``replication.parquet``: each rated item's judgments used, whether it stopped, and why;
``crisscross topup`` reads it to ask for the judgments open items still need.
"""

from __future__ import annotations

import argparse
import json
from dataclasses import dataclass, field
from typing import Any

import apache_beam as beam
import pyarrow as pa

from crisscross.annotate.formats import JUDGMENT_FORMATS
from crisscross.annotate.sources import JUDGMENT_SOURCES, SimulateSettings, SourceSettings
from crisscross.annotate.tasks import TaskParams
from crisscross.annotate.validate import summary as judgment_summary
from crisscross.beam.annotate import CollectJudgments
from crisscross.campaign.replication import DECISIONS_FILE, FIXED, ReplicationSettings, with_pilot_spread
from crisscross.core import io
from crisscross.core.errors import ParamError
from crisscross.core.settings import params_of, setting
from crisscross.formats.cxc import CXC_SPLITS
from crisscross.formats.plan import ceiling, read_plan
from crisscross.formats.schema import MAX_SECONDS_PER_ITEM, JudgmentRules
from crisscross.pipelines.registry import Stage
from crisscross.pipelines.stage import (
    Finished,
    StageArgs,
    load_params,
    local_path,
    parse_args,
    require,
    run_stage,
    write_quarantine,
)

STAGE = Stage(
    name="annotate", order=100, description="tasks → judgments: import people's files, replay earlier judgments, or simulate raters"
)
_SOURCE_DEFAULTS = SourceSettings()


@dataclass(frozen=True)
class AnnotateSettings:
    source: str = setting("simulate", choices=tuple(JUDGMENT_SOURCES.names()))
    format: str = setting(_SOURCE_DEFAULTS.format, choices=tuple(JUDGMENT_FORMATS.names()))  # import
    replay_split: str = setting(_SOURCE_DEFAULTS.replay_split, choices=CXC_SPLITS)  # replay of cxc:<folder>
    simulate: SimulateSettings = field(default_factory=SimulateSettings)
    replication: ReplicationSettings = field(default_factory=ReplicationSettings)  # campaign/replication.py
    # the longest one judgment may take: import quarantines a judgment over it, the rater app refuses it
    max_seconds_per_item: float = setting(MAX_SECONDS_PER_ITEM, low=1.0)
    strict: bool = False

    @property
    def rules(self) -> JudgmentRules:
        return JudgmentRules(max_seconds=self.max_seconds_per_item)


def add_flags(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--judgments",
        type=local_path,
        action="append",
        default=[],
        help="import: judgment files or folders; replay: a judgments parquet or cxc:<folder>",
    )
    parser.add_argument("--embeddings", type=local_path, help="simulate: the embed output holding the reference encoder's text vectors")
    parser.add_argument("--items", type=local_path, help="simulate: the ingest output, for the captions of each image (BISON CHOOSE)")
    parser.add_argument("--plan", type=local_path, help="a plan output: its pilot's rater spread per type for the stop rule")
    parser.add_argument("--strict", action="store_true", default=None, help="fail if any judgment is rejected")


def main(argv: list[str]) -> dict[str, Any]:
    stage = parse_args(STAGE, argv, AnnotateSettings, add_flags)
    return run_stage(stage, build, report)


def replication_of(annotate: AnnotateSettings, plan: str | None = None) -> ReplicationSettings:
    """``annotate.replication``, each type's rater spread filled from ``plan`` (a plan stage
    output) where params give none."""
    settings = annotate.replication
    if plan is not None:
        settings = with_pilot_spread(settings, read_plan(plan))
    if settings.rule != FIXED and not settings.rater_sd:
        raise ParamError(
            f"annotate.replication.rule is {settings.rule}, but no rating type has a rater_sd: give annotate.replication.rater_sd, "
            "or --plan with a plan stage output"
        )
    return settings


def source_settings(stage: StageArgs) -> SourceSettings:
    settings: AnnotateSettings = stage.settings
    return SourceSettings(
        judgments=tuple(stage.flags.judgments),
        embeddings=stage.flags.embeddings,
        items=stage.flags.items,
        format=settings.format,
        replay_split=settings.replay_split,
        simulate=settings.simulate,
        seed=stage.seed,
        rules=settings.rules,
    )


def build(pipeline: beam.Pipeline, out: str, stage: StageArgs):
    replication = adaptive(stage)  # a bad stop rule fails before anything is read
    tasks = require(io.join(stage.inputs, "tasks.parquet"), "tasks")
    settings = source_settings(stage)
    source = stage.settings.source
    JUDGMENT_SOURCES.create(source, settings=settings)  # an unusable source fails before the pipeline runs
    outputs = pipeline | "Annotate" >> CollectJudgments(tasks, source, settings, replication)
    outputs.collected | "Write" >> beam.Map(write, out)
    write_quarantine(outputs.rejected, out, stage.root)
    return replication


def adaptive(stage: StageArgs) -> tuple[ReplicationSettings, int] | None:
    """The stop rule and its ceiling (:func:`ceiling_of`), or None for the fixed design."""
    replication = replication_of(stage.settings, stage.flags.plan)
    if replication.rule == FIXED:
        return None
    return replication, ceiling_of(stage.flags.params, stage.flags.round, stage.flags.plan)


def ceiling_of(params: str | None, round_name: str | None, plan: str | None) -> int:
    """The most judgments an item takes: the plan's (as ``tasks --plan`` built the round), else
    ``tasks.replicas`` with the round laid over."""
    if plan is not None:
        return ceiling(read_plan(plan))
    return load_params(params, "tasks", TaskParams, round_name)[0].replicas


def write(collected: tuple[pa.Table, pa.Table, dict[str, Any], pa.Table | None], out: str) -> None:
    judgments, unjudged, facts, decisions = collected
    io.write_parquet(io.join(out, "judgments.parquet"), judgments)
    io.write_parquet(io.join(out, "unjudged.parquet"), unjudged)
    io.write_json(io.join(out, "source.json"), facts)
    if decisions is not None:
        io.write_parquet(io.join(out, DECISIONS_FILE), decisions)


def report(done: Finished, stage: StageArgs) -> dict[str, Any]:
    judgments = io.read_parquet(io.join(done.out, "judgments.parquet"))
    unjudged = io.read_parquet(io.join(done.out, "unjudged.parquet"))
    counts = judgment_summary(judgments, done.quarantine)
    simulated = any(judgments.column("simulated").to_pylist())
    lines = {
        kind: f"{c['judgments']:,} judgments of {c['items']:,} items by {c['workers']} worker{'s' * (c['workers'] != 1)}"
        for kind, c in counts["by_task_type"].items()
    }
    lines["source"] = stage.settings.source + (" (SIMULATED raters: not people)" if simulated else "")
    lines["unjudged"] = f"{unjudged.num_rows} task rows still need people → {stage.shown(io.join(stage.out, 'unjudged.parquet'))}"
    lines["rejected"] = f"{counts['rejected_total']} {counts['rejected'] or ''} → {stage.shown(io.join(stage.out, 'quarantine.parquet'))}"
    facts = json.loads(io.read_bytes(io.join(done.out, "source.json")))
    replication = replication_report(done.out, done.built)
    if replication:
        lines["replication"] = "; ".join(
            f"{kind} {c['stopped']:,} stopped early, {c['open']:,} open, {c['judgments_used']:,} of {c['ceiling']:,} judgments"
            for kind, c in replication["by_task_type"].items()
        )
    return {
        **counts,
        "source": stage.settings.source,
        "simulated": simulated,
        "unjudged": unjudged.num_rows,
        "source_facts": facts,
        **({"replication": replication} if replication else {}),
        "summary": lines,
    }


def replication_report(out: str, adapted: tuple[ReplicationSettings, int] | None) -> dict[str, Any]:
    """Per rated type under the stop rule ``build`` ran (or nothing, for the fixed design): items
    stopped early, still open, judgments used against the ceiling."""
    if adapted is None:
        return {}
    settings, replicas = adapted
    decisions = io.read_parquet(io.join(out, DECISIONS_FILE)).to_pandas()
    by_type = {
        str(kind): {
            "items": len(group),
            "stopped": int(group["stopped"].sum()),
            "open": int(group["open"].sum()),
            "judgments_used": int(group["used"].sum()),
            "ceiling": len(group) * replicas,
        }
        for kind, group in decisions.groupby("task_type", sort=True)
    }
    return {"rule": settings.rule, "replicas": replicas, "settings": params_of(settings), "by_task_type": by_type}
