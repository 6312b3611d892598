"""What the property-based (Hypothesis) tests of the file readers share: strategies, settings and
the accounting checks.

Every reader's test draws files from :func:`file_inputs`: random bytes, printable junk, JSON-ish
token soup, a structurally valid file built from the reader's own sample with random values in its
fields (``structured``), and either of the last two mutated at the byte level (cut, spliced,
bytes flipped, pieces repeated or dropped).  Values come from :func:`json_values`: the reader's own
strings, the numbers and literals that broke readers before (5000-digit integers, ``1e999``,
nesting deeper than Python's recursion limit, NaN, lone surrogates) and arbitrary text.

Settings are fixed so CI is deterministic: :func:`fuzz` gives ``derandomize=True`` (the same
examples on every run), no example database and no deadline.  Each test file keeps its samples, its
accounting rules (:class:`Expect`) and its ``@example`` regressions: inputs that once made a reader
crash or lose a record.
"""

from __future__ import annotations

import codecs
import csv
import io
import json
import string
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, TypeVar

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st

BOM = codecs.BOM_UTF8


def fuzz(examples: int) -> settings:
    """Deterministic settings for a reader's property test: ``examples`` inputs, the same on every run."""
    return settings(
        max_examples=examples,
        derandomize=True,
        database=None,
        deadline=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.large_base_example],
    )


# ---------------------------------------------------------------------------- checking one input


@dataclass(frozen=True)
class Expect:
    """What the accounting rule demands of one input."""

    raises: bool  # the file is unusable: the reader's one-line file error is the right answer
    sources: dict[str, tuple[int, int]] = field(default_factory=dict)  # source → (least, most) outputs


def assert_one_line(message: str, name: str) -> None:
    """A file error is one line that names the file."""
    assert len(message.splitlines()) == 1 and name in message, f"not a one-line error naming the file: {message!r}"


def describe(case_id: str, data: bytes) -> str:
    """How a failure names its input."""
    return f"{case_id}, input {data[:200]!r}{'…' if len(data) > 200 else ''} ({len(data)} bytes)"


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
    where: str, expect: Expect, error: Exception | None, outputs: Sequence[Out], check_output: Callable[[Out], None], noun: str
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


def csv_record_starts(text: str) -> tuple[list[str] | None, list[int]] | None:
    """The header (None for an empty text) and the first physical line of every later CSV record
    that is not an empty line (one the csv module raises ``csv.Error`` on included), as Python's
    csv module splits ``text``; None when the header itself cannot be parsed."""
    reader = csv.reader(io.StringIO(text, newline=""))
    try:
        header = next(reader, None)
    except csv.Error:
        return None
    starts = []
    while True:
        start = reader.line_num + 1
        try:
            if next(reader) == []:
                continue
        except csv.Error:
            pass
        except StopIteration:
            return header, starts
        starts.append(start)


def decoded(data: bytes) -> str | None:
    """The text of a file that readers decode whole (a BOM allowed), or None when it is not UTF-8."""
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError:
        return None


# ---------------------------------------------------------------------------- JSON values


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
NUMBERS = [0, 1, -1, 7, 2**31, 2**63, 10**30, 10**400, 1.5, -0.0, 1e308, float("nan"), float("inf"), -float("inf"), True, False]
RAWS = [Raw("1" * 5000), Raw("1e999"), Raw("-1e-999"), Raw(DEEP), Raw("NaN"), Raw("-Infinity")]
NASTY_STRINGS = ["", " ", "\t", "a\nb", "a\r\nb", "a\u2028b", "\x00", "\ud800", "é", "٣", "9" * 5000, "x" * 3000, "\ufeffa", "'=cmd"]


def json_values(strings: Sequence[str], keys: Sequence[str]) -> st.SearchStrategy[Any]:
    """JSON values (as :func:`dumps` writes them): the reader's ``strings`` and the shared nasty
    ones, numbers Python or the reader may not hold, raw literals, arbitrary short text, and lists
    and objects (keys from ``keys``) of those."""
    leaves = st.one_of(
        st.none(),
        st.sampled_from(NUMBERS),
        st.integers(-(10**20), 10**20),
        st.sampled_from([*strings, *NASTY_STRINGS]),
        st.sampled_from(RAWS),
        st.text(max_size=8),
    )
    return st.recursive(
        leaves, lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.sampled_from(list(keys)), inner, max_size=3), max_leaves=6
    )


@st.composite
def mutated_object(draw: st.DrawFn, obj: dict[str, Any], keys: Sequence[str], values: st.SearchStrategy[Any]) -> dict[str, Any]:
    """A copy of ``obj`` with one to three of ``keys`` set to a drawn value or dropped, or another key added."""
    obj = dict(obj)
    for _ in range(draw(st.integers(1, 3))):
        action, key = draw(st.sampled_from(["set", "set", "set", "drop", "add"])), draw(st.sampled_from(list(keys)))
        if action == "set":
            obj[key] = draw(values)
        elif action == "drop":
            obj.pop(key, None)
        else:
            obj[draw(st.text(max_size=6))] = draw(values)
    return obj


# ---------------------------------------------------------------------------- bytes

ALPHABET = string.printable + '",,{}[]::\n\n\n\r\x00é\u2028\ufeff\x85'
printable = st.text(alphabet=ALPHABET, max_size=300).map(str.encode)
INVALID_UTF8 = [b"\xff", b"\xc3", b"\xed\xa0\x80", b"\xc0\xaf"]
SPLICES = [
    BOM,
    b"\x00",
    b"\r",
    b"\r\n",
    b"\n",
    b'"',
    b",",
    b"]",
    b"[",
    b"{",
    b"}",
    b"\\",
    *INVALID_UTF8,
    b"1" * 5000,
    b"x" * 200_000,
    DEEP.encode(),
]


def json_tokens(names: Sequence[str]) -> st.SearchStrategy[bytes]:
    """JSON-ish token soup: punctuation, literals and ``names`` (quoted keys and values)."""
    tokens = ["{", "}", "[", "]", ":", ",", '"', "null", "true", "NaN", "1e999", "-0", "7", "\n", " ", "\\u0000", '"\\ud800"', "1" * 50]
    return st.lists(st.sampled_from([*tokens, *names]), min_size=1, max_size=60).map(lambda parts: "".join(parts).encode())


@st.composite
def mutated_bytes(draw: st.DrawFn, data: bytes) -> bytes:
    """``data`` after one to four byte-level edits: cut short, a slice dropped, repeated or replaced
    by random bytes, printable junk or a piece known to trouble parsers, a byte flipped."""
    for _ in range(draw(st.integers(1, 4))):
        size = len(data)
        start = draw(st.integers(0, size))
        end = draw(st.integers(start, min(size, start + 40)))
        action = draw(st.sampled_from(["cut", "drop", "repeat", "splice", "splice", "junk", "flip"]))
        if action == "cut":
            data = data[:start]
        elif action == "drop":
            data = data[:start] + data[end:]
        elif action == "repeat":
            data = data[:end] + data[start:end] + data[end:]
        elif action == "splice":
            data = data[:start] + draw(st.sampled_from(SPLICES)) + data[end:]
        elif action == "junk":
            data = data[:start] + draw(st.binary(max_size=20) | st.text(alphabet=ALPHABET, max_size=20).map(str.encode)) + data[end:]
        elif size:
            at = min(start, size - 1)
            data = data[:at] + bytes([draw(st.integers(0, 255))]) + data[at + 1 :]
    return data


@st.composite
def edited_row(draw: st.DrawFn, cells: Sequence[str], values: st.SearchStrategy[str], most: int) -> list[str]:
    """``cells`` after up to ``most`` edits: a cell replaced by a drawn value, one added, the last dropped."""
    cells = list(cells)
    for _ in range(draw(st.integers(0, most))):
        action = draw(st.sampled_from(["replace", "replace", "replace", "add", "drop"]))
        if action == "replace" and cells:
            cells[draw(st.integers(0, len(cells) - 1))] = draw(values)
        elif action == "add":
            cells.append(draw(values))
        elif cells:
            cells.pop()
    return cells


def file_inputs(sample: bytes, structured: st.SearchStrategy[bytes], tokens: st.SearchStrategy[bytes]) -> st.SearchStrategy[bytes]:
    """Every kind of input a reader's property test draws (module docstring)."""
    return st.one_of(
        st.binary(max_size=400),
        printable,
        tokens,
        structured,
        structured.flatmap(mutated_bytes),
        mutated_bytes(sample),
    )


def replace_line(data: bytes, number: int, new: bytes, end: bytes = b"\n") -> bytes:
    lines = data.split(end)
    lines[number - 1] = new
    return end.join(lines)
