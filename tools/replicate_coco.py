"""Write a SYNTHETIC caption collection the size of all of MS-COCO, for scale tests of the stages.

MS-COCO has 123,287 images (train2014 + val2014) and about 616k captions; only the 5,000
Karpathy test images and their 25,000 captions are here.  This tool replicates those real
captions under new ids until the collection has ``--images`` images (all of COCO by default):

* copy ``c`` (0, 1, 2, ...) holds the 5,000 source images in an order drawn from
  ``crisscross.core.rng.generator(seed, "replicate-coco", "copy:<c>")``; the last copy keeps only
  the first images of its order, so the size is exact;
* new image ``n`` (0-based, in output order) gets id ``IMAGE_ID_BASE + n`` and its captions, in
  the source's ``karpathy_order``, get ids ``CAPTION_ID_BASE + <running caption index>``: both
  ranges lie above every real MS-COCO id, so a replica can never be mistaken for a real image;
* caption texts and ``file_name`` are the source image's, unchanged, so pointing ``crisscross
  ingest --images`` at the real photos gives replicas of photographed images their pixels.
  Every text therefore occurs about 25 times: the collection measures throughput and memory, it
  says nothing about the quality of similarities, samples or evaluations built on it.

Output, all deterministic bytes for the same source, ``--images`` and ``--seed``:
``captions.jsonl`` (the ``coco-karpathy-jsonl`` format, ``crisscross ingest``'s default reader;
each line also names the real caption it copies in ``synthetic_copy_of``), ``metadata.json``
and ``README.md`` saying that the collection is synthetic and how it was made.

    python tools/replicate_coco.py --out /tmp/coco-scale                 # 123,287 images
    python tools/replicate_coco.py --out /tmp/coco-small --images 12000  # a smaller one
"""

from __future__ import annotations

import argparse
import hashlib
import json
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from crisscross.core import io
from crisscross.core.errors import InputError
from crisscross.core.rng import generator

COCO_IMAGES = 123_287  # train2014 (82,783) + val2014 (40,504)
IMAGE_ID_BASE = 1_000_000  # real COCO image ids are below 600,000
CAPTION_ID_BASE = 10_000_000  # real COCO caption annotation ids are below 1,000,000
SHARED_SOURCE = Path(__file__).resolve().parents[2] / "shared" / "data" / "coco-karpathy" / "test5k.jsonl"
FIELDS = ("image_id", "file_name", "caption_id", "caption_tok", "caption_raw", "karpathy_order")


def read_source(path: Path) -> list[list[dict[str, Any]]]:
    """The source's images in order of first appearance, each with its caption rows in ``karpathy_order``."""
    images: dict[int, list[dict[str, Any]]] = {}
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        try:
            row = json.loads(line)
            images.setdefault(int(row["image_id"]), []).append({name: row[name] for name in FIELDS})
        except (ValueError, KeyError, TypeError) as e:
            raise InputError(f"{path}:{number}: not a coco-karpathy-jsonl caption line ({e})") from e
    return [sorted(rows, key=lambda r: (r["karpathy_order"], r["caption_id"])) for rows in images.values()]


def replicate(source: Sequence[Sequence[dict[str, Any]]], n_images: int, seed: int) -> Iterator[dict[str, Any]]:
    """Caption rows of ``n_images`` replicated images (see the module docstring for the rules), one
    at a time: the full collection never has to fit in memory."""
    caption_id = CAPTION_ID_BASE
    for n in range(n_images):
        copy, index = divmod(n, len(source))
        if index == 0:
            order = generator(seed, "replicate-coco", f"copy:{copy}").permutation(len(source))
        for caption in source[int(order[index])]:
            yield {**caption, "image_id": IMAGE_ID_BASE + n, "caption_id": caption_id, "synthetic_copy_of": caption["caption_id"]}
            caption_id += 1


def readme(metadata: dict[str, Any]) -> str:
    return f"""# SYNTHETIC MS-COCO-sized caption collection

This is not MS-COCO. It holds {metadata["images"]:,} images and {metadata["captions"]:,} captions made by
`tools/replicate_coco.py` (seed {metadata["seed"]}) by replicating the {metadata["source_images"]:,} real
Karpathy-test images of `{metadata["source"]}` under new ids: images from {IMAGE_ID_BASE:,}, captions from
{CAPTION_ID_BASE:,}, above every real COCO id. Texts and file names are the source's, so a text occurs
in up to {-(-metadata["images"] // metadata["source_images"])} replicas, and `synthetic_copy_of` names the real
caption a line copies.

Use it to measure throughput and memory of the stages at the scale of all of COCO
(`crisscross ingest --in captions.jsonl`). Similarities, samples and evaluations built on it mean
nothing about real data. `metadata.json` records how it was made.
"""


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", required=True, help="output directory")
    parser.add_argument("--images", type=int, default=COCO_IMAGES, help=f"images to write (default {COCO_IMAGES:,}, all of MS-COCO)")
    parser.add_argument("--seed", type=int, default=0, help="seed of the per-copy image orders")
    parser.add_argument("--source", type=Path, default=SHARED_SOURCE, help="coco-karpathy-jsonl captions to replicate")
    args = parser.parse_args(argv)
    if args.images < 1:
        parser.error("--images must be at least 1")
    source = read_source(args.source)
    if not source:
        raise InputError(f"{args.source}: no caption lines to replicate")
    captions = 0
    with io.atomic_write(io.join(args.out, "captions.jsonl")) as handle:
        for row in replicate(source, args.images, args.seed):
            handle.write((json.dumps(row, ensure_ascii=False) + "\n").encode("utf-8"))
            captions += 1
    metadata = {
        "synthetic": True,
        "tool": "tools/replicate_coco.py",
        "images": args.images,
        "captions": captions,
        "seed": args.seed,
        "source": args.source.name,
        "source_sha256": hashlib.sha256(args.source.read_bytes()).hexdigest(),
        "source_images": len(source),
        "source_captions": sum(map(len, source)),
        "image_id_base": IMAGE_ID_BASE,
        "caption_id_base": CAPTION_ID_BASE,
        "reader": "coco-karpathy-jsonl",
    }
    io.write_json(io.join(args.out, "metadata.json"), metadata)
    io.write_bytes(io.join(args.out, "README.md"), readme(metadata).encode("utf-8"))
    print(f"{args.images:,} synthetic images, {captions:,} captions → {args.out}")
    return metadata


if __name__ == "__main__":
    main()
