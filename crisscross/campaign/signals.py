"""Machine signals of a pair: what the text encoders say about it, by its task type's own rule
(``TaskType.signals``, in the type's file).

Each text encoder's unit caption vectors (:class:`TextSpace`) give an image the mean of its
captions, so a type has signals even without image pixels.  A pair whose caption has no vector, or
whose image has no caption with one, has NaN signals: the machine cannot judge it and it goes to
people (:mod:`crisscross.campaign.triage`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd

from crisscross.embed.sets import CAPTIONS, EmbeddingSet, set_dir, unit_rows
from crisscross.ingest.records import captions_by_image
from crisscross.tasktypes import task_type, task_types


@dataclass(frozen=True, eq=False)
class TextSpace:
    """One text encoder's unit caption vectors, and each image's caption sum and count."""

    name: str
    vectors: np.ndarray  # unit rows, float64
    row: Mapping[str, int]  # caption id → row
    image_row: Mapping[str, int]  # image id → row of ``sums`` / ``counts``
    sums: np.ndarray  # per image: the sum of its captions' unit vectors
    counts: np.ndarray  # per image: how many of its captions have a vector
    members: Mapping[str, tuple[int, ...]]  # image id → rows of its captions

    @classmethod
    def read(cls, embeddings: str, encoder: str, image_of: Mapping[str, str]) -> TextSpace:
        """From an embed output's ``text/<encoder>/captions`` set and the caption → image map."""
        vectors = EmbeddingSet.read(set_dir(embeddings, "text", encoder, CAPTIONS))
        return cls.build(encoder, vectors.ids, vectors.vectors, image_of)

    @classmethod
    def build(cls, name: str, ids: Sequence[str], vectors: np.ndarray, image_of: Mapping[str, str]) -> TextSpace:
        unit = unit_rows(np.asarray(vectors, dtype=np.float64))
        row = {caption: k for k, caption in enumerate(ids)}
        members = {
            image: tuple(row[c] for c in captions if c in row)
            for image, captions in captions_by_image({c: image_of[c] for c in ids if c in image_of}).items()
        }
        image_row = {image: k for k, image in enumerate(members)}
        sums = np.zeros((len(members), unit.shape[1]))
        for image, rows in members.items():
            sums[image_row[image]] = unit[list(rows)].sum(axis=0)
        counts = np.asarray([len(rows) for rows in members.values()], dtype=np.float64)
        return cls(name, unit, row, image_row, sums, counts, members)

    def captions(self, ids: Sequence[str]) -> np.ndarray:
        """Unit vectors of captions (NaN rows for captions without one)."""
        return self._rows(self.vectors, [self.row.get(c) for c in ids])

    def image_means(self, images: Sequence[str], leave_out: Sequence[str | None] | None = None) -> np.ndarray:
        """Unit caption means of images, each without the caption ``leave_out[i]`` when it is one of
        the image's (NaN when no caption is left)."""
        at = [self.image_row.get(image) for image in images]
        sums, counts = self._rows(self.sums, at), self._rows(self.counts[:, None], at)[:, 0]
        if leave_out is not None:
            for i, caption in enumerate(leave_out):
                k = self.row.get(caption) if caption is not None else None
                if k is not None and at[i] is not None and k in self.members[images[i]]:
                    sums[i] -= self.vectors[k]
                    counts[i] -= 1
        with np.errstate(invalid="ignore", divide="ignore"):
            return unit_rows(np.where(counts[:, None] > 0, sums / counts[:, None], np.nan))

    def best_caption_cosine(self, a: Sequence[str], b: Sequence[str]) -> np.ndarray:
        """For each pair of images, the largest cosine between a caption of one and a caption of the other."""
        out = np.full(len(a), np.nan)
        for i, (x, y) in enumerate(zip(a, b, strict=True)):
            rows_x, rows_y = self.members.get(x, ()), self.members.get(y, ())
            if rows_x and rows_y:
                out[i] = float((self.vectors[list(rows_x)] @ self.vectors[list(rows_y)].T).max())
        return out

    @staticmethod
    def _rows(matrix: np.ndarray, at: Sequence[int | None]) -> np.ndarray:
        out = np.full((len(at), matrix.shape[1]), np.nan)
        found = np.asarray([k is not None for k in at], dtype=bool)
        out[found] = matrix[[k for k in at if k is not None]]
        return out


def signal_types() -> list[str]:
    """The registered task types that have machine signals."""
    return [t.name for t in task_types() if t.signals is not None]


def pair_signals(
    kind: str, id_a: Sequence[str], id_b: Sequence[str], spaces: Sequence[TextSpace], image_of: Mapping[str, str]
) -> pd.DataFrame:
    """One row per pair, one column per signal (named ``<encoder>:<what>``), in the type's order."""
    signals = task_type(kind).signals
    if signals is None:
        raise ValueError(f"no machine signals for task type {kind}; known: {signal_types()}")
    return pd.DataFrame(signals(list(id_a), list(id_b), spaces, image_of))
