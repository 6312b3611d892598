"""Models and galleries: what is scored, and against which items.

A *model* is anything that scores (query, item) pairs (:data:`MODEL_SOURCES`): embedding sets
(cosine similarity; a text encoder scores captions, an image encoder images, and an image–text
model whose two sets share one space scores across modalities), or a precomputed image × caption
score matrix, checked against its id lists so a transposed matrix is an error.  A *gallery* is the
evaluation protocol's items: every image and caption of a split, in source order.  The machine
annotators (candidates), the annotators' bias audit (aggregate) and the evaluate stage all load
their models here; :mod:`crisscross.scoring.protocol` scores them.
"""

from __future__ import annotations

import os
import threading
import zipfile
import zlib
from abc import ABC, abstractmethod
from collections import OrderedDict
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from io import BytesIO
from pathlib import Path
from typing import Annotated, Any, TypeVar

import numpy as np
import pyarrow as pa
from threadpoolctl import threadpool_limits

from crisscross.core import io
from crisscross.core.errors import InputError, ParamError, UserError, one_line
from crisscross.core.ids import CAPTION_KIND, IMAGE_KIND
from crisscross.core.registry import Registry
from crisscross.core.settings import Options, setting
from crisscross.embed.sets import CAPTIONS, IMAGES, EmbeddingSet, set_dir, unit_rows
from crisscross.formats.eccv import DIRECTIONS
from crisscross.ingest.records import caption_images

TASK_KINDS = {
    **DIRECTIONS,
    "t2t": (CAPTION_KIND, CAPTION_KIND),
    "i2i": (IMAGE_KIND, IMAGE_KIND),
}

Result = TypeVar("Result")
Block = Callable[[int, int], np.ndarray]  # (start, stop) → that block of query rows × every item
BlockInto = Callable[[int, int, np.ndarray], np.ndarray]  # (start, stop, out) → the same, written into out where the model can


RATING_KINDS = {
    "sts": (CAPTION_KIND, CAPTION_KIND),
    "sis": (IMAGE_KIND, IMAGE_KIND),
    "sits": (CAPTION_KIND, IMAGE_KIND),
}


ALL = "all"


FOLDS = "folds"


AUTO = "auto"


FULL = "full"


COVERED = "covered"


GALLERY_RULES = (AUTO, FULL, COVERED)


SCORE_BLOCK_ELEMENTS = 1 << 24  # float32 scores computed at once (64 MB)


UNIT_CACHE = 6  # normalised galleries an embedding model keeps (memory: a few galleries' vectors)


class CoverageError(UserError, ValueError):
    """The model cannot score every query and gallery item a task needs."""


class NoCoverageError(CoverageError):
    """The model has vectors for none of the gallery's images (an image encoder in a build without
    pixels): there is nothing to score it on."""


@dataclass(frozen=True)
class Gallery:
    """Images and captions of one protocol, in source order; ``caption_image`` links them."""

    image_ids: tuple[str, ...]
    caption_ids: tuple[str, ...]
    caption_image: Mapping[str, str]

    def ids(self, kind: str) -> tuple[str, ...]:
        return self.image_ids if kind == IMAGE_KIND else self.caption_ids

    def restrict(self, image_ids: Sequence[str]) -> Gallery:
        """The sub-gallery of these images (kept in this gallery's order) and their captions."""
        members = set(image_ids)
        images = tuple(i for i in self.image_ids if i in members)
        return Gallery(images, tuple(c for c in self.caption_ids if self.caption_image[c] in members), self.caption_image)

    def folds(self, n: int) -> list[Gallery]:
        """``n`` consecutive image folds, each with the captions of its images."""
        if not 1 <= n <= len(self.image_ids):
            raise ValueError(f"cannot split {len(self.image_ids)} images into {n} folds")
        out = []
        for part in np.array_split(np.arange(len(self.image_ids)), n):
            images = tuple(self.image_ids[i] for i in part)
            members = set(images)
            captions = tuple(c for c in self.caption_ids if self.caption_image[c] in members)
            out.append(Gallery(images, captions, self.caption_image))
        return out

    @classmethod
    def from_items(cls, images: pa.Table, captions: pa.Table) -> Gallery:
        """From the ingest tables, ordered by each record's ``file:line`` source (Karpathy's
        order for the Karpathy splits, which the 1K folds follow)."""
        image_ids = _in_source_order(images, "image_id")
        caption_ids = _in_source_order(captions, "caption_id")
        return cls(tuple(image_ids), tuple(caption_ids), caption_images(captions))


def _in_source_order(table: pa.Table, id_column: str) -> list[str]:
    def key(pair: tuple[str, str]) -> tuple[str, int, str]:
        source, item = pair
        name, _, line = source.rpartition(":")
        return (name, int(line), item) if line.isdigit() else (source, 0, item)

    pairs = zip(table.column("source").to_pylist(), table.column(id_column).to_pylist(), strict=True)
    return [item for _, item in sorted(pairs, key=key)]


class Model(ABC):
    """What evaluation needs of a model: which kinds it compares and the scores themselves."""

    name: str
    kinds: frozenset[str] = frozenset({IMAGE_KIND, CAPTION_KIND})  # the item kinds it has representations for

    @abstractmethod
    def can_compare(self, query_kind: str, item_kind: str) -> bool: ...

    @abstractmethod
    def missing(self, kind: str, ids: Sequence[str]) -> list[str]:
        """The ids of ``kind`` the model has no representation for."""

    @abstractmethod
    def block_scores(self, query_kind: str, query_ids: Sequence[str], item_kind: str, item_ids: Sequence[str]) -> Block:
        """``block(lo, hi)``: scores of queries ``lo:hi`` against every item, (hi - lo, items)."""

    def block_scores_into(self, query_kind: str, query_ids: Sequence[str], item_kind: str, item_ids: Sequence[str]) -> BlockInto:
        """``block(lo, hi, out)``: :meth:`block_scores` written into ``out`` (float32, (hi - lo,
        items)) by a model that computes its scores, so blocks reuse a buffer instead of faulting in
        fresh pages; this default (a model holding its scores) returns them without ``out``."""
        block = self.block_scores(query_kind, query_ids, item_kind, item_ids)
        return lambda lo, hi, out: block(lo, hi)

    def score_blocks(
        self, query_kind: str, query_ids: Sequence[str], item_kind: str, item_ids: Sequence[str], step: int
    ) -> Iterator[tuple[int, int, np.ndarray]]:
        """``(lo, hi, scores)`` for consecutive blocks of ``step`` queries; a block's scores are
        valid until the next block is asked for (they may share one buffer)."""
        block = self.block_scores_into(query_kind, query_ids, item_kind, item_ids)
        width = len(item_ids)
        buffer = np.empty(min(step, len(query_ids)) * width, np.float32)
        for lo in range(0, len(query_ids), step):
            hi = min(lo + step, len(query_ids))
            yield lo, hi, block(lo, hi, _first_rows(buffer, hi - lo, width))

    @abstractmethod
    def pair_scores(self, a_kind: str, a_ids: Sequence[str], b_kind: str, b_ids: Sequence[str]) -> np.ndarray:
        """One score per (a, b) pair."""

    def require(self, kind: str, ids: Sequence[str], what: str, hint: str = "") -> None:
        missing = self.missing(kind, ids)
        if missing:
            raise CoverageError(
                f"model {self.name!r} has no {kind} vector for {len(missing)} of the {len(ids)} {what} "
                f"(e.g. {', '.join(missing[:3])}); refusing to score a shrunken gallery{hint}"
            )


def _first_rows(buffer: np.ndarray, rows: int, width: int) -> np.ndarray:
    """The first ``rows`` × ``width`` entries of a flat score buffer, as a (rows, width) matrix."""
    return buffer[: rows * width].reshape(rows, width)


def map_score_blocks(
    model: Model,
    query_kind: str,
    query_ids: Sequence[str],
    item_kind: str,
    item_ids: Sequence[str],
    step: int,
    work: Callable[[int, int, np.ndarray], Result],
    threads: int | None = None,
) -> list[Result]:
    """``work(lo, hi, scores)`` of every block of ``step`` queries, in block order, the blocks on
    ``threads`` threads (None: one per core).

    Each thread multiplies with one BLAS thread into a buffer of its own: a product's bytes must
    not follow the machine's cores (the numeric policy), so the cores go to independent blocks, as
    in :mod:`crisscross.similarity.topk`, and the results are the same for any thread count.  The
    blocks are those :meth:`Model.score_blocks` gives, because a score's bytes depend on the rows
    multiplied with it.  ``work`` must not keep ``scores``: the thread's next block overwrites them."""
    block = model.block_scores_into(query_kind, query_ids, item_kind, item_ids)
    n_queries, width = len(query_ids), len(item_ids)
    local = threading.local()

    def one(lo: int) -> Result:
        hi = min(lo + step, n_queries)
        if not hasattr(local, "buffer"):
            local.buffer = np.empty(min(step, n_queries) * width, np.float32)
        return work(lo, hi, block(lo, hi, _first_rows(local.buffer, hi - lo, width)))

    with threadpool_limits(1, user_api="blas"), ThreadPoolExecutor(max(1, threads or os.cpu_count() or 1)) as pool:
        return list(pool.map(one, range(0, n_queries, step)))


class EmbeddingModel(Model):
    """Cosine similarity of embedding sets; across modalities only when ``joint`` (one space)."""

    def __init__(self, name: str, sets: Mapping[str, EmbeddingSet], joint: bool) -> None:
        self.name = name
        self.sets = dict(sets)
        self.kinds = frozenset(self.sets)
        self.joint = joint
        self._rows = {kind: s.row_of() for kind, s in self.sets.items()}
        # the last few (kind, ids, transposed) normalised: a task's queries and gallery, the next task's, its folds
        self._unit: OrderedDict[tuple[str, tuple[str, ...], bool], np.ndarray] = OrderedDict()

    def can_compare(self, query_kind: str, item_kind: str) -> bool:
        present = query_kind in self.sets and item_kind in self.sets
        return present and (query_kind == item_kind or self.joint)

    def missing(self, kind: str, ids: Sequence[str]) -> list[str]:
        rows = self._rows.get(kind, {})
        return [i for i in ids if i not in rows]

    def unit_vectors(self, kind: str, ids: Sequence[str]) -> np.ndarray:
        """Rows of ``ids`` in that order, L2-normalised; zero or non-finite rows are an error."""
        rows = self._rows[kind]
        unit = unit_rows(np.asarray(self.sets[kind].vectors[[rows[i] for i in ids]], dtype=np.float32))
        bad = ~np.isfinite(unit).all(axis=1)
        if bad.any():
            raise CoverageError(
                f"model {self.name!r} has {int(bad.sum())} zero or non-finite {kind} vectors "
                f"(e.g. {ids[int(np.argmax(bad))]}); they have no cosine similarity"
            )
        return unit

    def _gallery_vectors(self, kind: str, ids: Sequence[str], transposed: bool = False) -> np.ndarray:
        """:meth:`unit_vectors` of a gallery (``transposed``: as a contiguous (d, items) array),
        kept for the next few calls: t2t asks twice, every task and PMRP ask for the same gallery."""
        key = (kind, tuple(ids), transposed)
        if key not in self._unit:
            unit = self.unit_vectors(kind, ids)
            self._unit[key] = np.ascontiguousarray(unit.T) if transposed else unit
            self._unit[key].flags.writeable = False  # shared by the calls that follow
            if len(self._unit) > UNIT_CACHE:
                self._unit.popitem(last=False)
        self._unit.move_to_end(key)
        return self._unit[key]

    def block_scores(self, query_kind: str, query_ids: Sequence[str], item_kind: str, item_ids: Sequence[str]) -> Block:
        queries = self._gallery_vectors(query_kind, query_ids)
        items_t = self._gallery_vectors(item_kind, item_ids, transposed=True)
        return lambda lo, hi: queries[lo:hi] @ items_t

    def block_scores_into(self, query_kind: str, query_ids: Sequence[str], item_kind: str, item_ids: Sequence[str]) -> BlockInto:
        queries = self._gallery_vectors(query_kind, query_ids)
        items_t = self._gallery_vectors(item_kind, item_ids, transposed=True)
        return lambda lo, hi, out: np.matmul(queries[lo:hi], items_t, out=out)

    def pair_scores(self, a_kind: str, a_ids: Sequence[str], b_kind: str, b_ids: Sequence[str]) -> np.ndarray:
        a, b = self.unit_vectors(a_kind, a_ids), self.unit_vectors(b_kind, b_ids)
        return np.einsum("ij,ij->i", a, b, dtype=np.float64)


class ScoreMatrixModel(Model):
    """A precomputed image × caption score matrix (higher = more similar)."""

    def __init__(self, name: str, scores: np.ndarray, image_ids: Sequence[str], caption_ids: Sequence[str]) -> None:
        s = np.asarray(scores)
        shape = (len(image_ids), len(caption_ids))
        if s.ndim != 2 or s.shape != shape:
            hint = " — it looks transposed (captions × images)" if s.shape == shape[::-1] else ""
            raise InputError(
                f"score matrix of model {name!r} has shape {s.shape} but its ids say (images={shape[0]}, "
                f"captions={shape[1]}){hint}; rows must be images, columns captions"
            )
        if not np.isfinite(s).all():
            raise InputError(f"score matrix of model {name!r} holds {int((~np.isfinite(s)).sum())} NaN or infinite scores")
        self.name = name
        self.scores = s
        self._rows = {
            IMAGE_KIND: _unique_index(image_ids, f"image_ids of model {name!r}"),
            CAPTION_KIND: _unique_index(caption_ids, f"caption_ids of model {name!r}"),
        }

    def can_compare(self, query_kind: str, item_kind: str) -> bool:
        return query_kind != item_kind

    def missing(self, kind: str, ids: Sequence[str]) -> list[str]:
        return [i for i in ids if i not in self._rows[kind]]

    def _matrix_for(
        self, a_kind: str, a_ids: Sequence[str], b_kind: str, b_ids: Sequence[str]
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        a = np.asarray([self._rows[a_kind][i] for i in a_ids], dtype=np.int64)
        b = np.asarray([self._rows[b_kind][i] for i in b_ids], dtype=np.int64)
        return (self.scores, a, b) if a_kind == IMAGE_KIND else (self.scores.T, a, b)

    def block_scores(self, query_kind: str, query_ids: Sequence[str], item_kind: str, item_ids: Sequence[str]) -> Block:
        matrix, rows, cols = self._matrix_for(query_kind, query_ids, item_kind, item_ids)
        every_row, every_col = _is_range(rows, matrix.shape[0]), _is_range(cols, matrix.shape[1])

        def block(lo: int, hi: int) -> np.ndarray:
            # the ids in matrix order (the whole gallery) need no gather: a slice, copied once
            part = matrix[lo:hi] if every_row else matrix[rows[lo:hi]]
            return np.ascontiguousarray(part if every_col else part[:, cols], dtype=np.float32)

        return block

    def pair_scores(self, a_kind: str, a_ids: Sequence[str], b_kind: str, b_ids: Sequence[str]) -> np.ndarray:
        matrix, rows, cols = self._matrix_for(a_kind, a_ids, b_kind, b_ids)
        return np.asarray(matrix[rows, cols], dtype=np.float64)


def _is_range(index: np.ndarray, n: int) -> bool:
    """``index`` is 0 … n - 1 in order."""
    return index.size == n and bool((index == np.arange(n)).all())


def _unique_index(ids: Sequence[str], what: str) -> dict[str, int]:
    index: dict[str, int] = {}
    for i, v in enumerate(ids):
        if index.setdefault(str(v), i) != i:
            repeats = len(ids) - len({str(x) for x in ids})
            raise InputError(
                f"{what}: id {str(v)!r} appears at rows {index[str(v)]} and {i} ({repeats} repeated ids); each id must appear once"
            )
    return index


MODEL_SOURCES: Registry[Model] = Registry("model source", options=True, supplied=("name", "embeddings"))


@dataclass(frozen=True, kw_only=True)
class EmbeddingsOptions:
    """The options of the ``embeddings`` source: a text encoder, an image encoder, or both."""

    text: str | None = None
    image: str | None = None

    def __post_init__(self) -> None:
        if not self.text and not self.image:
            raise ValueError("a model of the embeddings names a text or an image encoder, or both")


@MODEL_SOURCES.register("embeddings", options=EmbeddingsOptions)
def embeddings_model(name: str, *, embeddings: str, text: str | None = None, image: str | None = None) -> Model:
    """Sets of the embed stage's output: caption vectors of ``text``, image vectors of ``image``.
    The same spec for both (an image–text model, e.g. ``precomputed:clip.npz``) is one space."""
    sets = {}
    for kind, modality, spec, rows in ((CAPTION_KIND, "text", text, CAPTIONS), (IMAGE_KIND, "image", image, IMAGES)):
        if spec:
            directory = set_dir(embeddings, modality, spec, rows)
            if not io.exists(io.join(directory, "vectors.npy")):
                raise FileNotFoundError(f"model {name!r}: no embedding set {directory}; run the embed stage with {spec!r}")
            sets[kind] = EmbeddingSet.read(directory)
    return EmbeddingModel(name, sets, joint=bool(text) and text == image)


EVERY_ENCODER = "all"  # evaluate.encoders: every encoder the embed stage wrote is a model


def embedded_models(embeddings: str, encoders: str | Sequence[str], where: str = "params") -> dict[str, dict[str, str]]:
    """The embed output's encoders as models under their own names (``encoders``: ``all`` or a
    list of names): ``{text: X}`` with caption vectors, ``{image: X}`` with image vectors, both
    (one joint space) when a name has both — so an encoder added to the embed stage is evaluated
    without a second edit."""
    found: dict[str, dict[str, str]] = {}
    for modality, rows in (("text", CAPTIONS), ("image", IMAGES)):
        root = Path(embeddings, modality)
        for slug in sorted(p.name for p in root.iterdir() if p.is_dir()) if root.is_dir() else []:
            if io.exists(io.join(set_dir(embeddings, modality, slug, rows), "vectors.npy")):
                found.setdefault(slug, {})[modality] = slug
    if encoders == EVERY_ENCODER:
        return found
    if isinstance(encoders, str):
        raise ParamError(f"{where}: evaluate.encoders must be {EVERY_ENCODER!r} or a list of encoder names, got {encoders!r}")
    unknown = sorted(set(encoders) - set(found))
    if unknown:
        raise ParamError(f"{where}: evaluate.encoders names {unknown}, which have no vectors in {embeddings}; embedded: {sorted(found)}")
    return {name: found[name] for name in sorted(set(encoders))}


@MODEL_SOURCES.register("score-matrix")
def score_matrix_model(name: str, *, embeddings: str, path: str) -> Model:
    """An ``.npz`` with ``scores`` (images × captions), ``image_ids`` and ``caption_ids``
    (canonical ids); ``embeddings`` (the embed output every source is offered) is not needed."""
    del embeddings
    try:
        with np.load(BytesIO(io.read_bytes(path)), allow_pickle=False) as data:
            absent = {"scores", "image_ids", "caption_ids"} - set(data.files)
            if absent:
                raise InputError(f"score matrix {path} lacks {sorted(absent)}; it has {sorted(data.files)}")
            arrays = data["scores"], data["image_ids"].astype(str).tolist(), data["caption_ids"].astype(str).tolist()
    except InputError:
        raise
    except _NPZ_ERRORS as error:
        raise InputError(f"score matrix {path} is no readable .npz of arrays ({one_line(error)})") from error
    try:
        return ScoreMatrixModel(name, *arrays)
    except InputError as error:
        raise InputError(f"{path}: {error}") from error


# What numpy raises for bytes that are no .npz of plain arrays: OSError and ValueError (not an npy
# or zip file, a pickled object array), a damaged archive (BadZipFile, zlib.error, EOFError).
_NPZ_ERRORS = (OSError, ValueError, EOFError, zipfile.BadZipFile, zlib.error)


@dataclass(frozen=True)
class ModelEntry:
    """The keys of a model's params entry beside its source's options (:data:`MODEL_SPEC`)."""

    source: str = setting("embeddings", choices=tuple(MODEL_SOURCES.names()))
    gallery: str = setting(AUTO, choices=GALLERY_RULES)  # see :func:`crisscross.scoring.protocol.model_gallery`


# A model's params entry (``evaluate.models``, ``filter.annotators``, ``positives.audit_models``):
# ``{source: embeddings, text: …, image: …}`` (the default source) or ``{source: score-matrix, path: …}``.
MODEL_SPEC = Annotated[Mapping[str, Any], Options(MODEL_SOURCES, "source", beside=ModelEntry)]


def load_model(name: str, spec: Mapping[str, Any], embeddings: str, root: str | None = None) -> Model:
    """A model from its params entry (:data:`MODEL_SPEC`); ``gallery`` is not the source's.  A
    relative ``path`` is the launching directory's (``root``): workers start elsewhere."""
    options = {k: v for k, v in spec.items() if k not in ("source", "gallery")}
    if "path" in options:
        options["path"] = io.absolute(str(options["path"]), root)
    return MODEL_SOURCES.create(str(spec.get("source", "embeddings")), name=name, embeddings=embeddings, **options)


def gallery_rule(spec: Mapping[str, Any]) -> str:
    """The ``gallery`` of a model's params entry (:data:`GALLERY_RULES`, checked with the params), default ``auto``."""
    return str(spec.get("gallery", AUTO))
