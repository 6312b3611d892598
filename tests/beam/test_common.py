"""The Beam pieces every stage shares: gathering packed lists, sharding packed parts, the whole-table step."""

from __future__ import annotations

from collections import Counter

import apache_beam as beam
import pyarrow as pa
from apache_beam.testing.test_pipeline import TestPipeline
from apache_beam.testing.util import assert_that, equal_to

from crisscross.beam.common import (
    SHARDS,
    WholeTable,
    by_shard,
    gather,
    packed_columns,
    shard_of,
    tables_by_shard,
    unpacked,
    unpacked_columns,
    unpacked_tables,
    unpacking,
)
from crisscross.core.io import read_parquet
from crisscross.core.quarantine import Rejected, RejectedBatch, quarantine_table, reject, rejected_batch
from crisscross.pipelines.stage import QUARANTINE, write_quarantine


def rejects(prefix: str, n: int) -> list[Rejected]:
    return [reject("row", f"{prefix}{i}", "bad", "detail", "source", {"i": i}) for i in range(n)]


def test_gather_hands_every_element_of_every_producer_and_bundle_to_one_call() -> None:
    with TestPipeline() as p:
        first = p | "First" >> beam.Create([300]) | "Make1" >> beam.FlatMap(lambda n: rejects("a", n))
        second = p | "Second" >> beam.Create(list(range(5))) | "Make2" >> beam.Map(lambda i: reject("row", f"b{i}", "bad", "d", "s", {}))
        got = gather("Gather", (first, second) | beam.Flatten()) | beam.Map(unpacking(lambda rows: sorted(r.key for r in rows)))
        assert_that(got, equal_to([sorted([f"a{i}" for i in range(300)] + [f"b{i}" for i in range(5)])]))


def test_gather_of_nothing_is_one_empty_list() -> None:
    with TestPipeline() as p:
        got = gather("Gather", p | beam.Create([])) | beam.Map(unpacking(lambda rows: len(rows)))
        assert_that(got, equal_to([0]))


def test_by_shard_packs_each_shard_once_and_loses_nothing() -> None:
    records = [f"id{i}" for i in range(1000)]
    parts = list(by_shard(records, lambda r: r))
    assert len({shard for shard, _ in parts}) == len(parts) <= SHARDS
    back = Counter()
    for shard, part in parts:
        members = unpacked(part)
        assert {shard_of(r) for r in members} == {shard}
        back.update(members)
    assert back == Counter(records)


def test_by_shard_packs_flat_rows_as_columns_and_gives_them_back_in_order() -> None:
    rows = [(f"id{i % 7}", f'q"{i}\u00e9', i, i / 3 if i % 5 else float("nan")) for i in range(500)]
    back: dict[int, list[tuple]] = {}
    for shard, part in by_shard(rows, lambda r: r[0], packed_columns):
        back[shard] = list(unpacked_columns(part))
    assert {shard_of(r[0]) for shard, part in back.items() for r in part} == set(back)
    for shard, part in back.items():
        expected = [r for r in rows if shard_of(r[0]) == shard]
        assert [repr(r) for r in part] == [repr(r) for r in expected]  # repr: NaN equals itself there


def test_tables_by_shard_splits_rows_by_their_key_shard_in_order_across_chunks() -> None:
    rows = [{"key": f"id{i % 37}\u00e9", "n": i} for i in range(600)]
    table = pa.concat_tables([pa.Table.from_pylist(rows[:250]), pa.Table.from_pylist(rows[250:])])
    parts = dict(tables_by_shard(table, "key"))
    assert len(parts) == len({shard_of(row["key"]) for row in rows}) <= SHARDS
    for shard, part in parts.items():
        assert isinstance(part, bytes)
        assert unpacked_tables([part], table.schema).to_pylist() == [row for row in rows if shard_of(row["key"]) == shard]
    assert sorted(unpacked_tables(parts.values(), table.schema).to_pylist(), key=lambda row: row["n"]) == rows
    assert unpacked_tables([], table.schema).equals(table.schema.empty_table())
    assert list(tables_by_shard(table.schema.empty_table(), "key")) == []


def halves(path: str, n: int) -> list[object]:
    """A whole-table library step: one result for its input, then its rejects."""
    return [f"{path}: {n} rows", *rejects("r", n // 2)]


def test_whole_table_runs_the_library_step_once_and_routes_and_counts_its_rejects() -> None:
    p = TestPipeline()
    outputs = p | "Step" >> WholeTable("demo", halves, "t.parquet", 6)
    assert_that(outputs.kept, equal_to(["t.parquet: 6 rows"]), label="Kept")
    assert_that(outputs.rejected | beam.Map(lambda r: r.key), equal_to(["r0", "r1", "r2"]), label="Rejected")
    result = p.run()
    result.wait_until_finish()
    counted = result.metrics().query(beam.metrics.MetricsFilter().with_namespace("demo"))["counters"]
    assert {(c.key.metric.name, c.committed) for c in counted} == {("rejected/row/bad", 3)}


def test_the_quarantine_is_written_in_shards_where_rejects_are_made_and_merged_as_one_sorted_table(tmp_path) -> None:
    """Every reject of every producer and bundle, an identical one made twice included, reaches the
    table, which equals the one sorted in memory; the shard folder is gone afterwards."""
    made = [*rejects("a", 300), *rejects("a", 2), *[reject("row", f"b{i}", "bad", "d", f"{tmp_path}/in.csv:{i}", {}) for i in range(5)]]
    with TestPipeline() as p:
        first = p | "First" >> beam.Create([300, 2]) | "Make1" >> beam.FlatMap(lambda n: rejects("a", n))
        second = p | "Second" >> beam.Create(list(range(5))) | "Make2" >> beam.Map(lambda i: made[302 + i])
        write_quarantine((first, second), str(tmp_path), str(tmp_path))
    assert read_parquet(str(tmp_path / QUARANTINE)).equals(quarantine_table(made, str(tmp_path)))
    assert read_parquet(str(tmp_path / QUARANTINE)).column("source").to_pylist()[-5:] == [f"in.csv:{i}" for i in range(5)]
    assert sorted(path.name for path in tmp_path.iterdir()) == [QUARANTINE]


def test_a_batch_of_rejects_is_routed_as_one_element_counted_per_reason_and_written_like_single_rejects(tmp_path) -> None:
    rows = [(f"k{i}", "bad" if i % 3 else "worse", "d", f"{tmp_path}/in.csv:{i}", {"i": i}) for i in range(7)]
    made = [reject("pair", *row) for row in rows]

    def step(path: str) -> list[object]:
        keys, reasons, details, sources, records = zip(*rows[:5], strict=True)
        batch = rejected_batch("pair", list(keys), list(reasons), list(details), pa.array(sources), pa.Table.from_pylist(list(records)))
        return ["kept", batch, *made[5:]]

    p = TestPipeline()
    outputs = p | "Step" >> WholeTable("demo", step, "t.parquet")
    assert_that(outputs.rejected | beam.Map(lambda r: isinstance(r, RejectedBatch)), equal_to([True, False, False]), label="Elements")
    write_quarantine(outputs.rejected, str(tmp_path), str(tmp_path))
    result = p.run()
    result.wait_until_finish()
    counted = result.metrics().query(beam.metrics.MetricsFilter().with_namespace("demo"))["counters"]
    assert {(c.key.metric.name, c.committed) for c in counted} == {("rejected/pair/bad", 4), ("rejected/pair/worse", 3)}
    assert read_parquet(str(tmp_path / QUARANTINE)).equals(quarantine_table(made, str(tmp_path)))
