"""The machine annotators: models that propose VERIFY candidates (ECCV Caption §3.1).

Any model of :data:`crisscross.scoring.models.MODEL_SOURCES` can annotate; :class:`TextProxyModel` adds the
leave-one-out text proxy (a caption scored against the mean of an image's *other* captions), so a
build with no image–text model still has annotators.  :func:`load_annotators` loads those the
``filter`` settings name.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from crisscross.candidates.machine import PROXY_PREFIX, FilterSettings
from crisscross.core import io
from crisscross.core.errors import InputError
from crisscross.core.ids import CAPTION_KIND, IMAGE_KIND
from crisscross.embed.sets import CAPTIONS, COCAPTION_MEAN, EmbeddingSet, set_dir, unit_rows
from crisscross.scoring.models import Block, CoverageError, Gallery, Model, load_model


class TextProxyModel(Model):
    """An image scored by its co-caption mean under a text encoder (cosine), leave-one-out for
    a caption against its own image; an image with a single caption cannot score that caption
    (-inf: it has no other caption to vote)."""

    def __init__(self, name: str, captions: EmbeddingSet, means: EmbeddingSet, caption_image: Mapping[str, str]) -> None:
        self.name = name
        self._caption_rows = captions.row_of()
        self._image_rows = means.row_of()
        self.units = unit_rows(np.asarray(captions.vectors, dtype=np.float32))
        self.means = np.asarray(means.vectors, dtype=np.float64)
        self._mean_norms = np.linalg.norm(self.means, axis=1)
        self._mean_units = (self.means / self._mean_norms[:, None]).astype(np.float32)
        image_of = np.full(len(captions.ids), -1, dtype=np.int64)
        for caption, row in self._caption_rows.items():
            image_of[row] = self._image_rows.get(caption_image.get(caption, ""), -1)
        self._image_of = image_of  # caption row → its image's mean row (-1: none)
        self.counts = np.bincount(image_of[image_of >= 0], minlength=len(means.ids))
        sums = np.zeros_like(self.means)
        np.add.at(sums, image_of[image_of >= 0], self.units[image_of >= 0])
        drift = np.abs(sums - self.counts[:, None] * self.means).max(initial=0.0)
        if not np.isfinite(drift) or drift > 1e-3:
            raise InputError(
                f"annotator {name!r}: the co-caption means are not the means of the unit caption vectors "
                f"(max |n·mean − Σ captions| = {drift:.3g}); re-run the embed stage"
            )

    def can_compare(self, query_kind: str, item_kind: str) -> bool:
        return {query_kind, item_kind} == {IMAGE_KIND, CAPTION_KIND}

    def missing(self, kind: str, ids: Sequence[str]) -> list[str]:
        rows = self._image_rows if kind == IMAGE_KIND else self._caption_rows
        return [i for i in ids if i not in rows]

    def leave_one_out(self, caption_rows: np.ndarray, image_rows: np.ndarray) -> np.ndarray:
        """cos(u_c, (n·m − u_c)/(n − 1)) = (n·d − 1) / sqrt(n²|m|² − 2n·d + 1), d = u_c·m."""
        u, m = self.units[caption_rows].astype(np.float64), self.means[image_rows]
        n = self.counts[image_rows].astype(np.float64)
        d = np.einsum("ij,ij->i", u, m)
        with np.errstate(invalid="ignore", divide="ignore"):
            out = (n * d - 1.0) / np.sqrt(np.maximum(n * n * self._mean_norms[image_rows] ** 2 - 2.0 * n * d + 1.0, 0.0))
        return np.where(n > 1, out, -np.inf)

    def _rows(self, kind: str, ids: Sequence[str]) -> np.ndarray:
        self.require(kind, ids, "ids")
        rows = self._image_rows if kind == IMAGE_KIND else self._caption_rows
        return np.fromiter((rows[i] for i in ids), dtype=np.int64, count=len(ids))

    def block_scores(self, query_kind: str, query_ids: Sequence[str], item_kind: str, item_ids: Sequence[str]) -> Block:
        q, it = self._rows(query_kind, query_ids), self._rows(item_kind, item_ids)
        if query_kind == IMAGE_KIND:  # rows images, columns captions; own captions of query rows lo:hi fixed
            queries, items_t = self._mean_units[q], np.ascontiguousarray(self.units[it].T)
            position = {row: p for p, row in enumerate(q.tolist())}
            owner = np.fromiter((position.get(int(r), -1) for r in self._image_of[it]), dtype=np.int64, count=len(it))

            def block(lo: int, hi: int) -> np.ndarray:
                scores = queries[lo:hi] @ items_t
                cols = np.nonzero((owner >= lo) & (owner < hi))[0]
                scores[owner[cols] - lo, cols] = self.leave_one_out(it[cols], q[owner[cols]])
                return scores

            return block
        queries, items_t = self.units[q], np.ascontiguousarray(self._mean_units[it].T)
        column = {row: p for p, row in enumerate(it.tolist())}
        own_col = np.fromiter((column.get(int(r), -1) for r in self._image_of[q]), dtype=np.int64, count=len(q))

        def block_t(lo: int, hi: int) -> np.ndarray:
            scores = queries[lo:hi] @ items_t
            rows = np.nonzero(own_col[lo:hi] >= 0)[0]
            scores[rows, own_col[lo + rows]] = self.leave_one_out(q[lo + rows], it[own_col[lo + rows]])
            return scores

        return block_t

    def pair_scores(self, a_kind: str, a_ids: Sequence[str], b_kind: str, b_ids: Sequence[str]) -> np.ndarray:
        caps, imgs = (a_ids, b_ids) if a_kind == CAPTION_KIND else (b_ids, a_ids)
        c, i = self._rows(CAPTION_KIND, caps), self._rows(IMAGE_KIND, imgs)
        scores = np.einsum("ij,ij->i", self.units[c].astype(np.float64), self._mean_units[i].astype(np.float64))
        own = self._image_of[c] == i
        scores[own] = self.leave_one_out(c[own], i[own])
        return scores


def text_proxy_model(encoder: str, embeddings: str, caption_image: Mapping[str, str]) -> TextProxyModel:
    """The text proxy of ``encoder`` from the embed output's ``captions`` and ``cocaption_mean`` sets."""
    sets = []
    for kind in (CAPTIONS, COCAPTION_MEAN):
        directory = set_dir(embeddings, "text", encoder, kind)
        if not io.exists(io.join(directory, "vectors.npy")):
            raise FileNotFoundError(f"no embedding set {directory}: run the embed stage with text encoder {encoder!r}")
        sets.append(EmbeddingSet.read(directory))
    return TextProxyModel(PROXY_PREFIX + encoder, sets[0], sets[1], caption_image)


def load_annotators(settings: FilterSettings, embeddings: str, gallery: Gallery, root: str | None = None) -> dict[str, Model]:
    """Every machine annotator by name, each checked to score images against captions over the
    whole gallery (a shrunken gallery would hide candidates: :class:`CoverageError`)."""
    models: dict[str, Model] = {name: load_model(name, spec, embeddings, root) for name, spec in sorted(settings.annotators.items())}
    for encoder in settings.text_proxies:
        models[PROXY_PREFIX + encoder] = text_proxy_model(encoder, embeddings, gallery.caption_image)
    for name, model in models.items():
        if not model.can_compare(IMAGE_KIND, CAPTION_KIND):
            raise CoverageError(f"annotator {name!r} cannot score images against captions (give it one joint space: text == image)")
        model.require(IMAGE_KIND, gallery.image_ids, "gallery images")
        model.require(CAPTION_KIND, gallery.caption_ids, "gallery captions")
    return models
