"""Embedding sets on disk: float32 rows, memory-mappable, with their id index and provenance.

A set is a directory holding ``vectors.npy`` (N×d float32, C order, loadable with
``mmap_mode="r"`` so a later stage reads one block of rows at a time), ``ids.parquet`` (the id
of each row, in row order, sorted) and ``meta.json`` (encoder spec and version, modality,
what the rows are, dimension, count).  An embed output holds one set per encoder and item kind:

    <out>/text/<encoder>/captions/        one row per caption
    <out>/text/<encoder>/cocaption_mean/  one row per image: mean of its L2-normalised captions
    <out>/image/<encoder>/images/         one row per image with pixels
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from io import BytesIO
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from crisscross.core import io

CAPTIONS = "captions"
COCAPTION_MEAN = "cocaption_mean"
IMAGES = "images"


def encoder_slug(spec: str) -> str:
    """A directory name for an encoder spec: the name itself, or name-<arg stem>-<hash> for
    specs with an argument (``precomputed:/data/clip.npz`` → ``precomputed-clip-1a2b3c4d``)."""
    name, _, argument = spec.partition(":")
    if not argument:
        return name
    stem = re.sub(r"[^A-Za-z0-9_.-]+", "-", Path(argument.rstrip("/")).stem).strip("-")[:40]
    digest = hashlib.sha256(argument.encode()).hexdigest()[:8]
    return f"{name}-{stem}-{digest}" if stem else f"{name}-{digest}"


def set_dir(root: str, modality: str, spec: str, kind: str) -> str:
    return io.join(root, modality, encoder_slug(spec), kind)


@dataclass
class EmbeddingSet:
    ids: list[str]
    vectors: np.ndarray
    meta: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.vectors.ndim != 2 or self.vectors.shape[0] != len(self.ids):
            raise ValueError(f"{len(self.ids)} ids but vectors of shape {self.vectors.shape}")

    @property
    def dim(self) -> int:
        return int(self.vectors.shape[1])

    def row_of(self) -> dict[str, int]:
        return {item: row for row, item in enumerate(self.ids)}

    def write(self, directory: str) -> None:
        """Write the three files; rows are put in id order so the bytes do not depend on the runner.

        Sets read from elsewhere may repeat ids (similarity quarantines the repeats); sets this
        project writes never do.
        """
        given = pa.array(self.ids, pa.string())
        order = id_order(given)
        ids = given.take(order)
        if len(ids) > 1 and pc.any(pc.equal(ids[1:], ids[:-1])).as_py():
            raise ValueError("duplicate ids in an embedding set")
        vectors = self.vectors if self.vectors.dtype == np.float32 else np.asarray(self.vectors, dtype=np.float32)
        io.write_npy(io.join(directory, "vectors.npy"), vectors, order)
        io.write_parquet(io.join(directory, "ids.parquet"), pa.table({"id": ids}))
        io.write_json(io.join(directory, "meta.json"), {**self.meta, "dim": int(vectors.shape[1]), "count": len(ids)})

    @classmethod
    def read(cls, directory: str | Path, mmap: bool = True) -> EmbeddingSet:
        """Local sets are memory-mapped; remote ones (``gs://``) are read whole into memory."""
        directory = str(directory)
        vectors_path = io.join(directory, "vectors.npy")
        if mmap and Path(vectors_path).is_file():
            vectors = np.load(vectors_path, mmap_mode="r", allow_pickle=False)
        else:
            vectors = np.load(BytesIO(io.read_bytes(vectors_path)), allow_pickle=False)
        ids = io.read_parquet(io.join(directory, "ids.parquet")).column("id").to_pylist()
        return cls(ids=ids, vectors=vectors, meta=cls.read_meta(directory))

    @staticmethod
    def read_meta(directory: str | Path) -> dict[str, Any]:
        """A set's ``meta.json`` alone (its encoder, width and row count), without its ids or vectors."""
        return json.loads(io.read_bytes(io.join(str(directory), "meta.json")))


def unit_rows(vectors: np.ndarray) -> np.ndarray:
    """Rows scaled to unit length, in the input's dtype: the project's one unit-normaliser.

    A zero or non-finite row has no direction and comes out as NaN, so it never passes a
    cosine threshold; callers that must not meet one exclude or refuse such rows."""
    with np.errstate(invalid="ignore", divide="ignore"):
        return vectors / np.linalg.norm(vectors, axis=1, keepdims=True)


def cocaption_mean(caption_ids: Sequence[str], vectors: np.ndarray) -> np.ndarray:
    """Mean of an image's L2-normalised caption vectors, summed in caption-id order.

    Normalising first gives every caption the same weight whatever its norm (BoW means of long
    and short captions differ in length); the fixed order makes the float sum reproducible.  The
    mean is not re-normalised: cosine similarity downstream normalises it anyway.
    """
    order = np.argsort(np.asarray(caption_ids, dtype=object), kind="stable")
    return unit_rows(np.asarray(vectors, dtype=np.float32)[order]).mean(axis=0, dtype=np.float64).astype(np.float32)


def id_order(ids: Sequence[str] | pa.Array, *then: Sequence[str] | pa.Array) -> np.ndarray:
    """The row order sorting ``ids`` (ties by each of ``then`` in turn), as Python orders the
    strings: Arrow compares UTF-8 bytes, which order as code points do, without a Python key per row.
    Text columns already in Arrow are sorted as they are, not converted again."""
    columns = {str(n): pa.array(column, pa.string()) for n, column in enumerate((ids, *then))}
    return pc.sort_indices(pa.table(columns), [(name, "ascending") for name in columns]).to_numpy().astype(np.int64)


MEANS_CHUNK = 1024  # images whose captions are normalised and averaged at once: a few MiB of copies, reused


def cocaption_means(caption_ids: Sequence[str], image_ids: Sequence[str], vectors: np.ndarray) -> tuple[list[str], np.ndarray]:
    """:func:`cocaption_mean` of every image's captions, rows in any order: ``(sorted image ids, means)``.

    Images with the same number of captions are averaged together, a chunk at a time: each mean
    is still its captions' unit rows summed in caption-id order, the bytes of :func:`cocaption_mean`
    whatever the batching (``tests/embed/test_sets.py``), without a Python step per image."""
    images_given = pa.array(image_ids, pa.string())
    rows = id_order(images_given, caption_ids)
    grouped = images_given.take(rows)
    starts = np.flatnonzero(np.r_[True, pc.not_equal(grouped[1:], grouped[:-1]).to_numpy(zero_copy_only=False)]) if len(rows) else rows
    sizes = np.diff(np.r_[starts, len(rows)])
    images = grouped.take(starts).to_pylist()
    means = np.zeros((len(images), vectors.shape[1]), np.float32)
    for size in np.unique(sizes).tolist():
        of_size = np.flatnonzero(sizes == size)
        for chunk in range(0, len(of_size), MEANS_CHUNK):
            which = of_size[chunk : chunk + MEANS_CHUNK]
            members = rows[starts[which, None] + np.arange(size)]
            unit = unit_rows(np.asarray(vectors[members.reshape(-1)], dtype=np.float32)).reshape(len(which), size, -1)
            means[which] = unit.mean(axis=1, dtype=np.float64).astype(np.float32)
    return images, means


def row_problems(vectors: np.ndarray, dim: int) -> list[str | None]:
    """Why each row of a matrix cannot be used (``wrong-dim``, ``non-finite``, ``zero-vector``), or
    None; checked for all rows at once (an encoder's batch)."""
    if vectors.ndim != 2 or vectors.shape[1] != dim:
        return ["wrong-dim"] * len(vectors)
    finite, nonzero = np.isfinite(vectors).all(axis=1), vectors.any(axis=1)
    if finite.all() and nonzero.all():
        return [None] * len(vectors)
    finite, nonzero = finite.tolist(), nonzero.tolist()
    return [None if ok and some else "zero-vector" if ok else "non-finite" for ok, some in zip(finite, nonzero, strict=True)]


def row_problem(vector: np.ndarray, dim: int) -> str | None:
    """:func:`row_problems` of one row."""
    vector = np.asarray(vector)
    return row_problems(vector[None, :], dim)[0] if vector.ndim == 1 else "wrong-dim"
