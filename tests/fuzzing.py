"""What the fuzz tests of the file readers share: seeded random inputs, bad values and the accounting checks.

Used by ``tests/annotate/test_fuzz_judgment_formats.py`` (judgment formats) and
``tests/ingest/test_fuzz_readers.py`` (source readers).  Each format or reader gets (a) random inputs
(raw bytes, printable text, JSON-ish token soup, mutated copies of a valid sample, valid samples with
random bytes or printable junk spliced in), (b) every truncation prefix of a small valid file, and
(c) named structured mutations (a wrong type in each field, null, nested lists, huge numbers, NaN,
BOM, CRLF, NUL, invalid UTF-8 in the middle, …).

Each test file keeps its own samples, its own strings to draw from and its own accounting rules; what
is here draws the random numbers in a fixed order, so a seed gives the same inputs whichever file asks.
"""

from __future__ import annotations

import codecs
import json
import random
import string
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any, Protocol, TypeVar

SEED = 20260705
N_RANDOM = 200
BOM = codecs.BOM_UTF8

# ---------------------------------------------------------------------------- checking one input


@dataclass(frozen=True)
class Expect:
    """What the accounting rule demands of one input."""

    raises: bool  # the file is unusable: the reader's one-line file error is the right answer
    sources: dict[str, tuple[int, int]] = field(default_factory=dict)  # source → (least, most) outputs


def assert_one_line(message: str, name: str) -> None:
    """A file error is one line that names the file."""
    assert len(message.splitlines()) == 1 and name in message, f"not a one-line error naming the file: {message!r}"


def describe(case_id: str, data: bytes, label: str) -> str:
    """How a failure names its input."""
    return f"{case_id} [{label}], input {data[:200]!r}{'…' if len(data) > 200 else ''} ({len(data)} bytes)"


T = TypeVar("T")


def guarded(where: str, read: Callable[[], T]) -> T:
    """``read()``; any exception it lets out is a bug, reported with the input."""
    try:
        return read()
    except Exception as error:
        raise AssertionError(f"{where}: {type(error).__name__}: {str(error)[:300]}") from error


class Sourced(Protocol):
    @property
    def source(self) -> str: ...


Out = TypeVar("Out", bound=Sourced)


def assert_accounted(
    where: str, expect: Expect, error: Exception | None, outputs: list[Out], check_output: Callable[[Out], None], noun: str
) -> None:
    """The reader raised exactly when the file is unusable; otherwise every output passes ``check_output``, comes
    from a source the rule knows, and each source gives as many as the rule says."""
    if expect.raises or error is not None:
        assert expect.raises and error is not None, f"{where}: expected raise={expect.raises}, got {error!r}"
        return
    for output in outputs:
        check_output(output)
    counts = Counter(output.source for output in outputs)
    unexpected = sorted(set(counts) - set(expect.sources))
    assert not unexpected, f"{where}: {noun}s from {unexpected[:5]}, which the accounting does not know"
    wrong = {s: counts[s] for s, (least, most) in expect.sources.items() if not least <= counts[s] <= most}
    assert not wrong, f"{where}: {noun} counts {dict(list(wrong.items())[:5])} outside the rule (lost or duplicated records)"


def prefix_ends(size: int, most: int) -> list[int]:
    """Where to cut a file of ``size`` bytes: every byte, or every k-th so at most about ``most`` prefixes, and the whole."""
    step = max(1, size // most)
    return [*range(0, size, step), size]


# ---------------------------------------------------------------------------- generators


class Raw(str):
    """A JSON literal spliced into generated text as written (too big or too deep for json.dumps)."""


def dumps(value: Any, **options: Any) -> str:
    raws: list[Raw] = []

    def mark(v: Any) -> Any:
        if isinstance(v, Raw):
            raws.append(v)
            return f"@@raw{len(raws) - 1}@@"
        if isinstance(v, dict):
            return {k: mark(x) for k, x in v.items()}
        if isinstance(v, list):
            return [mark(x) for x in v]
        return v

    text = json.dumps(mark(value), **options)
    for i, raw in enumerate(raws):
        text = text.replace(f'"@@raw{i}@@"', raw)
    return text


def encode(text: str) -> bytes:
    return text.encode("utf-8", "surrogatepass")  # generated text may hold lone surrogates


DEEP = "[" * 100_000 + "]" * 100_000
NUMBERS = [0, 1, -1, 7, 2**31, 2**63, 10**30, 1.5, -0.0, 1e308, float("nan"), float("inf"), -float("inf"), True, False]
RAWS = [Raw("1" * 5000), Raw("1e999"), Raw("-1e-999"), Raw(DEEP), Raw("NaN"), Raw("-Infinity")]


@dataclass(frozen=True)
class Values:
    """Random JSON values: the shared numbers and raw literals, and a format's own ``strings``."""

    strings: list[str]
    keys: list[str]  # the keys of generated objects

    def random(self, rng: random.Random, depth: int = 0) -> Any:
        r = rng.random()
        if r < 0.1:
            return None
        if r < 0.3:
            return rng.choice(NUMBERS) if rng.random() < 0.7 else rng.randint(-(10**9), 10**9)
        if r < 0.65:
            return rng.choice(self.strings)
        if r < 0.7:
            return rng.choice(RAWS)
        if depth > 2 or r < 0.85:
            return [self.random(rng, depth + 1) for _ in range(rng.randint(0, 3))]
        return {rng.choice(self.keys): self.random(rng, depth + 1) for _ in range(rng.randint(0, 3))}

    def mutate(self, rng: random.Random, obj: dict[str, Any], keys: list[str]) -> dict[str, Any]:
        """A copy of ``obj`` with one to three of ``keys`` set to a random value or dropped, or a key added."""
        obj = dict(obj)
        for _ in range(rng.randint(1, 3)):
            r, key = rng.random(), rng.choice(keys)
            if r < 0.6:
                obj[key] = self.random(rng)
            elif r < 0.8:
                obj.pop(key, None)
            else:
                obj[rng.choice(self.strings[:8])] = self.random(rng)
        return obj


ALPHABET = string.printable + '",,{}[]::\n\n\n\r\x00é\u2028\ufeff\x85'


def random_bytes(rng: random.Random, most: int) -> bytes:
    return rng.randbytes(rng.randint(0, most))


def random_printable(rng: random.Random, most: int) -> bytes:
    return "".join(rng.choice(ALPHABET) for _ in range(rng.randint(0, most))).encode()


def json_tokens(rng: random.Random, word: str, names: Iterable[str]) -> bytes:
    """JSON-ish token soup: punctuation, literals, the JSON string ``word`` and ``names`` (quoted keys and values)."""
    tokens = ["{", "}", "[", "]", ":", ",", '"', "null", "true", "NaN", "1e999", "-0", "7", word, "\n", " ", "\\u0000"]
    tokens += ['"\\ud800"', "1" * 50, *names]
    return "".join(rng.choice(tokens) for _ in range(rng.randint(1, 60))).encode()


class Sample(Protocol):
    @property
    def id(self) -> str: ...

    @property
    def sample(self) -> bytes: ...


C = TypeVar("C", bound=Sample)


def random_inputs(
    case: C,
    tokens: Callable[[random.Random, C], bytes],
    structured: Callable[[random.Random, C], bytes],
    splice: Callable[[random.Random, int], bytes],
) -> list[tuple[str, bytes]]:
    """``N_RANDOM`` inputs seeded by the case: raw bytes, printable text, ``tokens``, ``structured`` (close to
    a valid file) and the valid sample with a slice replaced by ``splice`` (up to 20 bytes), in turn."""
    rng = random.Random(f"{SEED}/{case.id}")
    out = []
    for i in range(N_RANDOM):
        kind = ("bytes", "printable", "json-tokens", "structured", "spliced")[i % 5]
        if kind == "bytes":
            data = random_bytes(rng, 400)
        elif kind == "printable":
            data = random_printable(rng, 300)
        elif kind == "json-tokens":
            data = tokens(rng, case)
        elif kind == "structured":
            data = structured(rng, case)
        else:
            start = rng.randrange(len(case.sample))
            end = min(len(case.sample), start + rng.randint(0, 20))
            data = case.sample[:start] + splice(rng, 20) + case.sample[end:]
        out.append((f"{kind} #{i}", data))
    return out


# ---------------------------------------------------------------------------- structured mutations

BAD_VALUES: dict[str, Any] = {
    "number": 123456789,
    "negative": -1,
    "float": 1.5,
    "huge-float": 1e308,
    "huge-int-literal": Raw("1" * 5000),
    "long-digit-string": "9" * 5000,
    "nan": float("nan"),
    "infinity": float("inf"),
    "null": None,
    "true": True,
    "empty": "",
    "blank": "  ",
    "nested-list": [["a"]],
    "object": {"a": 1},
    "nul": "a\x00b",
    "u2028": "a\u2028b",
    "lone-surrogate": "\ud800",
    "deep": Raw(DEEP),
}

# lines no JSON Lines reader can take as a record
BAD_JSON_LINES = {
    "array": b"[1, 2]",
    "string": b'"text"',
    "number": b"1" * 5000,
    "nan": b"NaN",
    "null": b"null",
    "deep": DEEP.encode(),
}

BAD_CSV_CELLS = {
    "empty": b"",
    "quote": b'"',
    "unterminated": b'"never closed',
    "inner-quote": b'a"b',
    "cr": b"a\rb",
    "nul": b"a\x00b",
    "huge": b"x" * 200_000,
    "huge-quoted": b'"' + b"x" * 200_000 + b'"',
    "extra-cells": b"a,b,c,d",
}

INVALID_UTF8 = {"ff": b"\xff", "truncated": b"\xc3", "surrogate": b"\xed\xa0\x80", "overlong": b"\xc0\xaf"}


def replace_line(data: bytes, number: int, new: bytes, end: bytes = b"\n") -> bytes:
    lines = data.split(end)
    lines[number - 1] = new
    return end.join(lines)
