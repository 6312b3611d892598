"""Gold items (ECCV Caption §3.2: every HIT of 18 pairs holds one true positive and one true
negative), drawn for the batches that need them.

Known positives are original image–caption pairs (SITS, VERIFY) or, for STS and SIS, an
*attention check* showing the same caption or image on both sides (it deserves a 5); known
negatives are random pairs whose cosine lies below the ``quantile`` of random-pair cosines under
*every* embedding space given, so no encoder thinks them alike.  Every draw uses
:func:`crisscross.core.rng.generator`, keyed by what is drawn for.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd
import pyarrow as pa

from crisscross.annotate.catalog import Catalog
from crisscross.annotate.items import ITEMS_SCHEMA, SAMPLING_GOLD, item_row
from crisscross.core import io
from crisscross.core.errors import UserError
from crisscross.core.ids import CAPTION_KIND, IMAGE_KIND
from crisscross.core.rng import generator
from crisscross.embed.sets import CAPTIONS, COCAPTION_MEAN, IMAGES, EmbeddingSet, set_dir, unit_rows
from crisscross.formats.schema import GOLD_NEGATIVE, GOLD_POSITIVE, item_id, item_ids
from crisscross.tasktypes import task_type, task_types

# Known negatives lie below this quantile of REFERENCE_PAIRS random pairs' cosines, drawn from at most MAX_DRAWS pairs.
NEGATIVE_QUANTILE, REFERENCE_PAIRS, MAX_DRAWS = 0.25, 10_000, 1_000_000


class GoldError(UserError, ValueError):
    """Not enough gold items can be made for the batches asked for."""


@dataclass(frozen=True)
class Space:
    """One encoder's vectors for the two sides of a task type's pairs, in one vector space: one
    caption set twice (STS), one image or co-caption-mean set twice (SIS), or a text encoder's
    captions against its co-caption means (SITS: a = captions, b = means; VERIFY the reverse)."""

    name: str
    a: EmbeddingSet
    b: EmbeddingSet


def gold_spaces(embeddings: str, text_encoders: Sequence[str], image_encoders: Sequence[str]) -> dict[str, list[Space]]:
    """Per task type, the vector spaces a known negative must be far apart in: every text
    encoder's captions (STS), co-caption means (SIS), captions against means (SITS, VERIFY), and
    every image encoder's images (SIS).  The sets are memory-mapped: open them where they are used."""

    def read(modality: str, spec: str, rows: str) -> EmbeddingSet:
        directory = set_dir(embeddings, modality, spec, rows)
        if not io.exists(io.join(directory, "vectors.npy")):
            raise FileNotFoundError(
                f"no embedding set {directory}: run the embed stage with {spec!r} or drop it from tasks.gold_*_encoders"
            )
        return EmbeddingSet.read(directory)

    rows = {CAPTION_KIND: CAPTIONS, IMAGE_KIND: COCAPTION_MEAN}  # a text encoder sees an image as its captions' mean
    spaces: dict[str, list[Space]] = {kind.name: [] for kind in task_types() if kind.plants_gold}
    for spec in text_encoders:
        sets = {rows_of: read("text", spec, rows_of) for rows_of in rows.values()}
        for kind in task_types():
            if kind.plants_gold:
                both_images = kind.kinds == (IMAGE_KIND, IMAGE_KIND)
                name = f"text/{spec}/{COCAPTION_MEAN}" if both_images else f"text/{spec}"
                spaces[kind.name].append(Space(name, sets[rows[kind.kinds[0]]], sets[rows[kind.kinds[1]]]))
    for spec in image_encoders:
        images = read("image", spec, IMAGES)
        for kind in task_types():
            if kind.plants_gold and kind.kinds == (IMAGE_KIND, IMAGE_KIND):
                spaces[kind.name].append(Space(f"image/{spec}", images, images))
    return spaces


_DRAW_CHUNK = 4096  # random pairs examined together (fixed: the accepted negatives depend on it)


def positive_gold(kind: str, catalog: Catalog, n: int, seed: int, exclude: Collection[str] = ()) -> pa.Table:
    """``n`` known positives of a task type, drawn without replacement (:data:`ITEMS_SCHEMA`).

    SITS and VERIFY: original caption–image pairs.  STS and SIS: the same caption or image on
    both sides, an attention check whose right answer is the top of the scale.
    """
    info = task_type(kind)
    if info.kinds[0] == info.kinds[1]:
        pool = [(value, value) for value in catalog.showable(info.kinds[0])]
    else:
        pool = [
            (caption, image) if info.kinds[0] == CAPTION_KIND else (image, caption)
            for caption in catalog.showable(CAPTION_KIND)
            if (image := catalog.image_of[caption]) in catalog.paths
        ]
    pool = [pair for pair, item in zip(pool, item_ids(kind, pool), strict=True) if item not in exclude]
    if len(pool) < n:
        raise GoldError(f"{kind}: {n} known positives needed but only {len(pool)} candidates can be shown to raters")
    chosen = np.sort(generator(seed, "gold", GOLD_POSITIVE, kind).choice(len(pool), size=n, replace=False))
    rows = [item_row(kind, *pool[i], SAMPLING_GOLD, GOLD_POSITIVE) for i in chosen]
    return pa.Table.from_pylist(sorted(rows, key=lambda r: r["item_id"]), schema=ITEMS_SCHEMA)


@dataclass(frozen=True)
class _Pools:
    """The ids each side can draw from (showable, with a vector in every space) and, per space,
    where their vectors sit in its sets; vectors are read and normalised only for the pairs drawn,
    so the work follows the gold items asked for, not the size of the collection."""

    a: list[str]
    b: list[str]
    rows_a: dict[str, np.ndarray]
    rows_b: dict[str, np.ndarray]
    spaces: dict[str, Space]


def _pools(kind: str, catalog: Catalog, spaces: Sequence[Space]) -> _Pools:
    if not spaces:
        raise GoldError(f"{kind}: known negatives need at least one embedding space")
    info = task_type(kind)
    in_every_a = set.intersection(*(set(s.a.ids) for s in spaces))
    in_every_b = set.intersection(*(set(s.b.ids) for s in spaces))
    pool_a = [v for v in catalog.showable(info.kinds[0]) if v in in_every_a]
    pool_b = [v for v in catalog.showable(info.kinds[1]) if v in in_every_b]
    if len(pool_a) < 2 or len(pool_b) < 2:
        raise GoldError(f"{kind}: {len(pool_a)} × {len(pool_b)} ids are showable and in every space; need at least 2 per side")
    return _Pools(
        pool_a,
        pool_b,
        {s.name: _rows(s.a, pool_a) for s in spaces},
        {s.name: _rows(s.b, pool_b) for s in spaces},
        {s.name: s for s in spaces},
    )


def _rows(embeddings: EmbeddingSet, ids: Sequence[str]) -> np.ndarray:
    """Rows of ``ids`` (all in the set; a repeated id is read from its last row, as ``row_of``) by a
    hashed index: a dict of the set costs ~1 µs per id, which adds up over a whole collection."""
    rows = pd.Series(np.arange(len(embeddings.ids)), index=pd.Index(embeddings.ids))
    return rows[~rows.index.duplicated(keep="last")].reindex(ids).to_numpy()


_COSINE_BLOCK = 1024  # pairs whose vectors are gathered at once


def _cosines(pools: _Pools, space: str, ia: np.ndarray, ib: np.ndarray) -> np.ndarray:
    """The cosine of each pair ``(pools.a[ia[k]], pools.b[ib[k]])`` in ``space``, a block of pairs at
    a time: each value is its own row's, whatever the block, and the copies stay a few MiB (10,000
    pairs of 1,280-d vectors would be ~100 MiB per copy, whose first touch in a new process cost
    more than the arithmetic)."""

    def unit(embeddings: EmbeddingSet, rows: np.ndarray) -> np.ndarray:
        return unit_rows(np.asarray(embeddings.vectors[rows], dtype=np.float64))

    vectors, rows_a, rows_b = pools.spaces[space], pools.rows_a[space][ia], pools.rows_b[space][ib]
    cosines = np.empty(len(rows_a))
    for start in range(0, len(rows_a), _COSINE_BLOCK):
        block = slice(start, start + _COSINE_BLOCK)
        cosines[block] = np.einsum("ij,ij->i", unit(vectors.a, rows_a[block]), unit(vectors.b, rows_b[block]))
    return cosines


def negative_thresholds(
    kind: str, catalog: Catalog, spaces: Sequence[Space], quantile: float, seed: int, reference_pairs: int = 10_000
) -> dict[str, float]:
    """Per space, the ``quantile`` of cosines of ``reference_pairs`` random pairs (distinct ids)
    drawn from the ids negatives are drawn from: a negative must lie below it in every space."""
    if not 0.0 < quantile < 1.0:
        raise ValueError(f"negative quantile must lie in (0, 1), got {quantile}")
    pools = _pools(kind, catalog, spaces)
    return _thresholds(kind, pools, spaces, quantile, seed, reference_pairs)


def _thresholds(kind: str, pools: _Pools, spaces: Sequence[Space], quantile: float, seed: int, n: int) -> dict[str, float]:
    out = {}
    for space in spaces:
        rng = generator(seed, "gold-threshold", kind, space.name)
        ia, ib = rng.integers(len(pools.a), size=n), rng.integers(len(pools.b), size=n)
        distinct = np.array([pools.a[i] != pools.b[j] for i, j in zip(ia, ib, strict=True)], dtype=bool)
        cosines = _cosines(pools, space.name, ia[distinct], ib[distinct])
        out[space.name] = float(np.nanquantile(cosines, quantile))
    return out


def negative_gold(
    kind: str,
    catalog: Catalog,
    spaces: Sequence[Space],
    n: int,
    seed: int,
    exclude: Collection[str] = (),
    quantile: float = NEGATIVE_QUANTILE,
    reference_pairs: int = REFERENCE_PAIRS,
    max_draws: int = MAX_DRAWS,
) -> pa.Table:
    """``n`` known negatives of a task type (:data:`ITEMS_SCHEMA`): random pairs of distinct
    images (so never co-captions, nor a caption with its own image), not in ``exclude``, whose
    cosine is below :func:`negative_thresholds` under every space.  Pairs are examined in
    chunks drawn from one generator, so the result depends only on the inputs and seed."""
    if n == 0:
        return pa.Table.from_pylist([], schema=ITEMS_SCHEMA)
    if not 0.0 < quantile < 1.0:
        raise ValueError(f"negative quantile must lie in (0, 1), got {quantile}")
    pools = _pools(kind, catalog, spaces)
    thresholds = _thresholds(kind, pools, spaces, quantile, seed, reference_pairs)
    rng = generator(seed, "gold", GOLD_NEGATIVE, kind)
    accepted: dict[str, dict[str, str]] = {}
    draws = 0
    while len(accepted) < n and draws < max_draws:
        size = min(_DRAW_CHUNK, max_draws - draws)
        ia, ib = rng.integers(len(pools.a), size=size), rng.integers(len(pools.b), size=size)
        draws += size
        below = np.ones(size, dtype=bool)
        for space in spaces:
            below &= _cosines(pools, space.name, ia, ib) < thresholds[space.name]
        for i, j in zip(ia[below], ib[below], strict=True):
            id_a, id_b = pools.a[i], pools.b[j]
            candidate = item_id(kind, id_a, id_b)
            if catalog.image(id_a) == catalog.image(id_b) or candidate in exclude or candidate in accepted:
                continue
            accepted[candidate] = item_row(kind, id_a, id_b, SAMPLING_GOLD, GOLD_NEGATIVE)
            if len(accepted) == n:
                break
    if len(accepted) < n:
        names = ", ".join(s.name for s in spaces)
        raise GoldError(
            f"{kind}: found {len(accepted)} of {n} known negatives in {draws} random pairs below the {quantile} quantile "
            f"under every space ({names}); raise negative_quantile or max_draws, or lower gold_per_batch"
        )
    return pa.Table.from_pylist([accepted[k] for k in sorted(accepted)], schema=ITEMS_SCHEMA)
