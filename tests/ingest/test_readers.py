"""Readers on the real files, and on small crafted files with every kind of bad row."""

from __future__ import annotations

import io
import json
from codecs import BOM_UTF8
from collections import Counter
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import given
from hypothesis import strategies as st

from crisscross.core.errors import ParamError
from crisscross.core.quarantine import Rejected
from crisscross.ingest import readers
from crisscross.ingest.readers import READERS, SourceFileError
from crisscross.ingest.records import CaptionRecord, ImageRecord


def read(name: str, path: Path, **options: object) -> tuple[list[ImageRecord], list[CaptionRecord], list[Rejected]]:
    items = list(READERS.create(name, **options).read(str(path)))
    images = [i for i in items if isinstance(i, ImageRecord)]
    captions = [i for i in items if isinstance(i, CaptionRecord)]
    rejected = [i for i in items if isinstance(i, Rejected)]
    assert len(images) + len(captions) + len(rejected) == len(items)
    return images, captions, rejected


def reasons(rejected: list[Rejected]) -> list[tuple[str, str, str]]:
    return [(r.kind, r.reason, r.source) for r in rejected]


def write_lines(path: Path, lines: list[bytes | str | dict]) -> Path:
    encoded = [line if isinstance(line, bytes) else (json.dumps(line) if isinstance(line, dict) else line).encode() for line in lines]
    path.write_bytes(b"\n".join(encoded) + b"\n")
    return path


# --- real files ---------------------------------------------------------------------------------


def test_coco_karpathy_test5k(shared_data: Path) -> None:
    images, captions, rejected = read("coco-karpathy-jsonl", shared_data / "coco-karpathy" / "test5k.jsonl", split="test")
    assert (len(images), len(captions), len(rejected)) == (5000, 25000, 0)
    assert len({c.caption_id for c in captions}) == 25000
    first = captions[0]
    assert first == CaptionRecord(
        caption_id="coco:cap:770337",
        image_id="coco:img:391895",
        text="A man with a red helmet on a small moped on a dirt road .",
        split="test",
        source="test5k.jsonl:1",
        position=1,
    )
    assert images[0].image_id == "coco:img:391895"
    assert images[0].file_name == "COCO_val2014_000000391895.jpg"
    assert all(c.text for c in captions)
    assert Counter(c.image_id for c in captions).most_common(1)[0][1] == 5


def test_coco_karpathy_val5k_partial_text_modes(shared_data: Path) -> None:
    path = shared_data / "coco-karpathy" / "val5k_partial.jsonl"
    raw = [json.loads(line) for line in path.read_text().splitlines()]
    both_null = sum(r["caption_tok"] is None and r["caption_raw"] is None for r in raw)
    assert both_null == 17650

    images, captions, rejected = read("coco-karpathy-jsonl", path)
    assert (len(images), len(captions), len(rejected)) == (5000, 25000, 0)
    assert sum(c.text is None for c in captions) == 17650
    assert {c.split for c in captions} == {""}  # the lines hold no split and none was given

    _, tok_only, _ = read("coco-karpathy-jsonl", path, text="tok")
    assert sum(c.text is None for c in tok_only) == sum(r["caption_tok"] is None for r in raw) == 20000
    _, raw_only, _ = read("coco-karpathy-jsonl", path, text="raw")
    assert sum(c.text is None for c in raw_only) == sum(r["caption_raw"] is None for r in raw)
    _, raw_first, _ = read("coco-karpathy-jsonl", path, text="raw-then-tok")
    assert sum(c.text is None for c in raw_first) == 17650
    with_both = next(i for i, r in enumerate(raw) if r["caption_tok"] and r["caption_raw"])
    assert raw_first[with_both].text == raw[with_both]["caption_raw"]
    assert captions[with_both].text == raw[with_both]["caption_tok"]


def test_flickr30k_test(shared_data: Path) -> None:
    images, captions, rejected = read("flickr30k-karpathy-jsonl", shared_data / "flickr30k-karpathy" / "test.jsonl")
    assert (len(images), len(captions), len(rejected)) == (1000, 5000, 0)
    assert images[0].image_id == "f30k:img:1007129816"
    assert images[0].file_name == "1007129816.jpg"
    assert [c.caption_id for c in captions[:2]] == ["f30k:cap:1007129816#0", "f30k:cap:1007129816#1"]
    assert captions[0].text == "The man with pierced ears is wearing glasses and an orange hat ."


def test_coco_captions_val2017(shared_data: Path) -> None:
    path = shared_data / "coco-karpathy" / "captions_val2017.json"
    document = json.loads(path.read_text())
    images, captions, rejected = read("coco-captions", path, split="val2017")
    assert len(images) == 5000
    assert len(captions) == len(document["annotations"])  # 25,014 in this release
    assert rejected == []
    first = document["annotations"][0]
    assert captions[0].caption_id == f"coco:cap:{first['id']}"
    assert captions[0].image_id == f"coco:img:{first['image_id']}"
    assert captions[0].text == first["caption"]
    assert captions[0].source == "captions_val2017.json:annotations[0]"
    assert {i.split for i in images} == {"val2017"}
    assert images[0].file_name == document["images"][0]["file_name"]


# --- malformed line input -------------------------------------------------------------------------


def coco_line(image: int, caption: int, tok: str | None = "a dog .", file_name: str | None = None) -> dict:
    return {
        "image_id": image,
        "file_name": file_name or f"COCO_val2014_{image:012d}.jpg",
        "caption_id": caption,
        "caption_tok": tok,
        "caption_raw": None,
        "karpathy_order": 0,
    }


def test_each_bad_line_is_one_reject_and_good_lines_survive(tmp_path: Path) -> None:
    missing = coco_line(2, 21)
    del missing["caption_id"]
    path = write_lines(
        tmp_path / "dirty.jsonl",
        [
            coco_line(1, 11),
            '{"image_id": 1, "file_name": ',  # line 2: truncated JSON
            b'{"image_id": 1, "caption_tok": "caf\xe9 au lait"}',  # line 3: Latin-1, not UTF-8
            missing,  # line 4
            coco_line(1, 12, file_name="COCO_val2014_000000000999.jpg"),  # line 5: conflicting image
            "",  # blank lines are no records
            coco_line(2, 22),  # line 7
            coco_line(3, 31, tok=None),  # line 8: null text is kept for validation to reject
        ],
    )
    images, captions, rejected = read("coco-karpathy-jsonl", path)
    assert reasons(rejected) == [
        ("row", "malformed-row", "dirty.jsonl:2"),
        ("row", "bad-encoding", "dirty.jsonl:3"),
        ("row", "missing-field", "dirty.jsonl:4"),
        ("image", "conflicting-image", "dirty.jsonl:5"),
    ]
    assert [i.image_id for i in images] == ["coco:img:1", "coco:img:2", "coco:img:3"]
    assert images[0].source == "dirty.jsonl:1"
    assert images[0].file_name == "COCO_val2014_000000000001.jpg"  # the first line wins
    assert [(c.caption_id, c.source) for c in captions] == [
        ("coco:cap:11", "dirty.jsonl:1"),
        ("coco:cap:12", "dirty.jsonl:5"),
        ("coco:cap:22", "dirty.jsonl:7"),
        ("coco:cap:31", "dirty.jsonl:8"),
    ]
    assert captions[-1].text is None
    # Every reject keeps the original record as JSON.
    assert json.loads(rejected[0].record) == '{"image_id": 1, "file_name": '
    assert "caf\\xe9" in json.loads(rejected[1].record)
    assert json.loads(rejected[2].record) == missing
    assert rejected[3].key == "coco:img:1"
    assert "COCO_val2014_000000000999.jpg" in rejected[3].detail


def test_bad_ids_and_wrong_types_are_rejected(tmp_path: Path) -> None:
    path = write_lines(
        tmp_path / "ids.jsonl",
        [
            coco_line(1, 11),
            {**coco_line(1, 12), "caption_id": "1007129816.jpg#0"},
            {**coco_line(1, 13), "image_id": "COCO_val2014_1.jpg"},
            {**coco_line(1, 14), "image_id": True},
            {**coco_line(1, 15), "caption_tok": ["a", "dog"]},
            "[1, 2]",
            {**coco_line(1, 16), "caption_id": "COCO_val2014:sentid:16"},
        ],
    )
    _, captions, rejected = read("coco-karpathy-jsonl", path)
    assert reasons(rejected) == [
        ("row", "bad-id", "ids.jsonl:2"),
        ("row", "bad-id", "ids.jsonl:3"),
        ("row", "bad-id", "ids.jsonl:4"),
        ("row", "malformed-row", "ids.jsonl:5"),
        ("row", "malformed-row", "ids.jsonl:6"),
    ]
    assert rejected[1].key == "coco:cap:13"  # the caption id was known when the image id failed
    assert [c.caption_id for c in captions] == ["coco:cap:11", "coco:cap:16"]


def test_flickr_jsonl_bad_rows(tmp_path: Path) -> None:
    path = write_lines(
        tmp_path / "f30k.jsonl",
        [
            {"karpathy_imgid": 25, "file_name": "1007129816.jpg", "caption_index": 0, "caption_tok": "a man ."},
            {"karpathy_imgid": 25, "file_name": "1007129816.jpg", "caption_index": -1, "caption_tok": "x"},
            {"karpathy_imgid": 25, "file_name": "1007129816.jpg", "caption_tok": "x"},
            {"karpathy_imgid": 26, "file_name": "photo.png", "caption_index": 0, "caption_tok": "x"},
            b'{"file_name": "1.jpg", "caption_index": 0, "caption_tok": "\xff"}',
            {"karpathy_imgid": 25, "file_name": "1007129816.jpg", "caption_index": "1", "caption_tok": "a hat ."},
        ],
    )
    images, captions, rejected = read("flickr30k-karpathy-jsonl", path, split="test")
    assert reasons(rejected) == [
        ("row", "bad-id", "f30k.jsonl:2"),
        ("row", "missing-field", "f30k.jsonl:3"),
        ("row", "bad-id", "f30k.jsonl:4"),
        ("row", "bad-encoding", "f30k.jsonl:5"),
    ]
    assert [(i.image_id, i.split) for i in images] == [("f30k:img:1007129816", "test")]
    assert [c.caption_id for c in captions] == ["f30k:cap:1007129816#0", "f30k:cap:1007129816#1"]


def test_unusable_files_raise_naming_the_file(tmp_path: Path) -> None:
    missing = tmp_path / "nowhere.jsonl"
    with pytest.raises(SourceFileError, match="nowhere.jsonl"):
        list(READERS.create("coco-karpathy-jsonl").read(str(missing)))
    broken = tmp_path / "captions_broken.json"
    broken.write_text('{"images": [')
    with pytest.raises(SourceFileError, match="captions_broken.json"):
        list(READERS.create("coco-captions").read(str(broken)))
    wrong = tmp_path / "wrong.json"
    wrong.write_text('{"images": []}')
    with pytest.raises(SourceFileError, match="wrong.json.*annotations"):
        list(READERS.create("coco-captions").read(str(wrong)))
    with pytest.raises(SourceFileError, match="dataset"):
        list(READERS.create("karpathy-json").read(str(wrong)))


def test_options_are_checked() -> None:
    with pytest.raises(ParamError, match="txt is not an option of reader 'coco-karpathy-jsonl'; options: split, text"):
        READERS.create("coco-karpathy-jsonl", txt="raw")
    with pytest.raises(ParamError, match="text must be one of .*tok-then-raw"):
        READERS.create("coco-karpathy-jsonl", text="both")
    with pytest.raises(ParamError, match="split must be a non-empty string, got 3"):
        READERS.create("flickr30k-karpathy-jsonl", split=3)
    with pytest.raises(KeyError, match="karpathy-json"):
        READERS.create("karpathy")
    with pytest.raises(ParamError, match="columns has key 'caption'; its keys must be among"):
        READERS.create("table", columns={"caption": "text"})
    with pytest.raises(ParamError, match="columns.text must be a non-empty string"):
        READERS.create("table", columns={"text": ""})
    with pytest.raises(ParamError, match="caption_id"):
        READERS.create("table", namespace="coco")
    with pytest.raises(ParamError, match="namespace"):
        READERS.create("table", namespace="a:b")
    assert READERS.names() == ["coco-captions", "coco-karpathy-jsonl", "flickr30k-karpathy-jsonl", "karpathy-json", "table"]


# --- JSON documents ---------------------------------------------------------------------------


def test_coco_captions_keeps_images_without_annotations(tmp_path: Path) -> None:
    path = tmp_path / "captions_tiny.json"
    path.write_text(
        json.dumps(
            {
                "images": [
                    {"id": 1, "file_name": "000000000001.jpg"},
                    {"id": 2, "file_name": "000000000002.jpg"},
                    {"file_name": "000000000003.jpg"},
                    "not an image",
                ],
                "annotations": [
                    {"id": 10, "image_id": 1, "caption": "A cat."},
                    {"id": 11, "image_id": "x", "caption": "A dog."},
                    {"id": 12, "image_id": 1, "caption": None},
                ],
            }
        )
    )
    images, captions, rejected = read("coco-captions", path)
    assert [i.image_id for i in images] == ["coco:img:1", "coco:img:2"]
    assert reasons(rejected) == [
        ("image", "missing-field", "captions_tiny.json:images[2]"),
        ("image", "malformed-row", "captions_tiny.json:images[3]"),
        ("caption", "bad-id", "captions_tiny.json:annotations[1]"),
    ]
    assert [(c.caption_id, c.text) for c in captions] == [("coco:cap:10", "A cat."), ("coco:cap:12", None)]


def karpathy_document(dataset: str) -> dict:
    if dataset == "coco":
        images = [
            {
                "filepath": "val2014",
                "filename": "COCO_val2014_000000391895.jpg",
                "imgid": 0,
                "split": "test",
                "cocoid": 391895,
                "sentids": [770, 771],
                "sentences": [
                    {"tokens": ["a", "man", "on", "a", "moped"], "raw": "A man on a moped.", "imgid": 0, "sentid": 770},
                    {"tokens": ["a", "dirt", "road"], "raw": None, "imgid": 0, "sentid": 771},
                ],
            },
            {
                "filepath": "train2014",
                "filename": "COCO_train2014_000000000009.jpg",
                "imgid": 1,
                "split": "restval",
                "sentids": [772],
                "sentences": [{"tokens": ["food"], "imgid": 1}],  # no sentid
            },
        ]
    else:
        images = [
            {
                "filename": "1007129816.jpg",
                "imgid": 25,
                "split": "test",
                "sentids": [125, 126],
                "sentences": [
                    {"tokens": ["the", "man"], "raw": "The man.", "imgid": 25, "sentid": 125},
                    {"tokens": ["a", "hat"], "raw": "", "imgid": 25, "sentid": 126},
                ],
            },
            {"filename": "1.png", "imgid": 26, "split": "val", "sentences": []},
        ]
    return {"images": images, "dataset": dataset}


def test_karpathy_json_coco(tmp_path: Path) -> None:
    path = tmp_path / "dataset_coco.json"
    path.write_text(json.dumps(karpathy_document("coco")))
    images, captions, rejected = read("karpathy-json", path)
    assert [(i.image_id, i.file_name, i.split) for i in images] == [
        ("coco:img:391895", "val2014/COCO_val2014_000000391895.jpg", "test"),
        ("coco:img:9", "train2014/COCO_train2014_000000000009.jpg", "restval"),  # id from the file name
    ]
    # Karpathy's sentids are not COCO annotation ids: never in the coco caption namespace.
    assert [(c.caption_id, c.image_id, c.text, c.position) for c in captions] == [
        ("coco-karpathy:cap:770", "coco:img:391895", "A man on a moped.", 0),
        ("coco-karpathy:cap:771", "coco:img:391895", "a dirt road", 1),  # raw null: tokens joined
    ]
    assert captions[1].source == "dataset_coco.json:images[0].sentences[1]"
    assert reasons(rejected) == [("caption", "missing-field", "dataset_coco.json:images[1].sentences[0]")]


def test_karpathy_json_flickr_and_split_override(tmp_path: Path) -> None:
    path = tmp_path / "dataset_flickr30k.json"
    path.write_text(json.dumps(karpathy_document("flickr30k")))
    images, captions, rejected = read("karpathy-json", path, split="all")
    assert [(i.image_id, i.split) for i in images] == [("f30k:img:1007129816", "all")]
    assert [(c.caption_id, c.text, c.split) for c in captions] == [
        ("f30k:cap:1007129816#0", "The man.", "all"),
        ("f30k:cap:1007129816#1", "a hat", "all"),  # blank raw: tokens joined
    ]
    assert reasons(rejected) == [("image", "bad-id", "dataset_flickr30k.json:images[1]")]


# --- generic tables ---------------------------------------------------------------------------

TABLE_ROWS = [
    {"photo": "1007129816.jpg", "sentence": "The man with a hat .", "part": "test"},
    {"photo": "1007129816.jpg", "sentence": "A man , with glasses .", "part": "test"},
    {"photo": "2.jpg", "sentence": "A dog .", "part": "val"},
]


def check_table(images: list[ImageRecord], captions: list[CaptionRecord], name: str, first_line: int) -> None:
    assert [(i.image_id, i.file_name, i.split) for i in images] == [
        ("f30k:img:1007129816", "1007129816.jpg", "test"),
        ("f30k:img:2", "2.jpg", "val"),
    ]
    assert [(c.caption_id, c.text, c.source) for c in captions] == [
        ("f30k:cap:1007129816#0", "The man with a hat .", f"{name}:{first_line}"),
        ("f30k:cap:1007129816#1", "A man , with glasses .", f"{name}:{first_line + 1}"),
        ("f30k:cap:2#0", "A dog .", f"{name}:{first_line + 2}"),
    ]


MAPPING = {"image_id": "photo", "text": "sentence", "split": "part"}


def test_table_csv(tmp_path: Path) -> None:
    path = tmp_path / "captions.csv"
    path.write_text("photo,sentence,part\n" + "".join(f'{r["photo"]},"{r["sentence"]}",{r["part"]}\n' for r in TABLE_ROWS))
    images, captions, rejected = read("table", path, columns=MAPPING, namespace="f30k")
    check_table(images, captions, "captions.csv", first_line=2)
    assert rejected == []


def test_table_jsonl(tmp_path: Path) -> None:
    path = write_lines(tmp_path / "captions.jsonl", TABLE_ROWS)
    images, captions, rejected = read("table", path, columns=MAPPING, namespace="f30k")
    check_table(images, captions, "captions.jsonl", first_line=1)
    assert rejected == []


def test_table_parquet(tmp_path: Path) -> None:
    path = tmp_path / "captions.parquet"
    pq.write_table(pa.Table.from_pylist(TABLE_ROWS), path)
    images, captions, rejected = read("table", path, columns=MAPPING, namespace="f30k")
    check_table(images, captions, "captions.parquet", first_line=1)
    assert rejected == []


def test_table_csv_with_caption_ids_and_bad_rows(tmp_path: Path) -> None:
    path = tmp_path / "coco.csv"
    path.write_bytes(
        b"image,cap,text,file\n"
        b'COCO_val2014_000000391895.jpg,COCO_val2014:sentid:770337,"A man,\nwith a helmet.",a.jpg\n'  # lines 2-3
        b"391895,770338,too,many,cells\n"  # line 4
        b"391895,770339,\xff\xfe,a.jpg\n"  # line 5
        b"391895,,no caption id,a.jpg\n"  # line 6
        b"\n"
        b'391895,770340,"a dog"x"",a.jpg\n'  # line 8: quoting is lenient, kept as written
        b"391895,770341,  spaced  ,a.jpg\n"  # line 9
    )
    columns = {"image_id": "image", "caption_id": "cap", "file_name": "file"}
    images, captions, rejected = read("table", path, columns=columns, namespace="coco", split="val")
    assert [(i.image_id, i.file_name, i.split, i.source) for i in images] == [("coco:img:391895", "a.jpg", "val", "coco.csv:2")]
    assert [(c.caption_id, c.text, c.source) for c in captions] == [
        ("coco:cap:770337", "A man,\nwith a helmet.", "coco.csv:2"),
        ("coco:cap:770340", 'a dogx""', "coco.csv:8"),
        ("coco:cap:770341", "  spaced  ", "coco.csv:9"),
    ]
    assert reasons(rejected) == [
        ("row", "malformed-row", "coco.csv:4"),
        ("row", "bad-encoding", "coco.csv:5"),
        ("row", "missing-field", "coco.csv:6"),
    ]
    assert json.loads(rejected[0].record) == "391895,770338,too,many,cells"


def test_table_default_namespace_and_missing_columns(tmp_path: Path) -> None:
    path = write_lines(
        tmp_path / "plain.jsonl",
        [
            {"image_id": "img-a", "text": "one"},
            {"image_id": "img-a"},
            {"image_id": None, "text": "x"},
            {"image_id": "img-b", "text": "two"},
        ],
    )
    images, captions, rejected = read("table", path)
    assert [(i.image_id, i.file_name) for i in images] == [("ds:img:img-a", "img-a"), ("ds:img:img-b", "img-b")]
    assert [(c.caption_id, c.text) for c in captions] == [("ds:cap:img-a#0", "one"), ("ds:cap:img-a#1", None), ("ds:cap:img-b#0", "two")]
    assert reasons(rejected) == [("row", "missing-field", "plain.jsonl:3")]

    csv_path = tmp_path / "plain.csv"
    csv_path.write_text("image_id,caption\nimg-a,one\n")
    with pytest.raises(SourceFileError, match="plain.csv.*text"):
        list(READERS.create("table").read(str(csv_path)))
    with pytest.raises(SourceFileError, match="plain.txt"):
        list(READERS.create("table").read(str(tmp_path / "plain.txt")))


def test_table_csv_oversized_field_bom_and_crlf(tmp_path: Path) -> None:
    path = tmp_path / "windows.csv"
    path.write_bytes(b"\xef\xbb\xbfimage_id,text\r\na,ok\r\nb," + b"x" * 200_000 + b"\r\nc,fine\r\n")
    images, captions, rejected = read("table", path)
    assert [(c.caption_id, c.text, c.source) for c in captions] == [
        ("ds:cap:a#0", "ok", "windows.csv:2"),
        ("ds:cap:c#0", "fine", "windows.csv:4"),
    ]
    assert [i.image_id for i in images] == ["ds:img:a", "ds:img:c"]
    assert reasons(rejected) == [("row", "malformed-row", "windows.csv:3")]
    assert "field limit" in rejected[0].detail
    assert json.loads(rejected[0].record).startswith("b,xxx")


PIECES = st.sampled_from([b"\n", b"\r", b"\r\n", b"ab", BOM_UTF8, b"\xff"])


@given(data=st.binary(max_size=64) | st.lists(PIECES, max_size=24).map(b"".join), block=st.integers(1, 9))
def test_lines_read_in_blocks_are_the_lines_readline_gives(data: bytes, block: int) -> None:
    """``_raw_lines`` splits as ``readline`` does (without the ``\\n``), whatever the block boundaries."""
    by_readline = [line.removesuffix(b"\n") for line in iter(io.BytesIO(data).readline, b"")]
    assert list(readers._raw_lines(io.BytesIO(data), block)) == by_readline
