"""The sample composite's per-process captions (``PerWorker``): read once per pipeline, found by every
copy of its handle, never stale across pipelines."""

from __future__ import annotations

import functools
import pickle
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from crisscross.beam.common import PerWorker
from crisscross.beam.sample import read_captions_by_image


def _captions(path: Path, pairs: list[tuple[str, str]]) -> None:
    pq.write_table(pa.table({"caption_id": [c for c, _ in pairs], "image_id": [i for _, i in pairs]}), path)


def test_captions_are_grouped_sorted_and_read_afresh_by_another_pipeline(tmp_path: Path) -> None:
    path = tmp_path / "captions.parquet"
    _captions(path, [("c:3", "i:1"), ("c:1", "i:1"), ("c:2", "i:2")])
    first = PerWorker(functools.partial(read_captions_by_image, str(path)))
    assert first.get() == {"i:1": ["c:1", "c:3"], "i:2": ["c:2"]}
    _captions(path, [("c:9", "i:5")])  # the same folder rebuilt, as a second build in one process does
    assert pickle.loads(pickle.dumps(first)).get() == {"i:1": ["c:1", "c:3"], "i:2": ["c:2"]}  # one pipeline reads once
    assert PerWorker(functools.partial(read_captions_by_image, str(path))).get() == {"i:5": ["c:9"]}
