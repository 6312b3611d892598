"""``crisscross boxes``: coreference chains → boxes per chain, merged, as a Flickr30k Entities release.

``--in`` is a coref output, ``--mentions`` the mentions output, ``--items`` the ingest output
(images with their sizes).  The simulated crowd runs each chain through box requirement,
drawing, quality and coverage (``boxes:`` error rates); ``--import FILE`` takes the boxes from a
Label Studio JSON export of the box tasks instead, and ``--release FOLDER`` (without ``--items``)
replays a Flickr30k Entities release's ``Annotations/*.xml`` (image sizes, boxes, scene and
no-box chains), so a release read by ``mentions --in entities:FOLDER`` is written back out.  Writes boxes.parquet (merged boxes and their
chains), chains.parquet (final chains, outcome), ``release/Sentences/*.txt`` and
``release/Annotations/*.xml`` (the Entities format), ``label_studio/`` (config.xml, tasks.json and
annotations.json: the box tasks, and the boxes they got in Label Studio's export format),
quarantine.parquet and report.json.
"""

from __future__ import annotations

import argparse
import json
from collections import Counter
from typing import Any

import apache_beam as beam
import pyarrow as pa
from apache_beam.io.filesystems import FileSystems

from crisscross.beam.boxes import AnnotateBoxes
from crisscross.core import io
from crisscross.core.errors import InputError
from crisscross.core.quarantine import Rejected, count_reasons
from crisscross.entities import labelstudio
from crisscross.entities.boxes import TASKS, BoxSettings
from crisscross.entities.coref import chain_order
from crisscross.entities.files import linked_away, read_annotation, release_ids
from crisscross.entities.merge import ImageResult, Imported, imported_from_annotation
from crisscross.pipelines.stage import (
    StageArgs,
    check_strict,
    local_path,
    parse_args,
    read_quarantine,
    require,
    run_stage,
    write_quarantine,
)

STAGE = "boxes"
DESCRIPTION = "Collect boxes for each coreference chain (simulated crowd or a Label Studio export), merge them, write the Entities files."

BOXES_SCHEMA = pa.schema(
    [
        ("image_id", pa.string()),
        ("box", pa.int32()),
        ("xmin", pa.int32()),
        ("ymin", pa.int32()),
        ("xmax", pa.int32()),
        ("ymax", pa.int32()),
        ("chains", pa.string()),
    ]
)
FINAL_CHAINS_SCHEMA = pa.schema(
    [
        ("image_id", pa.string()),
        ("chain", pa.string()),
        ("caption_id", pa.string()),
        ("index", pa.int32()),
        ("kind", pa.string()),
        ("outcome", pa.string()),
    ]
)


def add_flags(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--mentions", type=local_path, required=True, help="the mentions output (mentions.parquet, captions.parquet)")
    parser.add_argument("--items", type=local_path, default=None, help="the ingest output (images.parquet with sizes); not with --release")
    parser.add_argument("--import", type=local_path, dest="imported", default=None, help="a Label Studio JSON export of the box tasks")
    parser.add_argument(
        "--release", type=local_path, default=None, help="a Flickr30k Entities folder: replay its Annotations/*.xml (sizes and boxes)"
    )
    parser.add_argument("--strict", action="store_true", default=None, help="fail if any chain or box is rejected")


def main(argv: list[str]) -> dict[str, Any]:
    stage = parse_args(STAGE, DESCRIPTION, argv, BoxSettings, add_flags)
    return run_stage(stage, lambda pipeline, out: build(pipeline, out, stage))


def _from_export(pipeline: beam.Pipeline, path: str) -> tuple[beam.PCollection, beam.PCollection]:
    """A Label Studio export as one dict of imported chains, and its malformed tasks."""
    parsed = (
        pipeline
        | "ImportFile" >> beam.Create([path])
        | "ReadExport" >> beam.FlatMap(lambda p: list(labelstudio.read_export(io.read_bytes(p), p)))
    )
    rejected = parsed | "ImportRejects" >> beam.Filter(lambda x: isinstance(x, Rejected))
    chains = (
        parsed
        | "ImportBoxes" >> beam.Filter(lambda x: not isinstance(x, Rejected))
        | "ImportList" >> beam.combiners.ToList()
        | "ImportDict" >> beam.Map(lambda pairs: {key: (None, tuple(boxes)) for key, boxes in pairs})
    )
    return chains, rejected


def _annotation(path: str) -> tuple[dict[str, Any], dict[str, Imported]]:
    target = linked_away(path)
    if target is not None:
        raise InputError(f"{path}: a link to {target}, outside the release's Annotations/")
    annotation = read_annotation(io.read_bytes(path), path)
    stem = path.rsplit("/", 1)[-1].removesuffix(".xml")
    if annotation.file_name and annotation.file_name.rsplit(".", 1)[0] != stem:
        raise InputError(f"{path}: <filename> {annotation.file_name} is not the image of {stem}.xml")
    image_id, _ = release_ids(stem, 0)
    image = {
        "image_id": image_id,
        "file_name": annotation.file_name or f"{stem}.jpg",
        "width": annotation.width,
        "height": annotation.height,
    }
    return image, imported_from_annotation(image_id, annotation)


def _from_release(pipeline: beam.Pipeline, folder: str) -> tuple[beam.PCollection, beam.PCollection]:
    """A release's Annotations as image rows and one dict of imported chains."""
    pattern = io.join(folder, "Annotations", "*.xml")
    paths = sorted(m.path for r in FileSystems.match([pattern]) for m in r.metadata_list)
    if not paths:
        raise InputError(f"no {pattern}: --release must be a Flickr30k Entities folder with Annotations/")
    parsed = pipeline | "AnnotationFiles" >> beam.Create(paths) | "ReadAnnotations" >> beam.Map(_annotation)
    images = parsed | "ReleaseImages" >> beam.Map(lambda pair: pair[0])
    chains = (
        parsed
        | "ReleaseChains" >> beam.Map(lambda pair: pair[1])
        | "ReleaseList" >> beam.combiners.ToList()
        | "ReleaseDict" >> beam.Map(lambda parts: {k: v for part in parts for k, v in part.items()})
    )
    return images, chains


def build(pipeline: beam.Pipeline, out: str, stage: StageArgs):
    settings: BoxSettings = stage.settings
    flags = stage.flags
    if flags.release and (flags.items or flags.imported):
        raise InputError("--release replays a release's boxes and sizes: give it without --items and --import")
    if not flags.release and not flags.items:
        raise InputError("give --items (the ingest output), or --release to replay a Flickr30k Entities folder")
    chains = require(io.join(stage.inputs, "chains.parquet"), "coref")
    mentions = require(io.join(flags.mentions, "mentions.parquet"), "mentions")
    captions = require(io.join(flags.mentions, "captions.parquet"), "mentions")
    rejected = [pipeline | "NoImportRejects" >> beam.Create([])]
    imported = None
    if flags.release:
        images, imported = _from_release(pipeline, flags.release)
    else:
        images = require(io.join(flags.items, "images.parquet"), "ingest")
        if flags.imported:
            if not io.exists(flags.imported):
                raise InputError(f"no Label Studio export {flags.imported}")
            imported, import_rejects = _from_export(pipeline, flags.imported)
            rejected.append(import_rejects)
    results, annotate_rejects = pipeline | "Boxes" >> AnnotateBoxes(
        chains, mentions, captions, images, settings, stage.seed, imported
    )
    results | "GatherImages" >> beam.combiners.ToList() | "Write" >> beam.Map(write_results, out)
    write_quarantine((*rejected, annotate_rejects), out, stage.root)

    def finish(result: Any) -> dict[str, Any]:
        check_strict(stage, out)
        return report(out, stage)

    return finish


def write_results(images: list[ImageResult], out: str) -> None:
    images = sorted(images, key=lambda r: r.image_id)
    box_rows, chain_rows, tasks, counts = [], [], [], Counter()
    stems: dict[str, str] = {}
    for image in images:
        if stems.setdefault(image.stem, image.image_id) != image.image_id:
            raise InputError(f"images {stems[image.stem]} and {image.image_id} would both be release/Sentences/{image.stem}.txt")
        io.write_bytes(io.join(out, "release", "Sentences", f"{image.stem}.txt"), image.sentences)
        io.write_bytes(io.join(out, "release", "Annotations", f"{image.stem}.xml"), image.annotation)
        owners: dict[tuple[int, ...], list[str]] = {}
        for r in image.merged.chains:
            counts.update(dict(r.tasks))
            counts[f"outcome:{r.outcome}"] += 1
            for box in r.boxes:
                owners.setdefault(box, []).append(r.chain.chain)
            for m in r.chain.members:
                chain_rows.append(
                    {
                        "image_id": image.image_id,
                        "chain": r.chain.chain,
                        "caption_id": m.caption_id,
                        "index": m.index,
                        "kind": r.chain.kind,
                        "outcome": r.outcome,
                    }
                )
        for number, (box, names) in enumerate(sorted(owners.items(), key=lambda item: (chain_order(item[1][0]), item[0]))):
            box_rows.append(
                {
                    "image_id": image.image_id,
                    "box": number,
                    "xmin": box[0],
                    "ymin": box[1],
                    "xmax": box[2],
                    "ymax": box[3],
                    "chains": "/".join(names),
                }
            )
        counts["boxes_drawn"] += image.before_merge
        counts["merged_boxes"] += image.merged.merged_boxes
        counts["merged_chains"] += image.merged.merged_chains
        tasks.extend(image.tasks)
    chain_rows.sort(key=lambda r: (r["image_id"], chain_order(r["chain"]), r["caption_id"], r["index"]))
    io.write_parquet(io.join(out, "boxes.parquet"), pa.Table.from_pylist(box_rows, schema=BOXES_SCHEMA))
    io.write_parquet(io.join(out, "chains.parquet"), pa.Table.from_pylist(chain_rows, schema=FINAL_CHAINS_SCHEMA))
    tasks.sort(key=lambda t: t.key)
    ls_tasks = [labelstudio.task(i + 1, t.image_value, t.caption, t.first, t.end, t.key, t.kind) for i, t in enumerate(tasks)]
    io.write_bytes(io.join(out, "label_studio", "config.xml"), labelstudio.label_config().encode())
    io.write_json(io.join(out, "label_studio", "tasks.json"), ls_tasks)
    exported = labelstudio.export_with_annotations(ls_tasks, [t.boxes for t in tasks], [t.size for t in tasks])
    io.write_json(io.join(out, "label_studio", "annotations.json"), exported)
    io.write_json(io.join(out, "counts.json"), dict(sorted(counts.items())))


def report(out: str, stage: StageArgs) -> dict[str, Any]:
    counts = json.loads(io.read_bytes(io.join(out, "counts.json")))
    boxes = io.read_parquet(io.join(out, "boxes.parquet"))
    quarantine = read_quarantine(out)
    outcomes = {k.split(":", 1)[1]: v for k, v in counts.items() if k.startswith("outcome:")}
    tasks = {t: counts.get(t, 0) for t in TASKS}
    summary = {
        "chains": ", ".join(f"{n:,} {k}" for k, n in sorted(outcomes.items())),
        "boxes": f"{boxes.num_rows:,} after merging ({counts.get('boxes_drawn', 0):,} drawn, {counts.get('merged_boxes', 0):,} merged away, "
        f"{counts.get('merged_chains', 0):,} chains merged)",
        "answers": ", ".join(f"{t} {n:,}" for t, n in tasks.items()),
        "rejected": stage.rejected_line(len(quarantine)),
        "outputs": f"release/Sentences, release/Annotations, label_studio/, boxes.parquet, chains.parquet in {stage.shown(stage.out)}",
    }
    return {
        "boxes": boxes.num_rows,
        "outcomes": dict(sorted(outcomes.items())),
        "answers": tasks,
        "merging": {k: counts.get(k, 0) for k in ("boxes_drawn", "merged_boxes", "merged_chains")},
        "rejected": count_reasons(quarantine),
        "summary": summary,
    }
