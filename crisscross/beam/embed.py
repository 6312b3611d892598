"""The embed composite: items table → one embedding set per encoder (plus co-caption means).

Batches are formed deterministically (items hashed by id into buckets, each bucket sorted and
cut into ``batch_size`` chunks), so the same inputs give the same batches on any runner and any
number of workers.  Models load once per worker in ``DoFn.setup``; inference is batched.
Unreadable images and unusable vectors go to the ``rejected`` output with a reason; items an
encoder cannot see at all (images without pixels, ids absent from a precomputed file) go to the
``skipped`` output, so what was left out is always listed.
"""

from __future__ import annotations

import logging
import zlib
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

import apache_beam as beam
import numpy as np
import pyarrow as pa
from apache_beam.metrics import Metrics

from crisscross.beam.common import REJECTED, gather
from crisscross.core import io
from crisscross.core.images import UnreadableImageError, load_rgb
from crisscross.core.quarantine import reject
from crisscross.embed.encoders import IMAGE, IMAGE_ENCODERS, TEXT, TEXT_ENCODERS, Encoder
from crisscross.embed.sets import CAPTIONS, COCAPTION_MEAN, IMAGES, EmbeddingSet, cocaption_mean, row_problem, set_dir
from crisscross.ingest.records import PIXELS_OK

STAGE = "embed"
SKIPPED = "skipped"
BUCKET_ITEMS = 16_384
LOG = logging.getLogger("crisscross.embed")
REGISTRIES = {TEXT: TEXT_ENCODERS, IMAGE: IMAGE_ENCODERS}


class Item(NamedTuple):
    id: str
    payload: str  # caption text, or image path ("" when the image has no pixels)
    group: str  # the image a caption belongs to; the image itself for images


@dataclass(frozen=True)
class Batch:
    ids: tuple[str, ...]
    payloads: tuple[str, ...]
    groups: tuple[str, ...]


@dataclass(frozen=True)
class Encoded:
    ids: tuple[str, ...]
    groups: tuple[str, ...]
    vectors: np.ndarray


@dataclass(frozen=True)
class Skipped:
    encoder: str
    id: str
    reason: str  # "no-pixels" | "not-covered"


def bucket_of(item_id: str, n_buckets: int) -> int:
    """A stable bucket (crc32, not Python's salted ``hash``)."""
    return zlib.crc32(item_id.encode()) % n_buckets


def chunk(items: Iterable[Item], batch_size: int) -> list[Batch]:
    """Sorted by id and cut into batches: the same items always make the same batches."""
    ordered = sorted(items)
    return [
        Batch(*(tuple(column) for column in zip(*ordered[start : start + batch_size], strict=True)))
        for start in range(0, len(ordered), batch_size)
    ]


def build_encoder(spec: str, modality: str) -> Encoder:
    return REGISTRIES[modality].create(spec)


class EncodeBatches(beam.DoFn):
    """Encode batches with one encoder, loaded once per worker in ``setup``."""

    def __init__(self, spec: str, modality: str, dataset_ids: Sequence[str], parse_id: Callable[[object], str], total: int) -> None:
        self._spec = spec
        self._modality = modality
        self._dataset_ids = dataset_ids
        self._parse_id = parse_id
        self._total = total
        self._namespace = f"{STAGE}/{spec}"

    def setup(self) -> None:
        self._encoder = build_encoder(self._spec, self._modality)
        self._encoder.load()
        self._encoder.bind(self._dataset_ids, self._parse_id)
        self._stats = self._encoder.stats()
        self._done = 0

    def process(self, batch: Batch) -> Iterable[Any]:
        ids, payloads, groups = list(batch.ids), list(batch.payloads), list(batch.groups)
        covered = self._encoder.covers(ids)
        for item_id in (i for i, ok in zip(ids, covered, strict=True) if not ok):
            Metrics.counter(self._namespace, "skipped/not-covered").inc()
            yield beam.pvalue.TaggedOutput(SKIPPED, Skipped(self._spec, item_id, "not-covered"))
        keep = [i for i, ok in enumerate(covered) if ok]
        ids, payloads, groups = [ids[i] for i in keep], [payloads[i] for i in keep], [groups[i] for i in keep]
        if self._modality == IMAGE and self._encoder.needs_payload:
            ids, payloads, groups, unreadable = _decode_images(ids, payloads, groups, self._spec)
            for rejected in unreadable:
                Metrics.counter(self._namespace, "rejected/unreadable-image").inc()
                yield beam.pvalue.TaggedOutput(REJECTED, rejected)
        if not ids:
            return
        vectors = np.asarray(self._encoder.encode(ids, payloads), dtype=np.float32)
        good = []
        for row, item_id in enumerate(ids):
            problem = row_problem(vectors[row], self._encoder.dim)
            if problem is None:
                good.append(row)
                continue
            Metrics.counter(self._namespace, f"rejected/{problem}").inc()
            yield beam.pvalue.TaggedOutput(
                REJECTED,
                reject(
                    "vector",
                    item_id,
                    problem,
                    f"{self._spec} gave a {problem} row for {item_id}",
                    self._spec,
                    {"id": item_id, "encoder": self._spec},
                ),
            )
        Metrics.counter(self._namespace, "encoded").inc(len(good))
        self._count_stats()
        self._log_progress(len(ids))
        yield Encoded(tuple(ids[r] for r in good), tuple(groups[r] for r in good), vectors[good])

    def _log_progress(self, n: int) -> None:
        """One line per tenth of the items this worker has passed (each worker logs its own share)."""
        before, self._done = self._done, self._done + n
        if self._done * 10 // max(1, self._total) > before * 10 // max(1, self._total):
            LOG.info("%s: %d of %d items encoded on this worker", self._spec, self._done, self._total)

    def _count_stats(self) -> None:
        now = self._encoder.stats()
        for name, value in now.items():
            Metrics.counter(self._namespace, f"stat/{name}").inc(value - self._stats.get(name, 0))
        self._stats = now


def _decode_images(ids: list[str], paths: list[str], groups: list[str], spec: str) -> tuple[list[str], list[Any], list[str], list[Any]]:
    kept_ids, pixels, kept_groups, rejected = [], [], [], []
    for item_id, path, group in zip(ids, paths, groups, strict=True):
        try:
            pixels.append(load_rgb(path))
        except UnreadableImageError as error:
            rejected.append(reject("image", item_id, "unreadable-image", str(error), path, {"id": item_id, "path": path, "encoder": spec}))
            continue
        kept_ids.append(item_id)
        kept_groups.append(group)
    return kept_ids, pixels, kept_groups, rejected


def _skip_without_pixels(spec: str) -> Callable[[dict[str, Any]], Iterable[Any]]:
    def split(row: dict[str, Any]) -> Iterable[Any]:
        if row["pixels"] == PIXELS_OK:
            yield Item(row["image_id"], row["path"], row["image_id"])
        else:
            Metrics.counter(f"{STAGE}/{spec}", "skipped/no-pixels").inc()
            yield beam.pvalue.TaggedOutput(SKIPPED, Skipped(spec, row["image_id"], "no-pixels"))

    return split


def _write_set(batches: list[Encoded], directory: str, meta: dict[str, Any]) -> None:
    ids = [item for batch in batches for item in batch.ids]
    dim = meta["dim"]
    vectors = np.concatenate([b.vectors for b in batches]) if batches else np.zeros((0, dim), np.float32)
    EmbeddingSet(ids, vectors, meta).write(directory)


def _mean_per_image(keyed: tuple[str, Iterable[tuple[str, np.ndarray]]]) -> Encoded:
    image_id, members = keyed
    caption_ids, vectors = zip(*members, strict=True)
    return Encoded((image_id,), (image_id,), cocaption_mean(list(caption_ids), np.stack(vectors))[None, :])


class EmbedOutputs(NamedTuple):
    rejected: beam.PCollection
    skipped: beam.PCollection


class EmbedItems(beam.PTransform):
    """Encode one table (``captions`` or ``images`` rows as dicts) with one encoder and write its sets.

    ``meta`` (encoder, version, dim, needs_payload, items, encodable) comes from the encoder loaded once at
    pipeline construction, so the written metadata does not depend on which worker wrote it.
    ``dataset_ids`` are only needed by id-keyed encoders (precomputed vectors) and may be empty.
    """

    def __init__(
        self,
        spec: str,
        modality: str,
        out_root: str,
        meta: dict[str, Any],
        dataset_ids: Sequence[str],
        parse_id: Callable[[object], str],
        batch_size: int,
    ) -> None:
        super().__init__()
        self._spec = spec
        self._modality = modality
        self._out = out_root
        self._meta = meta
        self._dataset_ids = dataset_ids
        self._parse_id = parse_id
        self._batch_size = batch_size

    def expand(self, rows: beam.PCollection) -> EmbedOutputs:
        spec, batch_size = self._spec, self._batch_size
        # Buckets only make batching deterministic (the batches are reshuffled afterwards), so
        # they are large: few partial batches, and a bucket still fits a worker's memory.
        n_buckets = -(-self._meta["encodable"] // BUCKET_ITEMS) or 1
        skipped_parts = []
        if self._modality == TEXT:
            items = rows | "ToItems" >> beam.Map(lambda r: Item(r["caption_id"], r["text"], r["image_id"]))
        elif self._meta["needs_payload"]:
            split = rows | "SkipNoPixels" >> beam.FlatMap(_skip_without_pixels(spec)).with_outputs(SKIPPED, main="items")
            items = split.items
            skipped_parts.append(split[SKIPPED])
        else:
            items = rows | "ToItems" >> beam.Map(lambda r: Item(r["image_id"], "", r["image_id"]))
        encoded = (
            items
            | "Bucket" >> beam.Map(lambda item: (bucket_of(item.id, n_buckets), item))
            | "GroupBuckets" >> beam.GroupByKey()
            | "Batch" >> beam.FlatMap(lambda kv: chunk(kv[1], batch_size))
            | "Spread" >> beam.Reshuffle()
            | "Encode"
            >> beam.ParDo(EncodeBatches(spec, self._modality, self._dataset_ids, self._parse_id, self._meta["encodable"])).with_outputs(
                REJECTED, SKIPPED, main="encoded"
            )
        )
        skipped_parts.append(encoded[SKIPPED])
        kind = CAPTIONS if self._modality == TEXT else IMAGES
        meta = {**self._meta, "kind": kind}
        gather("GatherVectors", encoded.encoded) | "WriteVectors" >> beam.Map(
            _write_set, set_dir(self._out, self._modality, spec, kind), meta
        )
        if self._modality == TEXT:
            means = (
                encoded.encoded
                | "RowsByImage" >> beam.FlatMap(lambda b: [(g, (i, v)) for i, g, v in zip(b.ids, b.groups, b.vectors, strict=True)])
                | "GroupByImage" >> beam.GroupByKey()
                | "CocaptionMean" >> beam.Map(_mean_per_image)
            )
            mean_meta = {**self._meta, "kind": COCAPTION_MEAN, "normalisation": "mean of L2-normalised caption vectors, not re-normalised"}
            gather("GatherMeans", means) | "WriteMeans" >> beam.Map(_write_set, set_dir(self._out, TEXT, spec, COCAPTION_MEAN), mean_meta)
        skipped = tuple(skipped_parts) | "AllSkipped" >> beam.Flatten()
        return EmbedOutputs(rejected=encoded[REJECTED], skipped=skipped)


def write_skipped(skipped: list[Skipped], path: str) -> None:
    rows = sorted(skipped, key=lambda s: (s.encoder, s.id))
    io.write_parquet(
        path,
        pa.table(
            {
                "encoder": pa.array([s.encoder for s in rows], pa.string()),
                "id": pa.array([s.id for s in rows], pa.string()),
                "reason": pa.array([s.reason for s in rows], pa.string()),
            }
        ),
    )
