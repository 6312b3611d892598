"""Score a model against a ground truth: retrieval, graded-similarity correlation, PMRP, BISON.

A *model* is anything that scores (query, item) pairs: embedding sets (cosine similarity; a text
encoder scores captions, an image encoder images, and an image–text model whose two sets share one
space scores across modalities), or a precomputed image × caption score matrix.  A *gallery* is
the evaluation protocol's items: every image and caption of a split, in source order.

Protocols: ``all`` ranks each query against the whole gallery (the COCO 5K protocol on the
Karpathy test split); ``folds`` splits the images, in source order, into ``n`` consecutive folds
with their captions, scores each fold on its own and averages the fold values (COCO 1K: five
folds of 1,000 images; fold sizes differ by at most one image when ``n`` does not divide them).

Guards (the mistakes published evaluation code makes): a model that cannot score every query and
gallery item of a task is refused with :class:`CoverageError`, never *silently* scored on a
shrunken gallery; a score matrix is checked against its id lists, so a transposed matrix is an
error; queries without a positive are counted and left out; positives pointing outside the
gallery are counted (``missing_positives``); rated pairs outside the gallery are counted
(``pairs_outside_gallery``).

Gallery rule (per model, ``evaluate.models.<name>.gallery``, :data:`GALLERY_RULES`): ``full``
refuses a model that lacks a vector for any gallery item a runnable task needs; ``covered``
evaluates it on the sub-gallery it covers — the images it has vectors for and their captions
(i2i: those images only) — and names that sub-gallery beside its figures ("covered: 370 of
5,000 images"); its captions must still all be covered.  ``auto`` (the default) is ``covered``
for a model with image vectors only (an image encoder has no vector for an image without pixels,
and its only tasks, i2i and SIS, stay meaningful on the images it saw) and ``full`` for every
model with caption vectors: a text or image–text model missing part of the gallery is refused,
because its figures would be read beside full-gallery ones.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections import OrderedDict
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, fields
from io import BytesIO
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

from crisscross.core import io
from crisscross.core.errors import InputError, ParamError, UserError
from crisscross.core.ids import CAPTION_KIND, IMAGE_KIND
from crisscross.core.registry import Registry
from crisscross.core.rng import generator
from crisscross.core.settings import setting, settings_from_params
from crisscross.embed.sets import CAPTIONS, IMAGES, EmbeddingSet, set_dir, unit_rows
from crisscross.formats.eccv import DIRECTIONS
from crisscross.ingest.records import caption_images
from crisscross.scoring.metrics import (
    BLOCK_ELEMENTS,
    NO_POSITIVE,
    PositiveRanks,
    bison_accuracy,
    bootstrap_spearman,
    kendall_tau_b,
    metrics_from_ranks,
    pmrp,
    precision_recall,
    ranks_of_positives,
)
from crisscross.scoring.truths import GroundTruth

TASK_KINDS = {
    **DIRECTIONS,
    "t2t": (CAPTION_KIND, CAPTION_KIND),
    "i2i": (IMAGE_KIND, IMAGE_KIND),
}
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


Block = Callable[[int, int], np.ndarray]


# --------------------------------------------------------------------------- gallery


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


# --------------------------------------------------------------------------- models


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

    def score_blocks(
        self, query_kind: str, query_ids: Sequence[str], item_kind: str, item_ids: Sequence[str], step: int
    ) -> Iterator[tuple[int, int, np.ndarray]]:
        """``(lo, hi, scores)`` for consecutive blocks of ``step`` queries; a block's scores are
        valid until the next block is asked for (a model may reuse one buffer)."""
        block = self.block_scores(query_kind, query_ids, item_kind, item_ids)
        for lo in range(0, len(query_ids), step):
            hi = min(lo + step, len(query_ids))
            yield lo, hi, block(lo, hi)

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

    def score_blocks(
        self, query_kind: str, query_ids: Sequence[str], item_kind: str, item_ids: Sequence[str], step: int
    ) -> Iterator[tuple[int, int, np.ndarray]]:
        """Every block multiplied into one buffer: no fresh pages (and faults) per block."""
        queries = self._gallery_vectors(query_kind, query_ids)
        items_t = self._gallery_vectors(item_kind, item_ids, transposed=True)
        buffer = np.empty(min(step, len(queries)) * items_t.shape[1], np.float32)
        for lo in range(0, len(queries), step):
            hi = min(lo + step, len(queries))
            yield lo, hi, np.matmul(queries[lo:hi], items_t, out=buffer[: (hi - lo) * items_t.shape[1]].reshape(hi - lo, -1))

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


MODEL_SOURCES: Registry[Model] = Registry("model source")


@MODEL_SOURCES.register("embeddings")
def embeddings_model(name: str, *, embeddings: str, text: str | None = None, image: str | None = None) -> Model:
    """Sets of the embed stage's output: caption vectors of ``text``, image vectors of ``image``.
    The same spec for both (an image–text model, e.g. ``precomputed:clip.npz``) is one space."""
    if not text and not image:
        raise ValueError(f"model {name!r} names neither a text nor an image encoder")
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
    with np.load(BytesIO(io.read_bytes(path)), allow_pickle=False) as data:
        absent = {"scores", "image_ids", "caption_ids"} - set(data.files)
        if absent:
            raise InputError(f"score matrix {path} lacks {sorted(absent)}; it has {sorted(data.files)}")
        try:
            return ScoreMatrixModel(name, data["scores"], data["image_ids"].astype(str).tolist(), data["caption_ids"].astype(str).tolist())
        except InputError as error:
            raise InputError(f"{path}: {error}") from error


def load_model(name: str, spec: Mapping[str, Any], embeddings: str, root: str | None = None) -> Model:
    """A model from its params entry: ``{source: embeddings, text: …, image: …}`` (the default
    source) or ``{source: score-matrix, path: …}``; ``gallery`` (see :func:`gallery_rule`) is not
    the source's.  A relative ``path`` is the launching directory's (``root``): workers start elsewhere."""
    options = {k: v for k, v in spec.items() if k not in ("source", "gallery")}
    if "path" in options:
        options["path"] = io.absolute(str(options["path"]), root)
    return MODEL_SOURCES.create(str(spec.get("source", "embeddings")), name=name, embeddings=embeddings, **options)


def gallery_rule(name: str, spec: Mapping[str, Any]) -> str:
    """The ``gallery`` option of a model's params entry (:data:`GALLERY_RULES`, default ``auto``)."""
    rule = spec.get("gallery", AUTO)
    if rule not in GALLERY_RULES:
        raise ParamError(f"evaluate.models.{name}.gallery: {rule!r} is not one of {', '.join(GALLERY_RULES)}")
    return str(rule)


# --------------------------------------------------------------------------- retrieval


def retrieval_ranks(model: Model, truth: GroundTruth, gallery: Gallery, task: str) -> tuple[PositiveRanks, int]:
    """Ranks of every positive of every query of ``task`` over the whole gallery (queries in
    blocks of rows, so memory stays bounded), and the positives outside the gallery.  Under the
    truth's ``compat`` R rule the ranks carry every positive's count as ``totals`` (R of mAP@R)."""
    query_kind, item_kind = TASK_KINDS[task]
    query_ids, item_ids = gallery.ids(query_kind), gallery.ids(item_kind)
    model.require(query_kind, query_ids, f"{task} queries")
    model.require(item_kind, item_ids, f"{task} gallery items")
    mapped = truth.positives(task, query_ids, item_ids)
    intramodal = query_kind == item_kind
    step = max(1, SCORE_BLOCK_ELEMENTS // max(len(item_ids), 1))
    parts = []
    for lo, hi, scores in model.score_blocks(query_kind, query_ids, item_kind, item_ids, step):
        exclude = np.arange(lo, hi, dtype=np.int64) if intramodal else None
        parts.append(ranks_of_positives(scores, mapped.positives.rows_slice(lo, hi), exclude))
    return PositiveRanks.concatenate(parts).with_totals(truth.r_totals(task, query_ids)), mapped.missing


def recall_curve(first_positive_rank: np.ndarray, max_k: int) -> list[float]:
    """R@K for K = 1 … max_k (for the recall@K plot)."""
    ranks = first_positive_rank[first_positive_rank != NO_POSITIVE]
    if not ranks.size:
        return [float("nan")] * max_k
    hits = np.bincount(np.minimum(ranks, max_k + 1), minlength=max_k + 2)[1 : max_k + 1]
    return (np.cumsum(hits) / ranks.size).tolist()


def evaluate_retrieval(model: Model, truth: GroundTruth, gallery: Gallery, task: str, ks: Sequence[int], curve_k: int) -> dict[str, Any]:
    ranked, missing = retrieval_ranks(model, truth, gallery, task)
    values: dict[str, Any] = metrics_from_ranks(ranked, ks)
    values["missing_positives"] = float(missing)
    values["recall_curve"] = recall_curve(ranked.first, curve_k)
    return values


def average_folds(per_fold: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """Fold means of every value; counts (queries, missing positives) are summed instead."""
    summed = ("queries", "queries_without_positive", "missing_positives")
    out: dict[str, Any] = {}
    for key in per_fold[0]:
        column = [f[key] for f in per_fold]
        if key == "recall_curve":
            out[key] = np.mean(np.asarray(column, dtype=np.float64), axis=0).tolist()
        else:
            out[key] = float(np.sum(column)) if key in summed else float(np.mean(column))
    out["folds"] = float(len(per_fold))
    return out


# --------------------------------------------------------------------------- other metrics


def evaluate_ratings(
    model: Model, truth: GroundTruth, gallery: Gallery, kind: str, n_samples: int, rng: np.random.Generator
) -> dict[str, float]:
    """CxC §4 bootstrap Spearman between human ratings and model scores for rated pairs whose
    both ids are in the gallery; the first id of each pair is its query."""
    a_kind, b_kind = RATING_KINDS[kind]
    a_members, b_members = set(gallery.ids(a_kind)), set(gallery.ids(b_kind))
    inside = [r for r in truth.ratings(kind) if r[0] in a_members and r[1] in b_members]
    outside = len(truth.ratings(kind)) - len(inside)
    if not inside:
        return {"pairs": 0.0, "pairs_outside_gallery": float(outside)}
    a_ids, b_ids = [r[0] for r in inside], [r[1] for r in inside]
    model.require(a_kind, sorted(set(a_ids)), f"{kind} rated items")
    model.require(b_kind, sorted(set(b_ids)), f"{kind} rated items")
    scores = model.pair_scores(a_kind, a_ids, b_kind, b_ids)
    mean, std = bootstrap_spearman(a_ids, b_ids, [r[2] for r in inside], scores, n_samples, rng)
    return {"spearman": mean, "spearman_std": std, "pairs": float(len(inside)), "pairs_outside_gallery": float(outside)}


def label_matrix(ids: Sequence[str], labels: Mapping[str, Sequence[int]], n_classes: int) -> np.ndarray:
    """Boolean (items, classes) matrix; a caption with no labels of its own is looked up by the
    caller under its image's id."""
    matrix = np.zeros((len(ids), n_classes), dtype=bool)
    for row, item in enumerate(ids):
        matrix[row, list(labels.get(item, ()))] = True
    return matrix


def evaluate_pmrp(
    model: Model, gallery: Gallery, task: str, labels: Mapping[str, Sequence[int]], zetas: Sequence[int], r_cap: int
) -> dict[str, float]:
    """PMRP (ECCV Caption §4.1) for each ζ; captions carry their image's class labels."""
    query_kind, item_kind = TASK_KINDS[task]
    query_ids, item_ids = gallery.ids(query_kind), gallery.ids(item_kind)
    n_classes = 1 + max((max(v) for v in labels.values() if len(v)), default=0)

    def of(kind: str, ids: Sequence[str]) -> np.ndarray:
        keys = ids if kind == IMAGE_KIND else [gallery.caption_image[c] for c in ids]
        return label_matrix(keys, labels, n_classes)

    query_labels, item_labels = of(query_kind, query_ids), of(item_kind, item_ids)
    block = model.block_scores(query_kind, query_ids, item_kind, item_ids)
    step = max(1, BLOCK_ELEMENTS // max(len(item_ids), 1))
    total = dict.fromkeys(zetas, 0.0)
    counted = dict.fromkeys(zetas, 0)
    for lo in range(0, len(query_ids), step):
        hi = min(lo + step, len(query_ids))
        exclude = np.arange(lo, hi, dtype=np.int64) if query_kind == item_kind else None
        scores = block(lo, hi)  # once per block, for every ζ
        for zeta in zetas:
            value, without = pmrp(scores, query_labels[lo:hi], item_labels, zeta, r_cap, exclude)
            with_match = (hi - lo) - without
            if with_match:
                total[zeta] += value * with_match
                counted[zeta] += with_match
    return {f"PMRP@zeta={z}": total[z] / counted[z] if counted[z] else float("nan") for z in zetas}


def evaluate_bison(model: Model, triples: pa.Table, within: Gallery | None = None) -> dict[str, float]:
    """BISON accuracy over (caption, target, decoy) rows; with ``within`` (a model's covered
    sub-gallery) only over the rows whose three items it holds, the others counted."""
    captions = triples.column("caption").to_pylist()
    targets = triples.column("target").to_pylist()
    decoys = triples.column("decoy").to_pylist()
    outside = 0
    if within is not None:
        images, texts = set(within.image_ids), set(within.caption_ids)
        keep = [c in texts and t in images and d in images for c, t, d in zip(captions, targets, decoys, strict=True)]
        outside = len(keep) - sum(keep)
        captions, targets, decoys = ([x for x, k in zip(column, keep, strict=True) if k] for column in (captions, targets, decoys))
        if not captions:
            return {"triples": 0.0, "triples_outside_gallery": float(outside)}
    model.require(CAPTION_KIND, sorted(set(captions)), "BISON captions")
    model.require(IMAGE_KIND, sorted(set(targets) | set(decoys)), "BISON images")
    target = model.pair_scores(CAPTION_KIND, captions, IMAGE_KIND, targets)
    decoy = model.pair_scores(CAPTION_KIND, captions, IMAGE_KIND, decoys)
    result = {"accuracy": bison_accuracy(target, decoy), "triples": float(len(captions))}
    return result if within is None else {**result, "triples_outside_gallery": float(outside)}


def bootstrap_rng(seed: int, truth: str, kind: str) -> np.random.Generator:
    """The same bootstrap samples for every model of a ground truth, so models are compared on
    the same draws, whatever order the jobs run in."""
    return generator(seed, f"{truth}/{kind}")


# --------------------------------------------------------------------------- one job


@dataclass(frozen=True)
class Settings:
    tasks: tuple[str, ...] = tuple(TASK_KINDS)
    ratings: tuple[str, ...] = tuple(RATING_KINDS)
    folds: int = setting(5, low=1)
    ks: tuple[int, ...] = setting((1, 5, 10), low=1)
    curve_k: int = setting(50, low=1)
    bootstrap_samples: int = setting(1000, low=1)
    seed: int = 0
    pmrp_zetas: tuple[int, ...] = setting((0, 1, 2), low=0)
    pmrp_r_cap: int = setting(50, low=1)

    @classmethod
    def from_params(cls, params: Mapping[str, Any], seed: int, where: str = "params") -> Settings:
        """The ``evaluate:`` section's protocol keys, checked, and the base seed."""
        unknown = sorted(set(params.get("tasks", ())) - set(TASK_KINDS)) + sorted(set(params.get("ratings", ())) - set(RATING_KINDS))
        if unknown:
            raise ParamError(
                f"{where}: evaluate.tasks/evaluate.ratings: unknown {unknown}; known: {list(TASK_KINDS)} and {list(RATING_KINDS)}"
            )
        protocol = {f.name for f in fields(cls)} - {"seed"}
        return settings_from_params(cls, {k: v for k, v in params.items() if k in protocol}, "evaluate", where, seed=seed)


def runnable(model: Model, settings: Settings) -> tuple[list[str], list[str]]:
    """The retrieval tasks and rating kinds this model can score."""
    tasks = [t for t in settings.tasks if model.can_compare(*TASK_KINDS[t])]
    ratings = [r for r in settings.ratings if model.can_compare(*RATING_KINDS[r])]
    return tasks, ratings


def check_coverage(model: Model, gallery: Gallery, settings: Settings) -> None:
    """Raise :class:`CoverageError` before any work if a runnable task's gallery is not covered."""
    tasks, _ = runnable(model, settings)
    # images first: an image without a vector is the cause, its captions' absence the consequence
    for kind in sorted({k for t in tasks for k in TASK_KINDS[t]}, key=lambda k: (k != IMAGE_KIND, k)):
        model.require(kind, gallery.ids(kind), "gallery items", hint=_COVERED_HINT.format(name=model.name) if kind == IMAGE_KIND else "")


_COVERED_HINT = " (evaluate.models.{name}.gallery: covered scores it on the images it has vectors for)"


@dataclass(frozen=True)
class ModelGallery:
    """The gallery one model is evaluated on, and what it is a part of."""

    gallery: Gallery
    rule: str  # resolved: full | covered
    chosen_by: str  # the params value: auto | full | covered
    of_images: int
    of_captions: int

    @property
    def partial(self) -> bool:
        return len(self.gallery.image_ids) < self.of_images

    @property
    def note(self) -> str:
        """E.g. ``covered: 370 of 5,000 images, 1,850 of 25,000 captions``."""
        images, captions = len(self.gallery.image_ids), len(self.gallery.caption_ids)
        if not self.partial:
            return f"full: {images:,} images, {captions:,} captions"
        default = " (default for an image-only model)" if self.chosen_by == AUTO else ""
        return f"{self.rule}{default}: {images:,} of {self.of_images:,} images, {captions:,} of {self.of_captions:,} captions"

    def summary(self) -> dict[str, Any]:
        """For ``metrics.json``."""
        return {
            "rule": self.rule if self.partial else FULL,
            "images": len(self.gallery.image_ids),
            "of_images": self.of_images,
            "captions": len(self.gallery.caption_ids),
            "of_captions": self.of_captions,
            "note": self.note,
        }


def model_gallery(model: Model, gallery: Gallery, settings: Settings, rule: str = AUTO) -> ModelGallery:
    """The gallery ``model`` is evaluated on under ``rule`` (see the module's gallery rule);
    raises :class:`CoverageError` before any work when it cannot be scored."""
    if rule not in GALLERY_RULES:
        raise ValueError(f"gallery rule must be one of {GALLERY_RULES}, got {rule!r}")
    resolved = rule if rule != AUTO else (COVERED if model.kinds == {IMAGE_KIND} else FULL)
    chosen = gallery
    if resolved == COVERED and IMAGE_KIND in model.kinds:
        missing = set(model.missing(IMAGE_KIND, gallery.image_ids))
        if len(missing) == len(gallery.image_ids):
            example = ", ".join(gallery.image_ids[:3])
            raise NoCoverageError(
                f"model {model.name!r} has no {IMAGE_KIND} vector for any of the {len(missing)} gallery images (e.g. {example})"
            )
        if missing:
            chosen = gallery.restrict([i for i in gallery.image_ids if i not in missing])
    check_coverage(model, chosen, settings)
    return ModelGallery(chosen, resolved, rule, len(gallery.image_ids), len(gallery.caption_ids))


def evaluate(
    model: Model,
    truth: GroundTruth,
    truth_name: str,
    gallery: Gallery,
    settings: Settings,
    labels: Mapping[str, Sequence[int]] | None = None,
    bison: pa.Table | None = None,
    partial: bool = False,
) -> dict[str, dict[str, dict[str, Any]]]:
    """Every metric this model and ground truth allow: ``{protocol: {metric: {direction: value}}}``.
    ``partial``: ``gallery`` is the model's covered sub-gallery (:func:`model_gallery`), so BISON
    rows outside it are counted rather than refused.  The fold protocol needs at least one image
    per fold."""
    tasks, ratings = runnable(model, settings)
    by_protocol: dict[str, dict[str, dict[str, Any]]] = {ALL: {}}
    folds = gallery.folds(settings.folds) if 1 < settings.folds <= len(gallery.image_ids) else []
    if folds:
        by_protocol[FOLDS] = {}
    for task in tasks:
        if not truth.pairs(task):
            continue
        _put(by_protocol[ALL], task, evaluate_retrieval(model, truth, gallery, task, settings.ks, settings.curve_k))
        if folds:
            per_fold = [evaluate_retrieval(model, truth, fold, task, settings.ks, settings.curve_k) for fold in folds]
            _put(by_protocol[FOLDS], task, average_folds(per_fold))
        if labels:
            _put(by_protocol[ALL], task, evaluate_pmrp(model, gallery, task, labels, settings.pmrp_zetas, settings.pmrp_r_cap))
    for kind in ratings:
        if truth.ratings(kind):
            rng = bootstrap_rng(settings.seed, truth_name, kind)
            _put(by_protocol[ALL], kind, evaluate_ratings(model, truth, gallery, kind, settings.bootstrap_samples, rng))
    if bison is not None and model.can_compare(CAPTION_KIND, IMAGE_KIND):
        _put(by_protocol[ALL], "bison", evaluate_bison(model, bison, gallery if partial else None))
    return {protocol: metrics for protocol, metrics in by_protocol.items() if metrics}


def _put(table: dict[str, dict[str, Any]], direction: str, values: Mapping[str, Any]) -> None:
    for metric, value in values.items():
        table.setdefault(metric, {})[direction] = value


# --------------------------------------------------------------------------- across models


Results = Mapping[str, Mapping[str, Mapping[str, Mapping[str, Mapping[str, Any]]]]]  # model → truth → protocol → metric → direction


def model_ranking_agreement(results: Results, metrics: Sequence[str] = ("R@1", "mAP@R", "R-Precision")) -> list[dict[str, Any]]:
    """Kendall's tau-b between the orderings of the models under two (truth, metric) columns of
    the same direction (ECCV Caption Table 5); needs at least three models with both values."""
    columns: dict[tuple[str, str, str], dict[str, float]] = {}
    for model, truths in results.items():
        for truth, protocols in truths.items():
            for metric in metrics:
                for direction, value in protocols.get(ALL, {}).get(metric, {}).items():
                    columns.setdefault((direction, truth, metric), {})[model] = float(value)
    keys = sorted(columns)
    out = []
    for i, first in enumerate(keys):
        for second in keys[i + 1 :]:
            if first[0] != second[0]:
                continue
            models = sorted(set(columns[first]) & set(columns[second]))
            if len(models) < 3:
                continue
            tau = kendall_tau_b([columns[first][m] for m in models], [columns[second][m] for m in models])
            out.append(
                {"direction": first[0], "a": f"{first[1]} {first[2]}", "b": f"{second[1]} {second[2]}", "models": len(models), "tau_b": tau}
            )
    return out


def positives_agreement(truths: Mapping[str, GroundTruth], verified: str, gallery: Gallery) -> list[dict[str, Any]]:
    """Precision and recall of each ground truth's i2t / t2i positives against the ``verified``
    one's, on the verified truth's queries only (ECCV Caption Table 2), both within the gallery."""
    reference = truths[verified]
    members = set(gallery.image_ids) | set(gallery.caption_ids)
    out = []
    for name in sorted(truths):
        if name == verified:
            continue
        for task in DIRECTIONS:
            gold = {p for p in reference.pairs(task) if p[0] in members and p[1] in members}
            queries = {q for q, _ in gold}
            predicted = [p for p in truths[name].pairs(task) if p[0] in queries and p[1] in members]
            if not gold or not predicted:
                continue
            precision, recall = precision_recall(predicted, gold)
            out.append({"benchmark": name, "verified": verified, "direction": task, "precision": precision, "recall": recall})
    return out
