"""A round's items: each candidate pair becomes one item of a task type, by the type whose
``methods`` prefix its sampling method starts with (``c2c_*`` → STS, ``bison_decoy`` → CHOOSE, …;
image–caption pairs → VERIFY).  A pair sampled twice (in either order for the symmetric types) is
one item; every candidate that does not become an item is a ``Rejected``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

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
# Items as checked, before duplicates go: each with its row's number in its table (``source:position``).
MADE_SCHEMA = pa.schema([pa.field("position", pa.int64()), *ITEMS_SCHEMA])


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
    return _items(checked_candidates(candidates, catalog, 0, candidates.num_rows, source), candidates, source)


def checked_candidates(
    candidates: pa.Table, catalog: Catalog, start: int, stop: int, source: str = "candidates.parquet"
) -> tuple[pa.Table, RejectedBatch]:
    """Rows ``start``–``stop`` of a candidates table checked one by one (:func:`_item`): each row
    is checked on its own, so ranges of a large table are checked apart, then :func:`first_items`."""
    rows = candidates.slice(start, stop - start)
    kinds: dict[str, str | None] = {}  # each method's task type, looked up once (a table holds a few methods)
    methods = _column(rows, "method")
    checks = _Checks(catalog)
    return _checked(rows, start, source, methods, [_kind(kinds, m) for m in methods], _column(rows, "id1"), _column(rows, "id2"), checks)


def verify_items(
    pairs: pa.Table, catalog: Catalog, method: str = VERIFY_METHOD, source: str = "pairs.parquet"
) -> tuple[pa.Table, list[Rejected]]:
    """VERIFY items from (``image_id``, ``caption_id``) rows; a ``method`` column, when present,
    overrides the ``method`` argument per row."""
    methods = _column(pairs, "method") if "method" in pairs.column_names else [method] * pairs.num_rows
    firsts, seconds = _column(pairs, "image_id"), _column(pairs, "caption_id")
    return _items(_checked(pairs, 0, source, methods, [VERIFY.name] * pairs.num_rows, firsts, seconds, _Checks(catalog)), pairs, source)


def _column(table: pa.Table, name: str) -> list[Any]:
    """A column's values as the rows' dicts hold them (``None`` throughout when it is absent)."""
    return table.column(name).to_pylist() if name in table.column_names else [None] * table.num_rows


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
        made = _item(SAMPLING_GOLD if gold else row.get("method"), VERIFY.name, row.get("image_id"), row.get("caption_id"), checks)
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


def _items(checked: tuple[pa.Table, RejectedBatch], table: pa.Table, source: str) -> tuple[pa.Table, list[Rejected]]:
    """Checked rows (:func:`_checked`) of ``table`` → one item per distinct ``item_id``, the first
    row (in input order) providing its method, and every reject.

    Reasons: ``missing-field``, ``unknown-method``, ``bad-id`` (not a canonical id), ``wrong-kind``
    (the ids' kinds do not fit the task type), ``self-pair``, ``unknown-id`` / ``no-pixels`` (raters
    could not be shown it), ``duplicate-item`` (the same item as an earlier row, e.g. the pair in
    the other order; it is judged once, under the earlier row's method).
    """
    made, rejected = checked
    items, duplicates = first_items([made], lambda: table, source)
    return items, rejected.rejected() + duplicates


def _checked(
    table: pa.Table,
    start: int,
    source: str,
    methods: list[Any],
    kinds: list[str | None],
    firsts: list[Any],
    seconds: list[Any],
    checks: _Checks,
) -> tuple[pa.Table, RejectedBatch]:
    """Each row's item (:data:`MADE_SCHEMA`), or its reject, all of them as one batch (most of a
    large table may be): rows are numbered from ``start + 1``, and only refused rows are read
    whole, in Arrow, for the quarantine's record of them."""
    made: list[tuple[int, dict[str, str]]] = []
    refused: list[int] = []
    keys: list[str] = []
    reasons: list[str] = []
    details: list[str] = []
    for row, values in enumerate(zip(methods, kinds, firsts, seconds, strict=True)):
        item = _item(*values, checks)
        if isinstance(item, tuple):
            refused.append(row)
            reasons.append(item[0])
            details.append(item[1])
            keys.append(item[2])
        else:
            made.append((start + 1 + row, item))
    columns = {name: [item[name] for _, item in made] for name in ITEMS_SCHEMA.names}
    made_table = pa.table({"position": [position for position, _ in made], **columns}, schema=MADE_SCHEMA)
    positions = pa.array(refused, pa.int64())
    sources = pc.binary_join_element_wise(f"{source}:", pc.cast(pc.add(positions, start + 1), pa.string()), "")
    return made_table, rejected_batch("pair", keys, reasons, details, sources, table.take(positions))


def first_items(made: Iterable[pa.Table], table: Callable[[], pa.Table], source: str) -> tuple[pa.Table, list[Rejected]]:
    """The items of :func:`checked_candidates` (from any ranges, in any order): one per
    ``item_id``, the earliest row's, sorted by ``item_id``; each later row a ``duplicate-item``,
    its record read from ``table()`` (the checked table, asked for only then) by its position."""
    ordered = pa.concat_tables([MADE_SCHEMA.empty_table(), *made]).sort_by("position").combine_chunks()
    positions = ordered.column("position").to_pylist()
    earliest: dict[str, int] = {}
    kept: list[int] = []
    rejected: list[Rejected] = []
    for row, (position, item) in enumerate(zip(positions, ordered.column("item_id").to_pylist(), strict=True)):
        earlier = earliest.setdefault(item, row)
        if earlier == row:
            kept.append(row)
            continue
        method = ordered.column("sampling_method")[earlier].as_py()
        detail = f"{item} was already made from {source}:{positions[earlier]} ({method})"
        record = table().slice(position - 1, 1).to_pylist()[0]
        rejected.append(reject("pair", item, "duplicate-item", detail, f"{source}:{position}", record))
    items = ordered.take(pa.array(kept, pa.int64())).select(ITEMS_SCHEMA.names).sort_by("item_id").combine_chunks()
    return items, rejected


def _item(method: Any, kind: str | None, first: Any, second: Any, checks: _Checks) -> dict[str, str] | tuple[str, str, str]:
    """The item row of a pair (``kind``: its method's task type, None when it maps to none), or
    (reason, detail, key) when the pair cannot be one."""
    key = f"{first}|{second}"
    if not (method and first and second):
        missing = [name for name, value in (("method", method), ("first id", first), ("second id", second)) if not value]
        return "missing-field", f"no {', '.join(missing)}", key
    if kind is None:
        known = ", ".join(f"{p}*" for task in task_types() for p in task.methods)
        return "unknown-method", f"method {method!r} maps to no task type (known: {known})", key
    ids = (str(first), str(second))
    (first_kind, first_error), (second_kind, second_error) = checks.id_kind(ids[0]), checks.id_kind(ids[1])
    if first_error or second_error:
        return "bad-id", first_error or second_error, key
    kinds = (first_kind, second_kind)
    info = checks.task_type(kind)
    if sorted(kinds) != sorted(info.kinds):
        return "wrong-kind", f"{kind} pairs {info.kinds[0]}–{info.kinds[1]} ids, got {kinds[0]}–{kinds[1]}", key
    if kinds != info.kinds:  # a cross-modal pair given in the other order
        ids = (ids[1], ids[0])
    if ids[0] == ids[1]:
        return "self-pair", f"{method} pairs {ids[0]} with itself", key
    for value in ids:
        problem = checks.problem(value)
        if problem:
            return (*problem, key)
    unshowable = info.unshowable(ids[0], ids[1], checks.catalog)
    if unshowable:
        return (*unshowable, key)
    return item_row(kind, ids[0], ids[1], str(method), NOT_GOLD)


def item_row(kind: str, id_a: str, id_b: str, method: str, gold: str) -> dict[str, str]:
    """An item row; symmetric pairs in :func:`ordered_pair` order, as in their ``item_id``."""
    a, b = ordered_pair(kind, id_a, id_b)
    return {"item_id": item_id(kind, a, b), "task_type": kind, "id_a": a, "id_b": b, "sampling_method": method, "gold": gold}
