"""Preparing an embedding set for similarity search, and the neighbour table it produces.

:func:`prepare` is the one place that decides which rows take part: rows with non-finite values,
zero rows (no direction, e.g. a caption with no known word under BoW) and repeated ids are
excluded with a reason; the rest are L2-normalised so inner products are cosines.  Every worker
runs the same function on the same file, so all agree on the row numbering.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np
import pyarrow as pa

from crisscross.core.quarantine import Rejected, reject
from crisscross.core.rng import generator
from crisscross.embed.sets import EmbeddingSet, unit_rows
from crisscross.similarity.topk import NO_NEIGHBOUR, TopK, block_topk_dense

NEIGHBOURS_SCHEMA = pa.schema(
    [("query_id", pa.string()), ("rank", pa.int16()), ("neighbour_id", pa.string()), ("similarity", pa.float32())]
)


@dataclass(frozen=True)
class Prepared:
    ids: list[str]  # the rows kept, in the set's (id) order
    unit: np.ndarray  # (len(ids), d) float32, unit rows
    rejected: list[Rejected]


def prepare(embeddings: EmbeddingSet, source: str) -> Prepared:
    vectors = np.asarray(embeddings.vectors, dtype=np.float32)
    finite = np.isfinite(vectors).all(axis=1)
    # A finite row has a non-zero entry where its largest is above 0 or its smallest below: two
    # reductions over the rows, without copying them (±0 count as zero; non-finite rows are out first).
    nonzero = (vectors.max(axis=1, initial=-np.inf) > 0) | (vectors.min(axis=1, initial=np.inf) < 0)
    seen: set[str] = set()
    keep, rejected = [], []
    for row, item_id in enumerate(embeddings.ids):
        reason = None if finite[row] else "non-finite"
        reason = reason or (None if nonzero[row] else "zero-vector")
        reason = reason or ("duplicate-id" if item_id in seen else None)
        seen.add(item_id)
        if reason:
            rejected.append(
                reject(
                    "vector",
                    item_id,
                    reason,
                    f"row {row} of {source} is excluded from similarity: {reason}",
                    source,
                    {"id": item_id, "row": row},
                )
            )
        else:
            keep.append(row)
    kept = vectors if len(keep) == len(vectors) else vectors[keep]  # a copy only when a row is left out
    return Prepared([embeddings.ids[r] for r in keep], unit_rows(kept), rejected)


def neighbours_table(ids: list[str], parts: Iterable[TopK]) -> pa.Table:
    """Long table (query, rank 1..K, neighbour, similarity), sorted by query id then rank."""
    ordered = sorted(parts, key=lambda part: part.start)
    indices = np.concatenate([p.indices for p in ordered]) if ordered else np.zeros((0, 0), np.int64)
    scores = np.concatenate([p.scores for p in ordered]) if ordered else np.zeros((0, 0), np.float32)
    present = indices != NO_NEIGHBOUR
    query_rows, ranks = np.nonzero(present)
    id_array = pa.array(ids, pa.string())  # ids picked by Arrow's take: no Python string per row
    return pa.table(
        {
            "query_id": id_array.take(query_rows),
            "rank": pa.array(ranks + 1, pa.int16()),
            "neighbour_id": id_array.take(indices[present]),
            "similarity": pa.array(scores[present], pa.float32()),
        },
        schema=NEIGHBOURS_SCHEMA,
    )


def recall_at_k(approximate: np.ndarray, exact: np.ndarray) -> float:
    """Share of the exact top-K neighbours the approximate lists found (sets per row)."""
    hits = sum(len(set(a[a >= 0]) & set(e[e >= 0])) for a, e in zip(approximate, exact, strict=True))
    total = int((exact >= 0).sum())
    return hits / total if total else 1.0


def measured_recall(set_path: str, table: pa.Table, k: int, queries: int, seed: int) -> float:
    """Recall@k of an approximate table against exact search on a seeded sample of queries."""
    prepared = prepare(EmbeddingSet.read(set_path), set_path)
    rng = generator(seed)
    sample = np.sort(rng.choice(len(prepared.ids), size=min(queries, len(prepared.ids)), replace=False))
    block = prepared.unit[sample] @ prepared.unit.T
    block[np.arange(len(sample)), sample] = -np.inf
    exact, _ = block_topk_dense(block, 0, k)
    row_of = {item: row for row, item in enumerate(prepared.ids)}
    found = np.full((len(sample), k), -1, np.int64)
    position = {row: i for i, row in enumerate(sample)}
    for query, rank, neighbour in zip(*(table.column(c).to_pylist() for c in ("query_id", "rank", "neighbour_id")), strict=True):
        i = position.get(row_of[query])
        if i is not None:
            found[i, rank - 1] = row_of[neighbour]
    return recall_at_k(found, exact)
