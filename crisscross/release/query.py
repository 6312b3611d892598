"""A release as one queryable view of its labelled pairs, for ``crisscross browse``.

People's and the simulated panel's pairs (``data/pairs.parquet``) and a triage's machine labels
(``data/machine_labels/labels.parquet``) become one DuckDB table with who labelled each pair, so a
page counts, filters, sorts and pages them in two queries however large the release (CxC's
261,979 pairs: milliseconds).  Every value a caller gives reaches SQL as a bound parameter; a sort
is a key of :data:`SORTS`, never text put into the statement.  Caption texts and image file names come from the
release's Karpathy-shaped ``dataset_coco_cxc.json`` where it has one; without it a caption is shown
by its published id.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from crisscross.core.errors import InputError
from crisscross.core.ids import CAPTION_KIND, IMAGE_KIND, published, split_id
from crisscross.formats.manifest import DATA, INFO, MERGED, is_release
from crisscross.release.merge import karpathy_names
from crisscross.release.parts import MACHINE_LABELS

PEOPLE, SIMULATED, MACHINE = "people", "simulated", "machine"
LABELLED_BY = (PEOPLE, SIMULATED, MACHINE)
SORTS = {  # a page's sort key → the column it orders by (ties broken by ``key``, the release's own order)
    "release": "key",
    "score": "score",
    "spread": "std",
    "judgments": "n",
    "type": "task_type",
    "method": "sampling_method",
}
MAX_PAGE = 200
_PAIRS_SCHEMA = pa.schema(
    [
        ("key", pa.int64()),
        ("round", pa.int64()),
        ("split", pa.string()),
        ("task_type", pa.string()),
        ("item_id", pa.string()),
        ("id_a", pa.string()),
        ("id_b", pa.string()),
        ("published_a", pa.string()),
        ("published_b", pa.string()),
        ("sampling_method", pa.string()),
        ("score", pa.float64()),
        ("label", pa.string()),
        ("n", pa.int64()),
        ("std", pa.float64()),
        ("positive", pa.bool_()),
        ("labelled_by", pa.string()),
    ]
)
_PAIR_COLUMNS = tuple(_PAIRS_SCHEMA.names)
_JUDGMENTS_SCHEMA = pa.schema(  # what a pair's detail shows of each judgment, and what finds them
    [
        ("round", pa.int64()),
        ("item_id", pa.string()),
        ("rater", pa.string()),
        ("score", pa.float64()),
        ("answer", pa.string()),
        ("seconds", pa.float64()),
        ("source", pa.string()),
        ("status", pa.string()),
        ("batch_id", pa.string()),
    ]
)
MACHINE_DETAIL = ("task_type", "item_id", "score", "expected_score", "cut", "bound", "audited", "reason", "signals")
FILTERED = {"task_type": "task_type", "split": "split", "method": "sampling_method", "labelled_by": "labelled_by"}  # filter → column


@dataclass(frozen=True)
class Filters:
    """What a page asks for; ``None`` leaves a field unfiltered."""

    task_type: str | None = None
    split: str | None = None
    method: str | None = None
    labelled_by: str | None = None
    positive: bool | None = None
    score_min: float | None = None
    score_max: float | None = None
    sort: str = "release"
    descending: bool = False
    offset: int = 0
    limit: int = 50

    def where(self) -> tuple[str, list[Any]]:
        """The SQL condition and its parameters."""
        terms: list[tuple[str, Any]] = [
            ("task_type = ?", self.task_type),
            ("split = ?", self.split),
            ("sampling_method = ?", self.method),
            ("labelled_by = ?", self.labelled_by),
            ("positive = ?", self.positive),
            ("score >= ?", self.score_min),
            ("score <= ?", self.score_max),
        ]
        kept = [(sql, value) for sql, value in terms if value is not None]
        return (" AND ".join(sql for sql, _ in kept) or "TRUE"), [value for _, value in kept]


@dataclass(frozen=True)
class Side:
    """One side of a pair as a page shows it: an image (its id, to fetch) or a caption's text."""

    kind: str  # IMAGE_KIND | CAPTION_KIND
    id: str
    published: str
    text: str | None  # the caption's text; None for an image, or a caption the release has no text for


class ReleaseView:
    """A release folder's pairs, judgments, machine labels and texts, loaded once into an in-process DuckDB."""

    def __init__(self, path: str | Path) -> None:
        import duckdb

        root = Path(path)
        if not is_release(root):
            raise InputError(f"{root} is not a crisscross release folder (no {INFO} and SHA256SUMS): give a release's folder")
        self.path = root
        self.info: dict[str, Any] = json.loads((root / INFO).read_text(encoding="utf-8"))
        merged = root / DATA / MERGED
        self.texts, self.image_files = karpathy_names(json.loads(merged.read_text(encoding="utf-8"))) if merged.is_file() else ({}, {})
        data = root / DATA
        machine_file = data / MACHINE_LABELS / "labels.parquet"
        machine = pq.read_table(machine_file).to_pandas() if machine_file.is_file() else None
        judgments = data / "judgments.parquet"
        tables = {
            "pairs": labelled_pairs(data, machine),
            "judgments": pq.read_table(judgments, columns=_JUDGMENTS_SCHEMA.names).cast(_JUDGMENTS_SCHEMA)
            if judgments.is_file()
            else _JUDGMENTS_SCHEMA.empty_table(),
            "machine": pa.Table.from_pandas(machine[list(MACHINE_DETAIL)], preserve_index=False)
            if machine is not None
            else pa.table({name: pa.array([], pa.string()) for name in MACHINE_DETAIL}),
        }
        self._db = duckdb.connect(":memory:", config={"threads": 1})
        for name, table in tables.items():
            self._db.register("arrow", table)
            self._db.execute(f"CREATE TABLE {name} AS SELECT * FROM arrow")
            self._db.unregister("arrow")
        self.total = self._one("SELECT count(*) FROM pairs")[0]

    def _one(self, sql: str, parameters: list[Any] | None = None) -> tuple[Any, ...]:
        with self._db.cursor() as cursor:  # a connection of its own: DuckDB's are not shared between request threads
            return cursor.execute(sql, parameters or []).fetchone()

    def choices(self) -> dict[str, Any]:
        """What a page's filters offer: the values present, with their pair counts, and the score range."""
        with self._db.cursor() as cursor:
            counted = {
                field: [list(row) for row in cursor.execute(_COUNTED.format(column=column)).fetchall()]
                for field, column in FILTERED.items()
            }
            low, high = cursor.execute("SELECT min(score), max(score) FROM pairs").fetchone()
        return {**counted, "score": [low, high], "pairs": self.total}

    def page(self, filters: Filters) -> tuple[int, list[dict[str, Any]]]:
        """The matching pairs' count and one page of them, each with both sides."""
        if filters.sort not in SORTS:
            raise InputError(f"sort {filters.sort!r} is none of {', '.join(SORTS)}")
        where, parameters = filters.where()
        order = f"{SORTS[filters.sort]} {'DESC' if filters.descending else 'ASC'} NULLS LAST, key"
        with self._db.cursor() as cursor:
            (total,) = cursor.execute(f"SELECT count(*) FROM pairs WHERE {where}", parameters).fetchone()
            rows = cursor.execute(
                f"SELECT {', '.join(_PAIR_COLUMNS)} FROM pairs WHERE {where} ORDER BY {order} LIMIT ? OFFSET ?",
                [*parameters, min(filters.limit, MAX_PAGE), filters.offset],
            ).fetchall()
        return int(total), [self._shown(dict(zip(_PAIR_COLUMNS, row, strict=True))) for row in rows]

    def pair(self, key: int) -> dict[str, Any] | None:
        """One pair with every judgment of it, the spread of its ratings or answers and, for a
        machine label, the triage's cut, bound, audit and signals; None when no pair has ``key``."""
        names = _JUDGMENTS_SCHEMA.names[2:]  # a judgment's own fields, after its pair's round and item
        with self._db.cursor() as cursor:
            row = cursor.execute(f"SELECT {', '.join(_PAIR_COLUMNS)} FROM pairs WHERE key = ?", [key]).fetchone()
            if row is None:
                return None
            found = self._shown(dict(zip(_PAIR_COLUMNS, row, strict=True)))
            judged = cursor.execute(
                f"SELECT {', '.join(names)} FROM judgments WHERE round = ? AND item_id = ? ORDER BY rater, batch_id",
                [found["round"], found["item_id"]],
            ).fetchall()
            label = cursor.execute(
                f"SELECT {', '.join(MACHINE_DETAIL)} FROM machine WHERE task_type = ? AND item_id = ?",
                [found["task_type"], found["item_id"]],
            ).fetchone()
        found["judgments"] = [dict(zip(names, j, strict=True)) for j in judged]
        found["spread"] = spread(found["judgments"])
        found["machine"] = machine_detail(dict(zip(MACHINE_DETAIL, label, strict=True))) if found["labelled_by"] == MACHINE else None
        return found

    def _shown(self, row: dict[str, Any]) -> dict[str, Any]:
        row["sides"] = [self.side(row["id_a"], row["published_a"]).__dict__, self.side(row["id_b"], row["published_b"]).__dict__]
        return row

    def side(self, canonical: str, published_as: str) -> Side:
        kind = split_id(canonical)[1]
        return Side(kind, canonical, published_as, self.texts.get(canonical) if kind == CAPTION_KIND else None)

    def image_files_of(self, canonical: str) -> tuple[str, ...]:
        """Where an image the release pairs may lie, relative to the images folder, most likely
        first; nothing for any other id, so no request names a file the release does not."""
        if canonical in self.image_files:
            return (self.image_files[canonical],)
        if canonical.split(":")[1:2] != [IMAGE_KIND]:
            return ()
        known = self._one("SELECT count(*) FROM pairs WHERE id_a = ? OR id_b = ?", [canonical, canonical])[0]
        return (published(canonical, IMAGE_KIND),) if known else ()


_COUNTED = "SELECT {column}, count(*) FROM pairs WHERE {column} IS NOT NULL GROUP BY {column} ORDER BY {column}"


def labelled_pairs(data: Path, machine: pd.DataFrame | None) -> pa.Table:
    """People's, the panel's and the machine's pairs (``machine``: the release's machine labels)
    as one table in the release's order, each numbered (``key``) and marked with who labelled it."""
    parts = []
    pairs_file = data / "pairs.parquet"
    if pairs_file.is_file():
        pairs = pq.read_table(pairs_file).to_pandas()
        parts.append(
            pairs.rename(columns={"agg_score": "score", "agg_label": "label"}).assign(
                labelled_by=[SIMULATED if s else PEOPLE for s in pairs["simulated"]]
            )
        )
    if machine is not None:
        parts.append(
            machine.assign(
                published_a=[published(i, split_id(i)[1]) for i in machine["id_a"]],
                published_b=[published(i, split_id(i)[1]) for i in machine["id_b"]],
                score=None,  # the machine gives no 0–5 rating: its estimate stays in the pair's detail
                labelled_by=MACHINE,
            )
        )
    joined = pd.concat(parts, ignore_index=True) if parts else pd.DataFrame(columns=list(_PAIR_COLUMNS))
    joined = joined.assign(key=range(len(joined))).reindex(columns=list(_PAIR_COLUMNS))
    return pa.Table.from_pandas(joined, schema=_PAIRS_SCHEMA, preserve_index=False)


def machine_detail(label: Mapping[str, Any]) -> dict[str, Any]:
    """A machine label as its pair's detail shows it; ``signals``, the triage's comma-joined signal names, as a list."""
    shown = {name: value for name, value in label.items() if name not in ("task_type", "item_id", "signals")}
    return {**shown, "signals": [s for s in str(label["signals"]).split(",") if s]}


def spread(judgments: list[dict[str, Any]]) -> dict[str, Any]:
    """How the kept judgments of a pair spread: scores by value, or answers by count (gold and
    excluded raters' judgments are shown, not counted)."""
    kept = [j for j in judgments if j["status"] == "kept"]
    scores = sorted(j["score"] for j in kept if j["score"] is not None)
    answers: dict[str, int] = {}
    for j in kept:
        if j["answer"] is not None:
            answers[j["answer"]] = answers.get(j["answer"], 0) + 1
    return {"kept": len(kept), "scores": scores, "answers": dict(sorted(answers.items()))}
