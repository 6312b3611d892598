"""Annotation rounds: items and their gold → batches (:func:`build_tasks`).

Items of one task type go in a seeded random order, cut into batches of near-equal size, each with
its own gold items (:mod:`crisscross.annotate.gold`; gold is never shared, so ``item_id`` stays
unique in the tasks table), the order inside a batch shuffled by a generator keyed by the batch id.
Every draw uses :func:`crisscross.core.rng.generator` (base seed + crc32 of what is drawn for), so
the same inputs and seed give the same tables whatever order anything is processed in.  The items
themselves come from :mod:`crisscross.annotate.items`.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa

from crisscross.annotate.catalog import Catalog
from crisscross.annotate.gold import MAX_DRAWS, NEGATIVE_QUANTILE, REFERENCE_PAIRS, GoldError, Space, negative_gold, positive_gold
from crisscross.annotate.items import ITEMS_SCHEMA
from crisscross.core.rng import generator
from crisscross.core.settings import setting
from crisscross.embed import DEFAULT_IMAGE_ENCODERS, DEFAULT_TEXT_ENCODERS
from crisscross.formats.schema import GOLD_NEGATIVE, GOLD_POSITIVE, TASKS_SCHEMA
from crisscross.tasktypes import task_type, type_names


@dataclass(frozen=True)
class TaskParams:
    """A round's parameters (``params.yaml`` ``tasks:``); defaults follow ECCV Caption's HITs of
    18 pairs with one known positive and one known negative, and CxC's five ratings per item."""

    batch_size: int = setting(18, low=1)
    gold_per_batch: Mapping[str, int] = setting({GOLD_POSITIVE: 1, GOLD_NEGATIVE: 1}, low=0, choices=(GOLD_POSITIVE, GOLD_NEGATIVE))
    replicas: int = setting(5, low=1)
    negative_quantile: float = setting(NEGATIVE_QUANTILE, low=0.0, high=1.0, open_range=True)
    reference_pairs: int = setting(REFERENCE_PAIRS, low=1)
    max_draws: int = setting(MAX_DRAWS, low=1)
    gold_text_encoders: tuple[str, ...] = DEFAULT_TEXT_ENCODERS  # known negatives are far apart under each
    gold_image_encoders: tuple[str, ...] = DEFAULT_IMAGE_ENCODERS
    formats: tuple[str, ...] = ("jsonl", "crowd-csv", "label-studio")  # export folders
    items_per_type: Mapping[str, int] = setting(
        {}, low=1, choices=type_names
    )  # a plan's item counts (``tasks --plan``): a seeded sample per type


def batch_count(n_items: int, batch_size: int, gold_per_batch: Mapping[str, int]) -> int:
    """Batches needed for ``n_items`` items when each batch also holds its gold."""
    slots = batch_size - sum(gold_per_batch.values())
    if slots < 1:
        raise ValueError(f"batch_size {batch_size} leaves no room for items beside {sum(gold_per_batch.values())} gold per batch")
    return math.ceil(n_items / slots)


def make_batches(items: pa.Table, gold: pa.Table, batch_size: int, gold_per_batch: Mapping[str, int], seed: int) -> pa.Table:
    """The tasks table (:data:`TASKS_SCHEMA`, sorted by ``batch_id``, ``position``).

    Per task type (in the registry's order, ``type_names()``: the built-in six, then plugins): items in a random order (generator keyed by the
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
