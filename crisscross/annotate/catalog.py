"""What raters can be shown: caption texts and the image files of images with pixels."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from functools import cached_property

import pyarrow as pa

from crisscross.core import io
from crisscross.core.ids import CAPTION_KIND, split_id
from crisscross.ingest.records import PIXELS_OK, caption_images, captions_by_image


@dataclass(frozen=True)
class Catalog:
    """What raters can be shown: caption texts, and image paths or URIs of images with pixels.

    Built from the ingest tables; ``problem`` says why an id cannot be shown (stable codes).
    """

    texts: Mapping[str, str]  # caption id → text
    image_of: Mapping[str, str]  # caption id → the image it describes
    paths: Mapping[str, str]  # image id → path or URI (images whose pixels are "ok")
    pixels: Mapping[str, str]  # image id → pixels status, for every image in the table

    @classmethod
    def from_tables(cls, captions: pa.Table, images: pa.Table) -> Catalog:
        caption_ids, texts = (captions.column(name).to_pylist() for name in ("caption_id", "text"))
        image_ids, paths, pixels = (images.column(name).to_pylist() for name in ("image_id", "path", "pixels"))
        return cls(
            texts={caption: text for caption, text in zip(caption_ids, texts, strict=True) if text},
            image_of=caption_images(captions),
            paths={image: path for image, path, status in zip(image_ids, paths, pixels, strict=True) if status == PIXELS_OK and path},
            pixels=dict(zip(image_ids, pixels, strict=True)),
        )

    def rooted(self, root: str) -> Catalog:
        """The catalog with its image paths made absolute against ``root``, the directory ingest ran
        in (the items record paths relative to it); URIs as they are."""
        return replace(self, paths={image: io.absolute(path, root) for image, path in self.paths.items()})

    def problem(self, value: str) -> tuple[str, str] | None:
        """(reason, detail) when ``value`` cannot be shown to raters, else None."""
        kind = split_id(value)[1]
        if kind == CAPTION_KIND:
            return None if value in self.texts else ("unknown-id", f"caption {value} is not in the captions table (or has no text)")
        if value not in self.pixels:
            return "unknown-id", f"image {value} is not in the images table"
        if value not in self.paths:
            return "no-pixels", f"image {value} has pixels {self.pixels[value]!r}, so raters cannot see it"
        return None

    @cached_property
    def captions_by_image(self) -> dict[str, tuple[str, ...]]:
        """Image id → its captions raters can read, sorted (BISON's CHOOSE shows them all)."""
        return captions_by_image({caption: self.image_of.get(caption, "") for caption in self.texts})

    def captions_of(self, image: str) -> tuple[str, ...]:
        return self.captions_by_image.get(image, ())

    def showable(self, kind: str) -> list[str]:
        """Every id of one kind that raters can be shown, sorted."""
        return sorted(self.texts if kind == CAPTION_KIND else self.paths)

    def image(self, value: str) -> str:
        """The image behind an id: itself for images, the described image for captions."""
        return self.image_of.get(value, value) if split_id(value)[1] == CAPTION_KIND else value


def load_catalog(items: str) -> Catalog:
    """The catalog of an ingest output folder (caption texts, image paths)."""
    return Catalog.from_tables(io.read_parquet(io.join(items, "captions.parquet")), io.read_parquet(io.join(items, "images.parquet")))
