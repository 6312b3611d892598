"""``crisscross derive``: rated STS / SIS pairs → CxC C2I candidates (c2i_intrasim by decreasing
rating, c2i_original for every caption and its image) with provenance, as a table and as a
CxC-shaped ``sits_candidates.csv`` without scores.

``--in`` is the aggregate output (``rated.parquet``) or ``cxc:<folder>`` to replay the CxC release
files ``sts_<split>.csv`` and ``sis_<split>.csv`` (``derive.replay_split``).
"""

from __future__ import annotations

import argparse
import json
from collections import Counter
from typing import Any

import apache_beam as beam

from crisscross.beam.derive import DeriveC2I
from crisscross.candidates.c2i import METHODS, C2ICandidate, DeriveSettings, candidates_table, sits_csv
from crisscross.core import io
from crisscross.formats.cxc import CXC_FILES
from crisscross.pipelines.registry import Stage
from crisscross.pipelines.stage import Finished, StageArgs, local_path, parse_args, require, run_stage, write_quarantine
from crisscross.tasktypes.sis import SIS
from crisscross.tasktypes.sts import STS

STAGE = Stage(name="derive", order=60, description="rated STS/SIS pairs → CxC C2I candidates (c2i_intrasim by rank, c2i_original)")
CXC_PREFIX = "cxc:"


def add_flags(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--items", type=local_path, required=True, help="the ingest output (captions.parquet)")


def main(argv: list[str]) -> dict[str, Any]:
    stage = parse_args(STAGE, argv, DeriveSettings, add_flags)
    return run_stage(stage, build, report)


def rated_source(inputs: str, split: str) -> str | dict[str, str]:
    """``rated.parquet`` of an aggregate output, or the CxC release files of ``cxc:<folder>``."""
    if inputs.startswith(CXC_PREFIX):
        folder = inputs[len(CXC_PREFIX) :]
        files = {task: io.join(folder, CXC_FILES[task].name(split)) for task in (STS.name, SIS.name)}
        for path in files.values():
            if not io.exists(path):
                raise FileNotFoundError(f"no {path}: {inputs} must be a folder of CxC release files (split {split})")
        return files
    return require(io.join(inputs, "rated.parquet"), "aggregate")


def build(pipeline: beam.Pipeline, out: str, stage: StageArgs):
    settings: DeriveSettings = stage.settings
    rated = rated_source(stage.inputs, settings.replay_split)
    captions = require(io.join(stage.flags.items, "captions.parquet"), "ingest")
    outputs = pipeline | "Derive" >> DeriveC2I(rated, captions, settings, stage.seed)
    outputs.candidates | "Write" >> beam.Map(write_candidates, out)
    outputs.facts | "WriteFacts" >> beam.Map(lambda facts: io.write_json(io.join(out, "facts.json"), facts))
    write_quarantine(outputs.rejected, out, stage.root)


def write_candidates(candidates: list[C2ICandidate], out: str) -> None:
    io.write_parquet(io.join(out, "candidates.parquet"), candidates_table(candidates))
    io.write_bytes(io.join(out, "sits_candidates.csv"), sits_csv(candidates))


def report(done: Finished, stage: StageArgs) -> dict[str, Any]:
    candidates = io.read_parquet(io.join(done.out, "candidates.parquet"))
    facts = json.loads(io.read_bytes(io.join(done.out, "facts.json")))
    per_method = Counter(candidates.column("method").to_pylist())
    counts = {method: per_method.get(method, 0) for method in METHODS}
    sources = facts["sources"]
    rated = facts["rated"]
    summary = {
        "rated": ", ".join(f"{n:,} {kind}" for kind, n in rated.items()) or "no usable rated STS or SIS pairs",
        "c2i_intrasim": (
            f"{counts['c2i_intrasim']:,} of quota {facts['quota']:,} ({facts['ranks']} ranks"
            + (f", depth {facts['depth']}" if facts["ranks"] == "per-query" else "")
            + f", directions {facts['directions']}): {sources[STS.name]['selected']:,} from C2C ranks, {sources[SIS.name]['selected']:,} from I2I ranks"
        ),
        "c2i_original": f"{counts['c2i_original']:,} caption–image pairs of the captions table",
    }
    if facts["skipped"]:
        summary["skipped"] = ", ".join(f"{n:,} {why}" for why, n in facts["skipped"].items())
    if facts["shortfall"]:
        summary["shortfall"] = (
            f"{facts['shortfall']:,} fewer c2i_intrasim than the quota: the rated pairs derive only "
            f"{sources[STS.name]['derived'] + sources[SIS.name]['derived']:,} candidates (C2C {sources[STS.name]['derived']:,}, I2I {sources[SIS.name]['derived']:,})"
        )
    if facts["ignored"]:
        summary["ignored"] = ", ".join(f"{n:,} {kind} rows (not intramodal)" for kind, n in facts["ignored"].items())
    summary["rejected"] = stage.rejected_line(done.quarantined)
    summary["outputs"] = f"candidates.parquet, sits_candidates.csv in {stage.shown(stage.out)}"
    return {
        "candidates": counts,
        "quota": facts["quota"],
        "shortfall": facts["shortfall"],
        "selection": facts,
        "rejected": done.rejected,
        "summary": summary,
    }
