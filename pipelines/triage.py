"""``crisscross triage``: a round's tasks → which items the machine labels, and which still need people.

``--in`` is a tasks stage output (``tasks.parquet``), ``--rated`` the aggregate outputs holding what
people labelled so far (comma-separated; none before the audit is rated), ``--embeddings`` and
``--items`` the embed and ingest outputs.  The ``triage:`` section sets the audit share, the error
rate a machine label may have and its confidence (:class:`TriageSettings`).  Outputs
``decisions.parquet`` (every item: audited, score, label, who decided it and why),
``machine_labels.parquet`` (the machine's labels in use, with the cut, its bound and the signals),
``tasks.parquet`` (what people get next, with their batches' gold items: a type's pending audit
alone, since the next fit needs all of it, else its open band; ``annotate``'s input), ``fits.json``
(each type's fit per turn), ``quarantine.parquet`` and ``report.json``.  ``triage.turns`` repeats
audit, fit and labels over the band (:func:`crisscross.campaign.triage.triage`).
"""

from __future__ import annotations

import argparse
import json
from typing import Any

import apache_beam as beam
import pyarrow as pa

from crisscross.beam.common import WholeTable
from crisscross.campaign.audit import triage_files
from crisscross.campaign.triage import DECIDED_BY_MACHINE, DECIDED_BY_PEOPLE, UNDECIDED, TriagedRound, TriageSettings
from crisscross.core import io
from crisscross.formats.schema import TASKS_SCHEMA
from crisscross.pipelines.registry import Stage
from crisscross.pipelines.stage import Finished, StageArgs, local_path, local_paths, parse_args, require, run_stage, write_quarantine

STAGE = Stage(
    name="triage", order=130, description="tasks + people's audit → machine labels beyond certified cuts, the rest still for people"
)


def add_flags(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--rated", type=local_paths, default=[], help="aggregate outputs with people's labels so far (comma-separated)")
    parser.add_argument("--embeddings", type=local_path, required=True, help="the embed output (the text encoders' caption vectors)")
    parser.add_argument("--items", type=local_path, required=True, help="the ingest output (which image each caption describes)")


def main(argv: list[str]) -> dict[str, Any]:
    stage = parse_args(STAGE, argv, TriageSettings, add_flags)
    return run_stage(stage, build, report)


def build(pipeline: beam.Pipeline, out: str, stage: StageArgs) -> None:
    require(io.join(stage.flags.items, "captions.parquet"), "ingest")
    inputs = {
        "tasks": require(io.join(stage.inputs, "tasks.parquet"), "tasks"),
        "rated": [require(io.join(folder, "rated.parquet"), "aggregate") for folder in stage.flags.rated],
        "embeddings": stage.flags.embeddings,
        "items": stage.flags.items,
    }
    outputs = pipeline | "Triage" >> WholeTable(STAGE.name, triage_files, inputs, stage.settings, stage.seed)
    outputs.kept | "Write" >> beam.Map(write, out)
    write_quarantine(outputs.rejected, out, stage.root)


def write(result: TriagedRound, out: str) -> None:
    io.write_parquet(io.join(out, "decisions.parquet"), pa.Table.from_pandas(result.decisions, preserve_index=False))
    io.write_parquet(io.join(out, "machine_labels.parquet"), pa.Table.from_pandas(result.machine_labels, preserve_index=False))
    io.write_parquet(
        io.join(out, "tasks.parquet"),
        pa.Table.from_pandas(result.open_tasks[TASKS_SCHEMA.names], schema=TASKS_SCHEMA, preserve_index=False),
    )
    io.write_json(
        io.join(out, "fits.json"), io.strict_json({kind: [fit.summary() for fit in fits] for kind, fits in sorted(result.turns.items())})
    )


def report(done: Finished, stage: StageArgs) -> dict[str, Any]:
    decisions = io.read_parquet(io.join(done.out, "decisions.parquet")).to_pandas()
    fits = json.loads(io.read_bytes(io.join(done.out, "fits.json")))
    per_type, summary = {}, {}
    for kind, rows in decisions.groupby("task_type", sort=True):
        by = rows["decided_by"].value_counts()
        checked = rows["checked"].dropna()
        facts = {
            "items": len(rows),
            "audit": int(rows["audit"].sum()),
            DECIDED_BY_PEOPLE: int(by.get(DECIDED_BY_PEOPLE, 0)),
            DECIDED_BY_MACHINE: int(by.get(DECIDED_BY_MACHINE, 0)),
            UNDECIDED: int(by.get(UNDECIDED, 0)),
            "checked": len(checked),
            "checked_agree": int(checked.astype(bool).sum()),
            "machine_by_turn": {
                str(t): int(n) for t, n in rows.loc[rows["decided_by"] == DECIDED_BY_MACHINE, "turn"].value_counts().sort_index().items()
            },
            "cuts": [turn["cuts"] for turn in fits.get(kind, [])],
        }
        per_type[kind] = facts
        line = f"{facts['items']:,} items: audit {facts['audit']:,}; people {facts[DECIDED_BY_PEOPLE]:,}, machine {facts[DECIDED_BY_MACHINE]:,}, open {facts[UNDECIDED]:,}"
        if len(fits.get(kind, [])) > 1:
            line += f" (machine labels by turn {facts['machine_by_turn']})"
        if facts["checked"]:
            line += f"; where people also rated, the machine agreed on {facts['checked_agree']:,} of {facts['checked']:,}"
        notes = (
            [f"turn {t}: {turn['note']}" if len(fits[kind]) > 1 else turn["note"] for t, turn in enumerate(fits[kind], 1) if turn["note"]]
            if kind in fits
            else ["no machine signals for this task type"]
        )
        summary[kind] = line + (f" ({'; '.join(notes)})" if notes else "")
    summary["rejected"] = stage.rejected_line(done.quarantined)
    summary["outputs"] = (
        f"decisions.parquet, machine_labels.parquet, tasks.parquet (still for people), fits.json in {stage.shown(stage.out)}"
    )
    return {"task_types": per_type, "rejected": done.rejected, "summary": summary}
