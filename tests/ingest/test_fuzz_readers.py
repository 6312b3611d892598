"""Fuzz every source reader with random, truncated and mutated files (seeded, so deterministic).

Each reader gets the inputs :mod:`tests.fuzzing` makes: random, truncated and structurally mutated
files built from a small valid sample of the reader.

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
import random
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from crisscross.core.ids import split_id
from crisscross.core.quarantine import Rejected
from crisscross.ingest.readers import READERS, SourceFileError
from crisscross.ingest.records import CaptionRecord, ImageRecord
from tests.fuzzing import (
    BAD_CSV_CELLS,
    BAD_JSON_LINES,
    BOM,
    DEEP,
    INVALID_UTF8,
    Expect,
    Raw,
    Values,
    assert_accounted,
    assert_one_line,
    describe,
    dumps,
    encode,
    guarded,
    json_tokens,
    prefix_ends,
    random_bytes,
    random_inputs,
    replace_line,
)
from tests.fuzzing import BAD_VALUES as SHARED_BAD_VALUES

MAX_TRUNCATIONS = 400  # prefixes per file: every byte of a small sample, every k-th of a larger one
REASONS = {"bad-encoding", "malformed-row", "missing-field", "bad-id", "conflicting-image"}
MAX_ITEMS_PER_ROW = 3  # image + caption + conflicting-image reject

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


def run(case: Case, tmp_path: Path, data: bytes) -> tuple[Path, Outcome]:
    path = tmp_path / f"fuzz{case.suffix}"
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


def check(case: Case, tmp_path: Path, data: bytes, label: str) -> Outcome:
    """Read ``data`` as ``case`` and check both rules; failures name the input."""
    where = describe(case.id, data, label)
    path, outcome = guarded(where, lambda: run(case, tmp_path, data))
    name = path.name
    if case.layout == "json":
        expect = expect_json(case, name, data, outcome.items)
    else:
        expect = {"jsonl": expect_jsonl, "csv": expect_csv, "parquet": expect_parquet}[case.layout](case, name, data)
    assert_accounted(where, expect, outcome.error, outcome.items, lambda item: check_item(item, name), "item")
    return outcome


# ---------------------------------------------------------------------------- generators


STRINGS = [
    *["", " ", "\t", "a dog .", "1.jpg", " 1.jpg ", "1.jpg\n", "1007129816.jpg", "dir/3.jpg", "COCO_val2014_000000391895.jpg"],
    *["391895", " 42 ", "-3", "1.5", "coco:img:1", "coco:cap:1", "f30k:img:2", "f30k:cap:2#0", "ds:img:x", "x:img:", ":", "1.jpg#0"],
    *["a\nb", "a\u2028b", "\x00", "\ud800", "é", "٣", "test", "val", "9" * 5000, "x" * 3000, "\ufeffa"],
]
VALUES = Values(STRINGS, STRINGS[:8])
random_value, mutate_object = VALUES.random, VALUES.mutate


def mutate_document(rng: random.Random, case: Case) -> Any:
    document = copy.deepcopy(case.document)
    for _ in range(rng.randint(1, 4)):
        r = rng.random()
        lists = [k for k in ("images", "annotations") if isinstance(document.get(k), list) and document[k]]
        if r < 0.05:
            return random_value(rng)
        if r < 0.15:
            document[rng.choice(["images", "annotations", "dataset"])] = random_value(rng)
        elif r < 0.6 and lists:
            elements = document[rng.choice(lists)]
            i = rng.randrange(len(elements))
            if isinstance(elements[i], dict) and rng.random() < 0.8:
                elements[i] = mutate_object(rng, elements[i], sorted(elements[i]) or ["id"])
            else:
                elements[i] = random_value(rng)
        elif lists:
            image = rng.choice(document["images"]) if document.get("images") else None
            if isinstance(image, dict) and isinstance(image.get("sentences"), list) and image["sentences"]:
                j = rng.randrange(len(image["sentences"]))
                sentence = image["sentences"][j]
                image["sentences"][j] = mutate_object(rng, sentence, ["tokens", "raw", "sentid"]) if isinstance(sentence, dict) else None
            elif isinstance(image, dict):
                image["sentences"] = random_value(rng)
    return document


CSV_CELLS = ['"', '""', '"unterminated', 'a"b', '"a""b"', "a,b", '"a,\nb"', "a\rb", "\x00", "", " ", "\t", "é", "\u2028", "x" * 140_000]


def random_csv(rng: random.Random, case: Case) -> bytes:
    header = list(TABLE_LINES[0])
    if rng.random() < 0.2:
        rng.shuffle(header)
        header = header[: rng.randint(1, 4)] + ["extra"] * rng.randint(0, 1)
    lines = [",".join(header)]
    for _ in range(rng.randint(0, 6)):
        cells = [str(v) for v in rng.choice(TABLE_LINES).values()]
        for _ in range(rng.randint(0, 2)):
            r = rng.random()
            if r < 0.6:
                cells[rng.randrange(len(cells))] = rng.choice(CSV_CELLS + STRINGS[:12])
            elif r < 0.8:
                cells.append(rng.choice(CSV_CELLS))
            else:
                cells.pop()
        lines.append(",".join(cells))
    return (rng.choice(["\n", "\r\n", "\r"]).join(lines) + rng.choice(["\n", "", "\r\n"])).encode("utf-8", "surrogatepass")


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


def random_parquet(rng: random.Random, case: Case) -> bytes:
    if rng.random() < 0.5:  # flip a few bytes of the valid file
        data = bytearray(case.sample)
        for _ in range(rng.randint(1, 4)):
            data[rng.randrange(len(data))] = rng.randrange(256)
        return bytes(data)
    columns = {name: pa.array([r[name] for r in TABLE_LINES]) for name in TABLE_LINES[0]}
    for name in rng.sample(sorted(columns), rng.randint(1, 3)):
        columns[name] = rng.choice(PARQUET_COLUMNS)
    return parquet_bytes(pa.table(columns))


def random_structured(rng: random.Random, case: Case) -> bytes:
    """Something close to a valid file: the sample's rows or elements with random changes."""
    if case.layout == "json":
        return encode(dumps(mutate_document(rng, case)))
    if case.layout == "csv":
        return random_csv(rng, case)
    if case.layout == "parquet":
        return random_parquet(rng, case)
    lines = []
    for _ in range(rng.randint(1, 6)):
        row = rng.choice(case.rows)
        lines.append(dumps(mutate_object(rng, row, case.keys) if rng.random() < 0.9 else random_value(rng)))
    return encode("\n".join(lines) + "\n")


def random_tokens(rng: random.Random, case: Case) -> bytes:
    return json_tokens(rng, '"a dog"', ['"1.jpg"', '"COCO_val2014_000000000001.jpg"', *(f'"{k}"' for k in case.keys)])


def fuzz_inputs(case: Case) -> list[tuple[str, bytes]]:
    # random bytes replace a slice of the valid sample
    return random_inputs(case, random_tokens, random_structured, random_bytes)


# ---------------------------------------------------------------------------- structured mutations

BAD_VALUES: dict[str, Any] = {**SHARED_BAD_VALUES, "padded-name": " 1.jpg ", "canonical-other-kind": "f30k:cap:1#0"}


def middle(data: bytes, insert: bytes) -> bytes:
    """``insert`` in the middle of the second line (inside a string value, for the samples here)."""
    lines = data.split(b"\n")
    at = lines[1].find(b".") if b"." in lines[1] else len(lines[1]) // 2
    lines[1] = lines[1][:at] + insert + lines[1][at:]
    return b"\n".join(lines)


def line_mutations(case: Case) -> list[tuple[str, bytes]]:
    data = case.sample
    out = []
    if case.layout == "jsonl":
        for key in case.keys:
            for label, value in BAD_VALUES.items():
                out.append((f"{key}={label}", replace_line(data, 2, encode(dumps({**case.rows[1], key: value})))))
            out.append((f"{key} missing", replace_line(data, 2, json.dumps({k: v for k, v in case.rows[1].items() if k != key}).encode())))
        for label, line in {
            **BAD_JSON_LINES,
            "duplicate-key": b'{"a": 1, "a": 2}',
            "bad-escape": b'{"a": "\\x"}',
            "bom-mid-file": BOM + json.dumps(case.rows[1]).encode(),
            "raw-u2028": json.dumps(case.rows[1], ensure_ascii=False).replace(".", "\u2028").encode(),
            "long-line": json.dumps({**case.rows[1], case.keys[-1]: "x" * 300_000}).encode(),
            "control-chars-only": b"\x1c\x1d\x0b\x0c",
        }.items():
            out.append((f"line 2 = {label}", replace_line(data, 2, line)))
    elif case.layout == "csv":
        for label, cell in BAD_CSV_CELLS.items():
            out.append((f"cell={label}", replace_line(data, 2, b"1007129816.jpg," + cell + b",test")))
        out += [
            ("row with fewer cells", replace_line(data, 4, b"2.jpg")),
            ("header missing a column", replace_line(data, 1, b"photo,part")),
            ("header duplicated column", replace_line(data, 1, b"photo,sentence,sentence")),
            ("header unterminated quote", replace_line(data, 1, b'photo,"sentence,part')),
            ("header not utf-8", replace_line(data, 1, b"photo,sent\xffence,part")),
            ("header huge", replace_line(data, 1, b"photo,sentence,part," + b"x" * 200_000)),
            ("blank header", b"\n" + data),
            ("only a header", data.split(b"\n")[0] + b"\n"),
        ]
    out += [
        ("bom", BOM + data),
        ("crlf", data.replace(b"\n", b"\r\n")),
        ("cr only", data.replace(b"\n", b"\r")),
        ("no final newline", data.rstrip(b"\n")),
        ("blank lines", data.replace(b"\n", b"\n\n \t\n", 2)),
        ("nul byte", middle(data, b"\x00")),
        ("empty file", b""),
        ("utf-16", data.decode().encode("utf-16")),
        *((f"invalid utf-8 {label}", middle(data, bad)) for label, bad in INVALID_UTF8.items()),
    ]
    return out


def document_mutations(case: Case) -> list[tuple[str, bytes]]:
    def with_change(change: Callable[[dict[str, Any]], None]) -> bytes:
        document = copy.deepcopy(case.document)
        change(document)
        return encode(dumps(document))

    def set_path(path: tuple[Any, ...], value: Any) -> Callable[[dict[str, Any]], None]:
        def change(document: dict[str, Any]) -> None:
            target = document
            for step in path[:-1]:
                target = target[step]
            target[path[-1]] = value

        return change

    paths: list[tuple[Any, ...]] = [("images", 0, k) for k in case.document["images"][0]]
    if "annotations" in case.document:
        paths += [("annotations", 0, k) for k in case.document["annotations"][0]]
    else:
        paths += [("images", 0, "sentences", 0, k) for k in ("tokens", "raw", "sentid")]
    out = [(f"{'.'.join(map(str, p))}={label}", with_change(set_path(p, v))) for p in paths for label, v in BAD_VALUES.items()]
    for label, value in {"null": None, "number": 7, "string": "x", "list": [[]], "deep": Raw(DEEP)}.items():
        out.append((f"images[1]={label}", with_change(set_path(("images", 1), value))))
        out.append((f"images={label}", with_change(set_path(("images",), value))))
        if "annotations" in case.document:
            out.append((f"annotations[2]={label}", with_change(set_path(("annotations", 2), value))))
        else:
            out.append((f"images[0].sentences={label}", with_change(set_path(("images", 0, "sentences"), value))))
            out.append((f"images[0].sentences[1]={label}", with_change(set_path(("images", 0, "sentences", 1), value))))
            out.append((f"dataset={label}", with_change(set_path(("dataset",), value))))
    data = case.sample
    text = json.dumps(case.document, indent=1)
    out += [
        ("bom", BOM + data),
        ("crlf pretty-printed", text.replace("\n", "\r\n").encode()),
        ("utf-16", text.encode("utf-16")),
        ("top-level list", b"[" + data + b"]"),
        ("top-level number", b"1" * 5000),
        ("deep", DEEP.encode()),
        ("nul byte in a string", data.replace(b"000.jpg", b"000\x00.jpg", 1).replace(b".jpg", b"\x00.jpg", 1)),
        ("empty file", b""),
        ("trailing garbage", data + b"}"),
        *((f"invalid utf-8 {label}", data.replace(b".jpg", bad + b".jpg", 1)) for label, bad in INVALID_UTF8.items()),
    ]
    return out


def parquet_mutations(case: Case) -> list[tuple[str, bytes]]:
    out = []
    for name in TABLE_LINES[0]:
        for column in PARQUET_COLUMNS:
            table = pa.table({n: (column if n == name else pa.array([r[n] for r in TABLE_LINES])) for n in TABLE_LINES[0]})
            out.append((f"{name}: {column.type}", parquet_bytes(table)))
        table = pa.table({n: pa.array([r[n] for r in TABLE_LINES]) for n in TABLE_LINES[0] if n != name})
        out.append((f"no column {name}", parquet_bytes(table)))
    data = case.sample
    out += [(f"byte {i} zeroed", data[:i] + b"\x00" + data[i + 1 :]) for i in range(0, len(data), max(1, len(data) // 60))]
    extra = pa.table({**{n: pa.array([r[n] for r in TABLE_LINES]) for n in TABLE_LINES[0]}, "seen": PARQUET_COLUMNS[-1]})
    out += [("unmapped timestamp past 9999", parquet_bytes(extra))]
    out += [("empty table", parquet_bytes(pa.Table.from_pylist([], schema=pa.table({n: ["x"] for n in TABLE_LINES[0]}).schema)))]
    return out


def mutations(case: Case) -> list[tuple[str, bytes]]:
    return {"json": document_mutations, "parquet": parquet_mutations}.get(case.layout, line_mutations)(case)


# ---------------------------------------------------------------------------- tests


def test_every_reader_is_fuzzed() -> None:
    assert {c.reader for c in CASES} == set(READERS.names())


@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_valid_sample_reads_cleanly(case: Case, tmp_path: Path) -> None:
    outcome = check(case, tmp_path, case.sample, "valid sample")
    assert outcome.error is None
    assert [i for i in outcome.items if isinstance(i, Rejected)] == []
    assert len(outcome.items) == case.n_records


@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_random_inputs(case: Case, tmp_path: Path) -> None:
    outcomes = [check(case, tmp_path, data, label) for label, data in fuzz_inputs(case)]
    if case.layout in ("jsonl", "csv"):  # the random inputs reach the row code, not only the file checks
        assert sum(o.error is None and any(isinstance(i, CaptionRecord) for i in o.items) for o in outcomes) >= 10


@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_truncated_files(case: Case, tmp_path: Path) -> None:
    data = case.sample
    for end in prefix_ends(len(data), MAX_TRUNCATIONS):
        outcome = check(case, tmp_path, data[:end], f"first {end} of {len(data)} bytes")
        if case.layout != "jsonl" and end < len(data):
            continue
        assert outcome.error is None


@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_structured_mutations(case: Case, tmp_path: Path) -> None:
    cases = mutations(case)
    assert len(cases) >= 20
    for label, data in cases:
        check(case, tmp_path, data, label)


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
        (".json", DEEP.encode(), "not a valid JSON document.*recursion"),
        (".json", b"1" * 5000, "not a valid JSON document.*4300"),
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
