"""``crisscross localize``: phrase localization against the boxes (Flickr30k Entities §3.2).

``--in`` is a boxes output, ``--mentions`` the mentions output, ``--items`` the ingest output.
Proposals come from ``--proposals FILE`` (``localize.proposals: file``; the JSON-lines format of
:mod:`crisscross.entities.localize`) or a simulated model (``simulate``).  Writes metrics.json
(per type and overall: instances, R@1, R@K, AP), metrics.csv, quarantine.parquet, report.json.
"""

from __future__ import annotations

import argparse
import json
from typing import Any

import apache_beam as beam

from crisscross.beam.localize import PROPOSALS, LocalizePhrases
from crisscross.core import io
from crisscross.entities.localize import LocalizeSettings
from crisscross.pipelines.registry import Stage
from crisscross.pipelines.stage import Finished, StageArgs, local_path, parse_args, require, run_stage, write_quarantine

STAGE = Stage(name="localize", order=210, description="boxes + scored proposals → phrase localization R@1, R@K, AP per type")


def add_flags(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--mentions", type=local_path, required=True, help="the mentions output (mentions.parquet)")
    parser.add_argument("--items", type=local_path, required=True, help="the ingest output (images.parquet with sizes)")
    parser.add_argument("--proposals", type=local_path, default=None, help="proposals JSON lines (localize.proposals: file)")


def main(argv: list[str]) -> dict[str, Any]:
    stage = parse_args(STAGE, argv, LocalizeSettings, add_flags)
    return run_stage(stage, build, report)


def build(pipeline: beam.Pipeline, out: str, stage: StageArgs):
    settings: LocalizeSettings = stage.settings
    paths = {
        "chains": require(io.join(stage.inputs, "chains.parquet"), "boxes"),
        "boxes": require(io.join(stage.inputs, "boxes.parquet"), "boxes"),
        "mentions": require(io.join(stage.flags.mentions, "mentions.parquet"), "mentions"),
        "images": require(io.join(stage.flags.items, "images.parquet"), "ingest"),
    }
    given, rejected = PROPOSALS.create(settings.proposals, pipeline=pipeline, path=stage.flags.proposals)
    metrics, unknown = pipeline | "Localize" >> LocalizePhrases(paths, settings, stage.seed, given)
    metrics | "Write" >> beam.Map(write_metrics, out, settings.k)
    write_quarantine((rejected, unknown), out, stage.root)


def write_metrics(metrics: dict[str, dict[str, float]], out: str, k: int) -> None:
    io.write_json(io.join(out, "metrics.json"), metrics)
    header = ["type", "instances", "r_at_1", f"r_at_{k}", "ap"]
    rows = [
        [kind, m["instances"], round(m["r_at_1"], 2), round(m[f"r_at_{k}"], 2), round(m.get("ap", m.get("mean_ap", 0.0)), 2)]
        for kind, m in metrics.items()
    ]
    io.write_bytes(io.join(out, "metrics.csv"), io.csv_bytes(header, rows))


def report(done: Finished, stage: StageArgs) -> dict[str, Any]:
    metrics = json.loads(io.read_bytes(io.join(done.out, "metrics.json")))
    k = stage.settings.k
    overall = metrics.get("overall", {"instances": 0, "r_at_1": 0.0, f"r_at_{k}": 0.0, "mean_ap": 0.0})
    summary = {
        "phrases": f"{overall['instances']:,} with boxes ({stage.settings.proposals} proposals)",
        "overall": f"R@1 {overall['r_at_1']:.1f}, R@{k} {overall[f'r_at_{k}']:.1f}, mean AP {overall['mean_ap']:.1f}",
        "AP by type": ", ".join(f"{kind} {m['ap']:.1f}" for kind, m in metrics.items() if kind != "overall"),
        "rejected": stage.rejected_line(done.quarantined),
    }
    return {"metrics": metrics, "rejected": done.rejected, "summary": summary}
