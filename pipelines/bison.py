"""``crisscross bison``: COCO-BISON's rounds → its triples (BISON §4.1 steps 2–3).

``--in`` is the CHOOSE round's aggregate output, ``--decoys`` the decoys stage's, ``--items`` the
ingest output.  Always written: ``candidates.parquet`` (``bison_chosen`` caption–decoy pairs, the
VERIFY-TRIPLE round's input to ``crisscross tasks``).  With ``--verified`` (the VERIFY-TRIPLE
round's aggregate output) also the accepted triples: ``bison_annotations.json`` (the released
COCO-BISON JSON shape), ``triples.parquet`` and ``triples.csv`` (canonical ids: caption, target,
decoy, which ``crisscross evaluate --bison`` reads), the yield per step in ``report.json`` and, per
text encoder of ``bison.baselines``, BISON §5.1's reference-caption baseline: its accuracy in the
report and its scores as ``baselines/<encoder>.npz`` (a ``score-matrix`` model for ``crisscross
evaluate``; images of the triples × all their captions, so keep it off at COCO scale).
Then ``quarantine.parquet``: chosen captions not of their target, triples not accepted or
verified by their chooser.
"""

from __future__ import annotations

import argparse
import json
from dataclasses import dataclass
from typing import Any

import apache_beam as beam

from crisscross.aggregate.bison import bison_json, caption_baseline, triples_table, yields
from crisscross.beam.bison import AssembleBison, BisonInputs
from crisscross.candidates.bison import chosen_candidates
from crisscross.core import io
from crisscross.core.errors import ParamError
from crisscross.embed.sets import CAPTIONS, EmbeddingSet, encoder_slug, set_dir
from crisscross.pipelines.registry import Stage
from crisscross.pipelines.stage import Finished, StageArgs, local_path, parse_args, require, run_stage, write_quarantine

STAGE = Stage(name="bison", order=80, description="BISON rounds → chosen captions to verify, then verified triples (JSON, table)")
JSON_NAME = "bison_annotations.json"


@dataclass(frozen=True)
class BisonSettings:
    """``params.yaml`` ``bison:``; ``split``: ``info.split`` of the JSON (null: the images' own
    split); ``baselines``: text encoders whose §5.1 caption baseline is scored and written."""

    split: str | None = None
    baselines: tuple[str, ...] = ()


def add_flags(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--items", type=local_path, required=True, help="the ingest output (captions, images)")
    parser.add_argument("--decoys", type=local_path, required=True, help="the decoys stage output (decoys.parquet)")
    parser.add_argument(
        "--verified", type=local_path, help="the VERIFY-TRIPLE round's aggregate output; without it only the candidates are written"
    )
    parser.add_argument("--embeddings", type=local_path, help="the embed output (caption vectors of bison.baselines)")


def main(argv: list[str]) -> dict[str, Any]:
    stage = parse_args(STAGE, argv, BisonSettings, add_flags)
    return run_stage(stage, build, report)


def build(pipeline: beam.Pipeline, out: str, stage: StageArgs):
    require(io.join(stage.inputs, "rated.parquet"), "aggregate", " for the CHOOSE round (--round choose)")
    require(io.join(stage.flags.decoys, "decoys.parquet"), "decoys")
    if stage.flags.verified:
        require(io.join(stage.flags.verified, "rated.parquet"), "aggregate", " for the VERIFY-TRIPLE round")
    for encoder in stage.settings.baselines if stage.flags.verified else ():
        if not stage.flags.embeddings:
            raise ParamError(f"{stage.flags.params or 'params'}: bison.baselines names {encoder!r}: give --embeddings (the embed output)")
        require(
            io.join(set_dir(stage.flags.embeddings, "text", encoder, CAPTIONS), "vectors.npy"), "embed", f" with text encoder {encoder!r}"
        )
    inputs = BisonInputs(stage.inputs, stage.flags.items, stage.flags.verified)
    outputs = pipeline | "Bison" >> AssembleBison(inputs)
    outputs.chosen | "WriteChosen" >> beam.Map(write_chosen, out)
    outputs.triples | "WriteTriples" >> beam.Map(write_triples, out, stage)
    write_quarantine(outputs.rejected, out, stage.root)


def write_chosen(chosen: tuple[list[Any], dict[str, int]], out: str) -> None:
    captions, counts = chosen
    io.write_parquet(io.join(out, "candidates.parquet"), chosen_candidates(captions))
    io.write_json(io.join(out, "chosen.json"), counts)


def write_triples(found: tuple[list[Any], dict[str, int]], out: str, stage: StageArgs) -> None:
    triples, counts = found
    items, seed = stage.flags.items, stage.seed
    captions = io.read_parquet(io.join(items, "captions.parquet")).select(["caption_id", "image_id", "text"]).to_pylist()
    images = io.read_parquet(io.join(items, "images.parquet")).select(["image_id", "split"]).to_pylist()
    decoys = io.read_parquet(io.join(stage.flags.decoys, "decoys.parquet")).to_pylist()
    table = triples_table(
        triples,
        {r["caption_id"]: r["text"] for r in captions},
        {(d["target"], d["decoy"]): (d["similarity"], d["encoder"]) for d in decoys},
    )
    simulated = any(io.read_parquet(io.join(str(stage.flags.verified), "rated.parquet")).column("simulated").to_pylist())
    splits = {r["image_id"]: stage.settings.split or r["split"] or "" for r in images}
    io.write_json(io.join(out, JSON_NAME), bison_json(table, splits, seed, simulated))
    io.write_parquet(io.join(out, "triples.parquet"), table)
    io.write_bytes(io.join(out, "triples.csv"), io.frame_csv_bytes(table.to_pandas()))
    baselines = {}
    image_of = {r["caption_id"]: r["image_id"] for r in captions}  # the rows already read
    for encoder in stage.settings.baselines:
        captions_set = EmbeddingSet.read(set_dir(str(stage.flags.embeddings), "text", encoder, CAPTIONS))
        used = table.column("target").to_pylist() + table.column("decoy").to_pylist()
        baseline = caption_baseline(encoder, captions_set, used, image_of)
        io.write_bytes(io.join(out, "baselines", f"{encoder_slug(encoder)}.npz"), baseline.npz())
        baselines[encoder] = round(baseline.accuracy(table), 6)
    io.write_json(io.join(out, "verification.json"), {**counts, "simulated": simulated, "baseline_accuracy": baselines})


def _json(path: str) -> dict[str, Any]:
    return json.loads(io.read_bytes(path))


def report(done: Finished, stage: StageArgs) -> dict[str, Any]:
    chose = _json(io.join(done.out, "chosen.json"))
    candidates = io.read_parquet(io.join(done.out, "candidates.parquet")).num_rows
    summary = {
        "chosen": f"{chose['chosen']:,} target–decoy pairs with a chosen caption, {chose['none']:,} answered none (discarded)",
        "candidates": f"{candidates:,} caption–decoy pairs for the VERIFY-TRIPLE round → candidates.parquet",
    }
    facts: dict[str, Any] = {"chosen": chose, "candidates": candidates}
    if stage.flags.verified:
        verification = _json(io.join(done.out, "verification.json"))
        triples = io.read_parquet(io.join(done.out, "triples.parquet")).to_pylist()
        images = io.read_parquet(io.join(stage.flags.items, "images.parquet")).num_rows
        with_decoy = io.read_parquet(io.join(stage.flags.decoys, "decoys.parquet")).num_rows
        funnel = yields(images, with_decoy, chose, [r["target"] for r in triples])
        facts.update(verification=verification, yields=funnel)
        summary["triples"] = (
            f"{funnel['triples_accepted']:,} of {verification['verified']:,} verified triples accepted "
            f"({verification['not_accepted']:,} not by every verifier, {verification['verifier_was_chooser']:,} verified by their chooser)"
        )
        summary["yield"] = (
            f"{images:,} images → {with_decoy:,} with a decoy → {chose['chosen']:,} with a chosen caption → "
            f"{funnel['triples_accepted']:,} triples: {funnel['image_yield']:.1%} of images (paper: {funnel['paper_image_yield']:.1%})"
        )
        for encoder, accuracy in verification["baseline_accuracy"].items():
            summary[f"baseline {encoder}"] = f"BISON accuracy {accuracy:.1%} choosing by the other reference captions (§5.1) → baselines/"
        if verification["simulated"]:
            summary["simulated"] = "these triples come from SIMULATED raters, not people"
    summary["rejected"] = stage.rejected_line(done.quarantined)
    summary["outputs"] = (
        f"candidates.parquet{', bison_annotations.json, triples.parquet, triples.csv' if stage.flags.verified else ''} in {stage.shown(stage.out)}"
    )
    return {**facts, "rejected": done.rejected, "summary": summary}
