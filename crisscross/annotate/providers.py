"""Providers: fill the annotation step without people, from earlier judgments or a simulated panel.

A provider is called with a tasks table (:data:`~crisscross.formats.schema.TASKS_SCHEMA`, one row per
item and batch) and returns :class:`Provided`: the judgments it could give
(:data:`~crisscross.formats.schema.JUDGMENTS_SCHEMA`, sorted by item, batch, worker) and the task rows
it could not judge, each with a reason (:data:`UNJUDGED_SCHEMA`: a tasks table plus ``reason`` and
``detail``, so it can go straight to people).  The annotate stage picks them by name through
:data:`crisscross.annotate.sources.JUDGMENT_SOURCES`:

``replay`` — :class:`Replay` (``judgments=``)
    Judgments made before, found by item: symmetric types (STS, SIS) by unordered pair, so a pair
    judged in either order is found and never sent to raters twice.
``simulate`` — :func:`crisscross.annotate.simulate.simulate_from_embeddings`
    A seeded rater panel for dry runs and budgeting (its own module).

:func:`load_cxc_release` reads the published CxC release as items and judgments for ``replay``.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np
import pandas as pd
import pyarrow as pa

from crisscross.core.quarantine import Rejected, count_reasons
from crisscross.formats.cxc import CXC_FILES, check_split, read_cxc_file
from crisscross.formats.schema import (
    JUDGMENTS_SCHEMA,
    NOT_GOLD,
    SOURCE_REPLAY,
    TASKS_SCHEMA,
    item_id,
    ordered_pair,
    threshold_votes,
)
from crisscross.tasktypes import task_type, type_names

TableLike = pa.Table | pd.DataFrame

NO_JUDGMENT = "no-judgment"  # replay: the source never judged this item

UNJUDGED_SCHEMA = pa.schema([*TASKS_SCHEMA, pa.field("reason", pa.string()), pa.field("detail", pa.string())])

# Judgments are written in this order, so the bytes do not depend on input row order.
_JUDGMENT_ORDER = ("item_id", "batch_id", "worker", "score", "answer", "seconds", "time", "source")


class Provided(NamedTuple):
    """What a provider returns: the judgments it gave and the task rows it could not judge."""

    judgments: pa.Table  # JUDGMENTS_SCHEMA, sorted
    unjudged: pa.Table  # UNJUDGED_SCHEMA, sorted by batch and item


# --------------------------------------------------------------------------- tables


def _frame(table: TableLike, schema: pa.Schema, what: str) -> pd.DataFrame:
    """The schema's columns of a pyarrow table or pandas frame, cast to the schema, as pandas."""
    names = table.column_names if isinstance(table, pa.Table) else [str(c) for c in table.columns]
    missing = [n for n in schema.names if n not in names]
    if missing:
        raise ValueError(f"{what} lacks columns {missing}; it has {sorted(names)}")
    if isinstance(table, pd.DataFrame):
        table = pa.Table.from_pandas(table[schema.names], preserve_index=False)
    return table.select(schema.names).cast(schema).to_pandas()


def _pair_keys(frame: pd.DataFrame, what: str) -> list[str]:
    """``item_id`` recomputed from each row's task type and ids (unordered for symmetric types)."""
    nulls = {c: int(n) for c in ("task_type", "id_a", "id_b") if (n := frame[c].isna().sum())}
    if nulls:
        raise ValueError(f"{what} has null values (column: rows) {nulls}")
    unknown = frame.loc[~frame["task_type"].isin(type_names()), "task_type"]
    if len(unknown):
        raise ValueError(
            f"{what} has {len(unknown)} rows of unknown task types {sorted(map(str, set(unknown)))}; known: {', '.join(type_names())}"
        )
    return [item_id(t, a, b) for t, a, b in zip(frame["task_type"], frame["id_a"], frame["id_b"], strict=True)]


def tasks_frame(tasks: TableLike) -> pd.DataFrame:
    """The tasks table checked: required values present, ``item_id`` consistent, one row per item and batch."""
    frame = _frame(tasks, TASKS_SCHEMA, "tasks table")
    nulls = {c: int(n) for c in ("item_id", "batch_id") if (n := frame[c].isna().sum())}
    if nulls:
        raise ValueError(f"tasks table has null values (column: rows) {nulls}")
    keys = _pair_keys(frame, "tasks table")
    wrong = np.flatnonzero(frame["item_id"].to_numpy() != np.asarray(keys, dtype=object))
    if wrong.size:
        i = int(wrong[0])
        raise ValueError(
            f"tasks table has {wrong.size} rows whose item_id is not item_id(task_type, id_a, id_b), "
            f"first at row {i}: {frame['item_id'].iat[i]!r}, expected {keys[i]!r}"
        )
    repeated = frame.duplicated(["item_id", "batch_id"])
    if repeated.any():
        first = frame[repeated].iloc[0]
        raise ValueError(
            f"tasks table lists {int(repeated.sum())} items twice in one batch, first {first['item_id']!r} in batch {first['batch_id']!r}"
        )
    return frame


def judgments_table(frame: pd.DataFrame) -> pa.Table:
    table = pa.Table.from_pandas(frame[JUDGMENTS_SCHEMA.names], schema=JUDGMENTS_SCHEMA, preserve_index=False)
    return table.sort_by([(c, "ascending") for c in _JUDGMENT_ORDER])


def unjudged_table(frame: pd.DataFrame, reason: str, details: list[str]) -> pa.Table:
    rows = frame.assign(reason=reason, detail=details)[UNJUDGED_SCHEMA.names]
    table = pa.Table.from_pandas(rows, schema=UNJUDGED_SCHEMA, preserve_index=False)
    return table.sort_by([("batch_id", "ascending"), ("item_id", "ascending")])


# --------------------------------------------------------------------------- replay


class Replay:
    """The ``replay`` provider: judgments made before, re-labelled ``source = replay``.

    Source rows are matched to tasks by ``item_id`` recomputed from their task type and ids, so a
    symmetric pair written in the other order is still found.  Each replayed row takes the task's
    ``item_id``, ``id_a``, ``id_b`` and batch; an item listed in several batches (e.g. gold
    controls) receives each source row once, in the source row's batch when the item is in it,
    else in the item's first batch, so no judgment is replayed twice.  Worker, score, answer,
    seconds, time and ``simulated`` are kept: replayed simulated rows stay marked simulated.
    """

    def __init__(self, judgments: TableLike) -> None:
        source = _frame(judgments, JUDGMENTS_SCHEMA, "replay judgments")
        self._source = source.assign(key=_pair_keys(source, "replay judgments"))

    def __call__(self, tasks: TableLike) -> Provided:
        frame = tasks_frame(tasks)
        judged = frame["item_id"].isin(set(self._source["key"]))
        found = self._source[self._source["key"].isin(set(frame["item_id"]))]
        in_tasks = set(zip(frame["item_id"], frame["batch_id"], strict=True))
        first_batch = frame.groupby("item_id")["batch_id"].min()
        batch = [b if (k, b) in in_tasks else first_batch[k] for k, b in zip(found["key"], found["batch_id"], strict=True)]
        replayed = (
            found.drop(columns=["item_id", "task_type", "id_a", "id_b", "batch_id", "source"])
            .assign(item_id=found["key"], batch_id=batch, source=SOURCE_REPLAY)
            .merge(
                frame[["item_id", "batch_id", "task_type", "id_a", "id_b"]],
                on=["item_id", "batch_id"],
                how="left",
                validate="many_to_one",
            )
        )
        missing = frame[~judged]
        detail = f"no judgment of this item (in either order) among {len(self._source)} replay rows"
        return Provided(judgments_table(replayed), unjudged_table(missing, NO_JUDGMENT, [detail] * len(missing)))


# --------------------------------------------------------------------------- CxC release

CXC_WORKER = "cxc-release"


class CxcRelease(NamedTuple):
    """A CxC release split as replayable items and judgments, and every row that was not kept."""

    items: pa.Table  # TASKS_SCHEMA: one row per item, in file order
    judgments: pa.Table  # JUDGMENTS_SCHEMA: one row per kept release row
    rejected: list[Rejected]

    def report(self) -> dict[str, Any]:
        """Rows, items, repeated and straddling items per task type, and rejects by reason."""
        return {**repeats_report(self.judgments), "rejected": count_reasons((r.kind, r.reason) for r in self.rejected)}


def release_worker(occurrence: int) -> str:
    """Worker of a pair's n-th release row (1-based): ``cxc-release``, then ``cxc-release#2`` …"""
    return CXC_WORKER if occurrence == 1 else f"{CXC_WORKER}#{occurrence}"


def load_cxc_release(folder: str | Path, split: str) -> CxcRelease:
    """The CxC release files ``{sts,sis,sits}_<split>.csv`` as items and judgments for ``replay``.

    The release publishes only aggregated scores (the mean of five ratings, CxC §2), so each row
    becomes one judgment with ``score = agg_score``: replaying it reproduces the published
    ``agg_score`` per row, not the individual raters or their spread.  Ids become canonical
    ``coco:`` ids; an item's ids are in :func:`~crisscross.formats.schema.ordered_pair` order.  A pair
    published twice (SIS lists some pairs in both orders) is one item with two judgments, by
    :func:`release_worker` ``cxc-release`` and ``cxc-release#2`` in file order, so validation
    does not take them for one worker's duplicate and aggregation averages them.  Each file is
    one batch ``cxc-release:<file stem>``; ``position`` is the item's first appearance in it (1-based).
    Rows the release reader refuses (:func:`crisscross.formats.cxc.read_cxc_file`) are rejected.
    """
    check_split(split)
    items: list[pd.DataFrame] = []
    judgments: list[pd.DataFrame] = []
    rejected: list[Rejected] = []
    for task, spec in CXC_FILES.items():
        path = Path(folder) / spec.name(split)
        rows, bad = read_cxc_file(path, task)
        file_items, file_judgments = _release_items(rows, task, f"{CXC_WORKER}:{path.stem}")
        items.append(file_items)
        judgments.append(file_judgments)
        rejected += bad
    item_table = pa.Table.from_pandas(pd.concat(items, ignore_index=True), schema=TASKS_SCHEMA, preserve_index=False)
    return CxcRelease(
        item_table.sort_by([("batch_id", "ascending"), ("position", "ascending")]),
        judgments_table(pd.concat(judgments, ignore_index=True)),
        rejected,
    )


def _release_items(rows: pd.DataFrame, task: str, batch: str) -> tuple[pd.DataFrame, pd.DataFrame]:
    """One release file's rows → (items, judgments)."""
    pairs = [ordered_pair(task, a, b) for a, b in zip(rows["id_a"], rows["id_b"], strict=True)]
    found = pd.DataFrame(
        {
            "item_id": [item_id(task, a, b) for a, b in pairs],
            "id_a": [a for a, _ in pairs],
            "id_b": [b for _, b in pairs],
            "score": rows["score"].astype(np.float64),
        }
    )
    methods: dict[str, set[str]] = {}  # item → sampling methods of its rows
    for key, method in zip(found["item_id"], rows["sampling_method"], strict=True):
        methods.setdefault(key, set()).add(method)
    occurrence = found.groupby("item_id", sort=False).cumcount() + 1
    judgments = found.assign(
        task_type=task,
        worker=[release_worker(n) for n in occurrence],
        answer=None,
        seconds=math.nan,
        time=None,
        batch_id=batch,
        source=SOURCE_REPLAY,
        simulated=False,
    )
    items = found.drop_duplicates("item_id")[["item_id", "id_a", "id_b"]]
    items = items.assign(
        task_type=task,
        # A pair published under two sampling methods keeps both ("a+b"); the release has none.
        sampling_method=["+".join(sorted(methods[k])) for k in items["item_id"]],
        gold=NOT_GOLD,
        batch_id=batch,
        position=np.arange(1, len(items) + 1, dtype=np.int32),  # 1-based, as in tasks.make_batches
    )
    return items[TASKS_SCHEMA.names], judgments


def repeats_report(judgments: TableLike) -> dict[str, dict[str, int]]:
    """Per rating type: judgment rows, items, items with more than one row, and of those the
    ones whose rows straddle the CxC positive threshold (some pass, some do not)."""
    frame = _frame(judgments, JUDGMENTS_SCHEMA, "judgments")
    report: dict[str, dict[str, int]] = {
        "rows": {},
        "items": {},
        "repeated_items": {},
        "straddling_items": {},
    }
    for task in CXC_FILES:
        rows = frame[frame["task_type"] == task]
        votes = threshold_votes(rows["item_id"], rows["score"], task_type(task).scale.threshold)
        report["rows"][task] = len(rows)
        report["items"][task] = len(votes)
        report["repeated_items"][task] = int((votes["size"] > 1).sum())
        report["straddling_items"][task] = int(votes["straddles"].sum())
    return report
