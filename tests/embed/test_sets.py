from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from crisscross.embed import sets
from crisscross.embed.sets import EmbeddingSet, cocaption_mean, cocaption_means, encoder_slug, id_order, row_problem, row_problems


def test_cocaption_mean_weights_captions_equally_and_ignores_order():
    vectors = np.array([[3.0, 0.0], [0.0, 0.5]], dtype=np.float32)
    mean = cocaption_mean(["c2", "c1"], vectors)
    np.testing.assert_allclose(mean, [0.5, 0.5])  # unit vectors averaged, not raw ones
    np.testing.assert_array_equal(mean, cocaption_mean(["c1", "c2"], vectors[::-1]))
    assert mean.dtype == np.float32


def test_row_problems():
    assert row_problem(np.ones(3, np.float32), 3) is None
    assert row_problem(np.ones(4, np.float32), 3) == "wrong-dim"
    assert row_problem(np.array([1, np.nan, 0], np.float32), 3) == "non-finite"
    assert row_problem(np.array([1, np.inf, 0], np.float32), 3) == "non-finite"
    assert row_problem(np.zeros(3, np.float32), 3) == "zero-vector"
    batch = np.array([[1, 2, 3], [0, 0, 0], [np.nan, 0, 0], [np.inf, 1, 1], [0, 0, 1e-30]], np.float32)
    assert row_problems(batch, 3) == [None, "zero-vector", "non-finite", "non-finite", None]
    assert row_problems(batch, 4) == ["wrong-dim"] * 5


def test_set_round_trip_is_sorted_memory_mapped_and_deterministic(tmp_path: Path):
    ids = ["coco:cap:3", "coco:cap:1", "coco:cap:2"]
    vectors = np.arange(6, dtype=np.float64).reshape(3, 2)
    for name in ("a", "b"):
        EmbeddingSet(ids, vectors, {"encoder": "x"}).write(str(tmp_path / name))
    loaded = EmbeddingSet.read(tmp_path / "a")
    assert loaded.ids == ["coco:cap:1", "coco:cap:2", "coco:cap:3"]
    assert isinstance(loaded.vectors, np.memmap) and loaded.vectors.dtype == np.float32
    np.testing.assert_array_equal(loaded.vectors, [[2, 3], [4, 5], [0, 1]])
    assert loaded.meta == {"encoder": "x", "dim": 2, "count": 3}
    for name in ("vectors.npy", "ids.parquet", "meta.json"):
        assert (tmp_path / "a" / name).read_bytes() == (tmp_path / "b" / name).read_bytes()


def test_set_refuses_inconsistent_input_and_writing_repeated_ids():
    with pytest.raises(ValueError, match="2 ids but vectors of shape"):
        EmbeddingSet(["a", "b"], np.zeros((3, 2)))
    with pytest.raises(ValueError, match="duplicate ids"):
        EmbeddingSet(["a", "a"], np.zeros((2, 2))).write("unused")


def test_encoder_slug():
    assert encoder_slug("use-m3") == "use-m3"
    slug = encoder_slug("precomputed:/data/clip vectors.npz")
    assert slug.startswith("precomputed-clip-vectors-") and len(slug) == len("precomputed-clip-vectors-") + 8
    assert encoder_slug("tfhub:/a/model") != encoder_slug("tfhub:/b/model")


def test_cocaption_means_are_byte_identical_to_one_image_at_a_time_whatever_the_row_order(monkeypatch):
    monkeypatch.setattr(sets, "MEANS_CHUNK", 2)  # images of one caption count averaged in several chunks
    rng = np.random.default_rng(3)
    sizes = ((7, 5), (3, 9), (12, 1), (5, 6), (8, 5), (41, 5), (6, 5), (2, 1))
    captions = {f"coco:img:{i}": [f"coco:cap:{i}{j}" for j in range(k)] for i, k in sizes}
    caption_ids = [c for members in captions.values() for c in members]
    image_ids = [image for image, members in captions.items() for _ in members]
    vectors = rng.normal(size=(len(caption_ids), 16)).astype(np.float32)
    shuffled = rng.permutation(len(caption_ids))
    images, means = cocaption_means([caption_ids[r] for r in shuffled], [image_ids[r] for r in shuffled], vectors[shuffled])
    assert images == sorted(captions) and means.dtype == np.float32 and means.shape == (len(sizes), 16)
    for image, mean in zip(images, means, strict=True):
        rows = [r for r, owner in enumerate(image_ids) if owner == image]
        assert mean.tobytes() == cocaption_mean([caption_ids[r] for r in rows], vectors[rows]).tobytes()
    assert cocaption_means([], [], np.zeros((0, 16), np.float32))[1].shape == (0, 16)


_ID = st.text(st.sampled_from("ab~é☃😀\x00") | st.characters(exclude_categories=("Cs",)), max_size=3)


@settings(max_examples=300, derandomize=True, database=None, deadline=None)
@given(st.lists(st.tuples(_ID, _ID), max_size=40))
def test_id_order_is_pythons_order_of_the_strings(pairs):
    """Sets and co-caption means are sorted in Arrow: the rows come in the order Python's sort
    gives them (code points, astral ones too; ties by the next key, then kept as they came)."""
    firsts, seconds = [a for a, _ in pairs], [b for _, b in pairs]
    assert id_order(firsts).tolist() == sorted(range(len(pairs)), key=firsts.__getitem__)
    assert id_order(firsts, seconds).tolist() == sorted(range(len(pairs)), key=pairs.__getitem__)
