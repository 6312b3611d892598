"""A round's items, read from the stage before's output: candidate pairs → items, or batches formed
upstream (the filter stage's VERIFY batches) → tasks as formed; each checked against the catalog,
with one reject per refused row (:mod:`crisscross.annotate.items`)."""

from __future__ import annotations

from typing import Any

from crisscross.annotate.catalog import load_catalog
from crisscross.annotate.items import batched_verify_tasks, items_from_candidates
from crisscross.core import io


def candidate_items(candidates_path: str, items: str) -> list[Any]:
    """The item table of a candidates file, then one Rejected per refused candidate."""
    table, rejected = items_from_candidates(io.read_parquet(candidates_path), load_catalog(items))
    return [table, *rejected]


def formed_batches(batches_path: str, items: str) -> list[Any]:
    """The tasks table of batches formed upstream (VERIFY), then one Rejected per refused row."""
    table, rejected = batched_verify_tasks(io.read_parquet(batches_path), load_catalog(items))
    return [table, *rejected]
