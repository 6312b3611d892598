"""The one tolerant CSV record reader under the source, judgment and CxC readers."""

from __future__ import annotations

import csv

from crisscross.core.csv_records import CsvRecord, csv_records


def test_records_carry_their_first_line_and_text_and_reading_goes_on_after_an_unreadable_one() -> None:
    lines = ["id,text\n", 'a,"two\n', 'lines"\n', "b,stray\rreturn\n", "\n", "c,ok\n"]
    numbered = [(n, text) for n, text in enumerate(lines, start=1) if n != 5]  # line 5 held back by the caller
    records = list(csv_records(numbered))
    assert [(r.line, r.cells) for r in records] == [(1, ["id", "text"]), (2, ["a", "two\nlines"]), (4, None), (6, ["c", "ok"])]
    assert records[1].text == 'a,"two\nlines"\n' and records[2].text == "b,stray\rreturn\n"
    assert isinstance(records[2].error, csv.Error) and all(r.error is None for r in records if r.cells is not None)


def test_a_blank_line_is_an_empty_record_and_an_empty_file_has_none() -> None:
    assert list(csv_records([(1, "h\n"), (2, "\n")])) == [CsvRecord(1, "h\n", ["h"]), CsvRecord(2, "\n", [])]
    assert list(csv_records([])) == []
