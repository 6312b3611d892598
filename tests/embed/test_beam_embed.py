"""The embed composite's pieces: batches formed from Arrow tables the same way however the input is
split, models shared per process, thread shares, and EmbedItems with TestPipeline on real captions."""

from __future__ import annotations

import json
from pathlib import Path

import apache_beam as beam
import numpy as np
import pyarrow as pa
import pytest
from apache_beam.testing.test_pipeline import TestPipeline
from apache_beam.testing.util import assert_that, equal_to
from apache_beam.utils.shared import Shared

from crisscross.beam.common import default_threads
from crisscross.beam.embed import (
    SHARD_ROWS,
    Batch,
    EmbedItems,
    JoinedRows,
    batch_runs,
    batches_of,
    bucket_of,
    buckets_of,
    items_of,
    shard_rows,
    shared_lanes,
    split_by_bucket,
)
from crisscross.embed.encoders import IMAGE, TEXT, TEXT_ENCODERS
from crisscross.embed.sets import EmbeddingSet, cocaption_means, set_dir
from crisscross.ingest.records import PIXELS_OK
from crisscross.pipelines.stage import worker_processes


@pytest.fixture(scope="module")
def caption_table(shared_data: Path) -> pa.Table:
    """The first 300 real Karpathy-test captions (60 images) as the ingested captions table's columns."""
    lines = (shared_data / "coco-karpathy" / "test5k.jsonl").read_text().splitlines()[:300]
    rows = [json.loads(line) for line in lines]
    return pa.table(
        {
            "caption_id": [f"coco:cap:{r['caption_id']}" for r in rows],
            "text": [r["caption_tok"] for r in rows],
            "image_id": [f"coco:img:{r['image_id']}" for r in rows],
        }
    )


def test_buckets_are_crc32_of_the_id():
    ids = ["coco:cap:1", "coco:cap:2", "coco:cap:770337"]
    assert buckets_of(ids, 7).tolist() == [bucket_of(i, 7) for i in ids]
    assert bucket_of("coco:cap:1", 7) == 6  # zlib.crc32(b"coco:cap:1") % 7, the same in every process


def test_batches_do_not_depend_on_how_the_input_is_split(caption_table: pa.Table):
    items, _ = items_of(caption_table, TEXT, needs_payload=True)
    whole = [batch for _, table in split_by_bucket(items, 3) for batch in batches_of([table], 32)]
    shuffled = items.take(np.random.default_rng(0).permutation(len(items)))
    parts: dict[int, list[pa.Table]] = {}
    for start in range(0, len(shuffled), 70):  # five "row groups", each split by bucket
        for bucket, table in split_by_bucket(shuffled.slice(start, 70), 3):
            parts.setdefault(bucket, []).append(table)
    assert [batch for bucket in sorted(parts) for batch in batches_of(parts[bucket], 32)] == whole
    for bucket, table in split_by_bucket(items, 3):
        batches = batches_of([table], 32)
        ids = [i for batch in batches for i in batch.ids]
        assert ids == sorted(table["id"].to_pylist()) and {bucket_of(i, 3) for i in ids} == {bucket}
        assert [len(b.ids) for b in batches[:-1]] == [32] * (len(batches) - 1) and 0 < len(batches[-1].ids) <= 32
    rows = {r["caption_id"]: (r["text"], r["image_id"]) for r in caption_table.to_pylist()}
    assert all(isinstance(b, Batch) and rows[i] == (p, g) for b in whole for i, p, g in zip(b.ids, b.payloads, b.groups, strict=True))
    assert sum(len(b.ids) for b in whole) == 300


def test_images_without_pixels_are_listed_for_encoders_that_need_them():
    images = pa.table(
        {
            "image_id": ["coco:img:1", "coco:img:2", "coco:img:3"],
            "path": ["/p/1.jpg", None, "/p/3.jpg"],
            "pixels": [PIXELS_OK, "missing", PIXELS_OK],
        }
    )
    items, no_pixels = items_of(images, IMAGE, needs_payload=True)
    assert items.to_pylist() == [
        {"id": "coco:img:1", "payload": "/p/1.jpg", "group": "coco:img:1"},
        {"id": "coco:img:3", "payload": "/p/3.jpg", "group": "coco:img:3"},
    ]
    assert no_pixels == ["coco:img:2"]
    items, no_pixels = items_of(images, IMAGE, needs_payload=False)
    assert items["id"].to_pylist() == ["coco:img:1", "coco:img:2", "coco:img:3"] and set(items["payload"].to_pylist()) == {""}
    assert no_pixels == []


def test_models_are_shared_per_process_and_threads_set_per_worker_share(monkeypatch: pytest.MonkeyPatch):
    handle = Shared()
    first = shared_lanes(handle, "bow-glove50", TEXT, 1, 2)
    assert shared_lanes(handle, "bow-glove50", TEXT, 1, 2) is first and first.width == 2
    assert first.submit(lambda encoder: encoder.threads).result() == 1
    assert shared_lanes(Shared(), "bow-glove50", TEXT, 1, 2) is not first  # another pipeline step loads its own
    monkeypatch.setattr("os.cpu_count", lambda: 8)
    assert (default_threads(1), default_threads(2), default_threads(3), default_threads(16)) == (8, 4, 2, 1)
    assert worker_processes([]) == 1
    assert worker_processes(["--direct_num_workers=2"]) == 1  # threads in one process share its pools
    assert worker_processes(["--direct_num_workers=3", "--direct_running_mode=multi_processing"]) == 3
    assert worker_processes(["--direct_num_workers=0", "--direct_running_mode=multi_processing"]) == 8


def test_embed_items_writes_the_direct_vectors_and_their_cocaption_means(caption_table: pa.Table, tmp_path: Path):
    encoder = TEXT_ENCODERS.create("bow-glove50")
    encoder.prepare()
    meta = {"encoder": "bow-glove50", "version": encoder.version, "modality": TEXT, "dim": 50, "needs_payload": True}
    meta |= {"items": 300, "encodable": 300}
    tables = [caption_table.slice(start, 100) for start in (0, 100, 200)]
    with TestPipeline() as pipeline:
        outputs = pipeline | beam.Create(tables, reshuffle=False) | EmbedItems("bow-glove50", TEXT, str(tmp_path), meta, [], str, 16)
        assert_that(outputs.rejected, equal_to([]), label="NoRejects")
        assert_that(outputs.skipped, equal_to([]), label="NoneSkipped")
    written = EmbeddingSet.read(set_dir(str(tmp_path), TEXT, "bow-glove50", "captions"))
    order = np.argsort(caption_table["caption_id"].to_pylist())
    direct = encoder.encode(caption_table["caption_id"].to_pylist(), caption_table["text"].to_pylist())
    assert written.ids == sorted(caption_table["caption_id"].to_pylist())
    assert np.asarray(written.vectors).tobytes() == direct[order].tobytes()
    means = EmbeddingSet.read(set_dir(str(tmp_path), TEXT, "bow-glove50", "cocaption_mean"))
    images, expected = cocaption_means(caption_table["caption_id"].to_pylist(), caption_table["image_id"].to_pylist(), direct)
    assert means.ids == images and len(images) == 60
    assert np.asarray(means.vectors).tobytes() == expected.tobytes()
    assert means.meta["kind"] == "cocaption_mean" and written.meta["count"] == 300


def test_shards_read_as_one_matrix_each_mapped_where_it_is(tmp_path: Path):
    parts = [np.random.default_rng(n).standard_normal((n, 4), dtype=np.float32) for n in (5, 0, 3)]
    paths = [str(tmp_path / f"{n}{SHARD_ROWS}") for n in range(len(parts))]
    for path, part in zip(paths, parts, strict=True):
        Path(path).write_bytes(part.tobytes())
    joined = np.concatenate(parts)
    order = np.array([7, 0, 5, 4, 6, 1, 3, 2])
    with shard_rows(paths, 8, 4) as rows:
        assert isinstance(rows, JoinedRows) and rows.shape == (8, 4) and len(rows) == 8 and rows.dtype == np.float32
        assert rows[:].tobytes() == joined.tobytes() and rows[2:7].tobytes() == joined[2:7].tobytes()
        assert rows[order].tobytes() == joined[order].tobytes()
        out = np.full((3, 4), np.nan, np.float32)
        assert np.take(rows, order[:3], axis=0, out=out) is out and out.tobytes() == joined[order[:3]].tobytes()
        with pytest.raises(IndexError):
            rows[np.array([8])]
    with shard_rows(paths[:1], 5, 4) as rows:
        assert isinstance(rows, np.memmap) and rows.filename == paths[0]  # not copied
        assert rows.tobytes() == parts[0].tobytes()
    with shard_rows(paths[1:2], 0, 4) as rows:
        assert rows.shape == (0, 4)
    with pytest.raises(ValueError, match="3 shards hold 128 bytes of rows, expected 96"), shard_rows(paths, 6, 4):
        pass
    Path(paths[2]).write_bytes(b"\0" * 20)
    with pytest.raises(ValueError, match=r"2\.f32: 20 bytes, not whole rows of 4 float32"), shard_rows(paths, 6, 4):
        pass


def test_a_set_written_from_joined_shards_has_the_bytes_of_one_matrix(tmp_path: Path):
    parts = [np.random.default_rng(n).standard_normal((n, 3), dtype=np.float32) for n in (4, 3)]
    paths = [str(tmp_path / f"{n}{SHARD_ROWS}") for n in range(2)]
    for path, part in zip(paths, parts, strict=True):
        Path(path).write_bytes(part.tobytes())
    ids, groups = ["c6", "c1", "c4", "c0", "c5", "c2", "c3"], ["i1", "i0", "i1", "i0", "i2", "i0", "i1"]
    joined = np.concatenate(parts)
    with shard_rows(paths, 7, 3) as rows:
        EmbeddingSet(ids, rows, {}).write(str(tmp_path / "joined"))
        assert cocaption_means(ids, groups, rows)[1].tobytes() == cocaption_means(ids, groups, joined)[1].tobytes()
    EmbeddingSet(ids, joined, {}).write(str(tmp_path / "whole"))
    assert (tmp_path / "joined" / "vectors.npy").read_bytes() == (tmp_path / "whole" / "vectors.npy").read_bytes()


def test_batch_runs_keep_the_batches_and_spread_a_few_over_workers():
    """Up to 16 batches travel as one element; a bucket of few batches (370 images are 6) still
    gives an element per batch, so two workers share them; the batches themselves are untouched."""

    def batches(n: int) -> list[Batch]:
        return [Batch((f"id{i}",), ("",), (f"id{i}",)) for i in range(n)]

    for n, sizes in ((0, []), (6, [1] * 6), (29, [3] * 9 + [2]), (256, [16] * 16), (300, [16] * 18 + [12])):
        runs = batch_runs(batches(n))
        assert [len(run) for run in runs] == sizes and [b for run in runs for b in run] == batches(n)
