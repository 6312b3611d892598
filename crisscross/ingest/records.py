"""The two kinds of item every dataset is turned into, and their canonical table schemas."""

from __future__ import annotations

import operator
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

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
        """The record as read with what its file holds (built directly: ``replace`` costs several times more)."""
        return ImageRecord(
            self.image_id, self.file_name, self.split, self.source, self.position, path=path, pixels=pixels, width=width, height=height
        )


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


def images_table(images: Iterable[tuple[ImageRecord, int]]) -> pa.Table:
    """Rows in the given order; each image with its number of kept captions."""
    pairs = list(images)
    columns = {name: [getattr(record, name) for record, _ in pairs] for name in IMAGES_SCHEMA.names if name != "n_captions"}
    columns["n_captions"] = [n for _, n in pairs]
    return pa.table(columns, schema=IMAGES_SCHEMA)


# Captions as ingest's steps pass them on: the published columns and each caption's place in the
# source, which settles duplicates.  The columns are :class:`CaptionRecord`'s fields, in order.
CAPTION_ROWS_SCHEMA = CAPTIONS_SCHEMA.append(pa.field("position", pa.int64()))
_CAPTION_FIELDS = operator.attrgetter(*CAPTION_ROWS_SCHEMA.names)


def caption_rows(captions: Iterable[CaptionRecord]) -> pa.Table:
    """Records as a :data:`CAPTION_ROWS_SCHEMA` table, rows in the given order."""
    columns = list(zip(*map(_CAPTION_FIELDS, captions)))
    if not columns:
        return CAPTION_ROWS_SCHEMA.empty_table()
    return pa.Table.from_arrays(
        [pa.array(column, field.type) for column, field in zip(columns, CAPTION_ROWS_SCHEMA, strict=True)], schema=CAPTION_ROWS_SCHEMA
    )


def caption_records(rows: pa.Table) -> list[CaptionRecord]:
    """The records of a :data:`CAPTION_ROWS_SCHEMA` table (:func:`caption_rows` reversed)."""
    return [CaptionRecord(*row) for row in zip(*(rows.column(name).to_pylist() for name in CAPTION_ROWS_SCHEMA.names))]


def sorted_by_id(tables: Iterable[pa.Table], schema: pa.Schema) -> pa.Table:
    """Batches as one table sorted by its first column (the id; Arrow orders strings by code point,
    as Python does), in one chunk, so the file written from it does not depend on the batching."""
    table = pa.concat_tables([schema.empty_table(), *tables])
    return table.sort_by(schema.names[0]).combine_chunks()


def caption_images(captions: pa.Table) -> dict[str, str]:
    """Caption id → the id of the image it describes, from a captions table."""
    return dict(zip(captions.column("caption_id").to_pylist(), captions.column("image_id").to_pylist(), strict=True))


def captions_by_image(image_of: Mapping[str, str]) -> dict[str, tuple[str, ...]]:
    """Image id → its caption ids in id order: the inversion every step that shows, draws or
    groups an image's captions reads (keys in the order of each image's first caption)."""
    grouped: dict[str, list[str]] = {}
    for caption in sorted(image_of):
        grouped.setdefault(image_of[caption], []).append(caption)
    return {image: tuple(captions) for image, captions in grouped.items()}
