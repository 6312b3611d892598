"""The Crisscrossed Captions release format: ``{sts,sis,sits}_<split>.csv``.

One spec, one reader (with its validation) and one writer for the files CxC published, used by
the ``cxc:<folder>`` ground truth, the replay provider, the sampling stage's candidate CSVs and
the aggregate stage's rated CSVs.  In the files ids have their published COCO forms
(``COCO_val2014_%012d.jpg``, ``COCO_val2014:sentid:N``); in memory they are canonical ``coco:``
ids, in file orientation (the first id is the rated pair's query).
"""

from __future__ import annotations

import functools
import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from io import StringIO
from pathlib import Path
from typing import Any

import pandas as pd
import pyarrow as pa

from crisscross.core import io
from crisscross.core.csv_records import csv_records
from crisscross.core.errors import InputError, one_line
from crisscross.core.ids import CocoIdScheme, IdFormError, published
from crisscross.core.quarantine import Rejected, reject
from crisscross.formats.schema import item_id
from crisscross.tasktypes import task_type
from crisscross.tasktypes.base import SCORE_MAX, SCORE_MIN
from crisscross.tasktypes.sis import SIS
from crisscross.tasktypes.sits import SITS
from crisscross.tasktypes.sts import STS

CXC_SPLITS = ("test", "val")
SCORE = "agg_score"
METHOD = "sampling_method"
ROW_COLUMNS = ("id_a", "id_b", "score", "sampling_method", "where")
_COCO = CocoIdScheme()


@dataclass(frozen=True)
class CxcFile:
    """One release file: its task type and id columns (their kinds are the task type's)."""

    task: str
    columns: tuple[str, str]

    @property
    def kinds(self) -> tuple[str, str]:
        return task_type(self.task).kinds

    def name(self, split: str) -> str:
        return f"{self.task.lower()}_{split}.csv"


CXC_FILES = {
    STS.name: CxcFile(STS.name, ("caption1", "caption2")),
    SIS.name: CxcFile(SIS.name, ("image1", "image2")),
    SITS.name: CxcFile(SITS.name, ("caption", "image")),
}


def check_split(split: str) -> str:
    if split not in CXC_SPLITS:
        raise ValueError(f"CxC split must be one of {CXC_SPLITS}, got {split!r}")
    return split


def read_cxc_file(path: str | Path, task: str) -> tuple[pd.DataFrame, list[Rejected]]:
    """One release CSV → its usable rows (``ROW_COLUMNS``, file order) and every other row.

    Records the csv module cannot read, rows with missing or extra fields or no sampling method
    (``malformed-row``), ids that are not COCO ids of the column's kind (``bad-id``), scores that
    are not finite numbers (``bad-score``) or lie outside 0–5 (``score-out-of-range``) are
    rejected.  A file that is not UTF-8 (a BOM is allowed), whose header line is no CSV or lacks a
    column, or that is not a regular file raises :class:`InputError` naming it.
    """
    path = Path(path)
    spec = CXC_FILES[task]
    needed = [*spec.columns, SCORE, METHOD]
    rows: list[tuple[str, str, float, str, str]] = []
    rejected: list[Rejected] = []
    parse = functools.cache(_COCO.parse)  # each id is on many rows: parsed once per file
    try:
        text = io.read_bytes(str(path)).decode("utf-8-sig")
    except UnicodeDecodeError as error:
        raise InputError(f"{path}: not UTF-8 ({error})") from error
    with StringIO(text, newline="") as handle:
        records = csv_records(enumerate(handle, start=1))
        first = next(records, None)
        if first is not None and first.error is not None:
            raise InputError(f"{path}: the header line is not readable CSV ({one_line(first.error)})")
        header = first.cells if first is not None else None
        absent = [c for c in needed if c not in (header or [])]
        if absent:
            raise InputError(f"{path}: header lacks columns {absent}; it has {str(header)[:200]}")
        for record in records:
            if record.cells == []:
                continue  # a blank line holds no row
            where = f"{path.name}:{record.line}"
            row = _by_header(header, record.cells) if record.cells is not None else {"text": record.text}
            problem = f"not readable CSV: {record.error}" if record.error is not None else _row_problem(row, needed)
            if problem:
                rejected.append(reject("row", "", "malformed-row", problem, where, row))
                continue
            try:
                a, b = (parse(row[c], k) for c, k in zip(spec.columns, spec.kinds, strict=True))
            except IdFormError as error:
                rejected.append(reject("row", "", "bad-id", str(error), where, row))
                continue
            try:
                score = float(row[SCORE])
            except ValueError:
                score = math.nan
            if not math.isfinite(score):
                detail = f"{SCORE} {row[SCORE]!r} is not a finite number"
                rejected.append(reject("row", item_id(task, a, b), "bad-score", detail, where, row))
                continue
            if not SCORE_MIN <= score <= SCORE_MAX:
                detail = f"{SCORE} {score} outside [{SCORE_MIN}, {SCORE_MAX}]"
                rejected.append(reject("row", item_id(task, a, b), "score-out-of-range", detail, where, row))
                continue
            rows.append((a, b, score, row[METHOD].strip(), where))
    return pd.DataFrame(rows, columns=list(ROW_COLUMNS)), rejected


def _by_header(header: list[str], cells: list[str]) -> dict[str, Any]:
    """A row by column name, as ``csv.DictReader`` gives it: cells past the header under
    ``_extra``, columns past the cells None."""
    row: dict[str, Any] = dict(zip(header, cells, strict=False))
    if len(cells) > len(header):
        row["_extra"] = cells[len(header) :]
    row.update({column: None for column in header[len(cells) :]})
    return row


def _row_problem(row: Mapping[str, Any], needed: list[str]) -> str:
    """Why a CSV row is malformed ('' when it is not): extra or missing fields, no sampling method."""
    if "_extra" in row:
        return f"{len(row['_extra'])} more fields than the header"
    short = [c for c in needed if row.get(c) is None]
    if short:
        return f"fewer fields than the header: no {short}"
    if not row[METHOD].strip():
        return "empty sampling_method"
    return ""


def candidates_csv(task: str, first: pa.ChunkedArray, second: pa.ChunkedArray, methods: pa.ChunkedArray) -> bytes:
    """:func:`cxc_csv`'s candidate shape (ids and sampling method, no score yet) from columns whose
    ids are already in their published form."""
    return io.text_columns_csv_bytes([*CXC_FILES[task].columns, METHOD], [first, second, methods])


def cxc_csv(task: str, rows: Iterable[tuple[str, str, float | None, str]], *, scored: bool = True) -> bytes:
    """Rows ``(canonical a, canonical b, agg_score, sampling_method)`` in the release shape.

    Scores are written to six significant digits; ``scored=False`` writes the candidate shape
    (ids and sampling method, no score yet).
    """
    spec = CXC_FILES[task]
    header = [*spec.columns, *([SCORE] if scored else []), METHOD]
    body = (
        [published(a, spec.kinds[0]), published(b, spec.kinds[1]), *([f"{score:.6g}"] if scored else []), method]
        for a, b, score, method in rows
    )
    return io.csv_bytes(header, body)
