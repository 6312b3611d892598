"""What the boxes stage reads from a release and writes: the Flickr30k Entities files, the tables
of merged boxes and final chains, and the Label Studio tasks with the boxes they got.

:func:`release_image` reads one ``Annotations/*.xml`` of a release back as an image row and its
chains' boxes (``boxes --release``); :func:`write_results` writes every image's result, sorted,
so the files do not depend on the order workers finished in.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

import pyarrow as pa

from crisscross.core import io
from crisscross.core.errors import InputError
from crisscross.entities import labelstudio
from crisscross.entities.coref import chain_order
from crisscross.entities.files import linked_away, read_annotation, release_ids
from crisscross.entities.merge import ImageResult, Imported, imported_from_annotation

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


def release_image(path: str) -> tuple[dict[str, Any], dict[str, Imported]]:
    """One release annotation file as an image row (file name, size) and its chains' boxes."""
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


def write_results(images: list[ImageResult], out: str) -> None:
    """Every file of the stage's output but the quarantine and the report, from all images' results."""
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
