"""The sample composite: neighbour tables + captions → CxC intramodal candidates, with provenance.

Neighbour rows become findings of unordered pairs (``cxc.neighbour_evidence``); grouping by pair
unites what several encoders and both ends of a pair found.  Tables are read as Arrow row groups
and findings stay Arrow tables, shuffled per shard of the pair's first id (``common.tables_by_shard``:
a runner copies a step's output where steps meet, and sizes it from a sample it encodes), so all of
COCO's ~3M neighbour rows per space cost a few hundred Beam elements, each Arrow's IPC bytes.  Caption draws read the captions of each image from
``captions.parquet`` once per worker process and pipeline; the co-caption quota reads the
``c2c_isim`` count as a singleton side input.  Candidates become table rows where they are drawn
(``cxc.candidates_table``: published ids, provenance JSON, so that work is shared among workers)
and are written there as Parquet shards (``common.TableShards``).
Finally the shards' paths meet in one place for the constraint check (self pairs, duplicates in
either order, pairs in two methods), in Arrow, whose rejects are routed to the quarantine.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable, Iterator, Mapping
from typing import Any, NamedTuple

import apache_beam as beam
import pyarrow as pa

from crisscross.beam.common import (
    REJECTED,
    PerWorker,
    TableShards,
    gather,
    read_shards,
    route,
    tables_by_shard,
    unpacked_tables,
    unpacking,
)
from crisscross.candidates.cxc import (
    C2C_COCAPTION,
    C2C_ISIM,
    EVIDENCE_SCHEMA,
    I2I_CSIM,
    candidates_table,
    caption_pair_for_images,
    cocaption_pairs,
    enforce_constraints,
    evidence_by_pair,
    image_pairs_table,
    neighbour_evidence,
)
from crisscross.core import io
from crisscross.core.quarantine import Rejected
from crisscross.ingest.records import caption_images, captions_by_image

STAGE = "sample"


class SampleOutputs(NamedTuple):
    candidates: beam.PCollection  # one pa.Table of the kept candidates (``cxc.candidates_table``)
    rejected: beam.PCollection


def _pairs(pipeline: beam.Pipeline, label: str, tables: Mapping[str, str], top: int) -> beam.PCollection:
    """``(shard, packed parts)`` of (pair, evidence) from every neighbour table of one method, for
    :func:`_group_pairs`; none without tables (a text-only build lists no image encoder, so it
    draws no C2C pairs)."""
    if not tables:
        return pipeline | f"NoSpaces[{label}]" >> beam.Create([])
    parts = [
        pipeline
        | f"Read[{label}:{space}]" >> beam.io.ReadFromParquetBatched(path)
        | f"Pairs[{label}:{space}]" >> beam.FlatMap(lambda table, space=space: _pair_shards(table, space, top))
        for space, path in sorted(tables.items())
    ]
    return parts | f"All[{label}]" >> beam.Flatten() | f"ByShard[{label}]" >> beam.GroupByKey()


def _pair_shards(table: pa.Table, space: str, top: int) -> Iterator[tuple[int, bytes]]:
    """``(shard, part)`` of a neighbour table's findings (``cxc.neighbour_evidence``), sharded by
    the pair's first id, so every finding of a pair meets in one shard."""
    return tables_by_shard(neighbour_evidence(table, space, top), "id1")


def _shard_evidence(keyed: tuple[int, Iterable[bytes]]) -> pa.Table:
    """One shard's findings (:func:`_pair_shards` parts) as one table."""
    return unpacked_tables(keyed[1], EVIDENCE_SCHEMA)


def read_captions_by_image(path: str) -> dict[str, list[str]]:
    """Each image's caption ids, sorted, from ``captions.parquet``."""
    by_image = captions_by_image(caption_images(io.read_parquet(path)))
    return {image: list(by_image[image]) for image in sorted(by_image)}


def _image_pairs(keyed: tuple[int, Iterable[bytes]]) -> pa.Table:
    """One shard's ``i2i_csim`` candidates, as a table."""
    return image_pairs_table(_shard_evidence(keyed))


def _draw_captions(keyed: tuple[int, Iterable[bytes]], captions: PerWorker[dict[str, list[str]]], seed: int) -> Iterator[Any]:
    """One shard's ``c2c_isim`` draws: its rejects one by one, its candidates as a table and their
    count (tag ``count``, for the co-caption quota)."""
    by_image = captions.get()
    drawn = [caption_pair_for_images(pair, evidence, by_image, seed) for pair, evidence in evidence_by_pair(_shard_evidence(keyed))]
    kept = [d for d in drawn if not isinstance(d, Rejected)]
    yield from (d for d in drawn if isinstance(d, Rejected))
    yield beam.pvalue.TaggedOutput("count", len(kept))
    yield candidates_table(kept)


def _cocaption_table(n_isim: int, captions: PerWorker[dict[str, list[str]]], ratio: float, seed: int) -> pa.Table:
    """The ``c2c_cocaption`` candidates, ``ratio`` × the ``c2c_isim`` count of them; the captions
    are not read for none (a text-only build draws no ``c2c_isim`` pairs)."""
    quota = int(round(n_isim * ratio))
    return candidates_table(cocaption_pairs(captions.get(), quota, seed) if quota else [])


def _keep(shards: list[str], folder: str, allow_cross_method: bool) -> Iterable[Any]:
    """The candidates' shards checked: the kept rows as one table, the rejects one by one."""
    kept, rejected = enforce_constraints(read_shards(shards, folder), allow_cross_method)
    yield beam.pvalue.TaggedOutput("kept_table", kept)
    yield from rejected


class SampleCandidates(beam.PTransform):
    def __init__(
        self,
        i2i_tables: Mapping[str, str],
        c2c_tables: Mapping[str, str],
        captions_path: str,
        top_i2i: int,
        top_c2c: int,
        cocaption_ratio: float,
        seed: int,
        allow_cross_method: bool,
        shards_folder: str,
    ) -> None:
        super().__init__()
        self._i2i, self._c2c, self._captions = dict(i2i_tables), dict(c2c_tables), captions_path
        self._top_i2i, self._top_c2c, self._ratio, self._seed = top_i2i, top_c2c, cocaption_ratio, seed
        self._allow_cross, self._shards = allow_cross_method, shards_folder

    def expand(self, pbegin: beam.pvalue.PBegin) -> SampleOutputs:
        pipeline, seed, ratio = pbegin.pipeline, self._seed, self._ratio
        captions = PerWorker(functools.partial(read_captions_by_image, self._captions))
        i2i = _pairs(pipeline, I2I_CSIM, self._i2i, self._top_i2i) | "ImagePairs" >> beam.Map(_image_pairs)
        drawn = route(
            "DrawCaptions",
            _pairs(pipeline, C2C_ISIM, self._c2c, self._top_c2c),
            STAGE,
            _draw_captions,
            many=True,
            args=(captions, seed),
            tags=("count",),
        )
        isim, no_captions = drawn.kept, drawn[REJECTED]
        n_isim = drawn.count | "SumIsim" >> beam.CombineGlobally(sum)
        cocaption = (
            pipeline
            | "Once" >> beam.Create([None])
            | "Cocaption" >> beam.Map(lambda _, n: _cocaption_table(n, captions, ratio, seed), beam.pvalue.AsSingleton(n_isim))
        )
        shards = [
            tables | f"Shards[{method}]" >> beam.ParDo(TableShards(self._shards, pa.concat_tables))
            for method, tables in ((I2I_CSIM, i2i), (C2C_ISIM, isim), (C2C_COCAPTION, cocaption))
        ]
        checked = route(
            "Constraints",
            gather("Gather", shards | "AllShards" >> beam.Flatten()),
            STAGE,
            unpacking(_keep),
            many=True,
            args=(self._shards, self._allow_cross),
            tags=("kept_table",),
        )
        rejected = (no_captions, checked[REJECTED]) | "AllRejected" >> beam.Flatten()
        return SampleOutputs(candidates=checked.kept_table, rejected=rejected)
