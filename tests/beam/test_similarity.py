"""WriteNeighbours with TestPipeline: the exact backend's table on the demo's real co-caption means
is brute-force top-K (float64 cosines, ties by id), and a space of one row gets an empty table."""

from __future__ import annotations

from pathlib import Path

import numpy as np
from apache_beam.testing.test_pipeline import TestPipeline

from crisscross.beam.similarity import BACKENDS, WriteNeighbours, stripes
from crisscross.core import io
from crisscross.embed.sets import EmbeddingSet
from crisscross.similarity.neighbours import prepare
from crisscross.similarity.topk import block_pairs

K = 7


def test_exact_neighbours_are_brute_force_top_k(demo_chain: Path, tmp_path: Path) -> None:
    set_path = str(demo_chain / "embeddings" / "text" / "use-m3" / "cocaption_mean")
    prepared = prepare(EmbeddingSet.read(set_path), set_path)
    target = str(tmp_path / "neighbours.parquet")
    with TestPipeline() as pipeline:
        pipeline | WriteNeighbours(BACKENDS.create("exact"), set_path, prepared.ids, K, 1, target)
    table = io.read_parquet(target).to_pylist()
    unit = prepared.unit.astype(np.float64)
    cosine = unit @ unit.T
    np.fill_diagonal(cosine, -np.inf)
    ids = prepared.ids
    assert len(table) == len(ids) * K
    for row, query in enumerate(ids):
        got = [r for r in table if r["query_id"] == query]
        best = sorted(range(len(ids)), key=lambda j: (-cosine[row, j], ids[j]))[:K]
        assert [r["rank"] for r in got] == list(range(1, K + 1))
        assert [r["neighbour_id"] for r in got] == [ids[j] for j in best]
        assert np.allclose([r["similarity"] for r in got], cosine[row, best], atol=1e-5)


def test_a_space_of_one_row_gets_an_empty_table(demo_chain: Path, tmp_path: Path) -> None:
    set_path = str(demo_chain / "embeddings" / "text" / "use-m3" / "cocaption_mean")
    target = str(tmp_path / "neighbours.parquet")
    with TestPipeline() as pipeline:
        pipeline | WriteNeighbours(BACKENDS.create("exact"), set_path, ["coco:img:1"], K, 1, target)
    table = io.read_parquet(target)
    assert table.num_rows == 0 and table.column_names == ["query_id", "rank", "neighbour_id", "similarity"]


def test_stripes_hold_every_block_pair_once_in_elements_of_equal_work() -> None:
    """Workers are handed equal numbers of elements: each element holds m + 1 block pairs (the
    middle one of an odd m about half), so two workers finish together."""
    for n, block in ((10, 3), (31 * 4096 - 5, 4096), (32 * 100, 100), (1, 1), (5, 5)):
        work = stripes(n, block)
        flat = [pair for stripe in work for pair in stripe]
        assert sorted(flat) == sorted(block_pairs(n, block)) and len(set(flat)) == len(flat)
        m = -(-n // block)
        assert [len(stripe) for stripe in work] == [m + 1] * (m // 2) + ([(m + 1) // 2] if m % 2 else [])
