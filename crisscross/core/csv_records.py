"""A CSV file record by record, past the records the csv module cannot read.

Every tolerant reader of the project (source captions, judgment files, CxC release tables) needs
the same two things from a CSV: each record with the physical lines it took, for a reject's
``file:line`` and its original text; and reading on after a record the csv module refuses (a cell
over its field limit, a stray carriage return), where ``csv.reader`` would stop the file.  What a
record must hold, and the reject it becomes, stays with each reader.
"""

from __future__ import annotations

import csv
from collections.abc import Iterable, Iterator
from dataclasses import dataclass


@dataclass(frozen=True)
class CsvRecord:
    """One record: its first physical line, the text it took, and its cells (None, with the
    ``error``, when the csv module could not read it; ``[]`` for a blank line)."""

    line: int
    text: str
    cells: list[str] | None
    error: csv.Error | None = None


def csv_records(lines: Iterable[tuple[int, str]]) -> Iterator[CsvRecord]:
    """The records of numbered physical lines, each ending in its newline, the header first.
    Line numbers may skip lines the caller held back (e.g. lines that are not UTF-8)."""
    fed: list[tuple[int, str]] = []  # lines the parser took and no record has claimed yet

    def feed() -> Iterator[str]:
        for number, text in lines:
            fed.append((number, text))
            yield text

    reader = csv.reader(feed())
    claimed = 0
    while True:
        try:
            cells, error = next(reader), None
        except StopIteration:
            return
        except csv.Error as problem:
            cells, error = None, problem
        took, fed[: reader.line_num - claimed] = fed[: reader.line_num - claimed], []
        claimed = reader.line_num
        yield CsvRecord(took[0][0], "".join(text for _, text in took), cells, error)
