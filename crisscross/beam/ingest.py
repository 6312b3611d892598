"""The ingest composite: source file → validated images, captions, and a quarantine.

Steps (each labelled): read with the named reader → check image paths (confined to the images
folder) and look up and decode image files, on the worker's threads while the next records are read
→ check caption text (and length) → keep the first of duplicate caption ids → join captions to their
images, keeping the first of duplicate image ids (unknown images, images without captions).  Every
rejected record leaves through the ``rejected`` output; nothing is dropped.  An image refused for
its path is refused before the join, so its captions are rejected as ``unknown-image``, like the
captions of any image the source did not give usably.

A source a :class:`LineReader` reads (JSON Lines) is read in ``parts``, each on whichever worker
the runner gives it; the parts' image sightings meet by image-id shard, where each image is
settled from its first row in the file (``settle_image``), and the rare part whose own first row
of an image contradicts the file's is read again for it.  The records are those of one reading.

Elements are batches of records, and the two shuffles move per-shard batches (``common.by_shard``:
records keyed by a stable hash of the id the step groups on), so a collection the size of all of MS-COCO costs a few
thousand Beam elements rather than a few million; the library functions see one shard at a time.
"""

from __future__ import annotations

import dataclasses
import logging
import operator
from collections import deque
from collections.abc import Iterable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, NamedTuple, TypeVar

import apache_beam as beam

from crisscross.beam.common import REJECTED, by_shard, default_threads, in_global_window, packed_columns, route, unpacked, unpacked_columns
from crisscross.core.quarantine import Rejected
from crisscross.ingest.readers import ImageSighting, LineReader, settle_image
from crisscross.ingest.records import PIXELS_UNCHECKED, CaptionRecord, ImageRecord
from crisscross.ingest.validate import (
    DEFAULT_MAX_TEXT_LENGTH,
    check_caption_text,
    check_image,
    first_of_each,
    join_all,
)

STAGE = "ingest"
BATCH = 8192  # records per element as read
LOG = logging.getLogger(__name__)
R = TypeVar("R", ImageRecord, CaptionRecord)
_FIELDS = {kind: operator.attrgetter(*(field.name for field in dataclasses.fields(kind))) for kind in (ImageRecord, CaptionRecord)}


class IngestOutputs(NamedTuple):
    images: beam.PCollection  # lists of (ImageRecord, number of kept captions)
    captions: beam.PCollection  # lists of CaptionRecord
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


def _packed_records(records: list[ImageRecord] | list[CaptionRecord]) -> bytes:
    """Records of one kind as columns of their fields (``common.packed_columns``): pickled object by
    object, COCO's 616,435 captions cost several times more on each of their two shuffles."""
    return packed_columns(map(_FIELDS[type(records[0])], records))


def _unpacked_records(kind: type[R], parts: Iterable[bytes]) -> Iterator[R]:
    """The records of :func:`_packed_records` parts."""
    return (kind(*row) for part in parts for row in unpacked_columns(part))


def _check(batch: list[Any], max_text_length: int) -> Iterator[Any]:
    """Rejects as they are; checked captions keyed by caption-id shard (tag ``captions``), images
    (:class:`CheckFiles` checked them) by image-id shard (tag ``images``)."""
    captions, images = [], []
    for record in batch:
        if isinstance(record, CaptionRecord):
            record = check_caption_text(record, max_text_length)
        if isinstance(record, Rejected):
            yield record
        else:
            (images if isinstance(record, ImageRecord) else captions).append(record)
    for keyed in by_shard(captions, lambda c: c.caption_id, _packed_records):
        yield beam.pvalue.TaggedOutput("captions", keyed)
    for keyed in by_shard(images, lambda i: i.image_id, _packed_records):
        yield beam.pvalue.TaggedOutput("images", keyed)


def _first_captions(keyed: tuple[int, Iterable[bytes]]) -> Iterator[Any]:
    """One caption-id shard: the first of each id, keyed by image-id shard for the join."""
    kept, rejected = first_of_each(_unpacked_records(CaptionRecord, keyed[1]), lambda c: c.caption_id)
    yield from rejected
    yield from by_shard(kept, lambda c: c.image_id, _packed_records)


def _join(keyed: tuple[int, dict[str, Iterable[bytes]]]) -> Iterator[Any]:
    """One image-id shard: its images (first of each id, with what :class:`CheckFiles` found) with
    their captions, as one batch each.  An image the join refuses is quarantined as the source gave
    it: its file was looked at only because the join comes after the checks."""
    grouped = keyed[1]
    checked = list(_unpacked_records(ImageRecord, grouped["images"]))
    as_read = [i.with_pixels(PIXELS_UNCHECKED) for i in checked]
    found = {id(read): image for read, image in zip(as_read, checked, strict=True)}  # the join keeps one of the records it is given
    images, captions, rejected = join_all(as_read, _unpacked_records(CaptionRecord, grouped["captions"]))
    yield from rejected
    if images:
        yield beam.pvalue.TaggedOutput("images", [(found[id(image)], n) for image, n in images])
        yield captions


def check_images(records: list[Any], images_dir: str | None, root: str | None) -> list[Any]:
    """``records`` with each image's path checked and, where it stays in the folder, its file looked
    at and decoded: an image becomes its checked record or its reject; other records stay as they are."""
    checked = []
    for record in records:
        checked.append(check_image(record, images_dir, root) if isinstance(record, ImageRecord) else record)
    return checked


class CheckFiles(beam.DoFn):
    """Each batch's images checked (:func:`check_images`) on the worker's share of its cores while
    the batches after it are read: Pillow decodes outside the interpreter lock, so the threads decode
    beside the thread that parses.  Batches are then checked and sharded (:func:`_check`) in the order
    they came: its rejects leave on the main output, its shards tagged.  A checked batch never
    crosses to another step, where Beam would size it by pickling each of its records.  A few more
    batches than the threads are in flight, so memory stays bounded."""

    def __init__(self, images_dir: str | None, root: str | None, processes: int, max_text_length: int) -> None:
        self._images_dir, self._root, self._processes, self._max_text_length = images_dir, root, processes, max_text_length

    def setup(self) -> None:
        self._threads = default_threads(self._processes)
        self._pool = ThreadPoolExecutor(self._threads, thread_name_prefix="check-files")

    def start_bundle(self) -> None:
        self._pending: deque[Future[list[Any]]] = deque()

    def process(self, batch: list[Any]) -> Iterator[Any]:
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
        batches, settling = self._read(pbegin)
        checked = batches | "CheckFiles" >> beam.ParDo(
            CheckFiles(self._images_dir, self._root, self._processes, self._max_text_length)
        ).with_outputs("captions", "images", main="rejected")
        _, check_rejects = route("Check", checked.rejected, STAGE)
        captions, caption_duplicates = route(
            "FirstOfCaptionIds", checked.captions | "GroupCaptionShards" >> beam.GroupByKey(), STAGE, _first_captions, many=True
        )
        joined = {"images": checked.images, "captions": captions} | "GroupImageShards" >> beam.CoGroupByKey()
        joined = route("Join", joined, STAGE, _join, many=True, tags=("images",))
        rejected = (check_rejects, caption_duplicates, joined[REJECTED], *settling) | "AllRejected" >> beam.Flatten()
        return IngestOutputs(images=joined.images, captions=joined.kept, rejected=rejected)

    def _read(self, pbegin: beam.pvalue.PBegin) -> tuple[beam.PCollection, tuple[beam.PCollection, ...]]:
        """Batches of the source's records, and the rejects of settling its parts' images (none when read whole)."""
        if self._parts == 1:
            return pbegin | "Source" >> beam.Create([self._path]) | "Read" >> beam.FlatMap(_read_whole, self._reader, self._batch), ()
        read = (
            pbegin
            | "Parts" >> beam.Create(range(self._parts))
            | "SpreadParts" >> beam.Reshuffle()
            | "ReadParts"
            >> beam.ParDo(_read_part, self._reader, self._path, self._parts, self._batch).with_outputs("sightings", main="batches")
        )
        settled = route("SettleImages", read.sightings | "GroupSightings" >> beam.GroupByKey(), STAGE, _settle, many=True, tags=("again",))
        _, contradicting = route(
            "ReadAgain",
            settled.again | "GroupByPart" >> beam.GroupByKey(),
            STAGE,
            _read_again,
            many=True,
            args=(self._reader, self._path, self._parts),
        )
        batches = (read.batches, settled.kept) | "RecordsAndImages" >> beam.Flatten()
        return batches, (settled[REJECTED], contradicting)
