"""The two kinds of item every dataset is turned into, and their canonical table schemas."""

from __future__ import annotations

from dataclasses import asdict, dataclass, replace

import pyarrow as pa

PIXELS_OK = "ok"
PIXELS_MISSING = "missing"  # no file under the images directory
PIXELS_UNREADABLE = "unreadable"  # a file, but not a decodable image
PIXELS_UNCHECKED = "unchecked"  # no images directory was given


@dataclass(frozen=True, order=True)
class ImageRecord:
    image_id: str  # canonical id, e.g. "coco:img:391895"
    file_name: str  # as the source names it, e.g. "COCO_val2014_000000391895.jpg"
    split: str  # "train" | "val" | "test" | "restval" | "" when the source has none
    source: str  # "file:line" of the record it came from
    position: int  # order in the source; the first of duplicates is kept
    path: str = ""  # resolved file path or URI when the file was found
    pixels: str = PIXELS_UNCHECKED
    width: int = 0
    height: int = 0

    def with_pixels(self, pixels: str, path: str = "", width: int = 0, height: int = 0) -> ImageRecord:
        return replace(self, pixels=pixels, path=path, width=width, height=height)


@dataclass(frozen=True, order=True)
class CaptionRecord:
    caption_id: str  # canonical id, e.g. "coco:cap:770337"
    image_id: str  # canonical id of the image it describes
    text: str | None  # None when the source has no text (quarantined at validation)
    split: str
    source: str
    position: int


IMAGES_SCHEMA = pa.schema(
    [
        ("image_id", pa.string()),
        ("file_name", pa.string()),
        ("split", pa.string()),
        ("path", pa.string()),
        ("pixels", pa.string()),
        ("width", pa.int32()),
        ("height", pa.int32()),
        ("n_captions", pa.int32()),
        ("source", pa.string()),
    ]
)

CAPTIONS_SCHEMA = pa.schema(
    [
        ("caption_id", pa.string()),
        ("image_id", pa.string()),
        ("text", pa.string()),
        ("split", pa.string()),
        ("source", pa.string()),
    ]
)


def images_table(images: list[tuple[ImageRecord, int]]) -> pa.Table:
    """Rows sorted by id; each image with its number of kept captions."""
    rows = []
    for record, n_captions in sorted(images, key=lambda pair: pair[0].image_id):
        row = asdict(record)
        del row["position"]
        row["n_captions"] = n_captions
        rows.append(row)
    return pa.Table.from_pylist(rows, schema=IMAGES_SCHEMA)


def captions_table(captions: list[CaptionRecord]) -> pa.Table:
    rows = []
    for record in sorted(captions, key=lambda c: c.caption_id):
        row = asdict(record)
        del row["position"]
        rows.append(row)
    return pa.Table.from_pylist(rows, schema=CAPTIONS_SCHEMA)
