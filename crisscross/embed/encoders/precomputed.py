"""Precomputed vectors: ``precomputed:<file>`` looks vectors up by id instead of running a model.

This lets features made elsewhere (a bigger model, a GPU job) enter the pipeline.  Registered in
both registries; it never needs the captions or pixels (``needs_payload = False``).

File formats (``gs://`` paths work too):

* ``.npz`` with arrays ``ids`` (1-D strings or integers) and ``vectors`` (2-D numbers, one row
  per id);
* ``.parquet`` with columns ``id`` and ``vector`` (a list of numbers per row).  Rows may be
  ragged: the file's width is its most common row width (ties: the first met), and other rows
  are rejected.

:meth:`PrecomputedVectors.bind` turns file ids into canonical ids and rejects, as ``vector``
records with the file row as source, every row it cannot use: ``bad-id`` (null or in no known
form), ``unknown-id`` (not in the dataset), ``duplicate-id`` (the first row of an id is the one
used, even if its vector is then rejected), ``wrong-dim``, ``non-finite`` (NaN, ±inf, or beyond
float32 range) and ``zero-vector`` (all zeros: a placeholder, and cosine is undefined).
"""

from __future__ import annotations

import hashlib
import io
import posixpath
import zipfile
from collections import Counter
from collections.abc import Callable, Collection, Sequence
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from crisscross.core.io import read_bytes
from crisscross.core.quarantine import Rejected, reject
from crisscross.embed.encoders.base import IMAGE, IMAGE_ENCODERS, TEXT, TEXT_ENCODERS, Encoder, EncoderError

FORMATS = (".npz", ".parquet")


class MissingVectorError(EncoderError, KeyError):
    """``encode`` was asked for ids the file gives no usable vector for."""

    def __str__(self) -> str:  # KeyError quotes its message; show it plainly.
        return str(self.args[0])


def _read(path: str) -> bytes:
    try:
        return read_bytes(path)
    except OSError as e:
        raise EncoderError(f"cannot read precomputed vectors file {path}: {e}") from e


def _load_npz(path: str, data: bytes) -> tuple[list[Any], np.ndarray, np.ndarray]:
    """``(ids, float32 matrix, row widths)`` from an ``.npz`` file's bytes."""
    try:
        with np.load(io.BytesIO(data), allow_pickle=False) as arrays:
            missing = sorted({"ids", "vectors"} - set(arrays.files))
            if missing:
                raise EncoderError(f"{path}: missing array(s) {missing}; the file has {sorted(arrays.files)}")
            ids, vectors = arrays["ids"], arrays["vectors"]
    except (OSError, ValueError, zipfile.BadZipFile) as e:
        raise EncoderError(
            f"cannot read {path} as .npz with 'ids' and 2-D 'vectors' arrays (object arrays, as ragged vectors are saved, are refused): {e}"
        ) from e
    if ids.ndim != 1 or ids.dtype.kind not in "USiu":
        raise EncoderError(f"{path}: 'ids' must be a 1-D array of strings or integers, got {ids.dtype} {ids.shape}")
    if vectors.ndim != 2 or vectors.dtype.kind not in "fiu" or vectors.shape[1] == 0:
        raise EncoderError(f"{path}: 'vectors' must be a 2-D numeric array, got {vectors.dtype} {vectors.shape}")
    if len(ids) != len(vectors):
        raise EncoderError(f"{path}: {len(ids)} ids but {len(vectors)} vectors")
    if ids.dtype.kind == "S":
        ids = np.char.decode(ids, "utf-8")
    with np.errstate(over="ignore"):  # values beyond float32 become inf and are rejected as non-finite
        matrix = vectors.astype(np.float32)
    return ids.tolist(), matrix, np.full(len(ids), vectors.shape[1], dtype=np.int64)


def _load_parquet(path: str, data: bytes) -> tuple[list[Any], np.ndarray, np.ndarray]:
    """``(ids, float32 matrix, row widths)``; rows whose width is not the file's are left zero."""
    try:
        table = pq.read_table(io.BytesIO(data))
    except (OSError, pa.ArrowException) as e:
        raise EncoderError(f"cannot read {path} as parquet: {e}") from e
    missing = sorted({"id", "vector"} - set(table.column_names))
    if missing:
        raise EncoderError(f"{path}: missing column(s) {missing}; the file has {table.column_names}")
    column = table.column("vector").combine_chunks()
    kind = column.type
    if not (pa.types.is_list(kind) or pa.types.is_large_list(kind) or pa.types.is_fixed_size_list(kind)) or not (
        pa.types.is_floating(kind.value_type) or pa.types.is_integer(kind.value_type)
    ):
        raise EncoderError(f"{path}: column 'vector' must be a list of numbers, got {kind}")
    widths = pc.list_value_length(column).fill_null(0).to_numpy().astype(np.int64)
    counts = Counter(int(w) for w in widths if w > 0)
    if not counts:
        raise EncoderError(f"{path}: no non-empty vectors in {len(widths)} rows")
    dim = counts.most_common(1)[0][0]
    # Nulls inside a vector become NaN and are rejected as non-finite.
    values = pc.list_flatten(column).cast(pa.float64()).to_numpy(zero_copy_only=False)
    starts = np.concatenate([[0], np.cumsum(widths)[:-1]])
    fits = widths == dim
    matrix = np.zeros((len(widths), dim), dtype=np.float32)
    with np.errstate(over="ignore"):
        matrix[fits] = values[starts[fits, None] + np.arange(dim)]
    return table.column("id").to_pylist(), matrix, widths


class PrecomputedVectors(Encoder):
    """Vectors read from a file and matched to the dataset by id; subclasses fix the modality."""

    needs_payload = False

    def __init__(self, path: str) -> None:
        super().__init__(f"precomputed:{path}")
        self.path = path
        suffix = posixpath.splitext(path)[1].lower()
        if suffix not in FORMATS:
            raise EncoderError(f"precomputed vectors file {path} must end in one of {', '.join(FORMATS)}")
        self._suffix = suffix
        self._sha256: str | None = None
        self._file_ids: list[Any] | None = None
        self._matrix = np.zeros((0, 0), dtype=np.float32)
        self._widths = np.zeros(0, dtype=np.int64)
        self._rows: dict[str, int] | None = None

    @property
    def version(self) -> str:
        if self._sha256 is None:
            self._sha256 = hashlib.sha256(_read(self.path)).hexdigest()
        return f"precomputed:{posixpath.basename(self.path)} sha256={self._sha256[:16]}"

    @property
    def dim(self) -> int:
        if self._file_ids is None:
            raise EncoderError(f"{self.name}: dim is known after load()")
        return self._matrix.shape[1]

    def load(self) -> None:
        if self._file_ids is not None:
            return
        data = _read(self.path)
        reader = _load_npz if self._suffix == ".npz" else _load_parquet
        self._file_ids, self._matrix, self._widths = reader(self.path, data)
        self._sha256 = hashlib.sha256(data).hexdigest()

    def bind(self, dataset_ids: Collection[str], parse_id: Callable[[object], str]) -> list[Rejected]:
        self.load()
        assert self._file_ids is not None
        known = set(dataset_ids)
        dim = self.dim
        finite = np.isfinite(self._matrix).all(axis=1)
        nonzero = self._matrix.any(axis=1)
        first_row: dict[str, int] = {}
        rows: dict[str, int] = {}
        rejected: list[Rejected] = []
        for row, raw in enumerate(self._file_ids):
            source = f"{self.path}:row {row}"
            record = {"id": raw, "row": row}
            if raw is None:
                rejected.append(reject("vector", "", "bad-id", "id is null", source, record))
                continue
            try:
                canonical = parse_id(raw)
            except ValueError as e:
                rejected.append(reject("vector", raw, "bad-id", str(e), source, record))
                continue
            if canonical not in known:
                detail = f"{canonical} (from {raw!r}) is not in the dataset"
                rejected.append(reject("vector", canonical, "unknown-id", detail, source, record))
                continue
            if canonical in first_row:
                detail = f"{canonical} was already given at row {first_row[canonical]}"
                rejected.append(reject("vector", canonical, "duplicate-id", detail, source, record))
                continue
            first_row[canonical] = row
            if self._widths[row] != dim:
                detail = f"vector has {self._widths[row]} values, the file's vectors have {dim}"
                rejected.append(reject("vector", canonical, "wrong-dim", detail, source, record))
            elif not finite[row]:
                bad = int(np.count_nonzero(~np.isfinite(self._matrix[row])))
                detail = f"{bad} of {dim} values are NaN, infinite or beyond float32 range"
                rejected.append(reject("vector", canonical, "non-finite", detail, source, record))
            elif not nonzero[row]:
                rejected.append(reject("vector", canonical, "zero-vector", "all values are 0", source, record))
            else:
                rows[canonical] = row
        self._rows = rows
        return rejected

    def _bound_rows(self) -> dict[str, int]:
        if self._rows is None:
            raise EncoderError(f"{self.name}: call bind() before covers() or encode()")
        return self._rows

    def covers(self, ids: Sequence[str]) -> np.ndarray:
        rows = self._bound_rows()
        return np.fromiter((i in rows for i in ids), dtype=bool, count=len(ids))

    def encode(self, ids: Sequence[str], payloads: Sequence[Any]) -> np.ndarray:
        rows = self._bound_rows()
        missing = [i for i in ids if i not in rows]
        if missing:
            raise MissingVectorError(f"{self.name} has no usable vector for {len(missing)} of {len(ids)} ids, e.g. {missing[:3]}")
        index = np.fromiter((rows[i] for i in ids), dtype=np.int64, count=len(ids))
        return np.ascontiguousarray(self._matrix[index])


class PrecomputedTextVectors(PrecomputedVectors):
    modality = TEXT


class PrecomputedImageVectors(PrecomputedVectors):
    modality = IMAGE


TEXT_ENCODERS.register("precomputed", takes_argument=True)(PrecomputedTextVectors)
IMAGE_ENCODERS.register("precomputed", takes_argument=True)(PrecomputedImageVectors)
