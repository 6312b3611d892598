"""Judgment files back in, one format each, chosen by name (:data:`JUDGMENT_FORMATS`).

``read(name, data)`` parses one file's bytes into :class:`RawJudgment` records, each with its
``source`` (``file:line``, or an element path inside a JSON document) and canonical value names; a
record that cannot be parsed at all, or whose values hold text UTF-8 cannot encode (a JSON
``\\udXXX`` half surrogate pair), becomes a ``Rejected`` (``malformed-record``); a file that cannot
be read at all raises :class:`JudgmentFileError` with a one-line message naming it, and no other
exception leaves a reader, whatever the bytes (``tests/annotate/test_fuzz_judgment_formats.py``:
property-based tests).  The import source reads each file through :func:`crisscross.core.io.read_bytes`,
so only regular files are read.
Values are passed on as written: :mod:`crisscross.annotate.validate` checks them.  A record names
its item by ``item_id``, by ``task_type`` + ``id_a`` + ``id_b``, or by ``batch_id`` + ``position``.
The task files these answer are written by :mod:`crisscross.annotate.exports`.

``store`` reads the rater app's database (:mod:`crisscross.annotate.store`) instead of files: its
``--judgments`` values are database locations (a SQLite path or a ``postgresql://`` URL), one
record per stored judgment, validated like any file's.

Readers keep values as the file gives them: a guarded cell that comes back (``'=cmd`` as a worker
id) is not un-guarded, and validation sees exactly what the platform wrote.
"""

from __future__ import annotations

import io
import json
import re
from abc import ABC, abstractmethod
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from crisscross.annotate.exports import ANSWER_CONTROL, SCORE_CONTROL
from crisscross.annotate.store import open_store, redact
from crisscross.core.csv_records import csv_records
from crisscross.core.errors import UserError, one_line
from crisscross.core.io import JSON_ERRORS, json_document
from crisscross.core.quarantine import Rejected, reject
from crisscross.core.registry import Registry

# Canonical value names a reader may fill (``batch_seconds``: time for the whole batch, which
# validation divides by ``batch_items``, the items the rater was shown, else the batch's number of
# items: a top-up batch shows only its open items and its gold).
JUDGMENT_FIELDS = (
    "item_id",
    "task_type",
    "id_a",
    "id_b",
    "batch_id",
    "position",
    "worker",
    "score",
    "answer",
    "seconds",
    "batch_seconds",
    "batch_items",
    "time",
)


class JudgmentFileError(UserError, ValueError):
    """A whole judgments file is unusable (not UTF-8, not the document it should be)."""


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


def _as_record(value: object) -> object:
    """``value`` for :func:`reject`, which takes a string as JSON already: a line or element that
    is a string is kept as a JSON string, so every quarantine record parses as JSON."""
    return json.dumps(value) if isinstance(value, str) else value


def _malformed(name: str, line: int, detail: str, record: object) -> Rejected:
    return reject("judgment", "", "malformed-record", detail, f"{name}:{line}", _as_record(record))


def _csv_table(name: str, data: bytes) -> tuple[list[str] | None, Iterator[tuple[int, dict[str, str] | Rejected]]]:
    """The header (None for an empty file) and (first physical line, row by header) for each CSV
    record after it.  A record the csv module cannot parse (a cell over its field limit, a stray
    carriage return) or whose cell count differs from the header's is a ``malformed-record``;
    a header that cannot be parsed makes the file unusable."""
    records = csv_records(enumerate(io.StringIO(_text(name, data), newline=""), start=1))
    first = next(records, None)
    if first is not None and first.error is not None:
        raise JudgmentFileError(f"{name}: the header line is not readable CSV ({one_line(first.error)})") from first.error
    header = first.cells if first is not None else None

    def rows(header: list[str]) -> Iterator[tuple[int, dict[str, str] | Rejected]]:
        for record in records:
            if record.cells is None:
                yield record.line, _malformed(name, record.line, f"not readable CSV: {one_line(record.error)}", {"text": record.text})
            elif record.cells and len(record.cells) != len(header):
                detail = f"{len(record.cells)} cells but the header has {len(header)}"
                yield record.line, _malformed(name, record.line, detail, {"cells": record.cells})
            elif record.cells:
                yield record.line, dict(zip(header, record.cells, strict=True))

    return header, rows(header or [])


def _csv_rows(name: str, data: bytes) -> Iterator[tuple[int, dict[str, str] | Rejected]]:
    """(first physical line, row by header) for each CSV record, as :func:`_csv_table`."""
    return _csv_table(name, data)[1]


def _canonical(row: Mapping[str, Any]) -> dict[str, Any]:
    """The canonical fields a record holds; empty CSV cells count as absent."""
    return {key: row[key] for key in JUDGMENT_FIELDS if key in row and row[key] not in ("", None)}


_LINE_END = re.compile(r"\r\n|\r|\n")


def _lone_surrogate(values: Mapping[str, Any]) -> str:
    """Why ``values`` cannot be kept, or ``""``: a JSON ``\\udXXX`` escape can write half a
    surrogate pair, which decodes to a Python string but can never be written to Parquet."""
    for key, value in values.items():
        try:
            json.dumps(value, ensure_ascii=False).encode("utf-8")  # a value may be a list (several choices)
        except UnicodeEncodeError as error:
            return f"{key} holds a lone surrogate, which UTF-8 cannot encode: {error.reason}"
    return ""


@JUDGMENT_FORMATS.register("jsonl")
class JsonlJudgments(JudgmentFormat):
    """One JSON object per line with canonical names (item_id or task_type + id_a + id_b or
    batch_id + position; worker; score or answer; seconds; time); blank lines are skipped.

    Lines end at ``\\n``, ``\\r\\n`` or ``\\r`` only: U+2028, U+0085 and the other characters
    :meth:`str.splitlines` also breaks at may stand unescaped inside a JSON string.
    """

    def read(self, name: str, data: bytes) -> list[RawJudgment | Rejected]:
        out: list[RawJudgment | Rejected] = []
        for line, text in enumerate(_LINE_END.split(_text(name, data)), start=1):
            if not text.strip():
                continue
            try:
                obj = json.loads(text)
            except JSON_ERRORS as error:
                out.append(_malformed(name, line, f"not JSON: {one_line(error)}", text))
                continue
            if not isinstance(obj, dict):
                out.append(_malformed(name, line, f"a JSON {type(obj).__name__}, not an object", text))
                continue
            values = _canonical(obj)
            if unencodable := _lone_surrogate(values):
                out.append(_malformed(name, line, unencodable, obj))
                continue
            out.append(RawJudgment(f"{name}:{line}", (name, line, 0), values, obj))
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
_MAX_POSITION_DIGITS = 9  # a batch of a billion items is no batch; int() refuses 4300 digits


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

    A file whose header has no ``Answer.item_<i>_score`` / ``_answer`` column is no results
    file and raises :class:`JudgmentFileError`; a row with an empty ``Input.item_<i>_id`` at every
    answered position lists no item and is a ``malformed-record``.
    """

    def read(self, name: str, data: bytes) -> list[RawJudgment | Rejected]:
        header, rows = _csv_table(name, data)
        if header is None:
            return []
        for column in header:
            match = _ANSWER_COLUMN.fullmatch(column)
            if match and len(match.group(1)) > _MAX_POSITION_DIGITS:
                raise JudgmentFileError(f"{name}: answer column {column[:40]!r}… names an item position of {len(match.group(1))} digits")
        if not any(_ANSWER_COLUMN.fullmatch(column) for column in header):
            raise JudgmentFileError(f"{name}: no Answer.item_<i>_score or Answer.item_<i>_answer column, so not a crowd results file")
        out: list[RawJudgment | Rejected] = []
        for line, row in rows:
            if isinstance(row, Rejected):
                out.append(row)
                continue
            answers: dict[int, dict[str, str]] = {}
            for column, value in row.items():
                if match := _ANSWER_COLUMN.fullmatch(column):
                    answers.setdefault(int(match.group(1)), {})[match.group(2)] = value
            shared = {k: v for k, v in row.items() if not k.startswith(("Input.item_", "Answer.item_"))}
            found = len(out)
            shown = sum(1 for position in answers if row.get(f"Input.item_{position}_id"))
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
                    "batch_items": shown or None,  # a template without item ids cannot count them: the batch's size then
                    "time": row.get("SubmitTime") or row.get("AcceptTime"),
                    **given,
                }
                prefixes = (f"Input.item_{position}_", f"Answer.item_{position}_")
                record = {**shared, **{k: v for k, v in row.items() if k.startswith(prefixes)}}
                out.append(RawJudgment(f"{name}:{line}", (name, line, position), _canonical(values), record))
            if len(out) == found:
                out.append(_malformed(name, line, "no item: Input.item_<i>_id is empty at every answered position", row))
        return out


@JUDGMENT_FORMATS.register("label-studio")
class LabelStudioJudgments(JudgmentFormat):
    """A Label Studio JSON export: a list of tasks, each with ``data`` (as exported here) and
    ``annotations`` [{completed_by, result, lead_time, created_at, was_cancelled}].  One judgment
    per annotation: the ``score`` control's ``value.number`` or the ``answer`` control's
    ``value.choices`` (several choices are passed on as a list, which validation refuses);
    ``completed_by`` is a user id or, in some exports, an object whose ``email`` (else ``id``)
    names the worker; ``lead_time`` gives the seconds.  A cancelled (skipped) annotation has no
    value and so is refused by validation as ``missing-field``.  A task without annotations (absent,
    null or ``[]``) has no judgments; ``annotations`` that is not a list rejects the task, and a
    ``result`` that is not a list (nor null) rejects its annotation.
    """

    def read(self, name: str, data: bytes) -> list[RawJudgment | Rejected]:
        document = json_document(_text(name, data), name, JudgmentFileError)
        if not isinstance(document, list):
            raise JudgmentFileError(f"{name}: a Label Studio export is a list of tasks, got a JSON {type(document).__name__}")
        out: list[RawJudgment | Rejected] = []
        for t, task in enumerate(document):
            if not isinstance(task, dict) or not isinstance(task.get("data"), dict):
                out.append(reject("judgment", "", "malformed-record", "a task without a data object", f"{name}:[{t}]", _as_record(task)))
                continue
            annotations = task.get("annotations")
            if annotations is not None and not isinstance(annotations, list):
                detail = f"annotations is a JSON {type(annotations).__name__}, not a list"
                out.append(reject("judgment", "", "malformed-record", detail, f"{name}:[{t}]", task))
                continue
            for a, annotation in enumerate(annotations or []):
                source = f"{name}:[{t}].annotations[{a}]"
                record = {"task_id": task.get("id"), "data": task["data"], "annotation": annotation}
                if not isinstance(annotation, dict):
                    out.append(reject("judgment", "", "malformed-record", "an annotation that is not an object", source, record))
                    continue
                results = annotation.get("result")
                if results is not None and not isinstance(results, list):
                    detail = f"result is a JSON {type(results).__name__}, not a list"
                    out.append(reject("judgment", "", "malformed-record", detail, source, record))
                    continue
                values = {
                    "item_id": task["data"].get("item_id"),
                    "batch_id": task["data"].get("batch_id"),
                    "worker": _worker(annotation.get("completed_by")),
                    "seconds": annotation.get("lead_time"),
                    "time": annotation.get("created_at"),
                    **_result_values(results or []),
                }
                if unencodable := _lone_surrogate(_canonical(values)):
                    out.append(reject("judgment", "", "malformed-record", unencodable, source, record))
                    continue
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


class DatabaseFormat(JudgmentFormat):
    """A judgment format whose ``--judgments`` names databases, not files (the import source asks
    it for :meth:`read_database`)."""

    @abstractmethod
    def read_database(self, location: str) -> list[RawJudgment | Rejected]: ...

    def read(self, name: str, data: bytes) -> list[RawJudgment | Rejected]:
        raise JudgmentFileError(f"{name}: this format reads a database; give its path or URL as --judgments")


@JUDGMENT_FORMATS.register("store")
class StoreJudgments(DatabaseFormat):
    """The rater app's database (``crisscross serve --db``): each judgment names its item, batch
    and position, the rater as ``worker``, the score or answer, seconds on the item and the
    submission time.  The source of a record is ``<database>:<batch_id>:<position>:<worker>``."""

    def read_database(self, location: str) -> list[RawJudgment | Rejected]:
        name = redact(location)
        rows = open_store(location).judgments()
        return [
            RawJudgment(f"{name}:{row['batch_id']}:{row['position']}:{row['worker']}", (name, n, 0), _canonical(row), row)
            for n, row in enumerate(rows)
        ]
