"""Small Beam pieces every stage uses: routing rejects to a side output, counting, gathering, sharding."""

from __future__ import annotations

import os
import zlib
from collections.abc import Callable, Iterable, Iterator
from typing import Any

import apache_beam as beam
from apache_beam.metrics import Metrics

from crisscross.core.quarantine import Rejected

REJECTED = "rejected"
SHARDS = 64  # groups per sharded shuffle: enough to spread over many workers, few enough to stay cheap


class RouteRejected(beam.DoFn):
    """Send :class:`Rejected` elements to the ``rejected`` output, counted by reason; pass the rest.

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
            if isinstance(item, Rejected):  # tagged outputs of fn pass through untouched
                Metrics.counter(self._stage, f"rejected/{item.kind}/{item.reason}").inc()
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


def gather(label: str, pcoll: beam.PCollection) -> beam.PCollection:
    """All elements as one list, for writing one deterministic file (callers sort it)."""
    return pcoll | label >> beam.combiners.ToList()


def shard_of(key: str) -> int:
    """A stable shard for an id: the same in every process and run (unlike ``hash``)."""
    return zlib.crc32(key.encode("utf-8")) % SHARDS


def by_shard(records: Iterable[Any], key: Callable[[Any], str]) -> Iterator[tuple[int, list[Any]]]:
    """``(shard, records)`` per shard of ``key(record)``: what a stage grouping millions of records by
    id shuffles instead of the records one by one (a few thousand Beam elements, not millions)."""
    shards: dict[int, list[Any]] = {}
    for record in records:
        shards.setdefault(shard_of(key(record)), []).append(record)
    yield from shards.items()


def default_threads(processes: int) -> int:
    """A worker process's share of its machine's cores when ``processes`` worker processes share it
    (computed on the worker, so a cluster's workers use their own cores, not the launcher's)."""
    return max(1, (os.cpu_count() or 1) // max(1, processes))
