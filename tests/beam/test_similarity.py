"""WriteNeighbours with TestPipeline: the exact backend's table on the demo's real co-caption means
is brute-force top-K (float64 cosines, ties by id), and a space of one row gets an empty table."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from apache_beam.testing.test_pipeline import TestPipeline

from crisscross.beam.similarity import BACKENDS, WriteNeighbours, diagonals, floors, lists_table, merged_lists, stripes
from crisscross.core import io
from crisscross.embed.sets import EmbeddingSet
from crisscross.similarity.neighbours import prepare
from crisscross.similarity.topk import block_pairs, exact_topk, run_pairs

K = 7


@pytest.mark.parametrize("block", [4096, 16])  # one block; many (diagonal floors, stripes, list shards)
def test_exact_neighbours_are_brute_force_top_k(demo_chain: Path, tmp_path: Path, block: int) -> None:
    set_path = str(demo_chain / "embeddings" / "text" / "use-m3" / "cocaption_mean")
    prepared = prepare(EmbeddingSet.read(set_path), set_path)
    target = str(tmp_path / "neighbours.parquet")
    with TestPipeline() as pipeline:
        pipeline | WriteNeighbours(BACKENDS.create("exact", block=block), set_path, prepared.ids, K, 1, target, str(tmp_path / "shards"))
    table = io.read_parquet(target).to_pylist()
    assert not (tmp_path / "shards").exists()  # the partial lists are gone once merged
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
        pipeline | WriteNeighbours(BACKENDS.create("exact"), set_path, ["coco:img:1"], K, 1, target, str(tmp_path / "shards"))
    table = io.read_parquet(target)
    assert table.num_rows == 0 and table.column_names == ["query_id", "rank", "neighbour_id", "similarity"]


def test_diagonals_and_stripes_hold_every_block_pair_once_in_elements_of_equal_work() -> None:
    """Workers are handed equal numbers of stripes: ⌈m / 2⌉ of them, whose sizes differ by at most
    one off-diagonal block pair, so two workers finish together; the diagonal pairs, which give
    the stripes their floors, come a few to an element."""
    for n, block in ((10, 3), (31 * 4096 - 5, 4096), (32 * 100, 100), (1, 1), (5, 5), (7, 3)):
        m = -(-n // block)
        diagonal, work = diagonals(n, block), stripes(n, block)
        assert [pair for element in diagonal for pair in element] == [(i, i) for i in range(m)]
        assert all(len(element) <= 4 for element in diagonal)
        flat = [pair for stripe in work for pair in stripe]
        assert flat == [(i, j) for i in range(m) for j in range(i + 1, m)]
        assert sorted(flat + [(i, i) for i in range(m)]) == sorted(block_pairs(n, block))
        assert len(work) == min(len(flat), -(-m // 2)) and all(work)
        assert max(map(len, work), default=0) - min(map(len, work), default=0) <= 1


def test_floors_are_each_rows_kth_best_in_its_own_block() -> None:
    unit = np.random.default_rng(3).standard_normal((50, 8)).astype(np.float32)
    unit /= np.linalg.norm(unit, axis=1, keepdims=True)
    parts = run_pairs(unit, [(0, 0), (1, 1)], 32, 3, 1)
    floor = floors([(part.start, part.scores[:, -1]) for part in parts], len(unit))
    for first, last in ((0, 32), (32, 50)):
        cosine = unit[first:last] @ unit[first:last].T
        np.fill_diagonal(cosine, -np.inf)
        np.testing.assert_allclose(floor[first:last], np.sort(cosine, axis=1)[:, -3], rtol=1e-6)


def test_list_shards_merge_to_the_exact_lists_in_any_order_and_once_each(tmp_path: Path) -> None:
    """Shards of the diagonal and the off-diagonal pairs, handed over in any order and one of them
    twice (a path met twice is one shard), merge to every row's exact list."""
    unit = np.random.default_rng(4).standard_normal((70, 8)).astype(np.float32)
    unit /= np.linalg.norm(unit, axis=1, keepdims=True)
    pairs = list(block_pairs(len(unit), 16))
    folder = tmp_path / "shards"
    folder.mkdir()
    paths = []
    for name, group in (("diagonal", [p for p in pairs if p[0] == p[1]]), ("off", [p for p in pairs if p[0] != p[1]])):
        paths.append(str(folder / f"{name}.parquet"))
        io.write_parquet(paths[-1], lists_table(run_pairs(unit, group, 16, 5, 1)))
    merged = merged_lists([paths[1], paths[0], paths[1]], str(folder), len(unit), 5)
    indices, scores = exact_topk(unit, 5, 16)
    np.testing.assert_array_equal(merged.indices, indices)
    np.testing.assert_array_equal(merged.scores, scores)
    assert not folder.exists()


def test_stripes_selecting_against_floors_raised_by_earlier_elements_give_the_exact_lists_with_ties(tmp_path: Path) -> None:
    """One StripeTopK instance takes every stripe, in one bundle and then over several: each element
    selects against the floors its predecessors raised, and hundreds of exact ties for each row's
    K-th place still resolve by id, as in one pass without floors."""
    from crisscross.beam.similarity import StripeTopK
    from crisscross.similarity.topk import merge_topk
    from tests.similarity.test_topk import dense_reference, tied_unit_rows

    unit, block, k = tied_unit_rows(700, seed=9), 64, 25
    set_path = str(tmp_path / "tied")
    EmbeddingSet([f"coco:img:{row:04d}" for row in range(len(unit))], unit, {"dim": 8}).write(set_path)
    diagonal = run_pairs(unit, [(i, i) for i in range(-(-len(unit) // block))], block, k, 2)
    floor = floors([(part.start, part.scores[:, -1]) for part in diagonal], len(unit))
    ref_idx, ref_scores = dense_reference(unit, k)
    for per_bundle in (len(stripes(len(unit), block)), 1):
        top_k = StripeTopK(set_path, k, block, 2, 1)
        top_k.setup()
        found = {part.start: part for part in diagonal}
        work = stripes(len(unit), block)
        for first in range(0, len(work), per_bundle):
            top_k.start_bundle()
            for element in work[first : first + per_bundle]:
                top_k.process(element, floor)
            for value in top_k.finish_bundle():
                found[value.value.start] = merge_topk(found[value.value.start], value.value)
        assert top_k._floor is not None and (top_k._floor > floor).any()  # later elements had higher floors
        merged = [found[start] for start in sorted(found)]
        np.testing.assert_array_equal(np.concatenate([t.indices for t in merged]), ref_idx)
        np.testing.assert_array_equal(np.concatenate([t.scores for t in merged]), ref_scores)
