"""Blockwise exact top-K against a dense reference, ties by id, merging, and the faiss backend."""

from __future__ import annotations

import numpy as np
import pytest

from crisscross.similarity.topk import NO_NEIGHBOUR, TopK, block_pairs, block_topk, block_topk_dense, exact_topk, merge_topk, run_pairs


def unit_rows(n: int, d: int, seed: int) -> np.ndarray:
    x = np.random.default_rng(seed).standard_normal((n, d)).astype(np.float32)
    return x / np.linalg.norm(x, axis=1, keepdims=True)


def dense_reference(unit: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """Full matrix, diagonal removed, ordered by (similarity desc, id asc): the definition."""
    s = unit @ unit.T
    np.fill_diagonal(s, -np.inf)
    order = np.lexsort((np.broadcast_to(np.arange(len(unit)), s.shape), -s), axis=1)[:, :k]
    return order, np.take_along_axis(s, order, axis=1)


@pytest.mark.parametrize(("n", "d", "block", "k"), [(7, 4, 3, 25), (300, 16, 64, 5), (2500, 32, 1024, 25), (1100, 8, 4096, 25)])
def test_exact_topk_matches_the_dense_definition(n: int, d: int, block: int, k: int):
    unit = unit_rows(n, d, seed=n)
    idx, scores = exact_topk(unit, k, block)
    ref_idx, ref_scores = dense_reference(unit, min(k, n - 1))
    assert idx.shape == (n, k)
    np.testing.assert_array_equal(idx[:, : n - 1], ref_idx)
    np.testing.assert_allclose(scores[:, : n - 1], ref_scores, atol=2e-6)
    if k > n - 1:  # fewer than k other rows: padded, never a self pair
        assert (idx[:, n - 1 :] == NO_NEIGHBOUR).all() and np.isneginf(scores[:, n - 1 :]).all()
    assert not (idx == np.arange(n)[:, None]).any()


def test_equal_similarities_are_ranked_by_id():
    unit = unit_rows(50, 6, seed=3)
    unit[[10, 20, 30]] = unit[40]
    idx, scores = exact_topk(unit, 3, block=64)  # one block: the four duplicates tie exactly
    assert idx[40].tolist() == [10, 20, 30] and (scores[40] == scores[40][0]).all()
    assert idx[20].tolist() == [10, 30, 40]
    # Across blocks BLAS may round the same dot product differently in the last bit, so the
    # duplicates are still found (similarity 1), ordered by the similarities as computed.
    idx, scores = exact_topk(unit, 3, block=16)
    assert sorted(idx[40].tolist()) == [10, 20, 30] and np.allclose(scores[40], 1.0, atol=1e-6)
    keys = list(zip(-scores[40], idx[40], strict=True))
    assert keys == sorted(keys)


def tied_unit_rows(n: int, seed: int) -> np.ndarray:
    """Rows with four entries 0.5 in eight dimensions: every dot product is a multiple of 0.25,
    exact in any summation order, so ties are exact across blocks too (70 distinct rows)."""
    rng = np.random.default_rng(seed)
    unit = np.zeros((n, 8), np.float32)
    for row in range(n):
        unit[row, rng.choice(8, 4, replace=False)] = 0.5
    return unit


@pytest.mark.parametrize(("n", "block", "k"), [(700, 128, 25), (333, 64, 40)])
def test_thresholds_across_blocks_keep_exact_ties_by_id(n: int, block: int, k: int):
    """Each row has hundreds of exact ties for its K-th place: the thresholds carried from the
    merged blocks must still let an equal value with a smaller id in."""
    unit = tied_unit_rows(n, seed=n)
    idx, scores = exact_topk(unit, k, block)
    ref_idx, ref_scores = dense_reference(unit, k)
    np.testing.assert_array_equal(idx, ref_idx)
    np.testing.assert_array_equal(scores, ref_scores)


def test_any_pair_order_gives_the_same_lists():
    unit = tied_unit_rows(500, seed=1)
    pairs = list(block_pairs(len(unit), 96))
    shuffled = [pairs[i] for i in np.random.default_rng(0).permutation(len(pairs))]
    for threads in (1, 3):
        a, b = run_pairs(unit, pairs, 96, 10, threads), run_pairs(unit, shuffled, 96, 10, threads)
        assert [t.start for t in a] == [t.start for t in b] == list(range(0, 500, 96))
        for x, y in zip(a, b, strict=True):
            np.testing.assert_array_equal(x.indices, y.indices)
            np.testing.assert_array_equal(x.scores, y.scores)


def test_floors_from_the_diagonal_blocks_leave_the_lists_unchanged_with_ties():
    """The off-diagonal pairs selecting against every row's K-th best in its own block, merged with
    the diagonal lists, give exactly the lists of one pass without floors: ties at the floor still
    get in by id."""
    unit, block, k = tied_unit_rows(700, seed=5), 128, 25
    pairs = list(block_pairs(len(unit), block))
    diagonal = run_pairs(unit, [(i, j) for i, j in pairs if i == j], block, k, 2)
    floor = np.concatenate([part.scores[:, k - 1] for part in diagonal])
    off = run_pairs(unit, [(i, j) for i, j in pairs if i != j], block, k, 2, floor)
    merged = [merge_topk(a, b) for a, b in zip(diagonal, off, strict=True)]
    ref_idx, ref_scores = dense_reference(unit, k)
    np.testing.assert_array_equal(np.concatenate([t.indices for t in merged]), ref_idx)
    np.testing.assert_array_equal(np.concatenate([t.scores for t in merged]), ref_scores)
    assert np.isfinite(floor).all()


def test_compiled_selection_equals_sorting_including_ties():
    rng = np.random.default_rng(0)
    block = rng.standard_normal((300, 5000)).astype(np.float32)
    block[3, :] = 0.5  # a row of equal values: ids decide
    block[:, 40] = 0.5  # a column of equal values
    block[7, ::97] = 9.0
    block[:, 11] = -np.inf  # entries to ignore (self-pairs)
    for k in (1, 5, 25):
        for transposed, reference in ((False, block), (True, np.ascontiguousarray(block.T))):
            got = block_topk(block, 100, k, transposed=transposed)
            want = block_topk_dense(reference, 100, k)
            np.testing.assert_array_equal(got[0], want[0])
            np.testing.assert_array_equal(got[1], want[1])
    assert block_topk(block, 100, 5)[0][3].tolist() == [100, 101, 102, 103, 104]
    assert block_topk(block, 100, 3, transposed=True)[0][40].tolist() == [100, 101, 102]
    assert 111 not in block_topk(block, 100, 25)[0]


def test_merge_is_order_free_and_keeps_the_best():
    a = TopK(0, np.array([[4, 9, NO_NEIGHBOUR]]), np.array([[0.9, 0.5, -np.inf]], np.float32))
    b = TopK(0, np.array([[2, 7, 8]]), np.array([[0.9, 0.6, 0.1]], np.float32))
    ab, ba = merge_topk(a, b), merge_topk(b, a)
    assert ab.indices.tolist() == ba.indices.tolist() == [[2, 4, 7]]
    np.testing.assert_array_equal(ab.scores, np.array([[0.9, 0.9, 0.6]], np.float32))
    with pytest.raises(ValueError):
        merge_topk(a, TopK(3, b.indices, b.scores))
    short = TopK(0, np.array([[5, NO_NEIGHBOUR, NO_NEIGHBOUR]]), np.array([[0.2, -np.inf, -np.inf]], np.float32))
    both = merge_topk(short, a)  # missing entries stay last on both sides
    assert both.indices.tolist() == [[4, 9, 5]]


def test_faiss_hnsw_backend_finds_nearly_all_exact_neighbours(tmp_path):
    from crisscross.beam.similarity import hnsw_topk
    from crisscross.embed.sets import EmbeddingSet
    from crisscross.similarity.neighbours import recall_at_k

    unit = unit_rows(2000, 32, seed=5)
    EmbeddingSet([f"ds:img:{i:05d}" for i in range(2000)], unit).write(str(tmp_path / "set"))
    approx = hnsw_topk(str(tmp_path / "set"), 10, m=32, ef_construction=200, ef_search=128, processes=1)
    exact, _ = exact_topk(unit, 10, block=512)
    recall = recall_at_k(approx.indices, exact)
    assert 0.95 < recall <= 1.0
    assert not (approx.indices == np.arange(2000)[:, None]).any()
