"""The ingest composite: source file → validated images, captions, and a quarantine.

Steps (each labelled): read with the named reader and, in the same step, check image paths
(confined to the images folder) and look up and decode image files, on the worker's threads while
the next records are read → check caption text (and length) → keep the first of duplicate caption
ids → join captions to their images, keeping the first of duplicate image ids (unknown images,
images without captions).  Every
rejected record leaves through the ``rejected`` output; nothing is dropped.  An image refused for
its path is refused before the join, so its captions are rejected as ``unknown-image``, like the
captions of any image the source did not give usably.

A source a :class:`LineReader` reads (JSON Lines) is read in ``parts``, each on whichever worker
the runner gives it; the parts' image sightings meet by image-id shard, where each image is
settled from its first row in the file (``settle_image``), and the rare part whose own first row
of an image contradicts the file's is read again for it.  The records are those of one reading.

Elements are batches of records, and the two shuffles move per-shard batches keyed by a stable hash
of the id the step groups on, so a collection the size of all of MS-COCO costs a few thousand Beam
elements rather than a few million; the library functions see one shard at a time.  Checked
captions travel as Arrow tables (``common.tables_by_shard``, as IPC bytes) through the first-of-each
step and the join to the tables written, so none of COCO's 616,435 is pickled, or sized by Beam, as
an object; images, a fifth as many, as packed columns (``common.by_shard``).
"""

from __future__ import annotations

import dataclasses
import functools
import logging
import operator
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, NamedTuple

import apache_beam as beam

from crisscross.beam.common import (
    REJECTED,
    by_shard,
    default_threads,
    in_global_window,
    packed_columns,
    route,
    tables_by_shard,
    unpacked,
    unpacked_columns,
    unpacked_tables,
)
from crisscross.core.quarantine import Rejected
from crisscross.ingest.readers import ImageSighting, LineReader, settle_image
from crisscross.ingest.records import (
    CAPTION_ROWS_SCHEMA,
    CAPTIONS_SCHEMA,
    PIXELS_UNCHECKED,
    CaptionRecord,
    ImageRecord,
    caption_rows,
    images_table,
)
from crisscross.ingest.validate import DEFAULT_MAX_TEXT_LENGTH, check_caption_text, check_image, first_captions, join_captions

STAGE = "ingest"
BATCH = 8192  # records per element as read
LOG = logging.getLogger(__name__)
_IMAGE_FIELDS = operator.attrgetter(*(field.name for field in dataclasses.fields(ImageRecord)))


class IngestOutputs(NamedTuple):
    images: beam.PCollection  # tables of IMAGES_SCHEMA
    captions: beam.PCollection  # tables of CAPTIONS_SCHEMA
    rejected: beam.PCollection  # Rejected


def _batches(records: Iterable[Any], path: str, size: int) -> Iterator[list[Any]]:
    """Records read from ``path`` in lists of ``size``, logging the count every ten lists."""
    batch: list[Any] = []
    read = 0
    for record in records:
        batch.append(record)
        if len(batch) == size:
            read += len(batch)
            if read % (10 * size) == 0:
                LOG.info("ingest: %d records read from %s", read, path)
            yield batch
            batch = []
    if batch:
        yield batch


def _read_whole(path: str, reader: Any, size: int) -> Iterator[list[Any]]:
    """The whole source, in batches."""
    return _batches(reader.read(path), path, size)


def _read_part(part: int, reader: LineReader, path: str, parts: int, size: int) -> Iterator[Any]:
    """One part of a line source: its records in batches, then its image sightings keyed by image-id shard (tag ``sightings``)."""
    sightings: list[ImageSighting] = []

    def records() -> Iterator[Any]:
        for item in reader.read_part(path, part, parts):
            if isinstance(item, ImageSighting):
                sightings.append(item)
            else:
                yield item

    yield from _batches(records(), f"{path} (part {part + 1} of {parts})", size)
    for keyed in by_shard(sightings, lambda sighting: sighting.image.image_id):
        yield beam.pvalue.TaggedOutput("sightings", keyed)


def _as_read(batch: list[ImageRecord]) -> list[list[ImageRecord]]:
    """A batch of settled images, as :class:`CheckFiles` takes batches from a source."""
    return [batch]


def _settle(keyed: tuple[int, Iterable[bytes]]) -> Iterator[Any]:
    """One image-id shard's sightings: each image's record as one batch, the rows contradicting
    it, and ``(part, record)`` for each part to read again for it (tag ``again``)."""
    by_image: dict[str, list[ImageSighting]] = {}
    for sighting in (s for part in keyed[1] for s in unpacked(part)):
        by_image.setdefault(sighting.image.image_id, []).append(sighting)
    images = []
    for sightings in by_image.values():
        first, rejected, again = settle_image(sightings)
        images.append(first)
        yield from rejected
        for part in again:
            yield beam.pvalue.TaggedOutput("again", (part, first))
    if images:
        yield images


def _read_again(keyed: tuple[int, Iterable[ImageRecord]], reader: LineReader, path: str, parts: int) -> Iterator[Rejected]:
    """A part read again for the images whose first row in it contradicts their first in the file."""
    part, firsts = keyed
    return reader.contradictions(path, part, parts, {first.image_id: first for first in firsts})


def _packed_images(images: list[ImageRecord]) -> bytes:
    """Image records as columns of their fields (``common.packed_columns``): pickled object by
    object, they cost several times more on their shuffle."""
    return packed_columns(map(_IMAGE_FIELDS, images))


def _unpacked_images(parts: Iterable[bytes]) -> Iterator[ImageRecord]:
    """The records of :func:`_packed_images` parts."""
    return (ImageRecord(*row) for part in parts for row in unpacked_columns(part))


def _check(batch: list[Any], max_text_length: int) -> Iterator[Any]:
    """Rejects as they are; checked captions as tables (``CAPTION_ROWS_SCHEMA``) keyed by caption-id
    shard (tag ``captions``), images (:class:`CheckFiles` checked them) by image-id shard (tag ``images``)."""
    captions, images = [], []
    for record in batch:
        if isinstance(record, CaptionRecord):
            record = check_caption_text(record, max_text_length)
        if isinstance(record, Rejected):
            yield record
        else:
            (images if isinstance(record, ImageRecord) else captions).append(record)
    for keyed in tables_by_shard(caption_rows(captions), "caption_id"):
        yield beam.pvalue.TaggedOutput("captions", keyed)
    for keyed in by_shard(images, lambda i: i.image_id, _packed_images):
        yield beam.pvalue.TaggedOutput("images", keyed)


def _first_captions(keyed: tuple[int, Iterable[bytes]]) -> Iterator[Any]:
    """One caption-id shard: the first of each id, keyed by image-id shard for the join."""
    kept, rejected = first_captions(unpacked_tables(keyed[1], CAPTION_ROWS_SCHEMA))
    yield from rejected
    yield from tables_by_shard(kept, "image_id")


def _join(keyed: tuple[int, dict[str, Iterable[Any]]]) -> Iterator[Any]:
    """One image-id shard: its images (first of each id, with what :class:`CheckFiles` found) with
    their captions, as one table each.  An image the join refuses is quarantined as the source gave
    it: its file was looked at only because the join comes after the checks."""
    grouped = keyed[1]
    checked = list(_unpacked_images(grouped["images"]))
    as_read = [i.with_pixels(PIXELS_UNCHECKED) for i in checked]
    found = {id(read): image for read, image in zip(as_read, checked, strict=True)}  # the join keeps one of the records it is given
    images, captions, rejected = join_captions(as_read, unpacked_tables(grouped["captions"], CAPTION_ROWS_SCHEMA))
    yield from rejected
    if images:
        yield beam.pvalue.TaggedOutput("images", images_table((found[id(image)], n) for image, n in images))
        yield captions.select(CAPTIONS_SCHEMA.names)


def check_images(records: list[Any], images_dir: str | None, root: str | None) -> list[Any]:
    """``records`` with each image's path checked and, where it stays in the folder, its file looked
    at and decoded: an image becomes its checked record or its reject; other records stay as they are."""
    checked = []
    for record in records:
        checked.append(check_image(record, images_dir, root) if isinstance(record, ImageRecord) else record)
    return checked


class CheckFiles(beam.DoFn):
    """The batches ``read`` makes of each element (the source, a part of it, or a batch as it is),
    each batch's images checked (:func:`check_images`) on the worker's share of its cores while the
    batches after it are read: Pillow decodes outside the interpreter lock, so the threads decode
    beside the thread that parses.  Batches are then checked and sharded (:func:`_check`) in the order
    they came: its rejects leave on the main output, its shards tagged, as do the tagged outputs of
    ``read``.  Reading is part of this step because a batch that crossed to another step would be
    sized by Beam pickling each of its records.  A few more batches than the threads are in flight,
    so memory stays bounded."""

    def __init__(
        self, read: Callable[[Any], Iterable[Any]], images_dir: str | None, root: str | None, processes: int, max_text_length: int
    ) -> None:
        self._read = read
        self._images_dir, self._root, self._processes, self._max_text_length = images_dir, root, processes, max_text_length

    def setup(self) -> None:
        self._threads = default_threads(self._processes)
        self._pool = ThreadPoolExecutor(self._threads, thread_name_prefix="check-files")

    def start_bundle(self) -> None:
        self._pending: deque[Future[list[Any]]] = deque()

    def process(self, element: Any) -> Iterator[Any]:
        for batch in self._read(element):
            if isinstance(batch, beam.pvalue.TaggedOutput):
                yield batch
                continue
            self._pending.append(self._pool.submit(check_images, batch, self._images_dir, self._root))
            while len(self._pending) > self._threads + 1:
                yield from _check(self._pending.popleft().result(), self._max_text_length)

    def finish_bundle(self) -> Iterator[Any]:
        while self._pending:
            for item in _check(self._pending.popleft().result(), self._max_text_length):
                tagged = isinstance(item, beam.pvalue.TaggedOutput)
                yield beam.pvalue.TaggedOutput(item.tag, in_global_window(item.value)) if tagged else in_global_window(item)

    def teardown(self) -> None:
        self._pool.shutdown()


class IngestItems(beam.PTransform):
    """Read ``path`` with ``reader`` and validate; ``images_dir`` (optional) holds the image files;
    captions longer than ``max_text_length`` characters are rejected; ``batch`` records per element.
    Image paths are recorded relative to ``root`` when given (the launching directory).  A
    :class:`LineReader`'s source is read in ``parts``; ``processes`` worker processes share a machine."""

    def __init__(
        self,
        reader: Any,
        path: str,
        images_dir: str | None,
        max_text_length: int = DEFAULT_MAX_TEXT_LENGTH,
        batch: int = BATCH,
        root: str | None = None,
        processes: int = 1,
        parts: int = 1,
    ) -> None:
        super().__init__()
        self._batch = batch
        self._reader = reader
        self._path = path
        self._images_dir = images_dir
        self._max_text_length = max_text_length
        self._root = root
        self._processes = processes
        self._parts = parts if isinstance(reader, LineReader) else 1

    def expand(self, pbegin: beam.pvalue.PBegin) -> IngestOutputs:
        checked, settling = self._read_and_check(pbegin)
        _, check_rejects = route("Check", [c.rejected for c in checked] | "CheckRejects" >> beam.Flatten(), STAGE)
        caption_shards = [c.captions for c in checked] | "CaptionShards" >> beam.Flatten()
        image_shards = [c.images for c in checked] | "ImageShards" >> beam.Flatten()
        captions, caption_duplicates = route(
            "FirstOfCaptionIds", caption_shards | "GroupCaptionShards" >> beam.GroupByKey(), STAGE, _first_captions, many=True
        )
        joined = {"images": image_shards, "captions": captions} | "GroupImageShards" >> beam.CoGroupByKey()
        joined = route("Join", joined, STAGE, _join, many=True, tags=("images",))
        rejected = (check_rejects, caption_duplicates, joined[REJECTED], *settling) | "AllRejected" >> beam.Flatten()
        return IngestOutputs(images=joined.images, captions=joined.kept, rejected=rejected)

    def _read_and_check(self, pbegin: beam.pvalue.PBegin) -> tuple[list[Any], tuple[beam.PCollection, ...]]:
        """The outputs of :class:`CheckFiles` over the source's records (and, read in parts, over the
        images its parts' sightings settle), and the rejects of settling those images."""
        if self._parts == 1:
            source = pbegin | "Source" >> beam.Create([self._path])
            return [source | "ReadAndCheck" >> self._check_files(functools.partial(_read_whole, reader=self._reader, size=self._batch))], ()
        read = functools.partial(_read_part, reader=self._reader, path=self._path, parts=self._parts, size=self._batch)
        parts = pbegin | "Parts" >> beam.Create(range(self._parts)) | "SpreadParts" >> beam.Reshuffle()
        checked = parts | "ReadAndCheck" >> self._check_files(read, "sightings")
        settled = route(
            "SettleImages", checked.sightings | "GroupSightings" >> beam.GroupByKey(), STAGE, _settle, many=True, tags=("again",)
        )
        _, contradicting = route(
            "ReadAgain",
            settled.again | "GroupByPart" >> beam.GroupByKey(),
            STAGE,
            _read_again,
            many=True,
            args=(self._reader, self._path, self._parts),
        )
        images = settled.kept | "CheckSettledImages" >> self._check_files(_as_read)
        return [checked, images], (settled[REJECTED], contradicting)

    def _check_files(self, read: Callable[[Any], Iterable[Any]], *tags: str) -> beam.ParDo:
        return beam.ParDo(CheckFiles(read, self._images_dir, self._root, self._processes, self._max_text_length)).with_outputs(
            "captions", "images", *tags, main="rejected"
        )
