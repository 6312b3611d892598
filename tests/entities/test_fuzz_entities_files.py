"""Property-based tests (Hypothesis) of the Flickr30k Entities readers: ``Sentences/<image>.txt`` as
the mentions stage reads it, and ``Annotations/<image>.xml`` (:mod:`crisscross.entities.files`).

* **Sentences** (the mentions stage's step, :func:`crisscross.beam.mentions._sentences`, on a file):
  never an exception.  A file that is not UTF-8, whose brackets do not parse or whose name gives
  no image id is exactly one ``sentences`` reject and nothing else; brackets can only fail to
  parse in a file holding a ``[/EN#`` token.  Otherwise every line holding more than whitespace
  is one caption (in line order, positions 0…n-1), and each mention is kept or is one
  ``mention`` reject naming a caption of the file, at most one per ``[/EN#`` token of its line.
* **Annotations** (:func:`~crisscross.entities.files.read_annotation`): an ``Annotation`` or an
  ``InputError`` whose message is one line naming the file, never another exception; a file with
  a DTD is always refused (entity expansion); a read file keeps every ``<object>`` of its root,
  each with its chain names.
"""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from collections.abc import Callable
from pathlib import Path
from typing import Any
from xml.sax.saxutils import escape

import apache_beam as beam
import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from crisscross.beam.mentions import _sentences
from crisscross.core.errors import InputError
from crisscross.core.quarantine import Rejected
from crisscross.entities.files import Annotation, read_annotation
from crisscross.entities.mentions import Caption, Mention
from tests.entities.test_files import ANNOTATION, SENTENCES
from tests.fuzzing import (
    NASTY_STRINGS,
    assert_one_line,
    describe,
    encode,
    file_inputs,
    fuzz,
    guarded,
)
from tests.special_files import KINDS, make_special

EXAMPLES = 300  # per reader
SENTENCE_REJECTS = {"malformed-sentences"}
MENTION_REJECTS = {"empty-mention", "span-outside-caption", "text-mismatch", "unknown-type"}

# ---------------------------------------------------------------------------- Sentences


def run_sentences(path: Path) -> list[Any]:
    return [o.value if isinstance(o, beam.pvalue.TaggedOutput) else o for o in _sentences(str(path))]


def check_sentences(path: Path, data: bytes) -> list[Any]:
    """Read ``data`` as the Sentences file ``path`` and check the rule (module docstring)."""
    where = describe(path.name, data)
    path.write_bytes(data)
    outputs = guarded(where, lambda: run_sentences(path))
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        text = None
    refused = [o for o in outputs if isinstance(o, Rejected) and o.kind == "sentences"]
    if refused or text is None:
        assert len(outputs) == 1 and len(refused) == 1 and refused[0].reason in SENTENCE_REJECTS, f"{where}: {outputs}"
        assert text is None or "[/EN#" in text or not path.stem.strip(), f"{where}: refused a file without a mention: {refused}"
        json.loads(refused[0].record)
        return outputs
    lines = [line for line in text.split("\n") if line.strip()]
    captions = [o for o in outputs if isinstance(o, Caption)]
    assert [c.position for c in captions] == list(range(len(lines))), f"{where}: captions {captions} for {len(lines)} lines"
    line_of = {c.caption_id: lines[c.position] for c in captions}
    for output in outputs:
        if isinstance(output, Caption):
            continue
        if isinstance(output, Rejected):
            assert output.kind == "mention" and output.reason in MENTION_REJECTS, f"{where}: {output}"
            caption_id = json.loads(output.record)["caption_id"]
        else:
            assert isinstance(output, Mention), f"{where}: {output!r}"
            caption_id = output.caption_id
        assert caption_id in line_of, f"{where}: a mention of no caption of the file: {output}"
    for caption_id, line in line_of.items():
        mentions = [
            o for o in outputs if not isinstance(o, Caption) and caption_id in (getattr(o, "caption_id", None), _rejected_caption(o))
        ]
        openings = sum(token.startswith("[/EN#") for token in line.split())
        assert len(mentions) <= openings, f"{where}: {len(mentions)} mentions from {openings} openings in {line!r}"
    return outputs


def _rejected_caption(output: Any) -> str | None:
    return json.loads(output.record)["caption_id"] if isinstance(output, Rejected) else None


TYPES = ["people", "bodyparts", "scene", "clothing", "animals", "vehicles", "instruments", "other", "notvisual", "robots", ""]
WORDS = ["a", "man", ".", "]", "[", "[/EN#", "[/EN#1", "[/EN#1/", "x]", "]]", "é", "\u2028", "\x00", "\t", "\x85", "9" * 5000]


@st.composite
def sentence_line(draw: st.DrawFn) -> str:
    """A caption line: words and bracketed phrases whose chain, types and words are drawn, each
    phrase sometimes left open or closed twice."""
    tokens: list[str] = []
    for _ in range(draw(st.integers(0, 5))):
        if draw(st.booleans()):
            tokens.append(draw(st.sampled_from(WORDS) | st.text(max_size=6)))
            continue
        chain = draw(st.sampled_from(["1", "6729", "", "a b", "#", "9" * 5000]) | st.text(max_size=4))
        types = "/".join(draw(st.lists(st.sampled_from(TYPES), min_size=1, max_size=3)))
        words = draw(st.lists(st.sampled_from(WORDS[:3]) | st.text(max_size=5), max_size=3))
        close = draw(st.sampled_from(["]", "]", "", " ]", "]]"]))
        tokens.append(f"[/EN#{chain}/{types} " + " ".join(words) + close)
    return " ".join(tokens)


sentences_files = st.tuples(st.lists(sentence_line(), max_size=5), st.sampled_from(["\n", "\r\n", "\n\n"])).map(
    lambda drawn: encode(drawn[1].join(drawn[0]) + drawn[1])
)


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("fuzz-entities") / "Sentences"


def test_the_sentences_sample_reads_cleanly(folder: Path) -> None:
    folder.mkdir(exist_ok=True)
    outputs = check_sentences(folder / "1000092795.txt", SENTENCES.encode())
    assert [type(o).__name__ for o in outputs].count("Caption") == 3
    assert all(not isinstance(o, Rejected) for o in outputs) and len(outputs) == 3 + 8


# Inputs the property tests found making a reader crash or lose a record.
FOUND_SENTENCES: list[tuple[str, bytes]] = [
    ("١٢.txt", b"a man .\n"),  # str.isdigit() took Arabic digits for a Flickr photo number; the id scheme then raised IdFormError
    (" .txt", b"a man .\n"),  # a blank name made no image id (IdFormError)
    ("1.txt", b"[/EN#1/people a man .\n"),  # its reject's record was the bare path, which is no JSON
]


def sentences_property() -> Callable[..., None]:
    names = st.sampled_from(["1000092795.txt", "x.txt", "١٢.txt", " .txt", "a b.txt"])

    def test(folder: Path, name: str, data: bytes) -> None:
        folder.mkdir(exist_ok=True)
        check_sentences(folder / name, data)

    for name, data in FOUND_SENTENCES:
        test = example(name=name, data=data)(test)
    tokens = st.lists(st.sampled_from(WORDS + ["[/EN#1/people", "[/EN#2/scene", "\n"]), max_size=30).map(lambda t: encode(" ".join(t)))
    return fuzz(EXAMPLES)(given(name=names, data=file_inputs(SENTENCES.encode(), sentences_files, tokens))(test))


test_property_sentences = sentences_property()

# ---------------------------------------------------------------------------- Annotations

WHERE = "Annotations/1000092795.xml"
NUMBERS = ["1", "0", "-3", "333", " 7 ", "1.5", "1e3", "", "x", "٣", "9" * 5000, "NaN", "&amp;", "<", "]]>"]
NAMES = ["1", "6", "a&b<c", "", " ", "\x00", "\ud800", *NASTY_STRINGS[:6]]
DTDS = [
    '<!DOCTYPE a [<!ENTITY x "xxxxxxxx"><!ENTITY y "&x;&x;&x;&x;">]>',
    '<!DOCTYPE a [<!ENTITY e SYSTEM "file:///etc/passwd">]>',
    '<!DOCTYPE annotation SYSTEM "http://example.com/a.dtd">',
]


def element(tag: str, text: str, raw: bool) -> str:
    return f"<{tag}>{text if raw else escape(text)}</{tag}>"


@st.composite
def annotation_files(draw: st.DrawFn) -> bytes:
    """An ``<annotation>``: a file name, a size (each field sometimes left out) and 0 to 4 objects
    with boxes or scene / no-box flags, values drawn (sometimes written unescaped), optionally
    under a DTD or nested too deeply for a careless reader."""
    raw = draw(st.integers(0, 9)) == 0
    number = st.sampled_from(NUMBERS) | st.integers(-(10**6), 10**6).map(str)
    parts = []
    if draw(st.booleans()):
        parts.append(element("filename", draw(st.sampled_from(["1000092795.jpg", "../x.jpg", "", "a b.jpg"])), raw))
    size = "".join(element(tag, draw(number), raw) for tag in ("width", "height", "depth") if draw(st.integers(0, 5)))
    if draw(st.integers(0, 7)):
        parts.append(f"<size>{size}</size>")
    for _ in range(draw(st.integers(0, 4))):
        names = "".join(element("name", draw(st.sampled_from(NAMES) | st.text(max_size=4)), raw) for _ in range(draw(st.integers(0, 2))))
        if draw(st.booleans()):
            corners = "".join(element(tag, draw(number), raw) for tag in ("xmin", "ymin", "xmax", "ymax") if draw(st.integers(0, 9)))
            body = f"<bndbox>{corners}</bndbox>"
        else:
            body = "".join(element(tag, draw(number), raw) for tag in ("scene", "nobndbox") if draw(st.booleans()))
        parts.append(f"<object>{names}{body}</object>")
    document = f"<annotation>{''.join(parts)}</annotation>"
    if draw(st.integers(0, 9)) == 0:
        document = draw(st.sampled_from(DTDS)) + document
    if draw(st.integers(0, 19)) == 0:
        document = "<annotation>" + "<x>" * 20_000 + "</x>" * 20_000 + "</annotation>"
    return encode(document)


def check_annotation(data: bytes) -> Annotation | None:
    """Read ``data`` as an Annotations file and check the rule (module docstring)."""
    where = describe(WHERE, data)

    def read() -> Annotation | None:
        try:
            return read_annotation(data, WHERE)
        except InputError as error:
            assert_one_line(str(error), WHERE)
            return None

    annotation = guarded(where, read)
    if b"<!DOCTYPE" in data or b"<!ENTITY" in data:
        assert annotation is None, f"{where}: a file with a DTD was read"
    if annotation is not None:
        root = ET.fromstring(data)  # no DTD: safe with the standard parser
        objects = root.findall("object")
        assert len(annotation.objects) == len(objects), f"{where}: {len(annotation.objects)} objects of {len(objects)}"
        for read_object, written in zip(annotation.objects, objects, strict=True):
            assert read_object.names == tuple((n.text or "").strip() for n in written.findall("name")), where
    return annotation


def test_the_annotation_sample_reads_cleanly() -> None:
    annotation = check_annotation(ANNOTATION.encode())
    assert annotation is not None and len(annotation.objects) == 4


def annotation_property() -> Callable[[bytes], None]:
    def test(data: bytes) -> None:
        check_annotation(data)

    tokens = st.lists(st.sampled_from(["<annotation>", "</annotation>", "<object>", "</object>", "<name>", "</name>", "1", "&", "<!--"]))
    return fuzz(EXAMPLES)(given(data=file_inputs(ANNOTATION.encode(), annotation_files(), tokens.map(lambda t: "".join(t).encode())))(test))


test_property_annotations = annotation_property()


@pytest.mark.timeout(30)  # a FIFO named like a Sentences file used to be waited on
@pytest.mark.parametrize("kind", sorted(KINDS))
def test_a_sentences_file_that_is_not_a_regular_file_is_quarantined_never_opened(tmp_path: Path, kind: str) -> None:
    path = make_special(tmp_path / "1000092795.txt", kind)
    [rejected] = run_sentences(path)
    assert (rejected.kind, rejected.reason, rejected.source) == ("sentences", "not-a-regular-file", str(path))
    assert json.loads(rejected.record) == {"path": str(path)}
