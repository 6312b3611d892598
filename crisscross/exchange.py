"""Annotation files: task formats out to raters, judgment formats back in, each chosen by name.

Export (:data:`TASK_FORMATS`): :func:`export_tasks` turns the tasks table into the files of one
format, ``{relative path: bytes}``, so a stage can write them atomically.  Every batch is
self-contained (ids, caption text, image path or URI as the images table gives it, instructions,
``replicas``: how many raters do the batch).  Gold flags and sampling methods are never in a
rater-facing file (a method named ``gold`` would give them away): every format gets the same
``answer_key.csv`` beside it, listing the gold items, for the people running the round.

Import (:data:`JUDGMENT_FORMATS`): ``read(name, data)`` parses one file's bytes into
:class:`RawJudgment` records, each with its ``source`` (``file:line``, or an element path inside a
JSON document) and canonical value names; a record that cannot be parsed at all becomes a
``Rejected`` (``malformed-record``).  Values are passed on as written: :mod:`crisscross.judgments`
checks them.  A record names its item by ``item_id``, by ``task_type`` + ``id_a`` + ``id_b``, or by
``batch_id`` + ``position``.
"""

from __future__ import annotations

import csv
import io
import json
import re
from abc import ABC, abstractmethod
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any
from xml.sax.saxutils import quoteattr

import pyarrow as pa

from crisscross.annotation import (
    GOLD_NEGATIVE,
    GOLD_POSITIVE,
    SCORE_MAX,
    SCORE_MIN,
    TASK_TYPES,
    VERIFY_ANSWERS,
    task_type,
)
from crisscross.ids import CAPTION_KIND, split_id
from crisscross.quarantine import Rejected, reject
from crisscross.registry import Registry
from crisscross.tasks import INSTRUCTIONS, VERIFY_MEANINGS, Catalog

ANSWER_KEY = "answer_key.csv"
SCORE_CONTROL = "score"  # Label Studio control names; the reader looks for these in results
ANSWER_CONTROL = "answer"
# Canonical value names a reader may fill (``batch_seconds``: time for the whole batch, which
# validation divides by the batch's number of items).
JUDGMENT_FIELDS = ("item_id", "task_type", "id_a", "id_b", "batch_id", "position", "worker", "score", "answer", "seconds", "batch_seconds", "time")


class ExportError(ValueError):
    """The tasks table names ids raters cannot be shown."""


class JudgmentFileError(ValueError):
    """A whole judgments file is unusable (not UTF-8, not the document it should be)."""


# ---------------------------------------------------------------------------- export


@dataclass(frozen=True)
class Side:
    id: str
    field: str  # "text" or "image"
    value: str  # caption text, or image path / URI


@dataclass(frozen=True)
class BatchItem:
    item_id: str
    position: int
    a: Side
    b: Side


@dataclass(frozen=True)
class Batch:
    batch_id: str
    task_type: str
    items: tuple[BatchItem, ...]  # by position


def _side(value: str, catalog: Catalog) -> Side:
    if split_id(value)[1] == CAPTION_KIND:
        return Side(value, "text", catalog.texts[value])
    return Side(value, "image", catalog.paths[value])


def batches(tasks: pa.Table, catalog: Catalog) -> list[Batch]:
    """The tasks table as batches sorted by id, items by position; every id must be showable."""
    rows = sorted(tasks.to_pylist(), key=lambda r: (r["batch_id"], r["position"]))
    problems = sorted({(v, p[1]) for r in rows for v in (r["id_a"], r["id_b"]) if (p := catalog.problem(v))})
    if problems:
        raise ExportError(f"{len(problems)} ids in the tasks table cannot be shown to raters (first: {problems[:3]})")
    grouped: dict[str, list[dict[str, Any]]] = {}
    for row in rows:
        grouped.setdefault(row["batch_id"], []).append(row)
    out = []
    for batch_id, members in grouped.items():
        kinds = {r["task_type"] for r in members}
        if len(kinds) != 1:
            raise ExportError(f"batch {batch_id} mixes task types {sorted(kinds)}")
        items = tuple(BatchItem(r["item_id"], r["position"], _side(r["id_a"], catalog), _side(r["id_b"], catalog)) for r in members)
        out.append(Batch(batch_id, kinds.pop(), items))
    return out


def answer_key(tasks: pa.Table) -> bytes:
    """CSV of the gold items (batch_id, position, item_id, task_type, id_a, id_b, gold)."""
    columns = ["batch_id", "position", "item_id", "task_type", "id_a", "id_b", "gold"]
    rows = sorted((r for r in tasks.select(columns).to_pylist() if r["gold"] in (GOLD_POSITIVE, GOLD_NEGATIVE)), key=lambda r: (r["batch_id"], r["position"]))
    return _csv_bytes(columns, ([r[c] for c in columns] for r in rows))


def _csv_bytes(header: Sequence[str], rows: Iterable[Sequence[object]]) -> bytes:
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow(header)
    writer.writerows(rows)
    return buffer.getvalue().encode()


class TaskFormat(ABC):
    """Writes batches as one platform's files."""

    @abstractmethod
    def write(self, batches: Sequence[Batch], replicas: int) -> dict[str, bytes]: ...


TASK_FORMATS: Registry[TaskFormat] = Registry("task format")


def export_tasks(spec: str, tasks: pa.Table, catalog: Catalog, replicas: int) -> dict[str, bytes]:
    """The files of format ``spec`` for the tasks table, plus ``answer_key.csv``, by path."""
    if replicas < 1:
        raise ValueError(f"replicas must be at least 1, got {replicas}")
    files = TASK_FORMATS.create(spec).write(batches(tasks, catalog), replicas)
    files[ANSWER_KEY] = answer_key(tasks)
    return dict(sorted(files.items()))


@TASK_FORMATS.register("jsonl")
class JsonlTasks(TaskFormat):
    """``batches.jsonl``: one object per batch (batch_id, task_type, instructions, replicas,
    items [{item_id, position, a: {id, text | image}, b: {…}}])."""

    def write(self, batches: Sequence[Batch], replicas: int) -> dict[str, bytes]:
        lines = [
            json.dumps(
                {
                    "batch_id": b.batch_id,
                    "task_type": b.task_type,
                    "instructions": INSTRUCTIONS[b.task_type],
                    "replicas": replicas,
                    "items": [
                        {
                            "item_id": i.item_id,
                            "position": i.position,
                            "a": {"id": i.a.id, i.a.field: i.a.value},
                            "b": {"id": i.b.id, i.b.field: i.b.value},
                        }
                        for i in b.items
                    ],
                },
                sort_keys=True,
                ensure_ascii=False,
            )
            for b in batches
        ]
        return {"batches.jsonl": "".join(f"{line}\n" for line in lines).encode()}


@TASK_FORMATS.register("crowd-csv")
class CrowdCsvTasks(TaskFormat):
    """Per task type, ``<type>.csv`` (one row per batch, MTurk style: every column usable as a
    ``${column}`` template variable) and ``<type>.instructions.txt``.

    Columns: ``batch_id, task_type, replicas, n_items``, then for i = 1 … the largest batch
    ``item_<i>_id, item_<i>_a_<text|image>, item_<i>_b_<text|image>``; a shorter batch leaves its
    last item columns empty (results readers skip positions whose ``item_<i>_id`` is empty).
    """

    def write(self, batches: Sequence[Batch], replicas: int) -> dict[str, bytes]:
        files = {}
        for kind in TASK_TYPES:
            of_kind = [b for b in batches if b.task_type == kind]
            if not of_kind:
                continue
            fields = tuple("text" if k == CAPTION_KIND else "image" for k in task_type(kind).kinds)
            width = max(len(b.items) for b in of_kind)
            header = ["batch_id", "task_type", "replicas", "n_items"]
            for i in range(1, width + 1):
                header += [f"item_{i}_id", f"item_{i}_a_{fields[0]}", f"item_{i}_b_{fields[1]}"]
            rows = []
            for b in of_kind:
                cells: list[object] = [b.batch_id, b.task_type, replicas, len(b.items)]
                for i in b.items:
                    cells += [i.item_id, i.a.value, i.b.value]
                rows.append(cells + [""] * (len(header) - len(cells)))
            files[f"{kind.lower()}.csv"] = _csv_bytes(header, rows)
            files[f"{kind.lower()}.instructions.txt"] = (INSTRUCTIONS[kind] + "\n").encode()
        return files


@TASK_FORMATS.register("label-studio")
class LabelStudioTasks(TaskFormat):
    """Per task type, one Label Studio project: ``<type>/tasks.json`` (one task per item,
    ``data`` = item_id, batch_id, position, task_type, replicas, text_a | image_a, text_b |
    image_b) and ``<type>/config.xml`` (instructions; a ``<Number>`` 0–5 step 0.1 named
    ``score`` for ratings, ``<Choices>`` of the four answers named ``answer`` for VERIFY).

    Label Studio has no per-task replication: set the project's overlap (maximum annotations
    per task) to ``replicas``.  Image values are used as given, so local paths need Label Studio's
    local-files storage or a URI prefix applied before export.
    """

    def write(self, batches: Sequence[Batch], replicas: int) -> dict[str, bytes]:
        files = {}
        for kind in TASK_TYPES:
            tasks = [
                {
                    "data": {
                        "item_id": i.item_id,
                        "batch_id": b.batch_id,
                        "position": i.position,
                        "task_type": b.task_type,
                        "replicas": replicas,
                        f"{i.a.field}_a": i.a.value,
                        f"{i.b.field}_b": i.b.value,
                    }
                }
                for b in batches
                if b.task_type == kind
                for i in b.items
            ]
            if tasks:
                files[f"{kind.lower()}/tasks.json"] = (json.dumps(tasks, sort_keys=True, ensure_ascii=False, indent=1) + "\n").encode()
                files[f"{kind.lower()}/config.xml"] = label_studio_config(kind).encode()
        return files


def label_studio_config(kind: str) -> str:
    """The labeling config of one task type: instructions, the two sides, the rating control."""
    info = task_type(kind)
    objects = []
    for side, id_kind in zip("ab", info.kinds, strict=True):
        tag, field = ("Text", "text") if id_kind == CAPTION_KIND else ("Image", "image")
        objects.append(f"  <{tag} name={quoteattr(f'{field}_{side}')} value={quoteattr(f'${field}_{side}')}/>")
    target = "text_a" if info.kinds[0] == CAPTION_KIND else "image_a"
    if info.rated:
        control = (
            f'  <Number name="{SCORE_CONTROL}" toName="{target}" min="{SCORE_MIN:g}" max="{SCORE_MAX:g}" step="0.1" required="true"/>'
        )
    else:
        choices = "\n".join(f"    <Choice value={quoteattr(a)} hint={quoteattr(VERIFY_MEANINGS[a])}/>" for a in VERIFY_ANSWERS)
        control = f'  <Choices name="{ANSWER_CONTROL}" toName="{target}" choice="single" required="true">\n{choices}\n  </Choices>'
    instructions = f'  <View style="white-space: pre-wrap">\n    <Header size="5" value={quoteattr(INSTRUCTIONS[kind])}/>\n  </View>'
    return "\n".join(["<View>", instructions, *objects, control, "</View>", ""])


# ---------------------------------------------------------------------------- import


@dataclass(frozen=True)
class RawJudgment:
    """One judgment as a file gives it, before validation."""

    source: str  # "file:line", or "file:[task].annotations[n]" inside a JSON document
    order: tuple[str, int, int]  # (file, record, sub-record): its place in the input, for "first"
    values: Mapping[str, Any]  # canonical names (JUDGMENT_FIELDS) → values as written
    record: Mapping[str, Any]  # the original record, kept for the quarantine


class JudgmentFormat(ABC):
    """Reads one file of judgments."""

    @abstractmethod
    def read(self, name: str, data: bytes) -> list[RawJudgment | Rejected]: ...


JUDGMENT_FORMATS: Registry[JudgmentFormat] = Registry("judgment format")


def _text(name: str, data: bytes) -> str:
    try:
        return data.decode("utf-8-sig")  # spreadsheet exports often start with a BOM
    except UnicodeDecodeError as error:
        raise JudgmentFileError(f"{name}: not UTF-8 ({error})") from error


def _malformed(name: str, line: int, detail: str, record: object) -> Rejected:
    return reject("judgment", "", "malformed-record", detail, f"{name}:{line}", record)


def _csv_rows(name: str, data: bytes) -> Iterator[tuple[int, dict[str, str] | Rejected]]:
    """(first physical line, row by header) for each CSV record; a row whose cell count differs
    from the header's is a ``malformed-record``."""
    reader = csv.reader(io.StringIO(_text(name, data), newline=""))
    header = next(reader, None)
    if header is None:
        return
    line = reader.line_num + 1
    for cells in reader:
        if cells and len(cells) != len(header):
            detail = f"{len(cells)} cells but the header has {len(header)}"
            yield line, _malformed(name, line, detail, {"cells": cells})
        elif cells:
            yield line, dict(zip(header, cells, strict=True))
        line = reader.line_num + 1


def _canonical(row: Mapping[str, Any]) -> dict[str, Any]:
    """The canonical fields a record holds; empty CSV cells count as absent."""
    return {key: row[key] for key in JUDGMENT_FIELDS if key in row and row[key] not in ("", None)}


@JUDGMENT_FORMATS.register("jsonl")
class JsonlJudgments(JudgmentFormat):
    """One JSON object per line with canonical names (item_id or task_type + id_a + id_b or
    batch_id + position; worker; score or answer; seconds; time); blank lines are skipped."""

    def read(self, name: str, data: bytes) -> list[RawJudgment | Rejected]:
        out: list[RawJudgment | Rejected] = []
        for line, text in enumerate(_text(name, data).splitlines(), start=1):
            if not text.strip():
                continue
            try:
                obj = json.loads(text)
            except json.JSONDecodeError as error:
                out.append(_malformed(name, line, f"not JSON: {error}", text))
                continue
            if not isinstance(obj, dict):
                out.append(_malformed(name, line, f"a JSON {type(obj).__name__}, not an object", text))
                continue
            out.append(RawJudgment(f"{name}:{line}", (name, line, 0), _canonical(obj), obj))
        return out


@JUDGMENT_FORMATS.register("csv")
class CsvJudgments(JudgmentFormat):
    """A CSV with a header of canonical names (as for ``jsonl``); empty cells are absent values."""

    def read(self, name: str, data: bytes) -> list[RawJudgment | Rejected]:
        return [
            row if isinstance(row, Rejected) else RawJudgment(f"{name}:{line}", (name, line, 0), _canonical(row), row)
            for line, row in _csv_rows(name, data)
        ]


_ANSWER_COLUMN = re.compile(r"Answer\.item_(\d+)_(score|answer)", re.ASCII)


@JUDGMENT_FORMATS.register("crowd-csv")
class CrowdCsvJudgments(JudgmentFormat):
    """A crowd platform's batch results CSV (MTurk style), one row per assignment (a worker doing
    a batch): ``WorkerId``, ``WorkTimeInSeconds``, ``SubmitTime`` (else ``AcceptTime``),
    ``Input.batch_id``, ``Input.item_<i>_id`` and ``Answer.item_<i>_score`` /
    ``Answer.item_<i>_answer``.  One judgment per position ``i`` with an answer column, matched to
    its item by ``Input.item_<i>_id`` or else by the batch and position; positions whose
    ``Input.item_<i>_id`` is empty were not items of that batch.  ``WorkTimeInSeconds`` covers the
    whole batch: validation divides it by the batch's number of items (an even split is all
    the platform allows us to know).
    """

    def read(self, name: str, data: bytes) -> list[RawJudgment | Rejected]:
        out: list[RawJudgment | Rejected] = []
        for line, row in _csv_rows(name, data):
            if isinstance(row, Rejected):
                out.append(row)
                continue
            answers: dict[int, dict[str, str]] = {}
            for column, value in row.items():
                if match := _ANSWER_COLUMN.fullmatch(column):
                    answers.setdefault(int(match.group(1)), {})[match.group(2)] = value
            shared = {k: v for k, v in row.items() if not k.startswith(("Input.item_", "Answer.item_"))}
            for position, given in sorted(answers.items()):
                listed = row.get(f"Input.item_{position}_id")
                if listed == "":
                    continue
                values = {
                    "item_id": listed,
                    "batch_id": row.get("Input.batch_id"),
                    "position": position,
                    "worker": row.get("WorkerId"),
                    "batch_seconds": row.get("WorkTimeInSeconds"),
                    "time": row.get("SubmitTime") or row.get("AcceptTime"),
                    **given,
                }
                prefixes = (f"Input.item_{position}_", f"Answer.item_{position}_")
                record = {**shared, **{k: v for k, v in row.items() if k.startswith(prefixes)}}
                out.append(RawJudgment(f"{name}:{line}", (name, line, position), _canonical(values), record))
        return out


@JUDGMENT_FORMATS.register("label-studio")
class LabelStudioJudgments(JudgmentFormat):
    """A Label Studio JSON export: a list of tasks, each with ``data`` (as exported here) and
    ``annotations`` [{completed_by, result, lead_time, created_at, was_cancelled}].  One judgment
    per annotation: the ``score`` control's ``value.number`` or the ``answer`` control's
    ``value.choices`` (several choices are passed on as a list, which validation refuses);
    ``completed_by`` is a user id or, in some exports, an object whose ``email`` (else ``id``)
    names the worker; ``lead_time`` gives the seconds.  A cancelled (skipped) annotation has no
    value and so is refused by validation as ``missing-field``.
    """

    def read(self, name: str, data: bytes) -> list[RawJudgment | Rejected]:
        try:
            document = json.loads(_text(name, data))
        except json.JSONDecodeError as error:
            raise JudgmentFileError(f"{name}: not a JSON document ({error})") from error
        if not isinstance(document, list):
            raise JudgmentFileError(f"{name}: a Label Studio export is a list of tasks, got a JSON {type(document).__name__}")
        out: list[RawJudgment | Rejected] = []
        for t, task in enumerate(document):
            if not isinstance(task, dict) or not isinstance(task.get("data"), dict):
                out.append(reject("judgment", "", "malformed-record", "a task without a data object", f"{name}:[{t}]", task))
                continue
            for a, annotation in enumerate(task.get("annotations") or []):
                source = f"{name}:[{t}].annotations[{a}]"
                record = {"task_id": task.get("id"), "data": task["data"], "annotation": annotation}
                if not isinstance(annotation, dict):
                    out.append(reject("judgment", "", "malformed-record", "an annotation that is not an object", source, record))
                    continue
                values = {
                    "item_id": task["data"].get("item_id"),
                    "batch_id": task["data"].get("batch_id"),
                    "worker": _worker(annotation.get("completed_by")),
                    "seconds": annotation.get("lead_time"),
                    "time": annotation.get("created_at"),
                    **_result_values(annotation.get("result") or []),
                }
                out.append(RawJudgment(source, (name, t, a), _canonical(values), record))
        return out


def _worker(completed_by: object) -> object:
    if isinstance(completed_by, dict):
        return completed_by.get("email") or completed_by.get("id")
    return completed_by


def _result_values(results: Sequence[Any]) -> dict[str, Any]:
    values: dict[str, Any] = {}
    for result in results:
        value = result.get("value") if isinstance(result, dict) else None
        if not isinstance(value, dict):
            continue
        if result.get("from_name") == SCORE_CONTROL and "number" in value:
            values["score"] = value["number"]
        elif result.get("from_name") == ANSWER_CONTROL and "choices" in value:
            choices = value["choices"]
            values["answer"] = choices[0] if isinstance(choices, list) and len(choices) == 1 else choices
    return values
