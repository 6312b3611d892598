"""A round's batches formed upstream (the filter stage's VERIFY batches), read from the stage
before's output → tasks as formed, checked against the catalog, with one reject per refused row
(:mod:`crisscross.annotate.items`; candidate pairs become items in ranges, ``beam/tasks``)."""

from __future__ import annotations

from typing import Any

from crisscross.annotate.catalog import load_catalog
from crisscross.annotate.items import batched_verify_tasks
from crisscross.core import io


def formed_batches(batches_path: str, items: str) -> list[Any]:
    """The tasks table of batches formed upstream (VERIFY), then one Rejected per refused row."""
    table, rejected = batched_verify_tasks(io.read_parquet(batches_path), load_catalog(items))
    return [table, *rejected]
