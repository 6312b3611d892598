"""Rejected records: every record a stage does not keep is kept here, with a reason.

Reasons are short stable codes (``null-text``, ``unknown-image``) so reports can count them, plus
a human ``detail``; ``source`` says where the record came from (``file:line`` or a table name).
"""

from __future__ import annotations

import json
import os
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from json.encoder import encode_basestring_ascii
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from crisscross.core.errors import UserError


@dataclass(frozen=True, order=True)
class Rejected:
    kind: str  # what was rejected: "caption", "image", "row", "vector"
    key: str  # its id when it has one, else ""
    reason: str  # stable code, e.g. "null-text"
    detail: str  # what exactly was wrong, for a person
    source: str  # "file:line", or the table / encoder it came from
    record: str  # the original record as JSON, so nothing is lost

    def counts(self) -> Counter[tuple[str, str]]:
        """How many rejects it is by (kind, reason): one."""
        return Counter({(self.kind, self.reason): 1})


QUARANTINE_SCHEMA = pa.schema([(name, pa.string()) for name in Rejected.__dataclass_fields__])
_RECORD_JSON = json.JSONEncoder(sort_keys=True, default=str).encode  # what json.dumps would build anew for every record


def reject(kind: str, key: object, reason: str, detail: str, source: str, record: object) -> Rejected:
    """Build a :class:`Rejected`, serialising the original record to JSON."""
    return Rejected(kind=kind, key=_key_text(key), reason=reason, detail=detail, source=source, record=_record_text(record))


def _key_text(key: object) -> str:
    return "" if key is None else str(key)


def _record_text(record: object) -> str:
    """The original record as JSON with sorted keys (what JSON cannot say, as its ``str``); text as it is."""
    return record if isinstance(record, str) else _RECORD_JSON(record)


@dataclass(frozen=True)
class RejectedBatch:
    """Many rejects as one table (:data:`QUARANTINE_SCHEMA`), routed, counted and written as one
    element: a step refusing most of a large table (tasks: the candidate pairs of images without
    pixels) then builds no object per record, and the runner moves one element, not one per reject."""

    table: pa.Table

    def counts(self) -> Counter[tuple[str, str]]:
        """How many rejects it holds by (kind, reason)."""
        groups = self.table.group_by(["kind", "reason"]).aggregate([([], "count_all")]).to_pydict()
        return Counter(dict(zip(zip(groups["kind"], groups["reason"], strict=True), groups["count_all"], strict=True)))

    def rejected(self) -> list[Rejected]:
        """Its rejects as objects, in its order, for a caller that looks at them one by one."""
        return [Rejected(**row) for row in self.table.to_pylist()]


def rejected_batch(
    kind: str, keys: list[str], reasons: list[str], details: list[str], sources: pa.Array, records: pa.Table
) -> RejectedBatch:
    """Rejects of one ``kind`` from their columns, each as :func:`reject` makes it from its row of
    ``records`` (the rows refused, as read)."""
    columns = [pa.array([kind] * len(keys), pa.string()), keys, reasons, details, sources, records_json(records)]
    return RejectedBatch(pa.table(columns, schema=QUARANTINE_SCHEMA))


# Text JSON writes between its quotes as it is but for the quote and the backslash (printable ASCII).
_PRINTABLE_ASCII = r"^[\x20-\x7e]*$"


def records_json(table: pa.Table) -> pa.Array:
    """Each row of ``table`` as :func:`reject` writes the row's dict (``to_pylist``), byte for byte:
    a table of text columns is joined in Arrow, column by column, since the JSON encoder over a
    dict per row took a sixth of the ``tasks`` stage when most of COCO's candidates are refused."""
    names, types = table.column_names, table.schema.types
    if not names or len(set(names)) < len(names) or not all(pa.types.is_string(t) or pa.types.is_large_string(t) for t in types):
        return pa.array([_record_text(row) for row in table.to_pylist()], pa.string())
    pieces: list[Any] = []
    for n, name in enumerate(sorted(names)):
        pieces += [("{" if n == 0 else ", ") + _RECORD_JSON(name) + ": ", _json_text(table.column(name))]
    return pc.binary_join_element_wise(*pieces, "}", "")


def _json_text(column: pa.ChunkedArray) -> pa.Array:
    """Each value of a text column as JSON writes it (``null`` for a missing one): most between
    quotes as they are; printable ASCII with quotes or backslashes (provenance, itself JSON) with
    those two escaped in Arrow, as json's escaper does; the rest through json's own escaper."""
    values = column.cast(pa.string()).combine_chunks()
    printable = pc.fill_null(pc.match_substring_regex(values, _PRINTABLE_ASCII), True)
    backslashed = pc.replace_substring(pc.replace_substring(values, "\\", "\\\\"), '"', '\\"')
    quoted = pc.binary_join_element_wise('"', pc.if_else(printable, backslashed, values), '"', "")
    escaped = pc.invert(printable)
    if pc.any(escaped).as_py():
        texts = [encode_basestring_ascii(value) for value in pc.filter(values, escaped).to_pylist()]
        quoted = pc.replace_with_mask(quoted, escaped, pa.array(texts, pa.string()))
    return pc.fill_null(quoted, "null")


def relative_source(source: str, root: str) -> str:
    """A ``path`` or ``path:where`` source with an absolute local path, relative to ``root``."""
    path, colon, where = source.partition(":")
    return os.path.relpath(path, root) + colon + where if os.path.isabs(path) else source


def rejected_rows(rejected: Iterable[Rejected | RejectedBatch], root: str | None = None) -> pa.Table:
    """Rows of the single rejects in the given order, then the batches' in theirs; with ``root``
    (the launching directory: workers read absolute paths) sources name files relative to it, so
    the bytes do not depend on where the project lives."""
    rows: list[Rejected] = []
    batches: list[pa.Table] = []
    for r in rejected:
        if isinstance(r, RejectedBatch):
            batches.append(r.table)
        else:
            rows.append(r)
    single = pa.table({name: [getattr(r, name) for r in rows] for name in QUARANTINE_SCHEMA.names}, schema=QUARANTINE_SCHEMA)
    table = pa.concat_tables([single, *batches]).combine_chunks() if batches else single
    if not root:
        return table
    sources = table.column("source").combine_chunks()
    absolute = pc.starts_with(sources, "/")  # what os.path.isabs finds; most sources name a file only
    if pc.any(absolute).as_py():
        relative = [relative_source(source, root) for source in pc.filter(sources, absolute).to_pylist()]
        sources = pc.replace_with_mask(sources, absolute, pa.array(relative, pa.string()))
        table = table.set_column(QUARANTINE_SCHEMA.get_field_index("source"), "source", sources)
    return table


def sorted_quarantine(parts: Iterable[pa.Table]) -> pa.Table:
    """Parts of :func:`rejected_rows` as one table in one chunk, sorted by every column in turn, as
    :class:`Rejected` objects order (UTF-8 bytes sort as code points do), so the table is the same
    bytes whatever order the runner produced them in."""
    table = pa.concat_tables([QUARANTINE_SCHEMA.empty_table(), *parts])
    return table.sort_by([(name, "ascending") for name in QUARANTINE_SCHEMA.names]).combine_chunks()


def quarantine_table(rejected: Iterable[Rejected], root: str | None = None) -> pa.Table:
    """The quarantine of ``rejected``: :func:`rejected_rows`, sorted (:func:`sorted_quarantine`)."""
    return sorted_quarantine([rejected_rows(rejected, root)])


def count_reasons(kinds_and_reasons: Iterable[tuple[str, str]]) -> dict[str, dict[str, int]]:
    """``{kind: {reason: n}}``, sorted, for reports, from each reject's (kind, reason)."""
    counts = Counter(kinds_and_reasons)
    out: dict[str, dict[str, int]] = {}
    for (kind, reason), n in sorted(counts.items()):
        out.setdefault(kind, {})[reason] = n
    return out


class RejectionError(UserError, RuntimeError):
    """Raised under ``--strict`` when a stage rejected anything."""

    def __init__(self, stage: str, counts: Mapping[str, Mapping[str, int]], where: str) -> None:
        lines = [f"{kind} {reason}: {n}" for kind, reasons in counts.items() for reason, n in reasons.items()]
        super().__init__(f"{stage}: --strict and records were rejected ({'; '.join(lines)}); see {where}")
