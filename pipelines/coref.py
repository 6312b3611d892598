"""``crisscross coref``: mentions → cross-caption coreference chains (Flickr30k Entities §2.1).

``--in`` is a mentions output.  The simulated crowd answers the link and verification questions
(error rates in ``coref:``); mentions replayed from a release keep their chains.  Writes
chains.parquet (one row per mention: image, chain, representative, category), links.json (links
asked against the naive |M|(|M|-1)/2), accuracy.json (chains against the oracle's truth),
quarantine.parquet and report.json.
"""

from __future__ import annotations

import json
from typing import Any

import apache_beam as beam

from crisscross.beam.coref import ResolveCoreference
from crisscross.core import io
from crisscross.entities.coref import CorefSettings, chain_accuracy, chains_table
from crisscross.pipelines.registry import Stage
from crisscross.pipelines.stage import Finished, StageArgs, parse_args, require, run_stage, write_quarantine

STAGE = Stage(name="coref", order=190, description="mentions → cross-caption coreference chains (O(|M|·|C|) links, verification)")


def main(argv: list[str]) -> dict[str, Any]:
    stage = parse_args(STAGE, argv, CorefSettings)
    return run_stage(stage, build, report)


def write_chains(chains: list[Any], out: str) -> None:
    io.write_parquet(io.join(out, "chains.parquet"), chains_table(chains))
    io.write_json(io.join(out, "accuracy.json"), chain_accuracy(chains))


def build(pipeline: beam.Pipeline, out: str, stage: StageArgs):
    mentions = require(io.join(stage.inputs, "mentions.parquet"), "mentions")
    outputs = pipeline | "Coref" >> ResolveCoreference(mentions, stage.settings, stage.seed)
    outputs.chains | "GatherChains" >> beam.combiners.ToList() | "WriteChains" >> beam.Map(write_chains, out)
    outputs.counts | "WriteLinks" >> beam.Map(lambda counts: io.write_json(io.join(out, "links.json"), counts))
    write_quarantine(pipeline | "NoRejects" >> beam.Create([]), out, stage.root)


def report(done: Finished, stage: StageArgs) -> dict[str, Any]:
    chains = io.read_parquet(io.join(done.out, "chains.parquet"))
    links = json.loads(io.read_bytes(io.join(done.out, "links.json")))
    accuracy = json.loads(io.read_bytes(io.join(done.out, "accuracy.json")))
    n_chains = len({(r["image_id"], r["chain"]) for r in chains.select(["image_id", "chain"]).to_pylist()})
    n_images = len(set(chains.column("image_id").to_pylist()))
    saved = 1 - links["links_asked"] / links["naive_links"] if links["naive_links"] else 0.0
    summary = {
        "chains": f"{n_chains:,} over {chains.num_rows:,} mentions in {n_images:,} images ({n_chains / max(n_images, 1):.1f} per image)",
        "links asked": f"{links['links_asked']:,} against {links['naive_links']:,} pairwise ({saved:.0%} fewer)",
        "verification": f"{links['verified']:,} chains verified, {links['split']:,} split by head noun",
        "against the oracle": f"{accuracy['exact']:.1%} of true chains exact, link F1 {accuracy['link_f1']:.3f}",
        "rejected": stage.rejected_line(done.quarantined),
    }
    return {"chains": n_chains, "links": links, "accuracy": accuracy, "rejected": done.rejected, "summary": summary}
