"""Validation of read records: pure functions shaped for Beam, where the caller groups by key.

Each function returns what it keeps and a :class:`Rejected` for everything it does not, so the
quarantine accounts for every record.  Reason codes: ``null-text``, ``empty-text``,
``duplicate-id``, ``unknown-image``, ``no-captions``.  Image files are checked but never
rejected: an image without readable pixels stays an item, since text-only builds are legitimate.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import asdict, replace
from pathlib import PurePosixPath
from typing import TypeVar

from apache_beam.io.filesystems import FileSystems

from crisscross.images import UnreadableImageError, image_size
from crisscross.ingest.records import PIXELS_MISSING, PIXELS_OK, PIXELS_UNREADABLE, CaptionRecord, ImageRecord
from crisscross.quarantine import Rejected, reject

R = TypeVar("R", ImageRecord, CaptionRecord)


def _kind(record: ImageRecord | CaptionRecord) -> str:
    return "image" if isinstance(record, ImageRecord) else "caption"


def check_caption_text(c: CaptionRecord) -> CaptionRecord | Rejected:
    """Normalise whitespace (strip, collapse runs), so the same sentence always encodes the same."""
    if c.text is None:
        return reject("caption", c.caption_id, "null-text", "the source gives no text for this caption", c.source, asdict(c))
    text = " ".join(c.text.split())
    if not text:
        return reject("caption", c.caption_id, "empty-text", f"text {c.text!r} is empty or only whitespace", c.source, asdict(c))
    return c if text == c.text else replace(c, text=text)


def _source_order(record: ImageRecord | CaptionRecord) -> tuple[int, str, str]:
    # position first; the rest only breaks ties (records from different files), deterministically.
    return record.position, record.source, json.dumps(asdict(record), sort_keys=True)


def first_of_duplicates(key: str, records: Iterable[R]) -> tuple[R, list[Rejected]]:
    """Keep the record read first (lowest ``position``); every other one is a ``duplicate-id``."""
    ordered = sorted(records, key=_source_order)
    if not ordered:
        raise ValueError(f"no records for key {key!r}")
    kept, *others = ordered
    rejected = [
        reject(_kind(r), key, "duplicate-id", f"{key} was already read at {kept.source}", r.source, asdict(r)) for r in others
    ]
    return kept, rejected


def join_image_and_captions(
    image_id: str, images: list[ImageRecord], captions: list[CaptionRecord]
) -> tuple[ImageRecord | None, list[CaptionRecord], list[Rejected]]:
    """An image with its captions (sorted by id), or rejects: captions of an unknown image, or an
    image without captions.  Duplicate images, if any reach here, are resolved as by
    :func:`first_of_duplicates`.
    """
    strays = [r for r in [*images, *captions] if r.image_id != image_id]
    if strays:
        raise ValueError(f"records of image {strays[0].image_id!r} grouped under {image_id!r}")
    captions = sorted(captions, key=lambda c: c.caption_id)
    if not images:
        detail = f"no image {image_id} was read"
        return None, [], [reject("caption", c.caption_id, "unknown-image", detail, c.source, asdict(c)) for c in captions]
    image, rejected = first_of_duplicates(image_id, images)
    if not captions:
        detail = "no caption of this image was kept"
        return None, [], [*rejected, reject("image", image_id, "no-captions", detail, image.source, asdict(image))]
    return image, captions, rejected


def _candidates(file_name: str) -> list[str]:
    """Relative paths to try under the images directory: the name as given, then its base name."""
    relative = file_name.strip().lstrip("/")
    base = PurePosixPath(relative).name
    return [name for name in dict.fromkeys([relative, base]) if name]


def check_image_file(record: ImageRecord, images_dir: str | None) -> ImageRecord:
    """Record whether the image file is there and decodes (``pixels``, ``path``, size).

    ``None`` for ``images_dir`` leaves the record unchecked.
    """
    if images_dir is None:
        return record
    found = (FileSystems.join(images_dir, name) for name in _candidates(record.file_name))
    path = next((p for p in found if FileSystems.exists(p)), None)
    if path is None:
        return record.with_pixels(PIXELS_MISSING)
    try:
        width, height = image_size(path)
    except UnreadableImageError:
        return record.with_pixels(PIXELS_UNREADABLE, path=path)
    return record.with_pixels(PIXELS_OK, path=path, width=width, height=height)
