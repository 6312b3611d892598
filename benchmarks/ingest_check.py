"""Ingest's image check (``core.images.image_size``) on real photos, against a full-size decode.

Ingest decodes every image it keeps, so an image with a file that is cut or broken is recorded
as having no pixels instead of failing an encoder later.  The check decodes a JPEG at 1/8 scale:
the decoder still reads every coefficient, only the inverse DCT writes less.

The photos are the Karpathy test split's (``shared/data/coco-images/karpathy-test``), read into
memory first, then decoded in this process on one thread, alternating:
- **the check**: ``image_size`` on each file (header, Pillow's ``verify``, the decode at 1/8, EXIF);
- **the reference**: Pillow opening and decoding each file at full size (``Image.open(...).load()``),
  what the check did before.

The ratio is the check's median time per photo over the reference's, in the same run; the run also
projects both onto all of MS-COCO's 123,287 photos (CPU seconds, which ingest's check spreads over
the worker's cores).
"""

from __future__ import annotations

import argparse
import io
import statistics
import tempfile
import time
from pathlib import Path

from PIL import Image

from benchmarks import KARPATHY_PHOTOS, save_result
from crisscross.core.images import image_size

NAME = "ingest_check"
COCO_PHOTOS = 123_287  # train2014 + val2014, the images of the Karpathy splits
ROUNDS, QUICK_ROUNDS = 7, 3


def full_decode(data: bytes) -> None:
    with Image.open(io.BytesIO(data)) as image:
        image.load()


def run(args: argparse.Namespace) -> None:
    photos = sorted(KARPATHY_PHOTOS.glob("*.jpg"))
    rounds = QUICK_ROUNDS if args.quick else ROUNDS
    per_photo: dict[str, list[float]] = {"check": [], "full decode": []}
    with tempfile.TemporaryDirectory(prefix="crisscross-ingest-check-") as tmp:
        copies = []  # on local disk, warm in the page cache: the check reads files, the reference bytes
        for photo in photos:
            copies.append(Path(tmp) / photo.name)
            copies[-1].write_bytes(photo.read_bytes())
        datas = [path.read_bytes() for path in copies]
        for r in range(rounds):
            order = ("check", "full decode") if r % 2 == 0 else ("full decode", "check")
            for name in order:
                began = time.perf_counter()
                if name == "check":
                    for path in copies:
                        image_size(str(path))
                else:
                    for data in datas:
                        full_decode(data)
                per_photo[name].append((time.perf_counter() - began) / len(copies))
    check, reference = statistics.median(per_photo["check"]), statistics.median(per_photo["full decode"])
    megabytes = sum(len(d) for d in datas) / 1e6
    print(f"{len(photos)} photos ({megabytes:.1f} MB), median of {rounds} rounds, one thread")
    print(f"  check (image_size, 1/8 scale)   {check * 1e3:6.2f} ms per photo")
    print(f"  full-size decode (reference)    {reference * 1e3:6.2f} ms per photo")
    print(f"  check ÷ full decode             {check / reference:6.2f}")
    print(f"  all of COCO ({COCO_PHOTOS:,} photos): {check * COCO_PHOTOS:.0f} CPU s against {reference * COCO_PHOTOS:.0f}")
    path = save_result(
        NAME,
        {
            "photos": len(photos),
            "rounds": rounds,
            "check_ms_per_photo": check * 1e3,
            "full_decode_ms_per_photo": reference * 1e3,
            "check_over_full_decode": check / reference,
            "rounds_s_per_photo": per_photo,
            "coco_cpu_s": {"check": check * COCO_PHOTOS, "full_decode": reference * COCO_PHOTOS},
        },
    )
    print(f"→ {path}")
