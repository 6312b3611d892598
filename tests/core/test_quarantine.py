"""The quarantine table: sorted rows, sources named relative to the launching directory."""

from __future__ import annotations

import datetime
from collections import Counter

from hypothesis import given, settings
from hypothesis import strategies as st

from crisscross.core.quarantine import (
    Rejected,
    quarantine_table,
    reject,
    rejected_batch,
    rejected_rows,
    relative_source,
    sorted_quarantine,
)


def test_sources_name_files_relative_to_the_launching_directory() -> None:
    """Workers read absolute paths; the table says where a record came from the way the user's
    project does, so its bytes are the same wherever the project lives and whichever runner ran."""
    root = "/home/a/project/workflows/bison"
    assert relative_source("/home/a/project/build/rated/rated.parquet:7", root) == "../../build/rated/rated.parquet:7"
    assert relative_source("/home/a/project/workflows/bison/x.json:key", root) == "x.json:key"
    assert relative_source("captions.jsonl:3", root) == "captions.jsonl:3"  # readers name the file only
    assert relative_source("use-m3", root) == "use-m3"
    rows = [reject("row", "b", "bad", "d", "/p/in.csv:2", {}), reject("row", "a", "bad", "d", "/p/in.csv:1", {})]
    table = quarantine_table(rows, "/p")
    assert table.column("source").to_pylist() == ["in.csv:1", "in.csv:2"]
    assert quarantine_table(rows).column("source").to_pylist() == ["/p/in.csv:1", "/p/in.csv:2"]


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(*[st.text(max_size=4)] * 5), max_size=30))
def test_the_table_sorts_as_rejected_records_do(fields) -> None:
    """Arrow sorts UTF-8 bytes, Python compares code points: the same order, astral characters
    and equal prefixes included, so the table sorted in Arrow is the one sorted in memory."""
    rows = [Rejected(*f, record=f"{i % 3}") for i, f in enumerate(fields)]
    table = sorted_quarantine([rejected_rows(rows[: len(rows) // 2]), rejected_rows(rows[len(rows) // 2 :])])
    assert table.to_pylist() == [dict(vars(r)) for r in sorted(rows)]
    assert table.column(0).num_chunks == 1


_VALUES = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats()
    | st.text()
    | st.dates().map(lambda d: datetime.datetime(d.year, d.month, d.day)),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=3), inner, max_size=3),
    max_leaves=6,
)
_RECORDS = st.text() | st.dictionaries(st.text(max_size=5), _VALUES, max_size=5)


@settings(max_examples=300, deadline=None)
@given(
    st.lists(
        st.tuples(st.none() | st.text(max_size=5), st.text(max_size=5), st.text(max_size=5), st.text(max_size=8), _RECORDS), max_size=20
    )
)
def test_a_batch_of_rejects_holds_what_reject_makes_of_each(rows) -> None:
    """Rejects built as one table are, row for row, the ``Rejected`` of :func:`reject` (keys,
    records as sorted-key JSON with ``str`` for the rest, NaN, nesting, non-ASCII), counted alike,
    and written alike beside single rejects."""
    singles = [reject("pair", *row) for row in rows]
    batch = rejected_batch("pair", rows)
    assert batch.rejected() == singles
    assert batch.counts() == sum((r.counts() for r in singles), Counter())
    half = len(singles) // 2
    mixed = rejected_rows([*singles[:half], rejected_batch("pair", rows[half:])], "/p")
    assert sorted_quarantine([mixed]).equals(quarantine_table(singles, "/p"))
