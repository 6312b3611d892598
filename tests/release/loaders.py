"""Each loader of a release, compared row by row, value and type, with the release's Parquet
tables: Hugging Face ``datasets``, ``mlcroissant`` and TensorFlow Datasets' Croissant builder (on
``TFDS_ROWS`` rows spread over each table). Shared by the demo release's tests and the workflows' (COCO-BISON, Flickr30k Entities)."""

from __future__ import annotations

import hashlib
import json
import logging
import math
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pytest

import crisscross
from crisscross.core import io
from crisscross.release.croissant import record_set_id
from crisscross.release.hub import DTYPES, LABEL_COLUMNS, config_of, label_names


def parquet_tables(release: Path) -> dict[str, pa.Table]:
    return crisscross.load_release(release).tables


def missing(value: Any) -> bool:
    return value is None or (isinstance(value, float) and math.isnan(value))


def assert_rows_equal(got: list[dict[str, Any]], want: list[dict[str, Any]], where: str) -> None:
    """Same rows in the same order, each value equal and of the same Python type (missing: None or NaN both sides)."""
    assert len(got) == len(want), f"{where}: {len(got)} rows, Parquet has {len(want)}"
    for i, (g, w) in enumerate(zip(got, want, strict=True)):
        assert list(g) == list(w), f"{where} row {i}: columns {list(g)} != {list(w)}"
        for column, value in w.items():
            if missing(value):
                assert missing(g[column]), f"{where} row {i} {column}: {g[column]!r}, Parquet has no value"
            else:
                assert type(g[column]) is type(value) and g[column] == value, f"{where} row {i} {column}: {g[column]!r} != {value!r}"


def check_hugging_face(release: Path, cache: Path) -> dict[str, int]:
    """``load_dataset(release, config, split=split)`` for every table: its features as the card
    declares them, its rows those of the Parquet file (class labels read back as their names)."""
    from datasets import ClassLabel, Value, load_dataset

    checked = {}
    for key, table in parquet_tables(release).items():
        config, split = config_of(key)
        if not table.num_rows:  # datasets cannot load a split without rows: the card does not declare it
            with pytest.raises(ValueError, match=rf"BuilderConfig '{config}' not found|Unknown split \"{split}\""):
                load_dataset(str(release), config, split=split, cache_dir=str(cache))
            checked[key] = 0
            continue
        dataset = load_dataset(str(release), config, split=split, cache_dir=str(cache))
        names = label_names(table)
        for column in table.schema:
            feature = dataset.features[column.name]
            if column.name in LABEL_COLUMNS and names is not None:
                assert isinstance(feature, ClassLabel) and feature.names == names, f"{key}.{column.name}: {feature}"
            else:
                assert feature == Value(DTYPES[str(column.type)]), f"{key}.{column.name}: {feature}, Parquet {column.type}"
        labels = {c: dataset.features[c] for c in table.column_names if isinstance(dataset.features[c], ClassLabel)}
        rows = [{c: (labels[c].int2str(v) if c in labels and v is not None else v) for c, v in row.items()} for row in dataset.to_list()]
        assert_rows_equal(rows, table.to_pylist(), f"hf {config}[{split}]")
        checked[key] = len(rows)
    return checked


def check_croissant(release: Path) -> dict[str, int]:
    """``mlcroissant`` record set by record set: one per Parquet table, exactly its rows: text as
    bytes, 64-bit floats and integers as numpy scalars of those types, flags as bool."""
    import mlcroissant as mlc

    tables = parquet_tables(release)
    previous = logging.root.manager.disable
    logging.disable(logging.INFO)
    try:
        dataset = mlc.Dataset(jsonld=release / "croissant.json")
        ids = {record_set_id(f"data/{key}.parquet"): key for key in tables}
        others = {r.id for r in dataset.metadata.record_sets} - set(ids)  # CSVs with no Parquet copy or of another shape (CxC's)
        assert set(ids) <= {r.id for r in dataset.metadata.record_sets} and all(i == "ATTRIBUTION" or i.endswith("_csv") for i in others)
        checked = {}
        for set_id, key in ids.items():
            rows = []
            for record in dataset.records(set_id):
                row = {}
                for name, value in record.items():
                    column = tables[key].schema.field(name.split("/", 1)[1])
                    if value is not None:
                        expected = {pa.float64(): np.float64, pa.int64(): np.int64, pa.int32(): np.int32, pa.bool_(): bool}.get(
                            column.type, bytes
                        )
                        assert type(value) is expected, f"croissant {set_id}/{column.name}: {type(value)} for {column.type}"
                        value = (
                            value.decode("utf-8") if isinstance(value, bytes) else value.item() if isinstance(value, np.generic) else value
                        )
                    row[column.name] = value
                rows.append(row)
            assert_rows_equal(rows, tables[key].to_pylist(), f"croissant {set_id}")
            checked[key] = len(rows)
    finally:
        logging.disable(previous)
    return checked


TFDS_ROWS = 1_000  # rows per table for TFDS's Croissant builder, which runs a Beam pipeline per table: ~1 ms a row on a 2-core AMD EPYC


def spread_rows(tables: dict[str, pa.Table], release: Path, out: Path, rows: int) -> dict[str, pa.Table]:
    """A copy of ``release`` at ``out`` for ``croissant.json``'s readers: each Parquet table longer
    than ``rows`` cut to ``rows`` rows spread evenly over it plus each column's first value and first
    gap, in file order; every table written as the release writes Parquet, and its sha256 in
    ``croissant.json`` updated (``SHA256SUMS`` and the CSVs are left as they were). The tables as cut."""
    shutil.copytree(release, out)
    document = json.loads((out / "croissant.json").read_text(encoding="utf-8"))
    cut, sums = {}, {}
    for key, table in tables.items():
        if table.num_rows > rows:
            valid = [pc.is_valid(column).to_numpy() for column in table.columns]
            picks = [np.linspace(0, table.num_rows - 1, rows).astype(np.int64)]
            picks += [np.flatnonzero(mask)[:1] for v in valid for mask in (v, ~v)]
            table = table.take(np.unique(np.concatenate(picks)))
        cut[key] = table
        data = io.parquet_bytes(table)
        (out / "data" / f"{key}.parquet").write_bytes(data)
        sums[f"data/{key}.parquet"] = hashlib.sha256(data).hexdigest()
    for entry in document["distribution"]:
        if entry["@id"] in sums:
            entry["sha256"] = sums[entry["@id"]]
    (out / "croissant.json").write_text(json.dumps(document), encoding="utf-8")
    return cut


def check_tfds(release: Path, data_dir: Path, rows: int = TFDS_ROWS) -> dict[str, int]:
    """TFDS's ``CroissantBuilder``, one record set per builder, in file order: text as bytes
    (missing: ``b""``), floats as float32 values (``tf.train.Example`` stores float32; missing: -inf),
    integers and flags exact.  It reads a copy of the release whose tables keep about ``rows`` rows
    spread over each (:func:`spread_rows`): every table and column through the builder, values and
    gaps, at a size that checks its wiring, not its speed (``check_croissant`` reads every row through
    ``mlcroissant``, which the builder reads with).  Rows checked per table."""
    import tensorflow_datasets as tfds

    loaded = crisscross.load_release(release)
    version = loaded.version.split("-")[0]  # TFDS takes x.y.z only, not a simulated release's 1.0.0-simulated
    copy = data_dir.parent / f"{data_dir.name}-release"
    checked = {}
    for key, table in spread_rows(loaded.tables, release, copy, rows).items():
        set_id = record_set_id(f"data/{key}.parquet")
        builder = tfds.dataset_builders.CroissantBuilder(
            jsonld=copy / "croissant.json",
            record_set_ids=[set_id],
            file_format="array_record",
            disable_shuffling=True,
            data_dir=data_dir,
            overwrite_version=version,
        )
        builder.download_and_prepare()
        source = builder.as_data_source()["default"]
        want = table.to_pylist()
        assert len(source) == len(want), f"tfds {set_id}: {len(source)} rows, Parquet has {len(want)}"
        for i, (w, got) in enumerate(zip(want, source.__getitems__(range(len(want))), strict=True)):  # one batched read
            for column in table.schema:
                value, g = w[column.name], got[column.name]
                if pa.types.is_floating(column.type):
                    assert g == (-np.inf if missing(value) else np.float32(value)), (
                        f"tfds {set_id} row {i} {column.name}: {g!r} != {value!r}"
                    )
                elif pa.types.is_integer(column.type) or pa.types.is_boolean(column.type):
                    assert g == value, f"tfds {set_id} row {i} {column.name}: {g!r} != {value!r}"
                else:
                    assert g == (value or "").encode("utf-8"), f"tfds {set_id} row {i} {column.name}: {g!r} != {value!r}"
        checked[key] = len(want)
    return checked
