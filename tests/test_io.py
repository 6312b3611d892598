from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

from crisscross import io


def test_atomic_write_leaves_nothing_when_the_block_fails(tmp_path: Path):
    target = tmp_path / "table.parquet"
    target.write_bytes(b"old")
    with pytest.raises(RuntimeError):
        with io.atomic_write(str(target)) as handle:
            handle.write(b"half")
            raise RuntimeError("crash mid-write")
    assert target.read_bytes() == b"old"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["table.parquet"]


def test_writes_are_byte_identical_for_the_same_value(tmp_path: Path):
    table = pa.table({"id": ["b", "a"], "x": [1, 2]})
    for name in ("one", "two"):
        io.write_parquet(str(tmp_path / f"{name}.parquet"), table)
        io.write_json(str(tmp_path / f"{name}.json"), {"b": 1, "a": [1, 2]})
        io.write_npy(str(tmp_path / f"{name}.npy"), np.arange(6, dtype=np.float32).reshape(2, 3))
    for suffix in ("parquet", "json", "npy"):
        assert (tmp_path / f"one.{suffix}").read_bytes() == (tmp_path / f"two.{suffix}").read_bytes()
    assert io.read_parquet(str(tmp_path / "one.parquet")).equals(table)
    assert (tmp_path / "one.json").read_text() == '{\n  "a": [\n    1,\n    2\n  ],\n  "b": 1\n}\n'


def test_staged_directory_replaces_only_on_success(tmp_path: Path):
    out = tmp_path / "items"
    out.mkdir()
    (out / "old.txt").write_text("previous release")

    with pytest.raises(RuntimeError):
        with io.staged_directory(str(out)) as staging:
            (Path(staging) / "new.txt").write_text("half done")
            raise RuntimeError("stage crashed")
    assert [p.name for p in out.iterdir()] == ["old.txt"]
    # What the failed run wrote is kept for inspection, beside the untouched output.
    assert (io.failed_path(str(out)) / "new.txt").read_text() == "half done"

    with io.staged_directory(str(out)) as staging:
        (Path(staging) / "new.txt").write_text("complete")
    assert [p.name for p in out.iterdir()] == ["new.txt"]
    assert not [p for p in tmp_path.iterdir() if ".staging-" in p.name or ".previous-" in p.name]
