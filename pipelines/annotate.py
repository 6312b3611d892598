"""``crisscross annotate``: tasks → judgments, from people's files or from a provider.

The judgment source is chosen by name (``annotate.source``):

``import``   judgment files people made (``--judgments`` files or folders; ``annotate.format``:
             ``jsonl``, ``csv``, ``crowd-csv``, ``label-studio``), validated against the tasks;
``replay``   earlier judgments (``--judgments``: a judgments parquet, or ``cxc:<folder>`` for the
             published CxC release with ``annotate.replay_split``), matched by unordered pair;
``simulate`` a seeded simulated panel over a reference text encoder (``--embeddings``).

Outputs ``judgments.parquet``, ``unjudged.parquet`` (task rows nobody judged yet: what still
needs people), ``quarantine.parquet`` and ``report.json``.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any, NamedTuple

import apache_beam as beam
import pyarrow as pa

from crisscross import io
from crisscross.annotation import SOURCE_PEOPLE
from crisscross.beam.common import route
from crisscross.exchange import JUDGMENT_FORMATS
from crisscross.judgments import summary as judgment_summary
from crisscross.judgments import validate
from crisscross.providers import (
    NO_JUDGMENT,
    PROVIDERS,
    load_cxc_release,
    repeats_report,
    unjudged_table,
)
from crisscross.quarantine import Rejected, RejectionError, count_reasons
from crisscross.registry import Registry
from pipelines.stage import (
    StageArgs,
    parse_args,
    read_quarantine,
    run_stage,
    write_quarantine,
)

STAGE = "annotate"
DESCRIPTION = "Collect judgments for the tasks: import people's files, replay earlier judgments, or simulate a rater panel."
DEFAULTS: dict[str, Any] = {
    "source": "simulate",
    "format": "csv",
    "replay_split": "test",
    "simulate": {"encoder": "use-m3"},
    "strict": False,
}
CXC_PREFIX = "cxc:"


class Collected(NamedTuple):
    judgments: pa.Table  # JUDGMENTS_SCHEMA
    unjudged: pa.Table  # UNJUDGED_SCHEMA
    rejected: list[Rejected]
    facts: dict[str, Any]  # what the source itself reports


SOURCES: Registry[Collected] = Registry("judgment source")  # each: (tasks, stage) → Collected


def add_flags(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--judgments", action="append", default=[], help="import: judgment files or folders; replay: a judgments parquet or cxc:<folder>")
    parser.add_argument("--embeddings", help="simulate: the embed output holding the reference encoder's text vectors")
    parser.add_argument("--strict", action="store_true", default=None, help="fail if any judgment is rejected")


def main(argv: list[str]) -> dict[str, Any]:
    stage = parse_args(STAGE, DESCRIPTION, argv, DEFAULTS, add_flags)
    return run_stage(stage, lambda pipeline, out: build(pipeline, out, stage))


def _files(paths: list[str]) -> list[Path]:
    found: list[Path] = []
    for path in map(Path, paths):
        if path.is_dir():
            found += sorted(p for p in path.rglob("*") if p.is_file())
        elif path.is_file():
            found.append(path)
        else:
            raise FileNotFoundError(f"no judgment file or folder {path}")
    if not found:
        raise FileNotFoundError(f"no judgment files under {', '.join(paths) or '(no --judgments given)'}")
    return found


def _unjudged(tasks: pa.Table, judgments: pa.Table) -> pa.Table:
    frame = tasks.to_pandas()
    missing = frame[~frame["item_id"].isin(set(judgments.column("item_id").to_pylist()))]
    return unjudged_table(missing, NO_JUDGMENT, ["no valid judgment in the imported files"] * len(missing))


@SOURCES.register("import")
def import_files(tasks: pa.Table, stage: StageArgs) -> Collected:
    reader = JUDGMENT_FORMATS.create(stage.params["format"])
    files = _files(stage.flags.judgments)
    records: list[Any] = []
    for path in files:
        records += reader.read(str(path), path.read_bytes())
    judgments, rejected = validate(records, tasks, SOURCE_PEOPLE)
    return Collected(judgments, _unjudged(tasks, judgments), rejected, {"files": [str(f) for f in files]})


@SOURCES.register("replay")
def replay(tasks: pa.Table, stage: StageArgs) -> Collected:
    if len(stage.flags.judgments) != 1:
        raise SystemExit("annotate replay: give exactly one --judgments (a judgments parquet or cxc:<folder>)")
    source = stage.flags.judgments[0]
    rejected: list[Rejected] = []
    if source.startswith(CXC_PREFIX):
        release = load_cxc_release(source[len(CXC_PREFIX) :], stage.params["replay_split"])
        earlier, rejected = release.judgments, list(release.rejected)
    else:
        earlier = io.read_parquet(source)
    provided = PROVIDERS.create("replay", judgments=earlier)(tasks)
    return Collected(provided.judgments, provided.unjudged, rejected, {"source_rows": earlier.num_rows, "repeats": repeats_report(provided.judgments)})


@SOURCES.register("simulate")
def simulate(tasks: pa.Table, stage: StageArgs) -> Collected:
    if not stage.flags.embeddings:
        raise SystemExit("annotate simulate: --embeddings (the embed output) is required")
    options = dict(stage.params["simulate"])
    encoder = str(options.pop("encoder"))
    seed = int(stage.base.get("seed", 0))
    provided = PROVIDERS.create("simulate", embeddings=stage.flags.embeddings, encoder=encoder, seed=seed, params=options)(tasks)
    return Collected(provided.judgments, provided.unjudged, [], {"reference_encoder": encoder})


def collect(tasks_path: str, stage: StageArgs) -> list[Any]:
    """The source's judgments, unjudged rows and facts, then its rejects (routed to quarantine)."""
    collected = SOURCES.create(stage.params["source"], tasks=io.read_parquet(tasks_path), stage=stage)
    return [(collected.judgments, collected.unjudged, collected.facts), *collected.rejected]


def build(pipeline: beam.Pipeline, out: str, stage: StageArgs):
    tasks_path = io.join(stage.inputs, "tasks.parquet")
    if not io.exists(tasks_path):
        raise FileNotFoundError(f"no tasks table {tasks_path}: run the tasks stage first")
    kept, rejected = route("Collect", pipeline | "Tasks" >> beam.Create([tasks_path]), STAGE, collect, many=True, args=(stage,))
    kept | "Write" >> beam.Map(write, out)
    write_quarantine(rejected, out)

    def finish(result: Any) -> dict[str, Any]:
        summary = report(out, stage)
        strict = stage.flags.strict if stage.flags.strict is not None else stage.params["strict"]
        if strict and summary["rejected_total"]:
            raise RejectionError(STAGE, count_reasons(read_quarantine(out)), str(io.failed_path(stage.out) / "quarantine.parquet"))
        return summary

    return finish


def write(collected: tuple[pa.Table, pa.Table, dict[str, Any]], out: str) -> None:
    judgments, unjudged, facts = collected
    io.write_parquet(io.join(out, "judgments.parquet"), judgments)
    io.write_parquet(io.join(out, "unjudged.parquet"), unjudged)
    io.write_json(io.join(out, "source.json"), facts)


def report(out: str, stage: StageArgs) -> dict[str, Any]:
    judgments = io.read_parquet(io.join(out, "judgments.parquet"))
    unjudged = io.read_parquet(io.join(out, "unjudged.parquet"))
    quarantine = read_quarantine(out)
    counts = judgment_summary(judgments, quarantine)
    simulated = any(judgments.column("simulated").to_pylist())
    lines = {
        kind: f"{c['judgments']:,} judgments of {c['items']:,} items by {c['workers']} worker{'s' * (c['workers'] != 1)}"
        for kind, c in counts["by_task_type"].items()
    }
    lines["source"] = stage.params["source"] + (" (SIMULATED raters: not people)" if simulated else "")
    lines["unjudged"] = f"{unjudged.num_rows} task rows still need people → {io.join(stage.out, 'unjudged.parquet')}"
    lines["rejected"] = f"{counts['rejected_total']} {counts['rejected'] or ''} → {io.join(stage.out, 'quarantine.parquet')}"
    facts = json.loads(io.read_bytes(io.join(out, "source.json")))
    return {**counts, "source": stage.params["source"], "simulated": simulated, "unjudged": unjudged.num_rows, "source_facts": facts, "summary": lines}
