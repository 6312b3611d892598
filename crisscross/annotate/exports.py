"""Task files out to raters, one format each, chosen by name (:data:`TASK_FORMATS`).

:func:`export_tasks` turns the tasks table into the files of the formats a stage names, each
``(path under export/<format>/, bytes)``, so a stage can write them atomically; the batches are
built once for all formats.  Every batch is self-contained (ids, caption text,
image path or URI as the images table gives it, instructions, ``replicas``: how many raters do the
batch).  Gold flags and sampling methods are never in a rater-facing file (a method named ``gold``
would give them away): the stage writes one ``answer_key.csv`` (:func:`answer_key`) beside them, listing the gold
items, for the people running the round.  BISON items also carry their options as their type
presents them (``TaskType.options``: CHOOSE the target's captions,
VERIFY-TRIPLE the target and decoy images in their seeded order), each with the answer picking
it gives.  The judgments coming back are read by :mod:`crisscross.annotate.formats`.

Safety: every CSV goes through :func:`crisscross.core.io.csv_bytes`, which prefixes a cell that
would start a spreadsheet formula with ``'``; the crowd-csv caption and image cells are also
HTML-escaped, since crowd platforms paste ``${…}`` values raw into the task page.
"""

from __future__ import annotations

import html
import json
from abc import ABC, abstractmethod
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any
from xml.sax.saxutils import quoteattr

import pyarrow as pa

from crisscross.annotate.catalog import Catalog
from crisscross.core.errors import UserError
from crisscross.core.ids import CAPTION_KIND, split_id
from crisscross.core.io import csv_bytes
from crisscross.core.registry import Registry
from crisscross.formats.schema import GOLD_NEGATIVE, GOLD_POSITIVE
from crisscross.tasktypes import task_type, task_types
from crisscross.tasktypes.base import side_field

ANSWER_KEY = "answer_key.csv"
SCORE_CONTROL = "score"  # Label Studio control names; the reader looks for these in results
ANSWER_CONTROL = "answer"
EXPORT = "export"  # a stage's folder of task files, one subfolder per format
_JSON = json.JSONEncoder(sort_keys=True, ensure_ascii=False)  # one for every batch: json.dumps builds one per call
_FLAT = json.JSONEncoder(sort_keys=True, ensure_ascii=False, separators=(",\n   ", ": "))  # see studio_json


class ExportError(UserError, ValueError):
    """The tasks table names ids raters cannot be shown."""


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
    options = task_type(row["task_type"]).options(row["item_id"], row["id_a"], row["id_b"], catalog, seed)
    return tuple(_side(option.shows, catalog, option.answer) for option in options)


def _shown(row: dict[str, Any], catalog: Catalog) -> tuple[str, ...]:
    """Every id a task row shows raters (a VERIFY-TRIPLE's target image too)."""
    return task_type(row["task_type"]).shown(row["id_a"], row["id_b"], catalog)


def batches(tasks: pa.Table, catalog: Catalog, seed: int = 0) -> list[Batch]:
    """The tasks table as batches sorted by id, items by position; every id must be showable.
    ``seed`` (``base.seed``) orders the two images of each VERIFY-TRIPLE item."""
    rows = sorted(tasks.to_pylist(), key=lambda r: (r["batch_id"], r["position"]))
    shown = {v for r in rows for v in _shown(r, catalog)}  # each id checked once, however many rows show it
    problems = sorted({(v, p[1]) for v in shown if (p := catalog.problem(v))})
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


def export_tasks(specs: Sequence[str], tasks: pa.Table, catalog: Catalog, replicas: int, seed: int = 0) -> Iterator[tuple[str, bytes]]:
    """The files of every format in ``specs`` for the tasks table, by path in a stage's output
    (``export/<format>/…``).  The batches are built and checked once, here, for all formats; each
    format's files are made as the caller reaches them, so only one format is held at a time."""
    if replicas < 1:
        raise ValueError(f"replicas must be at least 1, got {replicas}")
    shown = batches(tasks, catalog, seed) if specs else []  # no format: nothing shown, nothing to check
    return (
        (f"{EXPORT}/{spec}/{relative}", data)
        for spec in specs
        for relative, data in sorted(TASK_FORMATS.create(spec).write(shown, replicas).items())
    )


@TASK_FORMATS.register("jsonl")
class JsonlTasks(TaskFormat):
    """``batches.jsonl``: one object per batch (batch_id, task_type, instructions, replicas,
    items [{item_id, position, a: {id, text | image}, b: {…}}]; BISON items also ``options``
    [{id, text | image, answer}] in the order to show them, ``answer`` being what picking one
    answers).  Values are raw text: a custom tool that shows them in a page must escape them itself."""

    def write(self, batches: Sequence[Batch], replicas: int) -> dict[str, bytes]:
        lines = [
            _JSON.encode(
                {
                    "batch_id": b.batch_id,
                    "task_type": b.task_type,
                    "instructions": task_type(b.task_type).instructions,
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
                }
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
        for kind in task_types():
            of_kind = [b for b in batches if b.task_type == kind.name]
            if not of_kind:
                continue
            fields = tuple(side_field(k) for k in kind.kinds)
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
            files[f"{kind.prefix}.csv"] = csv_bytes(header, rows)
            files[f"{kind.prefix}.instructions.txt"] = (kind.instructions + "\n").encode()
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

    Types whose items bring their own options (BISON's) are refused (:class:`ExportError`): a
    Label Studio choice is a fixed label or rendered HTML, so it can neither name a per-item caption
    id nor show caption text safely.
    """

    def write(self, batches: Sequence[Batch], replicas: int) -> dict[str, bytes]:
        present = [kind for kind in task_types() if any(b.task_type == kind.name for b in batches)]
        own_options = [kind.name for kind in present if kind.scale is None and kind.batch_answers() is None]
        if own_options:
            raise ExportError(f"label-studio cannot show {', '.join(own_options)} items; export them as jsonl or crowd-csv (tasks.formats)")
        files = {}
        for kind in present:
            data = [
                {
                    "item_id": i.item_id,
                    "batch_id": b.batch_id,
                    "position": i.position,
                    "task_type": b.task_type,
                    "replicas": replicas,
                    f"{i.a.field}_a": i.a.value,
                    f"{i.b.field}_b": i.b.value,
                }
                for b in batches
                if b.task_type == kind.name
                for i in b.items
            ]
            files[f"{kind.prefix}/tasks.json"] = (studio_json(data) + "\n").encode()
            files[f"{kind.prefix}/config.xml"] = label_studio_config(kind.name).encode()
        return files


def studio_json(data: Sequence[Mapping[str, str | int]]) -> str:
    """``json.dumps([{"data": d} for d in data], sort_keys=True, ensure_ascii=False, indent=1)``
    for non-empty flat ``d``, its layout written here around the C encoder's ``_FLAT`` output:
    with ``indent`` json falls back to its pure-Python encoder, ~2.5x slower."""
    if not data:
        return "[]"
    return "[\n" + ",\n".join(f' {{\n  "data": {{\n   {_FLAT.encode(d)[1:-1]}\n  }}\n }}' for d in data) + "\n]"


def label_studio_config(kind: str) -> str:
    """The labeling config of one task type: instructions, the two sides, the rating control."""
    info = task_type(kind)
    objects = []
    for side, id_kind in zip("ab", info.kinds, strict=True):
        field = side_field(id_kind)
        objects.append(f"  <{field.capitalize()} name={quoteattr(f'{field}_{side}')} value={quoteattr(f'${field}_{side}')}/>")
    target = f"{side_field(info.kinds[0])}_a"
    if info.scale is not None:
        low, high = info.scale.low, info.scale.high
        control = f'  <Number name="{SCORE_CONTROL}" toName="{target}" min="{low:g}" max="{high:g}" step="0.1" required="true"/>'
    else:
        choices = "\n".join(f"    <Choice value={quoteattr(a)} hint={quoteattr(info.meanings[a])}/>" for a in info.answers)
        control = f'  <Choices name="{ANSWER_CONTROL}" toName="{target}" choice="single" required="true">\n{choices}\n  </Choices>'
    instructions = f'  <View style="white-space: pre-wrap">\n    <Header size="5" value={quoteattr(info.instructions)}/>\n  </View>'
    return "\n".join(["<View>", instructions, *objects, control, "</View>", ""])
