"""Small Beam pieces every stage uses: routing rejects to a side output, counting, gathering, sharding."""

from __future__ import annotations

import functools
import hashlib
import os
import pickle
import zlib
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Any, Generic, NamedTuple, TypeVar

import apache_beam as beam
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from apache_beam.io.filesystems import FileSystems
from apache_beam.metrics import Metrics
from apache_beam.transforms.window import GlobalWindow
from apache_beam.utils.shared import Shared
from apache_beam.utils.timestamp import MIN_TIMESTAMP
from apache_beam.utils.windowed_value import WindowedValue

from crisscross.core import io
from crisscross.core.quarantine import Rejected, RejectedBatch, rejected_rows, sorted_quarantine

REJECTED = "rejected"
T = TypeVar("T")
SHARDS = 64  # groups per sharded shuffle: enough to spread over many workers, few enough to stay cheap


class RouteRejected(beam.DoFn):
    """Send :class:`Rejected` elements (and :class:`RejectedBatch` ones, many rejects each) to the
    ``rejected`` output, counted by reason; pass the rest.

    Functions that return a record *or* a ``Rejected`` (or an iterable mixing both) are wrapped
    with this, so no step can drop a record without it showing up in the quarantine.
    """

    def __init__(self, stage: str, fn: Callable[..., Any] | None = None, *, many: bool = False) -> None:
        self._stage = stage
        self._fn = fn
        self._many = many

    def process(self, element, *args):  # unannotated: Beam's type check reads hints on *args as a tuple
        produced = element if self._fn is None else self._fn(element, *args)
        for item in produced if self._many else (produced,):
            if isinstance(item, (Rejected, RejectedBatch)):  # tagged outputs of fn pass through untouched
                for (kind, reason), n in item.counts().items():
                    Metrics.counter(self._stage, f"rejected/{kind}/{reason}").inc(n)
                yield beam.pvalue.TaggedOutput(REJECTED, item)
            else:
                yield item


def route(
    label: str,
    pcoll: beam.PCollection,
    stage: str,
    fn: Callable[..., Any] | None = None,
    *,
    many: bool = False,
    args: tuple = (),
    tags: tuple[str, ...] = (),
) -> Any:
    """Apply ``fn`` and split its output into kept and rejected.

    Returns ``(kept, rejected)``; with ``tags`` (outputs ``fn`` yields as ``TaggedOutput``), the
    whole ``DoOutputsTuple``: ``.kept``, ``[REJECTED]`` and one entry per tag.
    """
    outputs = pcoll | label >> beam.ParDo(RouteRejected(stage, fn, many=many), *args).with_outputs(REJECTED, *tags, main="kept")
    return outputs if tags else (outputs.kept, outputs[REJECTED])


class Routed(NamedTuple):
    kept: beam.PCollection
    rejected: beam.PCollection


class WholeTable(beam.PTransform):
    """A step that needs whole tables at once (gold and batches, a judgment source, rater QC, a
    plan's estimates, a triage fit): the phase library's ``fn(inputs, *args)`` run on one element,
    so it runs wherever the runner puts its workers.  ``inputs`` names what ``fn`` reads (file
    paths); what it returns is kept, its :class:`Rejected` routed and counted under ``stage``."""

    def __init__(self, stage: str, fn: Callable[..., Iterable[Any]], inputs: Any, *args: Any) -> None:
        super().__init__()
        self._stage, self._fn, self._inputs, self._args = stage, fn, inputs, args

    def expand(self, pbegin: beam.pvalue.PBegin) -> Routed:
        inputs = pbegin | "Inputs" >> beam.Create([self._inputs])
        return Routed(*route("Run", inputs, self._stage, self._fn, many=True, args=self._args))


def packed(records: Iterable[Any]) -> bytes:
    """Records as one opaque Beam element.  Beam's coder pickles a list of objects it does not know
    object by object, and a worker sizes what it reads back object by object too; for lists of
    thousands of small records that cost more than the work on them.  :func:`unpacked` reverses it."""
    return pickle.dumps(list(records), protocol=pickle.HIGHEST_PROTOCOL)


def unpacked(data: bytes) -> list[Any]:
    """The records of :func:`packed` (made by this pipeline's own steps, never read from a file)."""
    return pickle.loads(data)


def packed_columns(rows: Iterable[tuple[Any, ...]]) -> bytes:
    """Flat rows of one width (text, numbers) as one opaque Beam element, column by column: pickle
    writes a few long lists of them several times faster than as many tuples, and reads them back
    faster too.  :func:`unpacked_columns` reverses it."""
    return pickle.dumps(list(zip(*rows)), protocol=pickle.HIGHEST_PROTOCOL)


def unpacked_columns(data: bytes) -> Iterator[tuple[Any, ...]]:
    """The rows of :func:`packed_columns`, in order."""
    return zip(*pickle.loads(data))


def in_global_window(value: Any) -> WindowedValue:
    """``value`` as ``finish_bundle`` must yield it (this project's pipelines are globally windowed)."""
    return WindowedValue(value, MIN_TIMESTAMP, [GlobalWindow()])


class _PackBundle(beam.DoFn):
    """A bundle's elements as one packed list, in the step that makes them."""

    def start_bundle(self) -> None:
        self._elements: list[Any] = []

    def process(self, element: Any) -> None:
        self._elements.append(element)

    def finish_bundle(self) -> Iterable[WindowedValue]:
        if self._elements:
            part, self._elements = packed(self._elements), []
            yield in_global_window(part)


def gather(label: str, pcoll: beam.PCollection) -> beam.PCollection:
    """All elements as one list, for writing one deterministic file: the step that writes it takes
    the list through :func:`unpacking` (and sorts it).  Elements cross to the gathering step packed,
    a bundle's worth at a time: the runner copies a step's output element by element into the next
    step, and sizes it by encoding a sample, which for a list of a million records is all of it."""
    return pcoll | f"{label}[pack]" >> beam.ParDo(_PackBundle()) | label >> beam.combiners.ToList()


def unpacking(fn: Callable[..., T]) -> Callable[..., T]:
    """``fn`` called with the list :func:`gather` gathered."""

    @functools.wraps(fn)
    def call(parts: list[bytes], *args: Any, **kwargs: Any) -> T:
        return fn([element for part in parts for element in unpacked(part)], *args, **kwargs)

    return call


def shard_of(key: str) -> int:
    """A stable shard for an id: the same in every process and run (unlike ``hash``)."""
    return zlib.crc32(key.encode("utf-8")) % SHARDS


def by_shard(records: Iterable[Any], key: Callable[[Any], str], pack: Callable[[list[Any]], bytes] = packed) -> Iterator[tuple[int, bytes]]:
    """``(shard, packed records)`` per shard of ``key(record)``: what a stage grouping millions of
    records by id shuffles instead of the records one by one (a few thousand Beam elements, not
    millions); the grouped step :func:`unpacked` each part (:func:`unpacked_columns` when
    ``pack`` is :func:`packed_columns`)."""
    shards: dict[int, list[Any]] = {}
    for record in records:
        shards.setdefault(shard_of(key(record)), []).append(record)
    for shard, part in shards.items():
        yield shard, pack(part)


def tables_by_shard(table: pa.Table, column: str) -> Iterator[tuple[int, bytes]]:
    """``(shard, packed rows)`` per shard (:func:`shard_of`) of ``table[column]``: :func:`by_shard`
    for rows that are already columns, each distinct key hashed once, each part a :func:`packed_table`.
    The rows are put in shard order once (a stable sort: each part keeps the table's order) and each
    part is a slice of that: a ``take`` per shard cost a pass over the table each, and over a table
    of many chunks it joined them every time."""
    keys = pc.dictionary_encode(table[column].combine_chunks())
    shard_of_key = np.fromiter((shard_of(key) for key in keys.dictionary.to_pylist()), dtype=np.int64, count=len(keys.dictionary))
    shards = shard_of_key[keys.indices.to_numpy(zero_copy_only=False)]
    by_shard_order = table.take(np.argsort(shards, kind="stable"))
    sizes = np.bincount(shards, minlength=SHARDS)
    starts = np.cumsum(sizes) - sizes
    for shard in np.flatnonzero(sizes).tolist():
        yield shard, packed_table(by_shard_order.slice(int(starts[shard]), int(sizes[shard])))


def packed_table(table: pa.Table) -> bytes:
    """A table as one opaque Beam element, in Arrow's IPC stream format.  Pickled, a table of a few
    hundred rows costs several times more to write and twice as much to read, and Beam sizes a
    sample of its elements by encoding them, where bytes cost nothing."""
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, table.schema) as writer:
        writer.write_table(table)
    return sink.getvalue().to_pybytes()


def unpacked_tables(parts: Iterable[bytes], schema: pa.Schema) -> pa.Table:
    """The rows of :func:`packed_table` parts as one table (an empty one of ``schema`` for none)."""
    return pa.concat_tables([schema.empty_table(), *(pa.ipc.open_stream(part).read_all() for part in parts)])


@dataclass(eq=False)
class _Held:
    value: Any  # in a class: ``Shared`` holds objects by weak reference


class PerWorker(Generic[T]):
    """A value a step reads whole on every element (a file of all of COCO's captions, a catalog),
    loaded once per worker process and pipeline: a side input would be shipped, and sized object
    by object, with every bundle.  Every unpickled copy of one handle finds the same value, which
    lives while a copy does; a handle made with another pipeline (another build in the same
    process) loads afresh."""

    def __init__(self, load: Callable[[], T]) -> None:
        self._load, self._handle, self._held = load, Shared(), None

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "_held": None}

    def get(self) -> T:
        if self._held is None:
            self._held = self._handle.acquire(lambda: _Held(self._load()))
        return self._held.value


def default_threads(processes: int) -> int:
    """A worker process's share of its machine's cores when ``processes`` worker processes share it
    (computed on the worker, so a cluster's workers use their own cores, not the launcher's)."""
    return max(1, (os.cpu_count() or 1) // max(1, processes))


class TableShards(beam.DoFn):
    """A bundle's records as one Parquet shard in ``folder`` (``to_table`` makes the table), named
    by its bytes, so a retried bundle writes the same file; yields the shard's path.  Applied where
    the records are made, millions of them never cross between processes: only the shard paths are
    gathered, and the step that needs them all reads the shards (:func:`read_shards`)."""

    def __init__(self, folder: str, to_table: Callable[[list[Any]], pa.Table]) -> None:
        self._folder, self._to_table = folder, to_table

    def start_bundle(self) -> None:
        self._records: list[Any] = []

    def process(self, record: Any) -> None:
        self._records.append(record)

    def finish_bundle(self) -> Iterable[WindowedValue]:
        if self._records:
            data, self._records = io.parquet_bytes(self._to_table(self._records)), []
            path = io.join(self._folder, f"{hashlib.sha256(data).hexdigest()[:24]}.parquet")
            io.write_bytes(path, data)
            yield in_global_window(path)


def quarantine_shards(folder: str, root: str | None) -> TableShards:
    """:class:`TableShards` of rejects (sources relative to ``root``), for :func:`merge_quarantine`."""
    return TableShards(folder, functools.partial(rejected_rows, root=root))


def read_shards(shards: list[str], folder: str) -> list[pa.Table]:
    """The tables of :class:`TableShards` (each path as often as it was yielded); then their
    ``folder`` is deleted, with any shard of a failed attempt."""
    tables = [io.read_parquet(path) for path in shards]
    if FileSystems.exists(folder):
        FileSystems.delete([folder])
    return tables


def merge_quarantine(shards: list[str], folder: str, target: str) -> None:
    """The rejects' shards (:func:`quarantine_shards`) as one sorted table at ``target``."""
    io.write_parquet(target, sorted_quarantine(read_shards(shards, folder)))
