"""The ingest composite: source file → validated images, captions, and a quarantine.

Steps (each labelled): read with the named reader → split by record type → check caption text
(and length) and image paths (confined to the images folder) → keep the first of duplicate ids
→ join captions to their images (unknown images, images without captions) → look up image
files.  Every rejected record leaves through the ``rejected`` output; nothing is dropped.  An
image refused for its path is refused before the join, so its captions are rejected as
``unknown-image``, like the captions of any image the source did not give usably.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, NamedTuple

import apache_beam as beam

from crisscross.beam.common import REJECTED, route
from crisscross.core.quarantine import Rejected
from crisscross.ingest.records import CaptionRecord, ImageRecord
from crisscross.ingest.validate import (
    DEFAULT_MAX_TEXT_LENGTH,
    check_caption_text,
    check_image_file,
    check_image_path,
    first_of_duplicates,
    join_image_and_captions,
)

STAGE = "ingest"


class IngestOutputs(NamedTuple):
    images: beam.PCollection  # (ImageRecord, number of kept captions)
    captions: beam.PCollection  # CaptionRecord
    rejected: beam.PCollection  # Rejected


def _by_type(record: ImageRecord | CaptionRecord | Rejected) -> Any:
    if isinstance(record, ImageRecord):
        return beam.pvalue.TaggedOutput("images", record)
    return record  # captions stay on the main output, rejects are routed


def _keep_first(keyed: tuple[str, Iterable[Any]]) -> list[Any]:
    kept, rejected = first_of_duplicates(*keyed)
    return [kept, *rejected]


def _join(keyed: tuple[str, dict[str, list[Any]]]) -> list[Any]:
    image_id, grouped = keyed
    image, captions, rejected = join_image_and_captions(image_id, list(grouped["images"]), list(grouped["captions"]))
    out: list[Any] = list(rejected)
    if image is not None:
        out.append(beam.pvalue.TaggedOutput("images", (image, len(captions))))
        out.extend(captions)
    return out


def _check_file(pair: tuple[ImageRecord, int], images_dir: str | None) -> tuple[ImageRecord, int]:
    image, n_captions = pair
    return check_image_file(image, images_dir), n_captions


class IngestItems(beam.PTransform):
    """Read ``path`` with ``reader`` and validate; ``images_dir`` (optional) holds the image files;
    captions longer than ``max_text_length`` characters are rejected."""

    def __init__(self, reader: Any, path: str, images_dir: str | None, max_text_length: int = DEFAULT_MAX_TEXT_LENGTH) -> None:
        super().__init__()
        self._reader = reader
        self._path = path
        self._images_dir = images_dir
        self._max_text_length = max_text_length

    def expand(self, pbegin: beam.pvalue.PBegin) -> IngestOutputs:
        records = pbegin | "Source" >> beam.Create([self._path]) | "Read" >> beam.FlatMap(self._reader.read)
        typed = route("SplitByType", records, STAGE, _by_type, tags=("images",))
        captions, bad_text = route("CheckText", typed.kept, STAGE, check_caption_text, args=(self._max_text_length,))
        images, bad_paths = route("CheckPaths", typed.images, STAGE, check_image_path, args=(self._images_dir,))
        images, image_duplicates = route(
            "DedupImages",
            images | "KeyImages" >> beam.Map(lambda r: (r.image_id, r)) | "GroupImages" >> beam.GroupByKey(),
            STAGE,
            _keep_first,
            many=True,
        )
        captions, caption_duplicates = route(
            "DedupCaptions",
            captions | "KeyCaptions" >> beam.Map(lambda r: (r.caption_id, r)) | "GroupCaptions" >> beam.GroupByKey(),
            STAGE,
            _keep_first,
            many=True,
        )
        joined = {
            "images": images | "ImagesByImage" >> beam.Map(lambda r: (r.image_id, r)),
            "captions": captions | "CaptionsByImage" >> beam.Map(lambda r: (r.image_id, r)),
        } | "Join" >> beam.CoGroupByKey()
        joined = route("RouteJoined", joined, STAGE, _join, many=True, tags=("images",))
        checked = joined.images | "SpreadFileChecks" >> beam.Reshuffle() | "CheckFiles" >> beam.Map(_check_file, self._images_dir)
        rejected = (
            typed[REJECTED],
            bad_text,
            bad_paths,
            image_duplicates,
            caption_duplicates,
            joined[REJECTED],
        ) | "AllRejected" >> beam.Flatten()
        return IngestOutputs(images=checked, captions=joined.kept, rejected=rejected)
