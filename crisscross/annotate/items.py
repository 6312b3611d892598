"""A round's items: each candidate pair becomes one item of a task type, by the type whose
``methods`` prefix its sampling method starts with (``c2c_*`` → STS, ``bison_decoy`` → CHOOSE, …;
image–caption pairs → VERIFY).  A pair sampled twice (in either order for the symmetric types) is
one item; every candidate that does not become an item is a ``Rejected``.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, NamedTuple

import pyarrow as pa

from crisscross.annotate.catalog import Catalog
from crisscross.core.ids import IdFormError, split_id
from crisscross.core.quarantine import Rejected, RejectedBatch, reject, rejected_batch
from crisscross.formats.schema import GOLD_NEGATIVE, GOLD_POSITIVE, NOT_GOLD, TASKS_SCHEMA, item_id, ordered_pair
from crisscross.tasktypes import task_type, task_types
from crisscross.tasktypes.base import TaskType
from crisscross.tasktypes.verify import VERIFY

SAMPLING_GOLD = "gold"


VERIFY_METHOD = "retrieved"  # default sampling_method of VERIFY pairs (ECCV: model top-5 lists)


ITEMS_SCHEMA = pa.schema([f for f in TASKS_SCHEMA if f.name not in ("batch_id", "position")])


class _Pair(NamedTuple):  # a tuple, not a dataclass: one per candidate row, so its making counts
    record: Mapping[str, Any]
    source: str  # "<file>:<row number>"
    method: str | None
    kind: str | None  # task type; None when the method maps to none
    first: str | None
    second: str | None
    position: int  # the row's number in its table


class _Checks:
    """The catalog, and what :func:`_item` learns of each id and task type, remembered for the rows
    of one call: ids recur (COCO's 123k images fill 1.5M id slots of its candidates), so each
    rule is asked once per distinct value."""

    def __init__(self, catalog: Catalog) -> None:
        self.catalog = catalog
        self._kinds: dict[str, tuple[str, str]] = {}  # id → (its kind, "") or ("", why it is not a canonical id)
        self._problems: dict[str, tuple[str, str] | None] = {}
        self._types: dict[str, TaskType] = {}

    def id_kind(self, value: str) -> tuple[str, str]:
        """(kind, "") of a canonical id, ("", the :class:`IdFormError`'s message) of anything else."""
        found = self._kinds.get(value)
        if found is None:
            try:
                found = (split_id(value)[1], "")
            except IdFormError as error:
                found = ("", str(error))
            self._kinds[value] = found
        return found

    def problem(self, value: str) -> tuple[str, str] | None:
        """:meth:`Catalog.problem`."""
        if value not in self._problems:
            self._problems[value] = self.catalog.problem(value)
        return self._problems[value]

    def task_type(self, name: str) -> TaskType:
        if name not in self._types:
            self._types[name] = task_type(name)
        return self._types[name]


def items_from_candidates(candidates: pa.Table, catalog: Catalog, source: str = "candidates.parquet") -> tuple[pa.Table, list[Rejected]]:
    """Items (:data:`ITEMS_SCHEMA`, sorted by ``item_id``) from a candidates table (``method``,
    ``id1``, ``id2``), and a ``Rejected`` for every row that is not one (see :func:`_items`)."""
    return _items(checked_candidates(candidates, catalog, 0, candidates.num_rows, source))


def checked_candidates(
    candidates: pa.Table, catalog: Catalog, start: int, stop: int, source: str = "candidates.parquet"
) -> tuple[list[MadeItem], RejectedBatch]:
    """Rows ``start``–``stop`` of a candidates table checked one by one (:func:`_item`): each row
    is checked on its own, so ranges of a large table are checked apart, then :func:`first_items`."""
    rows = candidates.slice(start, stop - start).to_pylist()
    kinds: dict[str, str | None] = {}  # each method's task type, looked up once (a table holds a few methods)
    pairs = (
        _Pair(row, f"{source}:{n}", row.get("method"), _kind(kinds, row.get("method")), row.get("id1"), row.get("id2"), n)
        for n, row in enumerate(rows, start=start + 1)
    )
    return _checked(pairs, _Checks(catalog))


def verify_items(
    pairs: pa.Table, catalog: Catalog, method: str = VERIFY_METHOD, source: str = "pairs.parquet"
) -> tuple[pa.Table, list[Rejected]]:
    """VERIFY items from (``image_id``, ``caption_id``) rows; a ``method`` column, when present,
    overrides the ``method`` argument per row."""
    rows = (
        _Pair(row, f"{source}:{n}", row.get("method", method), VERIFY.name, row.get("image_id"), row.get("caption_id"), n)
        for n, row in enumerate(pairs.to_pylist(), start=1)
    )
    return _items(_checked(rows, _Checks(catalog)))


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
    checks = _Checks(catalog)
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
            _Pair(row, where, SAMPLING_GOLD if gold else row.get("method"), VERIFY.name, row.get("image_id"), row.get("caption_id"), n),
            checks,
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


def method_task_type(method: object) -> str | None:
    """The type whose ``methods`` prefix the candidate's sampling method starts with (CxC method
    names begin with the modalities of the pair: ``c2c_`` → STS)."""
    return next((kind.name for kind in task_types() for prefix in kind.methods if str(method).startswith(prefix)), None)


def _kind(known: dict[str, str | None], method: object) -> str | None:
    """:func:`method_task_type`, remembered in ``known`` by the method's text (what it matches on)."""
    text = str(method)
    if text not in known:
        known[text] = method_task_type(text)
    return known[text]


def _items(checked: tuple[list[MadeItem], RejectedBatch]) -> tuple[pa.Table, list[Rejected]]:
    """Checked rows (:func:`_checked`) → one item per distinct ``item_id``, the first row (in input
    order) providing its method, and every reject.

    Reasons: ``missing-field``, ``unknown-method``, ``bad-id`` (not a canonical id), ``wrong-kind``
    (the ids' kinds do not fit the task type), ``self-pair``, ``unknown-id`` / ``no-pixels`` (raters
    could not be shown it), ``duplicate-item`` (the same item as an earlier row, e.g. the pair in
    the other order; it is judged once, under the earlier row's method).
    """
    made, rejected = checked
    items, duplicates = first_items(made)
    return items, rejected.rejected() + duplicates


@dataclass(frozen=True)
class MadeItem:
    """A row that makes an item: its place in its table (of rows making the same item, the
    earliest gives it), where it came from, the row as read (for a later one's reject), the item."""

    position: int
    source: str
    record: Mapping[str, Any]
    item: dict[str, str]


def _checked(pairs: Iterable[_Pair], checks: _Checks) -> tuple[list[MadeItem], RejectedBatch]:
    """Each pair's item, or its reject (all of them as one batch: most of a large table may be)."""
    made: list[MadeItem] = []
    rejected: list[tuple[str, str, str, str, Mapping[str, Any]]] = []
    for pair in pairs:
        item = _item(pair, checks)
        if isinstance(item, tuple):
            reason, detail, key = item
            rejected.append((key, reason, detail, pair.source, pair.record))
        else:
            made.append(MadeItem(pair.position, pair.source, pair.record, item))
    return made, rejected_batch("pair", rejected)


def first_items(made: Iterable[MadeItem]) -> tuple[pa.Table, list[Rejected]]:
    """The items of :func:`checked_candidates` (from any ranges, in any order): one per
    ``item_id``, the earliest row's, sorted by ``item_id``; each later row a ``duplicate-item``."""
    kept: dict[str, MadeItem] = {}
    rejected: list[Rejected] = []
    for row in sorted(made, key=lambda m: m.position):
        earlier = kept.get(row.item["item_id"])
        if earlier is None:
            kept[row.item["item_id"]] = row
        else:
            detail = f"{row.item['item_id']} was already made from {earlier.source} ({earlier.item['sampling_method']})"
            rejected.append(reject("pair", row.item["item_id"], "duplicate-item", detail, row.source, row.record))
    return pa.Table.from_pylist([kept[k].item for k in sorted(kept)], schema=ITEMS_SCHEMA), rejected


def _item(pair: _Pair, checks: _Checks) -> dict[str, str] | tuple[str, str, str]:
    """The item row, or (reason, detail, key) when the pair cannot be one."""
    key = f"{pair.first}|{pair.second}"
    if not (pair.method and pair.first and pair.second):
        missing = [name for name, value in (("method", pair.method), ("first id", pair.first), ("second id", pair.second)) if not value]
        return "missing-field", f"no {', '.join(missing)}", key
    if pair.kind is None:
        known = ", ".join(f"{p}*" for kind in task_types() for p in kind.methods)
        return "unknown-method", f"method {pair.method!r} maps to no task type (known: {known})", key
    ids = (str(pair.first), str(pair.second))
    (first_kind, first_error), (second_kind, second_error) = checks.id_kind(ids[0]), checks.id_kind(ids[1])
    if first_error or second_error:
        return "bad-id", first_error or second_error, key
    kinds = (first_kind, second_kind)
    info = checks.task_type(pair.kind)
    if sorted(kinds) != sorted(info.kinds):
        return "wrong-kind", f"{pair.kind} pairs {info.kinds[0]}–{info.kinds[1]} ids, got {kinds[0]}–{kinds[1]}", key
    if kinds != info.kinds:  # a cross-modal pair given in the other order
        ids = (ids[1], ids[0])
    if ids[0] == ids[1]:
        return "self-pair", f"{pair.method} pairs {ids[0]} with itself", key
    for value in ids:
        problem = checks.problem(value)
        if problem:
            return (*problem, key)
    unshowable = info.unshowable(ids[0], ids[1], checks.catalog)
    if unshowable:
        return (*unshowable, key)
    return item_row(pair.kind, ids[0], ids[1], str(pair.method), NOT_GOLD)


def item_row(kind: str, id_a: str, id_b: str, method: str, gold: str) -> dict[str, str]:
    """An item row; symmetric pairs in :func:`ordered_pair` order, as in their ``item_id``."""
    a, b = ordered_pair(kind, id_a, id_b)
    return {"item_id": item_id(kind, a, b), "task_type": kind, "id_a": a, "id_b": b, "sampling_method": method, "gold": gold}
