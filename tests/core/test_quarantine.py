"""The quarantine table: sorted rows, sources named relative to the launching directory."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from crisscross.core.quarantine import Rejected, quarantine_table, reject, rejected_rows, relative_source, sorted_quarantine


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
