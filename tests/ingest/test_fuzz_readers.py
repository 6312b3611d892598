"""Property-based tests (Hypothesis) of every source reader: random, mutated and structurally valid
files with random values (:mod:`tests.fuzzing`), built from a small valid sample of each reader.

For every input two things are checked:

* **No crash without a one-line error.**  ``read`` returns items, or raises
  :class:`SourceFileError` whose message is one line naming the file.  Any other exception is a
  bug, and so is a ``SourceFileError`` for a file the accounting below says is usable.
* **No record lost without a quarantine row**, accounted per format:

  - *JSONL* (``coco-karpathy-jsonl``, ``flickr30k-karpathy-jsonl``, ``table`` ``.jsonl``): a line
    is a ``\\n``-terminated piece of the file (a UTF-8 BOM dropped from line 1, trailing ``\\r``
    ignored).  Every line that is not UTF-8, or holds anything besides whitespace, yields 1 to 3
    items (image, caption, conflicting-image reject, or one reject) sourced ``<file>:<line>``; no
    item names another line.  Content never makes these readers raise.
  - *CSV* (``table`` ``.csv``): the header is the first CSV record.  After it, every non-UTF-8
    line and every CSV record that is not an empty line (records as Python's csv module splits
    the UTF-8 lines, one it raises ``csv.Error`` on included) yields 1 to 3 items sourced at its
    first physical line; no item names another line.  The reader raises exactly when the header
    cannot be parsed, is missing, spans a non-UTF-8 line or lacks a mapped column.
  - *Parquet* (``table`` ``.parquet``): the reader raises exactly when pyarrow cannot read the
    table or a mapped column is missing; otherwise rows ``1..n`` each yield 1 to 3 items.
  - *JSON documents* (``coco-captions``, ``karpathy-json``): the reader raises exactly when the
    bytes are no JSON document of its shape (``images`` and ``annotations`` lists; an ``images``
    list and ``dataset`` ``coco`` or ``flickr30k``).  Otherwise every element yields exactly one
    item: ``images[i]`` and ``annotations[j]``; for ``karpathy-json`` ``images[i]`` and, when that
    image is a record, each ``images[i].sentences[j]`` (a rejected image keeps its sentences in
    its quarantine record).

Every item must also be well formed: records hold canonical ids and string (or null) text, file
names and splits; rejects have a known reason, a source in the file and their record as JSON.
"""

from __future__ import annotations

import copy
import csv
import io
import json
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from crisscross.core.ids import split_id
from crisscross.core.quarantine import Rejected
from crisscross.ingest.readers import READERS, SourceFileError
from crisscross.ingest.records import CaptionRecord, ImageRecord
from tests.fuzzing import (
    BOM,
    DEEP,
    RAWS,
    Expect,
    assert_accounted,
    assert_one_line,
    describe,
    dumps,
    edited_row,
    encode,
    file_inputs,
    fuzz,
    guarded,
    json_tokens,
    json_values,
    mutated_object,
)

MAX_TRUNCATIONS = 400  # prefixes per file: every byte of a small sample, every k-th of a larger one
REASONS = {"bad-encoding", "malformed-row", "missing-field", "bad-id", "conflicting-image"}
MAX_ITEMS_PER_ROW = 3  # image + caption + conflicting-image reject
EXAMPLES = {"jsonl": 300, "csv": 300, "json": 300, "parquet": 100}  # per reader; Parquet files cost more to write and read

# ---------------------------------------------------------------------------- valid samples


def jsonl(rows: list[dict[str, Any]]) -> bytes:
    return "".join(json.dumps(r) + "\n" for r in rows).encode()


COCO_LINES = [
    {"image_id": 391895, "file_name": "COCO_val2014_000000391895.jpg", "caption_id": 770337, "caption_tok": "a man .", "caption_raw": None},
    {
        "image_id": 391895,
        "file_name": "COCO_val2014_000000391895.jpg",
        "caption_id": 771687,
        "caption_tok": None,
        "caption_raw": "A helmet.",
    },
    {"image_id": 522418, "file_name": "COCO_val2014_000000522418.jpg", "caption_id": 775, "caption_tok": "a dog", "caption_raw": "A dog."},
]
FLICKR_LINES = [
    {"karpathy_imgid": 25, "file_name": "1007129816.jpg", "caption_index": 0, "caption_tok": "a man ."},
    {"karpathy_imgid": 25, "file_name": "1007129816.jpg", "caption_index": 1, "caption_tok": "a hat ."},
    {"karpathy_imgid": 26, "file_name": "2.jpg", "caption_index": 0, "caption_tok": "a dog ."},
]
TABLE_MAPPING = {"image_id": "photo", "text": "sentence", "split": "part"}
TABLE_LINES = [
    {"photo": "1007129816.jpg", "sentence": "The man with a hat .", "part": "test"},
    {"photo": "1007129816.jpg", "sentence": "A man , with\nglasses .", "part": "test"},
    {"photo": "2.jpg", "sentence": "A dog .", "part": "val"},
]
COCO_DOCUMENT = {
    "images": [{"id": 1, "file_name": "000000000001.jpg"}, {"id": 2, "file_name": "000000000002.jpg"}],
    "annotations": [
        {"id": 10, "image_id": 1, "caption": "A cat."},
        {"id": 11, "image_id": 2, "caption": "A dog."},
        {"id": 12, "image_id": 1, "caption": "Two cats."},
    ],
}
KARPATHY_DOCUMENTS = {
    "coco": {
        "dataset": "coco",
        "images": [
            {
                "filepath": "val2014",
                "filename": "COCO_val2014_000000391895.jpg",
                "split": "test",
                "cocoid": 391895,
                "sentences": [
                    {"tokens": ["a", "man"], "raw": "A man.", "sentid": 770},
                    {"tokens": ["a", "road"], "raw": None, "sentid": 771},
                ],
            },
            {
                "filepath": "train2014",
                "filename": "COCO_train2014_000000000009.jpg",
                "split": "restval",
                "sentences": [{"raw": "Food.", "sentid": 7}],
            },
        ],
    },
    "flickr30k": {
        "dataset": "flickr30k",
        "images": [
            {
                "filename": "1007129816.jpg",
                "split": "test",
                "sentences": [{"tokens": ["the", "man"], "raw": "The man."}, {"raw": "A hat."}],
            },
            {"filename": "2.jpg", "split": "val", "sentences": [{"tokens": ["a", "dog"]}]},
        ],
    },
}


def table_csv() -> bytes:
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow(["photo", "sentence", "part"])
    writer.writerows([r["photo"], r["sentence"], r["part"]] for r in TABLE_LINES)  # row 2 spans two lines
    return buffer.getvalue().encode()


def parquet_bytes(table: pa.Table) -> bytes:
    buffer = io.BytesIO()
    pq.write_table(table, buffer)
    return buffer.getvalue()


@dataclass(frozen=True)
class Case:
    id: str
    reader: str
    suffix: str
    layout: str  # "jsonl", "csv", "parquet" or "json": which accounting rule applies
    sample: bytes
    options: dict[str, Any] = field(default_factory=dict)
    rows: list[dict[str, Any]] = field(default_factory=list)  # the sample's rows, for mutations
    document: dict[str, Any] = field(default_factory=dict)  # the sample's document, for mutations
    n_records: int = 0  # records (images + captions) the valid sample gives

    @property
    def keys(self) -> list[str]:
        rows = self.rows or [e for e in self.document.get("images", []) + self.document.get("annotations", [])]
        return sorted({k for r in rows for k in r})

    @property
    def needed(self) -> list[str]:
        return list(self.options.get("columns", {}).values())


CASES = [
    Case("coco-karpathy-jsonl", "coco-karpathy-jsonl", ".jsonl", "jsonl", jsonl(COCO_LINES), rows=COCO_LINES, n_records=5),
    Case("flickr30k-karpathy-jsonl", "flickr30k-karpathy-jsonl", ".jsonl", "jsonl", jsonl(FLICKR_LINES), rows=FLICKR_LINES, n_records=5),
    Case("coco-captions", "coco-captions", ".json", "json", json.dumps(COCO_DOCUMENT).encode(), document=COCO_DOCUMENT, n_records=5),
    *(
        Case(f"karpathy-json/{dataset}", "karpathy-json", ".json", "json", json.dumps(doc).encode(), document=doc, n_records=5)
        for dataset, doc in KARPATHY_DOCUMENTS.items()
    ),
    *(
        Case(
            f"table/{layout}",
            "table",
            f".{layout}",
            layout,
            sample,
            {"columns": TABLE_MAPPING, "namespace": "f30k"},
            TABLE_LINES,
            n_records=5,
        )
        for layout, sample in [
            ("csv", table_csv()),
            ("jsonl", jsonl(TABLE_LINES)),
            ("parquet", parquet_bytes(pa.Table.from_pylist(TABLE_LINES))),
        ]
    ),
]
IDS = [c.id for c in CASES]

# ---------------------------------------------------------------------------- running a reader


@dataclass
class Outcome:
    items: list[Any]
    error: SourceFileError | None


def run(case: Case, folder: Path, data: bytes) -> tuple[Path, Outcome]:
    path = folder / f"fuzz{case.suffix}"
    path.write_bytes(data)
    try:
        return path, Outcome(list(READERS.create(case.reader, **case.options).read(str(path))), None)
    except SourceFileError as error:
        assert_one_line(str(error), path.name)
        return path, Outcome([], error)


def line_texts(data: bytes) -> list[tuple[int, str | None]]:
    """The file's lines as the readers number them; None for a line that is not UTF-8."""
    pieces = data.split(b"\n")
    if pieces[-1] == b"":
        pieces.pop()
    out: list[tuple[int, str | None]] = []
    for number, raw in enumerate(pieces, start=1):
        raw = (raw.removeprefix(BOM) if number == 1 else raw).rstrip(b"\r")
        try:
            out.append((number, raw.decode("utf-8")))
        except UnicodeDecodeError:
            out.append((number, None))
    return out


def expect_jsonl(case: Case, name: str, data: bytes) -> Expect:
    rows = {f"{name}:{n}": (1, MAX_ITEMS_PER_ROW) for n, text in line_texts(data) if text is None or text.strip()}
    return Expect(False, rows)


def expect_csv(case: Case, name: str, data: bytes) -> Expect:
    lines = line_texts(data)
    good = [(n, text) for n, text in lines if text is not None]
    bad = [n for n, text in lines if text is None]
    parser = csv.reader(text + "\n" for _, text in good)
    try:
        header = next(parser, None)
    except csv.Error:
        return Expect(True)
    if header is None or (bad and bad[0] <= good[parser.line_num - 1][0]) or set(case.needed) - set(header):
        return Expect(True)
    starts = set(bad)
    while True:
        start = good[parser.line_num][0] if parser.line_num < len(good) else None
        try:
            if next(parser) != []:
                starts.add(start)
        except csv.Error:
            starts.add(start)
        except StopIteration:
            break
    return Expect(False, {f"{name}:{n}": (1, MAX_ITEMS_PER_ROW) for n in starts})


def expect_parquet(case: Case, name: str, data: bytes) -> Expect:
    try:
        table = pq.read_table(io.BytesIO(data))
        names = table.column_names  # a damaged footer can hold a name that is not UTF-8
    except (OSError, ValueError, pa.ArrowException):
        return Expect(True)
    if set(case.needed) - set(names):
        return Expect(True)
    return Expect(False, {f"{name}:{n}": (1, MAX_ITEMS_PER_ROW) for n in range(1, table.num_rows + 1)})


def expect_json(case: Case, name: str, data: bytes, items: list[Any]) -> Expect:
    try:
        document = json.loads(data)
    except (ValueError, RecursionError):
        return Expect(True)
    if not isinstance(document, dict):
        return Expect(True)
    if case.reader == "coco-captions":
        lists = ("images", "annotations")
        if not all(isinstance(document.get(k), list) for k in lists):
            return Expect(True)
        return Expect(False, {f"{name}:{k}[{i}]": (1, 1) for k in lists for i in range(len(document[k]))})
    if not isinstance(document.get("images"), list) or document.get("dataset") not in ("coco", "flickr30k"):
        return Expect(True)
    sources = {}
    images = {item.source for item in items if isinstance(item, ImageRecord)}
    for i, image in enumerate(document["images"]):
        sources[f"{name}:images[{i}]"] = (1, 1)
        if f"{name}:images[{i}]" in images:  # a record, so its sentences are read one by one
            sources.update({f"{name}:images[{i}].sentences[{j}]": (1, 1) for j in range(len(image["sentences"]))})
    return Expect(False, sources)


def utf8_encodable(text: str) -> bool:
    """False for text holding half a surrogate pair (a JSON ``\\udXXX`` escape), which no UTF-8 file can hold."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def check_item(item: Any, name: str) -> None:
    assert item.source.startswith(f"{name}:"), item
    assert all(utf8_encodable(v) for v in vars(item).values() if isinstance(v, str)), item  # Parquet can hold it
    if isinstance(item, Rejected):
        assert item.reason in REASONS, item
        assert all(isinstance(v, str) for v in (item.kind, item.key, item.detail, item.record)), item
        json.loads(item.record)  # the original record, kept as JSON
    elif isinstance(item, ImageRecord):
        assert split_id(item.image_id)[1] == "img", item
        assert isinstance(item.file_name, str) and isinstance(item.split, str) and isinstance(item.position, int), item
    elif isinstance(item, CaptionRecord):
        assert split_id(item.caption_id)[1] == "cap" and split_id(item.image_id)[1] == "img", item
        assert (item.text is None or isinstance(item.text, str)) and isinstance(item.split, str), item
    else:
        raise AssertionError(f"a reader yielded {item!r}")


def check(case: Case, folder: Path, data: bytes) -> Outcome:
    """Read ``data`` as ``case`` and check both rules; failures name the input."""
    where = describe(case.id, data)
    path, outcome = guarded(where, lambda: run(case, folder, data))
    name = path.name
    if case.layout == "json":
        expect = expect_json(case, name, data, outcome.items)
    else:
        expect = {"jsonl": expect_jsonl, "csv": expect_csv, "parquet": expect_parquet}[case.layout](case, name, data)
    assert_accounted(where, expect, outcome.error, outcome.items, lambda item: check_item(item, name), "item")
    return outcome


# ---------------------------------------------------------------------------- strategies


STRINGS = [
    *["a dog .", "1.jpg", " 1.jpg ", "1.jpg\n", "1007129816.jpg", "dir/3.jpg", "COCO_val2014_000000391895.jpg"],
    *["391895", " 42 ", "-3", "1.5", "coco:img:1", "coco:cap:1", "f30k:img:2", "f30k:cap:2#0", "ds:img:x", "x:img:", ":", "1.jpg#0"],
    *["test", "val", "f30k:cap:1#0"],
]
VALUES = json_values(STRINGS, STRINGS[:8])


def jsonl_files(case: Case) -> st.SearchStrategy[bytes]:
    """1 to 6 lines: the sample's rows with fields changed, or any JSON value."""
    row = st.sampled_from(case.rows).flatmap(lambda r: mutated_object(r, case.keys, VALUES))
    lines = st.lists(st.one_of(row, row, row, VALUES, st.sampled_from(RAWS)), min_size=1, max_size=6)
    return st.tuples(lines, st.sampled_from(["\n", "\r\n"])).map(lambda drawn: encode(drawn[1].join(map(dumps, drawn[0])) + drawn[1]))


@st.composite
def documents(draw: st.DrawFn, case: Case) -> bytes:
    """The sample document with one to four changes: a top-level value, an element or a sentence
    replaced or with fields changed, or the whole document some other value."""
    document: Any = copy.deepcopy(case.document)
    for _ in range(draw(st.integers(1, 4))):
        lists = [k for k in ("images", "annotations") if isinstance(document.get(k), list) and document[k]]
        action = draw(st.sampled_from(["whole", "top", "element", "element", "element", "sentence"]))
        if action == "whole":
            return encode(dumps(draw(VALUES)))
        if action == "top" or not lists:
            document[draw(st.sampled_from(["images", "annotations", "dataset"]))] = draw(VALUES)
            continue
        elements = document[draw(st.sampled_from(lists))]
        i = draw(st.integers(0, len(elements) - 1))
        element = elements[i]
        sentences = element.get("sentences") if isinstance(element, dict) else None
        if action == "sentence" and isinstance(sentences, list) and sentences:
            j = draw(st.integers(0, len(sentences) - 1))
            sentence = sentences[j] if isinstance(sentences[j], dict) else {}
            sentences[j] = draw(mutated_object(sentence, ["tokens", "raw", "sentid"], VALUES) | VALUES)
        elif isinstance(element, dict):
            elements[i] = draw(mutated_object(element, sorted(element) or ["id"], VALUES) | VALUES)
        else:
            elements[i] = draw(VALUES)
    return encode(dumps(document))


CSV_CELLS = ['"', '""', '"unterminated', 'a"b', '"a""b"', "a,b", '"a,\nb"', "a\rb", "\x00", "", " ", "\t", "é", "\u2028", "x" * 140_000]


@st.composite
def csv_files(draw: st.DrawFn, case: Case) -> bytes:
    """A header (sometimes shuffled, cut or with an extra column) and 0 to 6 of the sample's rows
    with cells replaced, added or dropped, joined by one line ending."""
    header = list(TABLE_LINES[0])
    if draw(st.booleans()):
        header = draw(st.permutations(header))[: draw(st.integers(1, 3))] + draw(st.sampled_from([[], ["extra"], ["x" * 200_000]]))
    rows = st.sampled_from(TABLE_LINES).flatmap(
        lambda row: edited_row([str(v) for v in row.values()], st.sampled_from(CSV_CELLS + STRINGS[:12]), 2)
    )
    lines = [",".join(cells) for cells in [header, *draw(st.lists(rows, max_size=6))]]
    end = draw(st.sampled_from(["\n", "\r\n", "\r"]))
    return (end.join(lines) + draw(st.sampled_from(["\n", "", "\r\n"]))).encode("utf-8", "surrogatepass")


PARQUET_COLUMNS = [
    pa.array([1, 2, 3], pa.int64()),
    pa.array([1.5, float("nan"), None], pa.float64()),
    pa.array([None, None, None], pa.null()),
    pa.array([["a"], [], None], pa.list_(pa.string())),
    pa.array([{"x": 1}, None, {"x": 2}]),
    pa.array([b"1.jpg", b"\xff", None], pa.binary()),
    pa.array(["", " ", None]),
    pa.array([True, False, None]),
    pa.array([b"1.jpg", b"caf\xe9", b"\xff"], pa.binary()).view(pa.string()),  # Arrow does not check UTF-8 on read
    pa.array([0, 2**62, None], pa.timestamp("ms")),  # past the year 9999: no Python datetime
]


@st.composite
def parquet_files(draw: st.DrawFn, case: Case) -> bytes:
    """The sample table with one to three columns of another type or content, or dropped, or an
    unmapped column added."""
    columns = {name: pa.array([r[name] for r in TABLE_LINES]) for name in TABLE_LINES[0]}
    for name in draw(st.lists(st.sampled_from([*sorted(columns), "seen"]), min_size=1, max_size=3, unique=True)):
        if name in columns and draw(st.integers(0, 4)) == 0:
            del columns[name]
        else:
            columns[name] = draw(st.sampled_from(PARQUET_COLUMNS))
    return parquet_bytes(pa.table(columns) if columns else pa.table({"other": [1]}))


STRUCTURED: dict[str, Callable[[Case], st.SearchStrategy[bytes]]] = {
    "jsonl": jsonl_files,
    "json": documents,
    "csv": csv_files,
    "parquet": parquet_files,
}


def inputs(case: Case) -> st.SearchStrategy[bytes]:
    names = ['"1.jpg"', '"COCO_val2014_000000000001.jpg"', '"a dog"', *(f'"{k}"' for k in case.keys)]
    return file_inputs(case.sample, STRUCTURED[case.layout](case), json_tokens(names))


# ---------------------------------------------------------------------------- tests


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("fuzz-readers")


def test_every_reader_is_fuzzed() -> None:
    assert {c.reader for c in CASES} == set(READERS.names())


@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_valid_sample_reads_cleanly(case: Case, folder: Path) -> None:
    outcome = check(case, folder, case.sample)
    assert outcome.error is None
    assert [i for i in outcome.items if isinstance(i, Rejected)] == []
    assert len(outcome.items) == case.n_records


@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_every_prefix_of_the_sample(case: Case, folder: Path) -> None:
    """A file cut anywhere; a JSON Lines file cut anywhere is still usable."""
    data = case.sample
    step = max(1, len(data) // MAX_TRUNCATIONS)
    for end in [*range(0, len(data), step), len(data)]:
        outcome = check(case, folder, data[:end])
        assert outcome.error is None or (case.layout != "jsonl" and end < len(data))


# Inputs the property tests found making a reader crash or lose a record, by reader.
FOUND: dict[str, list[bytes]] = {}


def reader_property(case: Case) -> Callable[..., None]:
    """The property test of one reader: every drawn input is read under both rules (module docstring)."""

    def test(folder: Path, data: bytes) -> None:
        check(case, folder, data)

    for data in FOUND.get(case.id, []):
        test = example(data=data)(test)
    return fuzz(EXAMPLES[case.layout])(given(data=inputs(case))(test))


for _case in CASES:
    globals()[f"test_property_{_case.id.replace('-', '_').replace('/', '_')}"] = reader_property(_case)


# ---------------------------------------------------------------------------- regressions
# Inputs the fuzzing found making a reader crash; each now gives the quarantine row shown.


def flickr_line(**changes: Any) -> bytes:
    return jsonl([{**FLICKR_LINES[0], **changes}])


REGRESSIONS = [
    # json.loads raises RecursionError for deep nesting and a plain ValueError for long integers.
    ("coco-karpathy-jsonl", "deep-nesting", DEEP.encode() + b"\n", "malformed-row"),
    ("coco-karpathy-jsonl", "huge-int-line", b"1" * 5000 + b"\n", "malformed-row"),
    ("coco-karpathy-jsonl", "huge-int-id", jsonl([{**COCO_LINES[0], "image_id": "1" * 5000}]), "bad-id"),
    ("flickr30k-karpathy-jsonl", "huge-caption-index", flickr_line(caption_index="9" * 5000), "bad-id"),
    # The caption id was built from the file name as written, which parse_image had accepted.
    ("flickr30k-karpathy-jsonl", "padded-file-name", flickr_line(file_name=" 1007129816.jpg "), None),
    ("flickr30k-karpathy-jsonl", "canonical-file-name", flickr_line(file_name="f30k:img:1007129816"), None),
]


@pytest.mark.parametrize(
    ("reader", "data", "reason"), [(reader, data, reason) for reader, _, data, reason in REGRESSIONS], ids=[r[1] for r in REGRESSIONS]
)
def test_regressions(reader: str, data: bytes, reason: str | None, tmp_path: Path) -> None:
    path = tmp_path / "regression.jsonl"
    path.write_bytes(data)
    items = list(READERS.create(reader).read(str(path)))
    if reason is None:
        assert [type(i) for i in items] == [ImageRecord, CaptionRecord]
        assert items[1].caption_id == "f30k:cap:1007129816#0"
    else:
        assert [(type(i), i.reason, i.source) for i in items] == [(Rejected, reason, "regression.jsonl:1")]


def test_lone_surrogates_are_bad_encoding(tmp_path: Path) -> None:
    # JSON's \\udXXX escapes can write half a surrogate pair; the record passed validation and then
    # the Parquet writer raised UnicodeEncodeError.  Now the row is quarantined as bad-encoding.
    path = tmp_path / "s.jsonl"
    path.write_text(
        '{"photo": "1.jpg", "sentence": "a \\ud800 dog"}\n{"photo": "2\\udc00.jpg", "sentence": "x"}\n{"photo": "3.jpg", "sentence": "\\ud83d\\ude00"}\n'
    )
    items = list(READERS.create("table", columns=TABLE_MAPPING).read(str(path)))
    assert [(type(i).__name__, getattr(i, "reason", "")) for i in items] == [
        ("Rejected", "bad-encoding"),
        ("Rejected", "bad-encoding"),
        ("ImageRecord", ""),
        ("CaptionRecord", ""),  # a whole pair is one character
    ]
    assert items[-1].text == "\U0001f600"
    document = copy.deepcopy(COCO_DOCUMENT)
    document["annotations"][0]["caption"] = "\ud800"
    path = tmp_path / "captions.json"
    path.write_text(json.dumps(document))
    rejected = [i for i in READERS.create("coco-captions").read(str(path)) if isinstance(i, Rejected)]
    assert [(r.reason, r.source, r.key) for r in rejected] == [("bad-encoding", "captions.json:annotations[0]", "")]


def test_karpathy_flickr_caption_ids_come_from_the_image_id(tmp_path: Path) -> None:
    # A filepath with a newline made the caption id unparseable (an IdFormError left the reader).
    document = copy.deepcopy(KARPATHY_DOCUMENTS["flickr30k"])
    document["images"][0]["filepath"] = "a\nb"
    path = tmp_path / "dataset_flickr30k.json"
    path.write_text(json.dumps(document))
    items = list(READERS.create("karpathy-json").read(str(path)))
    assert [i.caption_id for i in items if isinstance(i, CaptionRecord)][:2] == ["f30k:cap:1007129816#0", "f30k:cap:1007129816#1"]


def test_parquet_values_python_cannot_hold(tmp_path: Path) -> None:
    # Arrow does not check UTF-8 on read and keeps timestamps past the year 9999; to_pylist() then
    # raised UnicodeDecodeError / OverflowError out of the reader.  Now only the rows that need
    # such a value are quarantined; an unmapped column is kept as Arrow's text of it.
    sentences = pa.array([b"The man .", b"caf\xe9", b"A dog ."], pa.binary()).view(pa.string())
    table = pa.table({"photo": ["1.jpg", "2.jpg", "3.jpg"], "sentence": sentences, "seen": pa.array([0, 2**62, None], pa.timestamp("ms"))})
    path = tmp_path / "captions.parquet"
    path.write_bytes(parquet_bytes(table))
    items = list(READERS.create("table", columns={"image_id": "photo", "text": "sentence"}, namespace="f30k").read(str(path)))
    rejected = [i for i in items if isinstance(i, Rejected)]
    assert [(r.reason, r.source) for r in rejected] == [("bad-encoding", "captions.parquet:2")]
    assert json.loads(rejected[0].record)["sentence"] == "caf\\xe9"
    assert [(c.caption_id, c.text) for c in items if isinstance(c, CaptionRecord)] == [
        ("f30k:cap:1#0", "The man ."),
        ("f30k:cap:3#0", "A dog ."),
    ]


@pytest.mark.parametrize(
    ("suffix", "data", "message"),
    [
        (".csv", b"photo,sentence,part," + b"x" * 200_000 + b"\n", "header.*field limit"),  # csv.Error left the reader
        (".csv", b"photo,sentence\rpart\n", "header.*new-line"),
        (".json", DEEP.encode(), "not a JSON document.*recursion"),
        (".json", b"1" * 5000, "not a JSON document.*4300"),
    ],
    ids=["csv-header-over-field-limit", "csv-header-stray-cr", "json-deep-nesting", "json-huge-int"],
)
def test_unusable_files_raise_one_line(suffix: str, data: bytes, message: str, tmp_path: Path) -> None:
    path = tmp_path / f"broken{suffix}"
    path.write_bytes(data)
    reader = READERS.create("table", columns=TABLE_MAPPING) if suffix == ".csv" else READERS.create("coco-captions")
    with pytest.raises(SourceFileError, match=message) as raised:
        list(reader.read(str(path)))
    assert len(str(raised.value).splitlines()) == 1 and "broken" in str(raised.value)
