"""Annotation rounds: candidate pairs → items to judge → batches of items with gold mixed in.

* Items: each candidate pair becomes one item of a task type (``c2c_*`` → STS, ``i2i_*`` → SIS,
  ``c2i_*`` → SITS, ``bison_decoy`` target–decoy pairs → CHOOSE, ``bison_chosen`` caption–decoy
  pairs → VERIFY-TRIPLE; image–caption pairs → VERIFY).  A pair sampled twice (in either order for the
  symmetric types) is one item; every candidate that does not become an item is a ``Rejected``.
* Gold (ECCV Caption §3.2: every HIT of 18 pairs holds one true positive and one true negative):
  known positives are original image–caption pairs (SITS, VERIFY) or, for STS and SIS, an
  *attention check* showing the same caption or image on both sides (it deserves a 5); known
  negatives are random pairs whose cosine lies below the ``quantile`` of random-pair cosines
  under *every* embedding space given, so no encoder thinks them alike.
* Batches: items of one task type in a seeded random order, cut into batches of near-equal size,
  each with its own gold items (gold is never shared, so ``item_id`` stays unique in the tasks
  table), the order inside a batch shuffled by a generator keyed by the batch id.

Every draw uses :func:`crisscross.core.rng.generator` (base seed + crc32 of what is drawn for),
so the same inputs and seed give the same tables whatever order anything is processed in.

Its length is the three steps of one table (items, gold, batches), which share the catalog, the
seeded draws and the table schemas; each step is a function of its own.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa

from crisscross.annotate.catalog import Catalog
from crisscross.core import io
from crisscross.core.errors import UserError
from crisscross.core.ids import CAPTION_KIND, IMAGE_KIND, IdFormError, split_id
from crisscross.core.quarantine import Rejected, reject
from crisscross.core.rng import generator
from crisscross.core.settings import setting
from crisscross.embed import DEFAULT_IMAGE_ENCODERS, DEFAULT_TEXT_ENCODERS
from crisscross.embed.sets import CAPTIONS, COCAPTION_MEAN, IMAGES, EmbeddingSet, set_dir, unit_rows
from crisscross.formats.schema import GOLD_NEGATIVE, GOLD_POSITIVE, NOT_GOLD, TASKS_SCHEMA, item_id, item_ids, ordered_pair
from crisscross.tasktypes import task_type, task_types, type_names
from crisscross.tasktypes.verify import VERIFY

# ---------------------------------------------------------------------------- items

SAMPLING_GOLD = "gold"
VERIFY_METHOD = "retrieved"  # default sampling_method of VERIFY pairs (ECCV: model top-5 lists)
ITEMS_SCHEMA = pa.schema([f for f in TASKS_SCHEMA if f.name not in ("batch_id", "position")])


class GoldError(UserError, ValueError):
    """Not enough gold items can be made for the batches asked for."""


@dataclass(frozen=True)
class _Pair:
    record: Mapping[str, Any]
    source: str
    method: str | None
    kind: str | None  # task type; None when the method maps to none
    first: str | None
    second: str | None


def items_from_candidates(candidates: pa.Table, catalog: Catalog, source: str = "candidates.parquet") -> tuple[pa.Table, list[Rejected]]:
    """Items (:data:`ITEMS_SCHEMA`, sorted by ``item_id``) from a candidates table (``method``,
    ``id1``, ``id2``), and a ``Rejected`` for every row that is not one (see :func:`_items`)."""
    pairs = (
        _Pair(row, f"{source}:{n}", row.get("method"), _method_task_type(row.get("method")), row.get("id1"), row.get("id2"))
        for n, row in enumerate(candidates.to_pylist(), start=1)
    )
    return _items(pairs, catalog)


def verify_items(
    pairs: pa.Table, catalog: Catalog, method: str = VERIFY_METHOD, source: str = "pairs.parquet"
) -> tuple[pa.Table, list[Rejected]]:
    """VERIFY items from (``image_id``, ``caption_id``) rows; a ``method`` column, when present,
    overrides the ``method`` argument per row."""
    rows = (
        _Pair(row, f"{source}:{n}", row.get("method", method), VERIFY.name, row.get("image_id"), row.get("caption_id"))
        for n, row in enumerate(pairs.to_pylist(), start=1)
    )
    return _items(rows, catalog)


def batched_verify_tasks(batches: pa.Table, catalog: Catalog, source: str = "batches.parquet") -> tuple[pa.Table, list[Rejected]]:
    """The tasks table of VERIFY batches formed upstream (the machine-annotator filter: per query,
    16 candidates + its original positive + a negative outside every annotator's top lists), kept
    as formed: gold drawn at random here would break the per-query rule.  Rows raters cannot be
    shown are rejected like any item; a batch whose gold row was rejected (``batch-lost-gold``) or
    that came without one of the gold kinds others have (``batch-without-gold``) is rejected whole,
    never refilled.  Positions are renumbered 1..n within each kept batch."""
    kept: dict[str, list[tuple[dict[str, Any], str, dict[str, Any]]]] = {}
    formed_gold: dict[str, set[str]] = {}
    rejected: list[Rejected] = []
    seen: dict[str, str] = {}
    for n, row in enumerate(batches.to_pylist(), start=1):
        where, batch = f"{source}:{n}", str(row.get("batch_id"))
        gold = row.get("gold") or NOT_GOLD
        if gold not in (NOT_GOLD, GOLD_POSITIVE, GOLD_NEGATIVE):
            rejected.append(
                reject("pair", "", "bad-gold", f"gold {gold!r} is not {GOLD_POSITIVE!r}, {GOLD_NEGATIVE!r} or empty", where, row)
            )
            continue
        formed_gold.setdefault(batch, set()).add(gold)
        made = _item(
            _Pair(row, where, SAMPLING_GOLD if gold else row.get("method"), VERIFY.name, row.get("image_id"), row.get("caption_id")),
            catalog,
        )
        if isinstance(made, tuple):
            reason, detail, key = made
            rejected.append(reject("pair", key, reason, detail, where, row))
            continue
        if made["item_id"] in seen:
            detail = f"{made['item_id']} is already in batch {seen[made['item_id']]}"
            rejected.append(reject("pair", made["item_id"], "duplicate-item", detail, where, row))
            continue
        seen[made["item_id"]] = batch
        kept.setdefault(batch, []).append(({**made, "gold": gold, "batch_id": batch, "position": int(row["position"])}, where, row))
    wanted = {GOLD_POSITIVE, GOLD_NEGATIVE} & set().union(*formed_gold.values()) if formed_gold else set()
    rows: list[dict[str, Any]] = []
    for batch, members in sorted(kept.items()):
        never = wanted - formed_gold[batch]
        lost = wanted - never - {m["gold"] for m, _, _ in members}
        if never or lost:
            reason = "batch-without-gold" if never else "batch-lost-gold"
            detail = f"batch {batch} {'came without' if never else 'lost'} its {' and '.join(sorted(never or lost))} gold row; it is not sent to raters"
            rejected += [reject("pair", m["item_id"], reason, detail, where, row) for m, where, row in members]
            continue
        ordered = sorted((m for m, _, _ in members), key=lambda m: m["position"])
        rows += [{**m, "position": i} for i, m in enumerate(ordered, start=1)]
    return pa.Table.from_pylist(rows, schema=TASKS_SCHEMA), rejected


def _method_task_type(method: object) -> str | None:
    """The type whose ``methods`` prefix the candidate's sampling method starts with (CxC method
    names begin with the modalities of the pair: ``c2c_`` → STS)."""
    return next((kind.name for kind in task_types() for prefix in kind.methods if str(method).startswith(prefix)), None)


def _items(pairs: Iterable[_Pair], catalog: Catalog) -> tuple[pa.Table, list[Rejected]]:
    """One item per distinct ``item_id``, the first row (in input order) providing its method.

    Reasons: ``missing-field``, ``unknown-method``, ``bad-id`` (not a canonical id), ``wrong-kind``
    (the ids' kinds do not fit the task type), ``self-pair``, ``unknown-id`` / ``no-pixels`` (raters
    could not be shown it), ``duplicate-item`` (the same item as an earlier row, e.g. the pair in
    the other order; it is judged once, under the earlier row's method).
    """
    kept: dict[str, dict[str, str]] = {}
    first_source: dict[str, str] = {}
    rejected: list[Rejected] = []
    for pair in pairs:
        made = _item(pair, catalog)
        if isinstance(made, tuple):
            reason, detail, key = made
            rejected.append(reject("pair", key, reason, detail, pair.source, pair.record))
        elif made["item_id"] in kept:
            earlier = kept[made["item_id"]]
            detail = f"{made['item_id']} was already made from {first_source[made['item_id']]} ({earlier['sampling_method']})"
            rejected.append(reject("pair", made["item_id"], "duplicate-item", detail, pair.source, pair.record))
        else:
            kept[made["item_id"]] = made
            first_source[made["item_id"]] = pair.source
    return pa.Table.from_pylist([kept[k] for k in sorted(kept)], schema=ITEMS_SCHEMA), rejected


def _item(pair: _Pair, catalog: Catalog) -> dict[str, str] | tuple[str, str, str]:
    """The item row, or (reason, detail, key) when the pair cannot be one."""
    key = f"{pair.first}|{pair.second}"
    missing = [name for name, value in (("method", pair.method), ("first id", pair.first), ("second id", pair.second)) if not value]
    if missing:
        return "missing-field", f"no {', '.join(missing)}", key
    if pair.kind is None:
        known = ", ".join(f"{p}*" for kind in task_types() for p in kind.methods)
        return "unknown-method", f"method {pair.method!r} maps to no task type (known: {known})", key
    try:
        kinds = (split_id(str(pair.first))[1], split_id(str(pair.second))[1])
    except IdFormError as error:
        return "bad-id", str(error), key
    info = task_type(pair.kind)
    ids = (str(pair.first), str(pair.second))
    if sorted(kinds) != sorted(info.kinds):
        return "wrong-kind", f"{pair.kind} pairs {info.kinds[0]}–{info.kinds[1]} ids, got {kinds[0]}–{kinds[1]}", key
    if kinds != info.kinds:  # a cross-modal pair given in the other order
        ids = (ids[1], ids[0])
    if ids[0] == ids[1]:
        return "self-pair", f"{pair.method} pairs {ids[0]} with itself", key
    for value in ids:
        problem = catalog.problem(value)
        if problem:
            return (*problem, key)
    unshowable = info.unshowable(ids[0], ids[1], catalog)
    if unshowable:
        return (*unshowable, key)
    return _row(pair.kind, ids[0], ids[1], str(pair.method), NOT_GOLD)


def _row(kind: str, id_a: str, id_b: str, method: str, gold: str) -> dict[str, str]:
    """An item row; symmetric pairs in :func:`ordered_pair` order, as in their ``item_id``."""
    a, b = ordered_pair(kind, id_a, id_b)
    return {"item_id": item_id(kind, a, b), "task_type": kind, "id_a": a, "id_b": b, "sampling_method": method, "gold": gold}


# ---------------------------------------------------------------------------- gold


@dataclass(frozen=True)
class Space:
    """One encoder's vectors for the two sides of a task type's pairs, in one vector space: one
    caption set twice (STS), one image or co-caption-mean set twice (SIS), or a text encoder's
    captions against its co-caption means (SITS: a = captions, b = means; VERIFY the reverse)."""

    name: str
    a: EmbeddingSet
    b: EmbeddingSet


@dataclass(frozen=True)
class TaskParams:
    """A round's parameters (``params.yaml`` ``tasks:``); defaults follow ECCV Caption's HITs of
    18 pairs with one known positive and one known negative, and CxC's five ratings per item."""

    batch_size: int = setting(18, low=1)
    gold_per_batch: Mapping[str, int] = setting({GOLD_POSITIVE: 1, GOLD_NEGATIVE: 1}, low=0, choices=(GOLD_POSITIVE, GOLD_NEGATIVE))
    replicas: int = setting(5, low=1)
    negative_quantile: float = setting(0.25, low=0.0, high=1.0, open_range=True)
    reference_pairs: int = setting(10_000, low=1)
    max_draws: int = setting(1_000_000, low=1)
    gold_text_encoders: tuple[str, ...] = DEFAULT_TEXT_ENCODERS  # known negatives are far apart under each
    gold_image_encoders: tuple[str, ...] = DEFAULT_IMAGE_ENCODERS
    formats: tuple[str, ...] = ("jsonl", "crowd-csv", "label-studio")  # export folders
    items_per_type: Mapping[str, int] = setting(
        {}, low=1, choices=type_names
    )  # a plan's item counts (``tasks --plan``): a seeded sample per type


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
    rows = [_row(kind, *pool[i], SAMPLING_GOLD, GOLD_POSITIVE) for i in chosen]
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


def _cosines(pools: _Pools, space: str, ia: np.ndarray, ib: np.ndarray) -> np.ndarray:
    def unit(embeddings: EmbeddingSet, rows: np.ndarray) -> np.ndarray:
        return unit_rows(np.asarray(embeddings.vectors[rows], dtype=np.float64))

    vectors = pools.spaces[space]
    return np.einsum("ij,ij->i", unit(vectors.a, pools.rows_a[space][ia]), unit(vectors.b, pools.rows_b[space][ib]))


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
    quantile: float = TaskParams.negative_quantile,
    reference_pairs: int = TaskParams.reference_pairs,
    max_draws: int = TaskParams.max_draws,
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
            accepted[candidate] = _row(kind, id_a, id_b, SAMPLING_GOLD, GOLD_NEGATIVE)
            if len(accepted) == n:
                break
    if len(accepted) < n:
        names = ", ".join(s.name for s in spaces)
        raise GoldError(
            f"{kind}: found {len(accepted)} of {n} known negatives in {draws} random pairs below the {quantile} quantile "
            f"under every space ({names}); raise negative_quantile or max_draws, or lower gold_per_batch"
        )
    return pa.Table.from_pylist([accepted[k] for k in sorted(accepted)], schema=ITEMS_SCHEMA)


# ---------------------------------------------------------------------------- batches


def batch_count(n_items: int, batch_size: int, gold_per_batch: Mapping[str, int]) -> int:
    """Batches needed for ``n_items`` items when each batch also holds its gold."""
    slots = batch_size - sum(gold_per_batch.values())
    if slots < 1:
        raise ValueError(f"batch_size {batch_size} leaves no room for items beside {sum(gold_per_batch.values())} gold per batch")
    return math.ceil(n_items / slots)


def make_batches(items: pa.Table, gold: pa.Table, batch_size: int, gold_per_batch: Mapping[str, int], seed: int) -> pa.Table:
    """The tasks table (:data:`TASKS_SCHEMA`, sorted by ``batch_id``, ``position``).

    Per task type (in :data:`TASK_TYPES` order): items in a random order (generator keyed by the
    task type) are cut into :func:`batch_count` batches whose sizes differ by at most one (no
    small tail batch); batch ``k`` takes the next ``gold_per_batch[kind]`` gold items of each kind
    in ``item_id`` order; positions 1.. follow a shuffle by a generator keyed by the batch id.
    Batch ids are ``<type>-<number>`` from 1, zero-padded to at least 5 digits.
    """
    regular, golden = items.to_pylist(), gold.to_pylist()
    _check_unique(regular, golden)
    rows: list[dict[str, Any]] = []
    for kind in type_names():
        of_kind = sorted((r for r in regular if r["task_type"] == kind), key=lambda r: r["item_id"])
        if not of_kind:
            continue
        order = generator(seed, "batches", kind).permutation(len(of_kind))
        n_batches = batch_count(len(of_kind), batch_size, gold_per_batch)
        digits = max(5, len(str(n_batches)))  # equal widths, so batch ids sort in batch order
        pools = {g: _gold_pool(golden, kind, g, n_batches * count) for g, count in sorted(gold_per_batch.items())}
        start = 0
        for k in range(n_batches):
            size = len(of_kind) // n_batches + (k < len(of_kind) % n_batches)
            members = [of_kind[i] for i in order[start : start + size]]
            start += size
            for g, count in sorted(gold_per_batch.items()):
                members += pools[g][k * count : (k + 1) * count]
            batch = f"{task_type(kind).prefix}-{k + 1:0{digits}d}"
            shuffled = generator(seed, batch).permutation(len(members))
            rows += [{**members[i], "batch_id": batch, "position": p} for p, i in enumerate(shuffled, start=1)]
    rows.sort(key=lambda r: (r["batch_id"], r["position"]))
    return pa.Table.from_pylist(rows, schema=TASKS_SCHEMA)


def _check_unique(regular: list[dict[str, Any]], golden: list[dict[str, Any]]) -> None:
    counts = Counter(r["item_id"] for r in [*regular, *golden])
    repeated = sorted(i for i, n in counts.items() if n > 1)
    if repeated:
        raise ValueError(f"{len(repeated)} item ids occur more than once among items and gold (first: {repeated[:3]})")
    not_gold = [r["item_id"] for r in golden if r["gold"] not in (GOLD_POSITIVE, GOLD_NEGATIVE)]
    if not_gold:
        raise ValueError(f"{len(not_gold)} rows of the gold table are not marked positive or negative (first: {not_gold[:3]})")


def _gold_pool(golden: list[dict[str, Any]], kind: str, gold: str, needed: int) -> list[dict[str, Any]]:
    pool = sorted((r for r in golden if r["task_type"] == kind and r["gold"] == gold), key=lambda r: r["item_id"])
    if len(pool) < needed:
        raise GoldError(f"{kind}: the batches need {needed} {gold} gold items, got {len(pool)}")
    return pool[:needed]


def planned_items(items: pa.Table, per_type: Mapping[str, int], seed: int) -> tuple[pa.Table, pa.Table]:
    """Items → (those a campaign plan asks for, those it holds back): per task type in ``per_type``,
    a seeded sample of that many items when there are more; other types whole.  The held-back
    items stay candidates for a later round."""
    kinds = items.column("task_type").to_numpy(zero_copy_only=False)
    keep = np.ones(items.num_rows, dtype=bool)
    for kind, wanted in sorted(per_type.items()):
        rows = np.flatnonzero(kinds == kind)
        if len(rows) > wanted:
            held = generator(seed, "plan-sample", kind).choice(rows, size=len(rows) - wanted, replace=False)
            keep[held] = False
    return items.filter(pa.array(keep)), items.filter(pa.array(~keep))


def build_tasks(items: pa.Table, catalog: Catalog, spaces: Mapping[str, Sequence[Space]], params: TaskParams, seed: int) -> pa.Table:
    """Items → the tasks table: exactly the gold the batches need is drawn for every task type
    (known negatives under ``spaces[task_type]``), then :func:`make_batches`."""
    taken = set(items.column("item_id").to_pylist())
    per_type = Counter(items.column("task_type").to_pylist())
    gold_tables = []
    for kind in type_names():
        if not per_type[kind]:
            continue
        if not task_type(kind).plants_gold and any(params.gold_per_batch.values()):
            raise GoldError(
                f"{kind}: its items have no known answers to plant (BISON: any caption may be the discriminative one); "
                "set the round's tasks.gold_per_batch to {positive: 0, negative: 0}"
            )
        n_batches = batch_count(per_type[kind], params.batch_size, params.gold_per_batch)
        positives = positive_gold(kind, catalog, n_batches * params.gold_per_batch.get(GOLD_POSITIVE, 0), seed, taken)
        taken |= set(positives.column("item_id").to_pylist())
        negatives = negative_gold(
            kind,
            catalog,
            spaces.get(kind, ()),
            n_batches * params.gold_per_batch.get(GOLD_NEGATIVE, 0),
            seed,
            taken,
            params.negative_quantile,
            params.reference_pairs,
            params.max_draws,
        )
        taken |= set(negatives.column("item_id").to_pylist())
        gold_tables += [positives, negatives]
    gold = pa.concat_tables(gold_tables) if gold_tables else pa.Table.from_pylist([], schema=ITEMS_SCHEMA)
    return make_batches(items, gold, params.batch_size, params.gold_per_batch, seed)
