"""Precomputed vectors: npz and parquet round trips, and every reason a row is rejected."""

from __future__ import annotations

import hashlib
import json
import re
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from crisscross.embed.encoders import IMAGE, IMAGE_ENCODERS, TEXT, TEXT_ENCODERS, EncoderError
from crisscross.embed.encoders.precomputed import MissingVectorError, PrecomputedVectors

DATASET = [f"t:img:{n}" for n in range(1, 6)]


def parse_id(raw: object) -> str:
    """A tiny id scheme: integers or ``pic<N>`` → ``t:img:<N>``; anything else is malformed."""
    if isinstance(raw, int):
        return f"t:img:{raw}"
    match = re.fullmatch(r"pic(\d+)", str(raw))
    if match is None:
        raise ValueError(f"{raw!r} is not an image id")
    return f"t:img:{match.group(1)}"


def create(registry_spec: str) -> PrecomputedVectors:
    encoder = IMAGE_ENCODERS.create(registry_spec)
    assert isinstance(encoder, PrecomputedVectors)
    return encoder


def test_npz_round_trip(tmp_path: Path) -> None:
    vectors = np.arange(1, 13, dtype=np.float64).reshape(4, 3) / 7
    path = tmp_path / "vecs.npz"
    np.savez(path, ids=np.array(["pic3", "pic1", "pic5", "pic2"]), vectors=vectors)

    encoder = create(f"precomputed:{path}")
    assert encoder.name == f"precomputed:{path}"
    assert encoder.modality == IMAGE
    assert not encoder.needs_payload
    assert encoder.version == f"precomputed:vecs.npz sha256={hashlib.sha256(path.read_bytes()).hexdigest()[:16]}"
    assert encoder.bind(DATASET, parse_id) == []
    assert encoder.dim == 3
    np.testing.assert_array_equal(encoder.covers(DATASET), [True, True, True, False, True])
    out = encoder.encode(["t:img:2", "t:img:3", "t:img:2"], [None, None, None])
    assert out.dtype == np.float32 and out.flags.c_contiguous
    np.testing.assert_array_equal(out, vectors[[3, 0, 3]].astype(np.float32))
    assert encoder.encode([], []).shape == (0, 3)


def test_npz_integer_ids_in_the_text_registry(tmp_path: Path) -> None:
    path = tmp_path / "ints.npz"
    np.savez(path, ids=np.array([4, 2], dtype=np.int64), vectors=np.array([[1.0, 0.0], [0.0, 2.0]], dtype=np.float32))
    encoder = TEXT_ENCODERS.create(f"precomputed:{path}")
    assert encoder.modality == TEXT
    assert encoder.bind(DATASET, parse_id) == []
    np.testing.assert_array_equal(encoder.encode(["t:img:2", "t:img:4"], []), [[0.0, 2.0], [1.0, 0.0]])


def test_parquet_round_trip(tmp_path: Path) -> None:
    path = tmp_path / "vecs.parquet"
    rows = {"pic1": [0.5, -1.0, 2.0, 0.25], "pic4": [3.0, 0.0, 0.0, 1.0]}
    pq.write_table(pa.table({"id": list(rows), "vector": list(rows.values())}), path)
    encoder = create(f"precomputed:{path}")
    assert encoder.bind(DATASET, parse_id) == []
    assert encoder.dim == 4
    np.testing.assert_array_equal(encoder.covers(["t:img:4", "t:img:2", "t:img:1"]), [True, False, True])
    np.testing.assert_array_equal(encoder.encode(["t:img:4", "t:img:1"], []), [rows["pic4"], rows["pic1"]])


def test_every_rejection_reason(tmp_path: Path) -> None:
    path = tmp_path / "messy.parquet"
    ids = ["pic1", "banana", "pic99", "pic1", "pic2", "pic3", "pic4", None, "pic5"]
    vectors = [
        [1.0, 2.0, 3.0],  # 0 kept
        [1.0, 1.0, 1.0],  # 1 bad-id
        [1.0, 1.0, 1.0],  # 2 unknown-id
        [9.0, 9.0, 9.0],  # 3 duplicate-id of row 0
        [1.0, float("nan"), 1.0],  # 4 non-finite
        [0.0, 0.0, 0.0],  # 5 zero-vector
        [1.0, 2.0],  # 6 wrong-dim
        [1.0, 2.0, 3.0],  # 7 bad-id (null)
        [1e300, 1.0, 1.0],  # 8 non-finite in float32
    ]
    pq.write_table(pa.table({"id": ids, "vector": vectors}), path)

    encoder = create(f"precomputed:{path}")
    rejected = encoder.bind(DATASET, parse_id)
    got = [(r.kind, r.key, r.reason, r.source) for r in rejected]
    source = f"{path}:row"
    assert got == [
        ("vector", "banana", "bad-id", f"{source} 1"),
        ("vector", "t:img:99", "unknown-id", f"{source} 2"),
        ("vector", "t:img:1", "duplicate-id", f"{source} 3"),
        ("vector", "t:img:2", "non-finite", f"{source} 4"),
        ("vector", "t:img:3", "zero-vector", f"{source} 5"),
        ("vector", "t:img:4", "wrong-dim", f"{source} 6"),
        ("vector", "", "bad-id", f"{source} 7"),
        ("vector", "t:img:5", "non-finite", f"{source} 8"),
    ]
    assert json.loads(rejected[0].record) == {"id": "banana", "row": 1}
    assert json.loads(rejected[6].record) == {"id": None, "row": 7}
    assert all("9.0" not in r.record and "1e+300" not in r.record for r in rejected)
    assert "row 0" in rejected[2].detail
    assert "2 values" in rejected[5].detail and "3" in rejected[5].detail
    np.testing.assert_array_equal(encoder.covers(DATASET), [True, False, False, False, False])
    # The first occurrence wins: row 0's vector, not the duplicate's.
    np.testing.assert_array_equal(encoder.encode(["t:img:1"], []), [[1.0, 2.0, 3.0]])
    with pytest.raises(MissingVectorError, match=r"no usable vector for 2 of 3 ids.*t:img:2") as caught:
        encoder.encode(["t:img:1", "t:img:2", "t:img:3"], [])
    assert isinstance(caught.value, KeyError) and isinstance(caught.value, EncoderError)


def test_npz_rejections(tmp_path: Path) -> None:
    path = tmp_path / "messy.npz"
    vectors = np.array([[np.inf, 1.0], [0.0, 0.0], [1.0, 1.0], [2.0, 2.0]])
    np.savez(path, ids=np.array(["pic1", "pic2", "pic1", "nope"]), vectors=vectors)
    encoder = create(f"precomputed:{path}")
    reasons = [(r.key, r.reason) for r in encoder.bind(DATASET, parse_id)]
    # Row 2 repeats pic1: a duplicate even though row 0 was itself unusable.
    assert reasons == [
        ("t:img:1", "non-finite"),
        ("t:img:2", "zero-vector"),
        ("t:img:1", "duplicate-id"),
        ("nope", "bad-id"),
    ]
    assert not encoder.covers(DATASET).any()


def test_covers_needs_bind(tmp_path: Path) -> None:
    path = tmp_path / "v.npz"
    np.savez(path, ids=np.array(["pic1"]), vectors=np.ones((1, 2)))
    encoder = create(f"precomputed:{path}")
    with pytest.raises(EncoderError, match="bind"):
        encoder.covers(DATASET)
    with pytest.raises(EncoderError, match="bind"):
        encoder.encode(DATASET, [])


def test_load_errors_name_the_file(tmp_path: Path) -> None:
    missing_array = tmp_path / "noids.npz"
    np.savez(missing_array, vectors=np.ones((2, 2)))
    ragged = tmp_path / "ragged.npz"
    np.savez(ragged, ids=np.array(["pic1", "pic2"]), vectors=np.array([[1.0], [1.0, 2.0]], dtype=object))
    mismatched = tmp_path / "mismatch.npz"
    np.savez(mismatched, ids=np.array(["pic1", "pic2"]), vectors=np.ones((3, 2)))
    flat = tmp_path / "flat.npz"
    np.savez(flat, ids=np.array(["pic1", "pic2"]), vectors=np.ones(2))
    not_zip = tmp_path / "text.npz"
    not_zip.write_text("hello")
    no_column = tmp_path / "nocol.parquet"
    pq.write_table(pa.table({"id": ["pic1"], "embedding": [[1.0]]}), no_column)
    strings = tmp_path / "strings.parquet"
    pq.write_table(pa.table({"id": ["pic1"], "vector": [["a"]]}), strings)
    cases = {
        missing_array: r"missing array\(s\) \['ids'\]",
        ragged: "cannot read",
        mismatched: "2 ids but 3 vectors",
        flat: "2-D",
        not_zip: "cannot read",
        no_column: r"missing column\(s\) \['vector'\]",
        strings: "list of numbers",
        tmp_path / "absent.npz": "cannot read",
    }
    for path, message in cases.items():
        encoder = create(f"precomputed:{path}")
        with pytest.raises(EncoderError, match=message) as caught:
            encoder.load()
        assert path.name in str(caught.value)


def test_unknown_suffix_is_refused() -> None:
    with pytest.raises(EncoderError, match=r"\.npz, \.parquet"):
        IMAGE_ENCODERS.create("precomputed:vectors.csv")
