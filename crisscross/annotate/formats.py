"""Annotation files: task formats out to raters, judgment formats back in, each chosen by name.

Export (:data:`TASK_FORMATS`): :func:`export_tasks` turns the tasks table into the files of one
format, ``{relative path: bytes}``, so a stage can write them atomically.  Every batch is
self-contained (ids, caption text, image path or URI as the images table gives it, instructions,
``replicas``: how many raters do the batch).  Gold flags and sampling methods are never in a
rater-facing file (a method named ``gold`` would give them away): every format gets the same
``answer_key.csv`` beside it, listing the gold items, for the people running the round.
BISON items also carry their options (CHOOSE: the target's captions; VERIFY-TRIPLE: the target
and decoy images in the seeded order of :func:`~crisscross.formats.schema.decoy_first`), each
with the answer picking it gives.

Import (:data:`JUDGMENT_FORMATS`): ``read(name, data)`` parses one file's bytes into
:class:`RawJudgment` records, each with its ``source`` (``file:line``, or an element path inside a
JSON document) and canonical value names; a record that cannot be parsed at all, or whose values
hold text UTF-8 cannot encode (a JSON ``\\udXXX`` half surrogate pair), becomes a
``Rejected`` (``malformed-record``); a file that cannot be read at all raises :class:`JudgmentFileError`
with a one-line message naming it, and no other exception leaves a reader, whatever the bytes
(``tests/annotate/test_fuzz_judgment_formats.py``).  Values are passed on as written:
:mod:`crisscross.annotate.validate` checks them.  A record names its item by ``item_id``, by ``task_type`` + ``id_a`` + ``id_b``, or by
``batch_id`` + ``position``.

``store`` reads the rater app's database (:mod:`crisscross.annotate.store`) instead of files: its
``--judgments`` values are database locations (a SQLite path or a ``postgresql://`` URL), one
record per stored judgment, validated like any file's.

Safety: every CSV goes through :func:`crisscross.core.io.csv_bytes`, which prefixes a cell that
would start a spreadsheet formula with ``'``; the crowd-csv caption and image cells are also
HTML-escaped, since crowd platforms paste ``${…}`` values raw into the task page.  Readers keep
values as the file gives them: a guarded cell that comes back (``'=cmd`` as a worker id) is not
un-guarded, and validation sees exactly what the platform wrote.
"""

from __future__ import annotations

import csv
import html
import io
import json
import re
from abc import ABC, abstractmethod
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any
from xml.sax.saxutils import quoteattr

import pyarrow as pa

from crisscross.annotate.catalog import Catalog
from crisscross.annotate.instructions import INSTRUCTIONS, VERIFY_MEANINGS
from crisscross.annotate.presentation import PRESENTATIONS
from crisscross.annotate.store import open_store, redact
from crisscross.core.errors import UserError
from crisscross.core.ids import CAPTION_KIND, split_id
from crisscross.core.io import csv_bytes
from crisscross.core.quarantine import Rejected, reject
from crisscross.core.registry import Registry
from crisscross.formats.schema import (
    BISON_TYPES,
    GOLD_NEGATIVE,
    GOLD_POSITIVE,
    SCORE_MAX,
    SCORE_MIN,
    TASK_TYPES,
    VERIFY_ANSWERS,
    task_type,
)

ANSWER_KEY = "answer_key.csv"
SCORE_CONTROL = "score"  # Label Studio control names; the reader looks for these in results
ANSWER_CONTROL = "answer"
# Canonical value names a reader may fill (``batch_seconds``: time for the whole batch, which
# validation divides by the batch's number of items).
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
    "time",
)


class ExportError(UserError, ValueError):
    """The tasks table names ids raters cannot be shown."""


class JudgmentFileError(UserError, ValueError):
    """A whole judgments file is unusable (not UTF-8, not the document it should be)."""


# ---------------------------------------------------------------------------- export


@dataclass(frozen=True)
class Side:
    id: str
    field: str  # "text" or "image"
    value: str  # caption text, or image path / URI
    answer: str = ""  # options only: the answer a rater gives by picking this option


@dataclass(frozen=True)
class BatchItem:
    item_id: str
    position: int
    a: Side
    b: Side
    # BISON: CHOOSE lists the target's captions (answer: the caption id); VERIFY-TRIPLE shows the
    # target and decoy images in a seeded order (answer: target / decoy).
    options: tuple[Side, ...] = ()


@dataclass(frozen=True)
class Batch:
    batch_id: str
    task_type: str
    items: tuple[BatchItem, ...]  # by position


def _side(value: str, catalog: Catalog, answer: str = "") -> Side:
    if split_id(value)[1] == CAPTION_KIND:
        return Side(value, "text", catalog.texts[value], answer)
    return Side(value, "image", catalog.paths[value], answer)


def _options(row: dict[str, Any], catalog: Catalog, seed: int) -> tuple[Side, ...]:
    """The options of an item as its type presents them (see :class:`BatchItem`)."""
    options = PRESENTATIONS[row["task_type"]].options(row["item_id"], row["id_a"], row["id_b"], catalog, seed)
    return tuple(_side(option.shows, catalog, option.answer) for option in options)


def _shown(row: dict[str, Any], catalog: Catalog) -> tuple[str, ...]:
    """Every id a task row shows raters (a VERIFY-TRIPLE's target image too)."""
    return PRESENTATIONS[row["task_type"]].shown(row["id_a"], row["id_b"], catalog)


def batches(tasks: pa.Table, catalog: Catalog, seed: int = 0) -> list[Batch]:
    """The tasks table as batches sorted by id, items by position; every id must be showable.
    ``seed`` (``base.seed``) orders the two images of each VERIFY-TRIPLE item."""
    rows = sorted(tasks.to_pylist(), key=lambda r: (r["batch_id"], r["position"]))
    problems = sorted({(v, p[1]) for r in rows for v in _shown(r, catalog) if (p := catalog.problem(v))})
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
        items = tuple(
            BatchItem(r["item_id"], r["position"], _side(r["id_a"], catalog), _side(r["id_b"], catalog), _options(r, catalog, seed))
            for r in members
        )
        out.append(Batch(batch_id, kinds.pop(), items))
    return out


def answer_key(tasks: pa.Table) -> bytes:
    """CSV of the gold items (batch_id, position, item_id, task_type, id_a, id_b, gold)."""
    columns = ["batch_id", "position", "item_id", "task_type", "id_a", "id_b", "gold"]
    rows = sorted(
        (r for r in tasks.select(columns).to_pylist() if r["gold"] in (GOLD_POSITIVE, GOLD_NEGATIVE)),
        key=lambda r: (r["batch_id"], r["position"]),
    )
    return csv_bytes(columns, ([r[c] for c in columns] for r in rows))


class TaskFormat(ABC):
    """Writes batches as one platform's files."""

    @abstractmethod
    def write(self, batches: Sequence[Batch], replicas: int) -> dict[str, bytes]: ...


TASK_FORMATS: Registry[TaskFormat] = Registry("task format")


def export_tasks(spec: str, tasks: pa.Table, catalog: Catalog, replicas: int, seed: int = 0) -> dict[str, bytes]:
    """The files of format ``spec`` for the tasks table, plus ``answer_key.csv``, by path."""
    if replicas < 1:
        raise ValueError(f"replicas must be at least 1, got {replicas}")
    files = TASK_FORMATS.create(spec).write(batches(tasks, catalog, seed), replicas)
    files[ANSWER_KEY] = answer_key(tasks)
    return dict(sorted(files.items()))


@TASK_FORMATS.register("jsonl")
class JsonlTasks(TaskFormat):
    """``batches.jsonl``: one object per batch (batch_id, task_type, instructions, replicas,
    items [{item_id, position, a: {id, text | image}, b: {…}}]; BISON items also ``options``
    [{id, text | image, answer}] in the order to show them, ``answer`` being what picking one
    answers).  Values are raw text: a custom tool that shows them in a page must escape them itself."""

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
                            **({"options": [{"id": o.id, o.field: o.value, "answer": o.answer} for o in i.options]} if i.options else {}),
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

    Crowd platforms substitute ``${item_<i>_a_text}`` into the task's HTML as it is, so caption
    text and image paths / URIs are written HTML-escaped (``html.escape(quote=True)``: ``<`` →
    ``&lt;``, ``"`` → ``&quot;``, …); the browser shows them as written, and an escaped URI in a
    ``src="…"`` attribute resolves to the same address.  Ids are written as they are, since
    results files echo them back for matching (canonical and item ids hold no markup in practice).
    A caption starting with ``=``, ``+``, ``-`` or ``@`` also gets :func:`~crisscross.core.io.csv_bytes`'s
    leading ``'``, which the page then shows.

    BISON types add, for j = 1 … the most options of an item, ``item_<i>_option_<j>_<text|image>``
    and ``item_<i>_option_<j>_answer`` (the value a radio button under that option submits: the
    caption id for CHOOSE, target / decoy for VERIFY-TRIPLE, in the order to show them).
    """

    def write(self, batches: Sequence[Batch], replicas: int) -> dict[str, bytes]:
        files = {}
        for kind in TASK_TYPES:
            of_kind = [b for b in batches if b.task_type == kind]
            if not of_kind:
                continue
            fields = tuple("text" if k == CAPTION_KIND else "image" for k in task_type(kind).kinds)
            width = max(len(b.items) for b in of_kind)
            n_options = max(len(i.options) for b in of_kind for i in b.items)
            option_field = next((o.field for b in of_kind for i in b.items for o in i.options), "image")  # captions or images
            header = ["batch_id", "task_type", "replicas", "n_items"]
            for i in range(1, width + 1):
                header += [f"item_{i}_id", f"item_{i}_a_{fields[0]}", f"item_{i}_b_{fields[1]}"]
                for j in range(1, n_options + 1):
                    header += [f"item_{i}_option_{j}_{option_field}", f"item_{i}_option_{j}_answer"]
            rows = []
            for b in of_kind:
                cells: list[object] = [b.batch_id, b.task_type, replicas, len(b.items)]
                for i in b.items:
                    cells += [i.item_id, html_text(i.a.value), html_text(i.b.value)]
                    options = [[html_text(o.value), o.answer] for o in i.options]
                    cells += [cell for pair in options + [["", ""]] * (n_options - len(options)) for cell in pair]
                rows.append(cells + [""] * (len(header) - len(cells)))
            files[f"{kind.lower()}.csv"] = csv_bytes(header, rows)
            files[f"{kind.lower()}.instructions.txt"] = (INSTRUCTIONS[kind] + "\n").encode()
        return files


def html_text(value: str) -> str:
    """``value`` as HTML text or a quoted attribute value, for templates that substitute it raw."""
    return html.escape(value, quote=True)


@TASK_FORMATS.register("label-studio")
class LabelStudioTasks(TaskFormat):
    """Per task type, one Label Studio project: ``<type>/tasks.json`` (one task per item,
    ``data`` = item_id, batch_id, position, task_type, replicas, text_a | image_a, text_b |
    image_b) and ``<type>/config.xml`` (instructions; a ``<Number>`` 0–5 step 0.1 named
    ``score`` for ratings, ``<Choices>`` of the four answers named ``answer`` for VERIFY).

    Label Studio has no per-task replication: set the project's overlap (maximum annotations
    per task) to ``replicas``.  Image values are used as given, so local paths need Label Studio's
    local-files storage or a URI prefix applied before export.

    ``data`` values are not HTML-escaped: the ``<Text>`` tag renders ``$text_a`` as plain text
    (escaping would show raters ``&lt;``) and ``<Image>`` takes its value as a URL.  Do not
    switch the config to ``<HyperText>``, which renders its value as HTML.

    BISON batches are refused (:class:`ExportError`): a Label Studio choice is a fixed label or
    rendered HTML, so it can neither name a per-item caption id nor show caption text safely.
    """

    def write(self, batches: Sequence[Batch], replicas: int) -> dict[str, bytes]:
        bison = sorted({b.task_type for b in batches if b.task_type in BISON_TYPES})
        if bison:
            raise ExportError(f"label-studio cannot show {', '.join(bison)} items; export them as jsonl or crowd-csv (tasks.formats)")
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
        control = f'  <Number name="{SCORE_CONTROL}" toName="{target}" min="{SCORE_MIN:g}" max="{SCORE_MAX:g}" step="0.1" required="true"/>'
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


def _as_record(value: object) -> object:
    """``value`` for :func:`reject`, which takes a string as JSON already: a line or element that
    is a string is kept as a JSON string, so every quarantine record parses as JSON."""
    return json.dumps(value) if isinstance(value, str) else value


def _malformed(name: str, line: int, detail: str, record: object) -> Rejected:
    return reject("judgment", "", "malformed-record", detail, f"{name}:{line}", _as_record(record))


def _first_line(error: BaseException) -> str:
    """An exception's message as one line, for a :class:`JudgmentFileError` or a reject's detail."""
    lines = str(error).strip().splitlines()
    return lines[0] if lines else type(error).__name__


# What ``json.loads`` raises for text that is no usable JSON: JSONDecodeError (a ValueError), a
# plain ValueError for an integer longer than Python converts (4300 digits), RecursionError for
# nesting deeper than the interpreter's recursion limit.
_JSON_ERRORS = (ValueError, RecursionError)


def _csv_table(name: str, data: bytes) -> tuple[list[str] | None, Iterator[tuple[int, dict[str, str] | Rejected]]]:
    """The header (None for an empty file) and (first physical line, row by header) for each CSV
    record after it.  A record the csv module cannot parse (a cell over its field limit, a stray
    carriage return) or whose cell count differs from the header's is a ``malformed-record``;
    a header that cannot be parsed makes the file unusable."""
    fed: list[str] = []  # physical lines the parser took for the record being read

    def lines() -> Iterator[str]:
        for line in io.StringIO(_text(name, data), newline=""):
            fed.append(line)
            yield line

    reader = csv.reader(lines())
    try:
        header = next(reader, None)
    except csv.Error as error:
        raise JudgmentFileError(f"{name}: the header line is not readable CSV ({_first_line(error)})") from error

    def rows(header: list[str]) -> Iterator[tuple[int, dict[str, str] | Rejected]]:
        while True:
            line = reader.line_num + 1
            fed.clear()
            try:
                cells = next(reader)
            except StopIteration:
                return
            except csv.Error as error:
                yield line, _malformed(name, line, f"not readable CSV: {_first_line(error)}", {"text": "".join(fed)})
                continue
            if cells and len(cells) != len(header):
                detail = f"{len(cells)} cells but the header has {len(header)}"
                yield line, _malformed(name, line, detail, {"cells": cells})
            elif cells:
                yield line, dict(zip(header, cells, strict=True))

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
            except _JSON_ERRORS as error:
                out.append(_malformed(name, line, f"not JSON: {_first_line(error)}", text))
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
        try:
            document = json.loads(_text(name, data))
        except _JSON_ERRORS as error:
            raise JudgmentFileError(f"{name}: not a JSON document ({_first_line(error)})") from error
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
