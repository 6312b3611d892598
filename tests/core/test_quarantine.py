"""The quarantine table: sorted rows, sources named relative to the launching directory."""

from __future__ import annotations

from collections import Counter

import pyarrow as pa
from hypothesis import example, given, settings
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


# Text Arrow can hold (no lone surrogates), with what JSON escapes: quotes, backslashes, control
# and non-ASCII characters.
_TEXT = st.text(st.one_of(st.sampled_from('"\\/\n\r\t\x00\x1f\x7f\u2028é☃😀 a~'), st.characters(exclude_categories=("Cs",))), max_size=6)
_COLUMN_VALUES = {  # a column's values: text (the candidates' tables, written in Arrow), or anything else a table holds
    "text": st.none() | _TEXT,
    "int": st.none() | st.integers(-(2**63), 2**63 - 1),
    "float": st.none() | st.floats(),
    "bool": st.none() | st.booleans(),
}


@st.composite
def _refused(draw: st.DrawFn) -> tuple[list[tuple[str, str, str, str]], pa.Table]:
    """(key, reason, detail, source) rows and the table of their records."""
    n = draw(st.integers(0, 12))
    names = draw(st.lists(_TEXT, min_size=1, max_size=4, unique=True))
    kinds = draw(st.lists(st.sampled_from(["text", "text", "int", "float", "bool"]), min_size=len(names), max_size=len(names)))
    columns = {name: draw(st.lists(_COLUMN_VALUES[kind], min_size=n, max_size=n)) for name, kind in zip(names, kinds, strict=True)}
    types = {"text": pa.string(), "int": pa.int64(), "float": pa.float64(), "bool": pa.bool_()}
    records = pa.table({name: pa.array(values, types[kind]) for (name, values), kind in zip(columns.items(), kinds, strict=True)})
    source = st.one_of(_TEXT, _TEXT.map(lambda t: f"/p/in.csv:{t}"))
    rows = draw(st.lists(st.tuples(_TEXT, _TEXT, _TEXT, source), min_size=n, max_size=n))
    return rows, records


def _batch(rows: list[tuple[str, str, str, str]], records: pa.Table):
    keys, reasons, details, sources = (list(column) for column in zip(*rows, strict=True)) if rows else ([], [], [], [])
    return rejected_batch("pair", keys, reasons, details, pa.array(sources, pa.string()), records)


@settings(max_examples=150, derandomize=True, database=None, deadline=None)
@given(_refused())
@example(([("k", "r", "d", "s")], pa.table({"b": ['x"\\\u00e9'], "a": [None]})))
@example(([("k", "r", "d", "s")] * 4, pa.table({"p": ['[{"q": "a\\\\b"}]', 'é"', None, "plain"]})))
def test_a_batch_of_rejects_holds_what_reject_makes_of_each(refused) -> None:
    """Rejects built as one table are, row for row, the ``Rejected`` of :func:`reject` given each
    record's dict (sorted-key JSON, text escaped as json escapes it, nulls, NaN, any column type),
    counted alike, and written alike beside single rejects."""
    rows, records = refused
    singles = [reject("pair", *row, record) for row, record in zip(rows, records.to_pylist(), strict=True)]
    batch = _batch(rows, records)
    assert batch.rejected() == singles
    assert batch.counts() == sum((r.counts() for r in singles), Counter())
    half = len(singles) // 2
    mixed = rejected_rows([*singles[:half], _batch(rows[half:], records.slice(half))], "/p")
    assert sorted_quarantine([mixed]).equals(quarantine_table(singles, "/p"))
