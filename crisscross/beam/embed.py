"""The embed composite: items tables → one embedding set per encoder (plus co-caption means).

Beam elements are runs of batches, never single items, because pickling every caption at each shuffle
cost more than encoding it.  The input is Arrow tables (Parquet row groups); each is split by a
stable hash of the id into buckets, a bucket's rows are sorted by id and cut into ``batch_size``
batches, so the same inputs give the same batches (and the same bytes) on any runner and any
number of workers.  A model is loaded once per lane of a worker process (:mod:`crisscross.embed.lanes`:
threads that encode whole batches side by side, each with single-threaded kernels, so the process
uses its share of the cores and the bytes do not follow it), shared by the ``DoFn`` instances in
the process; an encoder that holds the interpreter lock (``bow-glove50``, id lookups) runs on the
bundle's thread instead (an inline lane).  Encoded vectors never meet in one
Beam element: each bundle writes its rows as a shard file, and one merge step writes the set in
id order and the co-caption means from the shards (so memory does not grow with copies of the
whole matrix in shuffles).  Unreadable images and
unusable vectors go to the ``rejected`` output with a reason; items an encoder cannot see at all
(images without pixels, ids absent from a precomputed file) go to the ``skipped`` output, so what
was left out is always listed.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import os
import shutil
import sys
import tempfile
import uuid
import zlib
from collections.abc import Callable, Iterable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import IO, Any, NamedTuple

import apache_beam as beam
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from apache_beam.io.filesystems import FileSystems
from apache_beam.metrics import Metrics
from apache_beam.utils.shared import Shared
from apache_beam.utils.windowed_value import WindowedValue
from threadpoolctl import threadpool_limits

from crisscross.beam.common import REJECTED, default_threads, gather, in_global_window, unpacking
from crisscross.core import io, numerics
from crisscross.core.images import UnreadableImageError, load_rgb
from crisscross.core.quarantine import Rejected, reject
from crisscross.embed.encoders import IMAGE, IMAGE_ENCODERS, TEXT, TEXT_ENCODERS, Encoder
from crisscross.embed.lanes import InOrder, Lanes, lane_count
from crisscross.embed.sets import CAPTIONS, COCAPTION_MEAN, IMAGES, EmbeddingSet, cocaption_means, row_problems, set_dir
from crisscross.ingest.records import PIXELS_OK

STAGE = "embed"
SKIPPED = "skipped"
BUCKET_ITEMS = 16_384
BATCHES_PER_ELEMENT = 16  # encoder batches travelling as one Beam element at most (batch_runs)
ELEMENTS_PER_BUCKET = 8  # elements a bucket of enough batches is cut into, to spread over workers
SHARDS = ".shards"  # beside the encoder's sets, deleted by the merge
SHARD_ROWS = ".f32"  # a shard's rows: raw float32, C order, the width in the set's meta
COPY_BYTES = 1 << 20  # read at a time when a remote shard is copied to be mapped
LOG = logging.getLogger("crisscross.embed")
REGISTRIES = {TEXT: TEXT_ENCODERS, IMAGE: IMAGE_ENCODERS}
# The columns each input table must have (the caption and image tables ``crisscross ingest`` writes).
COLUMNS = {TEXT: ("caption_id", "text", "image_id"), IMAGE: ("image_id", "path", "pixels")}


@dataclass(frozen=True)
class Batch:
    ids: tuple[str, ...]
    payloads: tuple[str, ...]  # caption texts, or image paths ("" for encoders that need no payload)
    groups: tuple[str, ...]  # the image each caption belongs to; the image itself for images


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


def bucket_count(encodable: int) -> int:
    """Buckets only make batching deterministic (the batches are reshuffled afterwards), so they are
    large: few partial batches, and a bucket still fits a worker's memory."""
    return -(-encodable // BUCKET_ITEMS) or 1


def bucket_of(item_id: str, n_buckets: int) -> int:
    """A stable bucket (crc32, not Python's salted ``hash``)."""
    return zlib.crc32(item_id.encode()) % n_buckets


def buckets_of(ids: Sequence[str], n_buckets: int) -> np.ndarray:
    """:func:`bucket_of` of every id."""
    return np.fromiter((zlib.crc32(item_id.encode()) for item_id in ids), dtype=np.int64, count=len(ids)) % n_buckets


def items_of(table: pa.Table, modality: str, needs_payload: bool) -> tuple[pa.Table, list[str]]:
    """An input table as items (``id``, ``payload``, ``group``) and the ids of images without pixels,
    which an encoder that needs pixels cannot see."""
    if modality == TEXT:
        return pa.table({"id": table["caption_id"], "payload": table["text"], "group": table["image_id"]}), []
    ids = table["image_id"]
    if not needs_payload:
        return pa.table({"id": ids, "payload": pa.array([""] * len(table), pa.string()), "group": ids}), []
    ok = pc.equal(table["pixels"], PIXELS_OK)
    kept = table.filter(ok)
    return (
        pa.table({"id": kept["image_id"], "payload": kept["path"], "group": kept["image_id"]}),
        table.filter(pc.invert(ok))["image_id"].to_pylist(),
    )


def split_by_bucket(items: pa.Table, n_buckets: int) -> list[tuple[int, pa.Table]]:
    """The rows of each bucket present, as ``(bucket, table)``."""
    buckets = buckets_of(items["id"].to_pylist(), n_buckets)
    return [(int(b), items.take(np.flatnonzero(buckets == b))) for b in np.unique(buckets)]


def batches_of(tables: Iterable[pa.Table], batch_size: int) -> list[Batch]:
    """A bucket's rows sorted by id and cut into batches: the same items always make the same batches."""
    items = pa.concat_tables(list(tables))
    items = items.take(pc.sort_indices(items, [("id", "ascending"), ("payload", "ascending"), ("group", "ascending")]))
    columns = [items[name].to_pylist() for name in ("id", "payload", "group")]
    return [Batch(*(tuple(column[start : start + batch_size]) for column in columns)) for start in range(0, len(items), batch_size)]


def batch_runs(batches: list[Batch]) -> list[list[Batch]]:
    """A bucket's batches, up to :data:`BATCHES_PER_ELEMENT` to a Beam element and at least
    :data:`ELEMENTS_PER_BUCKET` elements when it has as many batches: each element costs the runner a
    pickle, a shuffle entry and a window on the way to the lanes, which at COCO's 9,632 batches of 64
    captions the main thread paid beside the lanes, while a few batches of images must still spread
    over the workers.  The batches, and so the bytes, are the same."""
    per_element = max(1, min(BATCHES_PER_ELEMENT, len(batches) // ELEMENTS_PER_BUCKET))
    return [batches[first : first + per_element] for first in range(0, len(batches), per_element)]


def build_encoder(spec: str, modality: str) -> Encoder:
    return REGISTRIES[modality].create(spec)


def shared_lanes(handle: Shared, spec: str, modality: str, threads: int, lanes: int) -> Lanes:
    """``lanes`` loaded copies of a model encoder, built once per process for a ``Shared`` handle and
    used by every ``DoFn`` instance holding that handle (the runner makes several; each used to load
    its own copy).  Another pipeline has another handle and loads its own copies, though what a model
    only reads and its encoder keeps once per process (use-m3's weights and vocabulary, GloVe's
    index) is not read again.
    """

    def load() -> Lanes:
        encoders = []
        for _ in range(lanes):
            encoder = build_encoder(spec, modality)
            encoder.use_threads(threads)
            encoder.load()
            encoders.append(encoder)
        return Lanes(encoders)

    return handle.acquire(load, tag=(spec, modality, threads, lanes))


def limit_process_threads(threads: int) -> None:
    """Set this process's BLAS / OpenMP pools, and torch's if a model imported it, to ``threads``
    kernel threads per computation.

    Process-wide on purpose: every lane computes with this many.  torch's setting is global, and
    the lanes' threads (started later) read it on their first operation."""
    threadpool_limits(limits=threads)
    torch = sys.modules.get("torch")
    if torch is not None:
        torch.set_num_threads(threads)


@dataclass(frozen=True)
class BatchDone:
    """What a lane made of one batch, handed back to the bundle's thread, where Beam's metrics and
    outputs live."""

    not_covered: list[str]
    unreadable: list[Rejected]
    ids: list[str]
    groups: list[str]
    vectors: np.ndarray
    dim: int  # the encoder's width, which every row must have
    stats: dict[str, int]  # the encoder's counters over this batch


def encode_batch(encoder: Encoder, batch: Batch, spec: str, modality: str, root: str | None) -> BatchDone:
    """One batch on one lane: what the encoder cannot see, decoding (images), encoding."""
    ids, payloads, groups = list(batch.ids), list(batch.payloads), list(batch.groups)
    covered = encoder.covers(ids)
    not_covered = [i for i, ok in zip(ids, covered, strict=True) if not ok]
    keep = [i for i, ok in enumerate(covered) if ok]
    ids, payloads, groups = [ids[i] for i in keep], [payloads[i] for i in keep], [groups[i] for i in keep]
    unreadable: list[Rejected] = []
    if modality == IMAGE and encoder.needs_payload:
        ids, payloads, groups, unreadable = _decode_images(ids, payloads, groups, spec, root)
    if not ids:
        return BatchDone(not_covered, unreadable, [], [], np.zeros((0, encoder.dim), np.float32), encoder.dim, {})
    before = encoder.stats()
    vectors = np.asarray(encoder.encode(ids, payloads), dtype=np.float32)
    stats = {name: value - before.get(name, 0) for name, value in encoder.stats().items()}
    return BatchDone(not_covered, unreadable, ids, groups, vectors, encoder.dim, stats)


class EncodeBatches(beam.DoFn):
    """Encode runs of batches (:func:`batch_runs`) with one encoder, on lanes loaded once per
    worker process in ``setup``.

    Batches go to the lanes as they arrive and their results come back in order, the last ones in
    ``finish_bundle``, so a bundle's outputs are the same whatever the number of lanes."""

    def __init__(
        self,
        spec: str,
        modality: str,
        dataset_ids: Sequence[str],
        parse_id: Callable[[object], str],
        total: int,
        threads: int,
        lanes: int,
        processes: int,
        root: str | None = None,
    ) -> None:
        self._spec = spec
        self._modality = modality
        self._dataset_ids = dataset_ids
        self._parse_id = parse_id
        self._root = root
        self._total = total
        self._threads = threads
        self._lanes = lanes
        self._processes = processes
        self._namespace = f"{STAGE}/{spec}"
        self._models = Shared()  # one handle per encoder step: its DoFn instances in a process share its lanes

    def setup(self) -> None:
        numerics.check(f"embed {self._spec}")
        cores = default_threads(self._processes)
        threads = self._threads or cores
        spec = io.located_source(self._spec, self._root)  # a precomputed file relative to the launching directory
        encoder = build_encoder(spec, self._modality)
        if encoder.needs_payload and not encoder.holds_interpreter:
            lanes = shared_lanes(self._models, spec, self._modality, threads, lane_count(self._lanes, threads, cores))
        else:  # cheap lookups or Python throughout: one encoder, used on this thread
            encoder.load()
            if not encoder.needs_payload:  # id-keyed encoders are bound to this dataset
                encoder.bind(self._dataset_ids, self._parse_id)
            lanes = Lanes([encoder], inline=True)
        limit_process_threads(threads)
        self._lanes_of_process = lanes
        self._done = 0
        self._counters: dict[str, Any] = {}

    def start_bundle(self) -> None:
        # A fresh window per bundle: a bundle that failed (and is retried) leaves nothing behind.
        self._window = InOrder(self._lanes_of_process)

    def process(self, batches: list[Batch]) -> Iterable[Any]:
        for batch in batches:
            task = functools.partial(encode_batch, batch=batch, spec=self._spec, modality=self._modality, root=self._root)
            for done in self._window.put(task):
                yield from self._outputs(done)

    def finish_bundle(self) -> Iterable[Any]:
        for done in self._window.drain():
            for output in self._outputs(done):
                if isinstance(output, beam.pvalue.TaggedOutput):
                    yield beam.pvalue.TaggedOutput(output.tag, in_global_window(output.value))
                else:
                    yield in_global_window(output)

    def _count(self, name: str, n: int = 1) -> None:
        """Add ``n`` to this step's counter ``name``, made once per instance: Beam builds a counter's
        name anew on every ``Metrics.counter`` call, and a batch bumps several."""
        if name not in self._counters:
            self._counters[name] = Metrics.counter(self._namespace, name)
        self._counters[name].inc(n)

    def _outputs(self, done: BatchDone) -> Iterable[Any]:
        for item_id in done.not_covered:
            self._count("skipped/not-covered")
            yield beam.pvalue.TaggedOutput(SKIPPED, Skipped(self._spec, item_id, "not-covered"))
        for rejected in done.unreadable:
            self._count("rejected/unreadable-image")
            yield beam.pvalue.TaggedOutput(REJECTED, rejected)
        if not done.ids:
            return
        problems = row_problems(done.vectors, done.dim)
        good = [row for row, problem in enumerate(problems) if problem is None]
        for item_id, problem in zip(done.ids, problems, strict=True):
            if problem is None:
                continue
            self._count(f"rejected/{problem}")
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
        self._count("encoded", len(good))
        for name, value in done.stats.items():
            self._count(f"stat/{name}", value)
        self._log_progress(len(done.ids))
        if len(good) == len(done.ids):  # every row usable, as nearly always: no copies
            yield Encoded(tuple(done.ids), tuple(done.groups), done.vectors)
        else:
            yield Encoded(tuple(done.ids[r] for r in good), tuple(done.groups[r] for r in good), done.vectors[good])

    def _log_progress(self, n: int) -> None:
        """One line per tenth of the items this worker has passed (each worker logs its own share)."""
        before, self._done = self._done, self._done + n
        if self._done * 10 // max(1, self._total) > before * 10 // max(1, self._total):
            LOG.info("%s: %d of %d items encoded on this worker", self._spec, self._done, self._total)


def _decode_images(
    ids: list[str], paths: list[str], groups: list[str], spec: str, root: str | None
) -> tuple[list[str], list[Any], list[str], list[Any]]:
    """Decoded pixels of each image; ``paths`` as the items table records them (relative to ``root``)."""
    kept_ids, pixels, kept_groups, rejected = [], [], [], []
    for item_id, path, group in zip(ids, paths, groups, strict=True):
        try:
            pixels.append(load_rgb(io.absolute(path, root)))
        except UnreadableImageError as error:
            rejected.append(reject("image", item_id, "unreadable-image", str(error), path, {"id": item_id, "path": path, "encoder": spec}))
            continue
        kept_ids.append(item_id)
        kept_groups.append(group)
    return kept_ids, pixels, kept_groups, rejected


def _to_buckets(spec: str, modality: str, needs_payload: bool, n_buckets: int) -> Callable[[pa.Table], Iterable[Any]]:
    def split(table: pa.Table) -> Iterable[Any]:
        items, no_pixels = items_of(table, modality, needs_payload)
        if no_pixels:
            Metrics.counter(f"{STAGE}/{spec}", "skipped/no-pixels").inc(len(no_pixels))
        for image_id in no_pixels:
            yield beam.pvalue.TaggedOutput(SKIPPED, Skipped(spec, image_id, "no-pixels"))
        yield from split_by_bucket(items, n_buckets)

    return split


class WriteShards(beam.DoFn):
    """Encoded batches → one shard per bundle in ``folder``: ``<stem>.f32``, the rows as raw float32
    written batch by batch as the lanes hand them over (so writing overlaps encoding and a bundle's
    rows are never held together), and ``<stem>.parquet``, their ids and groups; yields the stem.
    Vectors leave the pipeline here instead of travelling through a shuffle to one list: only the
    stems are gathered.  A shard is yielded once both its files are closed, and one of a bundle that
    failed and was retried is never yielded, so the merge reads exactly the committed ones (and
    deletes the folder with whatever a failed attempt left in it)."""

    def __init__(self, folder: str) -> None:
        self._folder = folder

    def start_bundle(self) -> None:
        self._stem = ""
        self._rows: IO[bytes] | None = None
        self._ids: list[str] = []
        self._groups: list[str] = []

    def process(self, encoded: Encoded) -> None:
        if self._rows is None:
            self._stem = io.join(self._folder, uuid.uuid4().hex)
            self._rows = FileSystems.create(f"{self._stem}{SHARD_ROWS}")
        self._rows.write(memoryview(np.ascontiguousarray(encoded.vectors, dtype=np.float32)).cast("B"))
        self._ids += encoded.ids
        self._groups += encoded.groups

    def finish_bundle(self) -> Iterable[WindowedValue]:
        if self._rows is None:
            return
        self._rows.close()
        ids, groups = pa.array(self._ids, pa.string()), pa.array(self._groups, pa.string())
        io.write_parquet(f"{self._stem}.parquet", pa.table({"id": ids, "group": groups}))
        yield in_global_window(self._stem)


class JoinedRows:
    """Several row matrices read as one N×d matrix without joining them into one array: the shape,
    dtype, ``np.take(..., axis=0, out=...)`` and row indexing (a slice or an index array) that
    :func:`crisscross.core.io.write_npy` and :func:`cocaption_means` ask of a matrix."""

    ndim = 2

    def __init__(self, parts: Sequence[np.ndarray]) -> None:
        self._parts = list(parts)
        self._starts = np.cumsum([0, *(len(part) for part in parts)])
        self.shape = (int(self._starts[-1]), int(parts[0].shape[1]))
        self.dtype = parts[0].dtype

    def __len__(self) -> int:
        return self.shape[0]

    def take(self, indices: np.ndarray, axis: int = 0, out: np.ndarray | None = None, mode: str = "raise") -> np.ndarray:
        """The rows at ``indices`` (into ``out`` when given), gathered part by part; what
        ``np.take`` calls on an object with a ``take`` method."""
        if axis != 0 or mode != "raise":
            raise ValueError("JoinedRows.take gathers rows (axis 0) and refuses indices out of range")
        indices = np.asarray(indices, dtype=np.int64)
        if len(indices) and (indices.min() < 0 or indices.max() >= len(self)):
            raise IndexError(f"row index out of range for {len(self)} rows")
        out = np.empty((len(indices), self.shape[1]), self.dtype) if out is None else out
        part_of = np.searchsorted(self._starts, indices, side="right") - 1
        for part in np.unique(part_of).tolist():
            at = np.flatnonzero(part_of == part)
            out[at] = self._parts[part][indices[at] - self._starts[part]]
        return out

    def __getitem__(self, rows: slice | np.ndarray) -> np.ndarray:
        return self.take(np.arange(len(self))[rows] if isinstance(rows, slice) else rows)


@contextlib.contextmanager
def shard_rows(paths: Sequence[str], rows: int, dim: int) -> Iterator[np.ndarray | JoinedRows]:
    """The shards' rows, in the order of ``paths``, as one read-only N×dim float32 matrix: each
    local shard memory-mapped where it is (a remote one first copied into a local scratch folder),
    several read as one by :class:`JoinedRows`.  Mapped, never read or copied into one file,
    because fresh memory and fresh page cache cost their first touch (seconds per GiB on some
    machines) and the page cache already holds the rows the workers wrote."""
    row_bytes = dim * np.dtype(np.float32).itemsize
    with tempfile.TemporaryDirectory(prefix="crisscross-shards-") as scratch:
        local = [_local_shard(path, scratch, n) for n, path in enumerate(paths)]
        sizes = [os.path.getsize(path) for path in local]
        for path, size in zip(paths, sizes, strict=True):
            if size % row_bytes:
                raise ValueError(f"{path}: {size} bytes, not whole rows of {dim} float32")
        if sum(sizes) != rows * row_bytes:
            raise ValueError(
                f"{len(paths)} shards hold {sum(sizes)} bytes of rows, expected {rows * row_bytes} ({rows} rows of {dim} float32)"
            )
        parts = [np.memmap(path, np.float32, "r", shape=(size // row_bytes, dim)) for path, size in zip(local, sizes, strict=True) if size]
        yield np.zeros((0, dim), np.float32) if not parts else parts[0] if len(parts) == 1 else JoinedRows(parts)


def _local_shard(path: str, scratch: str, n: int) -> str:
    if not io.is_uri(path):
        return path
    copy = os.path.join(scratch, f"{n}{SHARD_ROWS}")
    with io.open_input(path) as part, open(copy, "wb") as out:
        shutil.copyfileobj(part, out, COPY_BYTES)
    return copy


def merge_shards(stems: list[str], folder: str, directory: str, meta: dict[str, Any], means: tuple[str, dict[str, Any]] | None) -> None:
    """The shards as one set in ``directory`` (rows in id order) and, with ``means``, the
    co-caption means of its images as another; then the shards' ``folder`` is deleted.  The rows
    are read through a memory map (:func:`shard_rows`), never copied into one array.  The means
    are computed on a second thread while the set is written: writing is mostly the kernel's
    (a gigabyte of fresh pages at COCO scale), and each result is made as it would be alone."""
    stems = sorted(stems)
    tables = [io.read_parquet(f"{stem}.parquet") for stem in stems]
    ids = [i for table in tables for i in table.column("id").to_pylist()]
    groups = [g for table in tables for g in table.column("group").to_pylist()]
    with shard_rows([f"{stem}{SHARD_ROWS}" for stem in stems], len(ids), meta["dim"]) as vectors, ThreadPoolExecutor(1) as pool:
        averaged = None if means is None else (means, pool.submit(cocaption_means, ids, groups, vectors))
        EmbeddingSet(ids, vectors, meta).write(directory)
        if averaged is not None:
            (mean_dir, mean_meta), result = averaged
            EmbeddingSet(*result.result(), mean_meta).write(mean_dir)
    if FileSystems.exists(folder):
        FileSystems.delete([folder])


class EmbedOutputs(NamedTuple):
    rejected: beam.PCollection
    skipped: beam.PCollection


class EmbedItems(beam.PTransform):
    """Encode one table (Arrow tables with the modality's :data:`COLUMNS`) with one encoder and write its sets.

    ``meta`` (encoder, version, dim, needs_payload, items, encodable) comes from the encoder prepared once at
    pipeline construction, so the written metadata does not depend on which worker wrote it.
    ``dataset_ids`` are only needed by id-keyed encoders (precomputed vectors) and may be empty.
    ``threads`` kernel threads per computation (0: the worker machine's cores shared by ``processes``
    processes) and ``lanes`` batches at once per worker process (0: enough to fill its cores).
    Image paths in the table are relative to ``root`` (the launching directory) unless absolute or URIs.
    With ``spread``, the runs of batches are reshuffled so they spread over the workers; in the
    command's own process there is no other worker, and the batches of a bucket go to the lanes as
    they are cut, unpickled and unsized.
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
        threads: int = 0,
        lanes: int = 0,
        processes: int = 1,
        root: str | None = None,
        *,
        spread: bool = True,
    ) -> None:
        super().__init__()
        self._root = root
        self._spread = spread
        self._spec = spec
        self._modality = modality
        self._out = out_root
        self._meta = meta
        self._dataset_ids = dataset_ids
        self._parse_id = parse_id
        self._batch_size = batch_size
        self._threads = threads
        self._lanes = lanes
        self._processes = processes

    def expand(self, tables: beam.PCollection) -> EmbedOutputs:
        spec, modality, batch_size = self._spec, self._modality, self._batch_size
        n_buckets = bucket_count(self._meta["encodable"])
        split = tables | "Bucket" >> beam.FlatMap(_to_buckets(spec, modality, self._meta["needs_payload"], n_buckets)).with_outputs(
            SKIPPED, main="buckets"
        )
        encode = EncodeBatches(
            spec,
            modality,
            self._dataset_ids,
            self._parse_id,
            self._meta["encodable"],
            self._threads,
            self._lanes,
            self._processes,
            self._root,
        )
        runs = (
            split.buckets
            | "GroupBuckets" >> beam.GroupByKey()
            | "Batch" >> beam.FlatMap(lambda kv: batch_runs(batches_of(kv[1], batch_size)))
        )
        if self._spread:
            runs = runs | "Spread" >> beam.Reshuffle()
        encoded = runs | "Encode" >> beam.ParDo(encode).with_outputs(REJECTED, SKIPPED, main="encoded")
        kind = CAPTIONS if modality == TEXT else IMAGES
        meta = {**self._meta, "kind": kind}
        means = None
        if modality == TEXT:
            mean_meta = {**self._meta, "kind": COCAPTION_MEAN, "normalisation": "mean of L2-normalised caption vectors, not re-normalised"}
            means = (set_dir(self._out, TEXT, spec, COCAPTION_MEAN), mean_meta)
        folder = set_dir(self._out, modality, spec, SHARDS)
        shards = encoded.encoded | "WriteShards" >> beam.ParDo(WriteShards(folder))
        gather("GatherShards", shards) | "MergeShards" >> beam.Map(
            unpacking(merge_shards), folder, set_dir(self._out, modality, spec, kind), meta, means
        )
        skipped = (split[SKIPPED], encoded[SKIPPED]) | "AllSkipped" >> beam.Flatten()
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
