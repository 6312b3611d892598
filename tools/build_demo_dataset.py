"""Rebuild ``data/demo`` from ``../shared/data``: the redistributable Karpathy-test photos.

Keeps the photos whose Flickr licence allows redistribution (CC BY, CC BY-SA, no known
copyright restrictions), downscaled, with their five captions and an attribution file.
Run once by maintainers; the default build only reads the committed result.
"""

from __future__ import annotations

import argparse
import csv
import io
import json
from pathlib import Path

from PIL import Image, ImageOps

REDISTRIBUTABLE = {"Attribution License", "Attribution-ShareAlike License", "No known copyright restrictions"}
LONG_SIDE = 320
JPEG_QUALITY = 85


def downscale(source: Path) -> bytes:
    with Image.open(source) as image:
        image = ImageOps.exif_transpose(image).convert("RGB")
        image.thumbnail((LONG_SIDE, LONG_SIDE), Image.Resampling.LANCZOS)
        out = io.BytesIO()
        image.save(out, "JPEG", quality=JPEG_QUALITY, optimize=True)
        return out.getvalue()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--shared", type=Path, default=Path("../shared/data"))
    parser.add_argument("--out", type=Path, default=Path("data/demo"))
    args = parser.parse_args()

    photos_dir = args.shared / "coco-images" / "karpathy-test"
    with open(photos_dir / "images.csv", newline="") as handle:
        photos = [row for row in csv.DictReader(handle) if row["flickr_license"] in REDISTRIBUTABLE]
    keep = {int(row["image_id"]) for row in photos}

    (args.out / "images").mkdir(parents=True, exist_ok=True)
    for row in photos:
        (args.out / "images" / row["file_name"]).write_bytes(downscale(photos_dir / row["file_name"]))

    with open(args.shared / "coco-karpathy" / "test5k.jsonl") as source, open(args.out / "captions.jsonl", "w") as out:
        for line in source:
            if json.loads(line)["image_id"] in keep:
                out.write(line)

    with open(args.out / "ATTRIBUTION.csv", "w", newline="") as handle:
        fields = ["file_name", "image_id", "flickr_license", "flickr_url", "coco_url", "original_width", "original_height"]
        writer = csv.DictWriter(handle, fieldnames=fields, lineterminator="\n")
        writer.writeheader()
        for row in sorted(photos, key=lambda r: r["file_name"]):
            writer.writerow(
                {
                    "file_name": row["file_name"],
                    "image_id": row["image_id"],
                    "flickr_license": row["flickr_license"],
                    "flickr_url": row["flickr_url"],
                    "coco_url": row["coco_url"],
                    "original_width": row["width"],
                    "original_height": row["height"],
                }
            )
    print(f"{len(photos)} photos, captions and attribution written to {args.out}")


if __name__ == "__main__":
    main()
