"""``evaluate --bison`` reads COCO-BISON's released JSON shape as well as tables."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from crisscross.core.errors import InputError
from crisscross.evaluate.tables import read_bison


def entry(bison_id: int, caption: object, true: object, candidates: list[object]) -> dict[str, object]:
    return {
        "bison_id": bison_id,
        "caption_id": caption,
        "true_image_id": true,
        "image_candidates": [{"image_id": c, "image_filename": f"COCO_val2014_{c:012d}.jpg"} for c in candidates],
    }


def test_the_released_json_shape_becomes_canonical_triples(tmp_path: Path) -> None:
    path = tmp_path / "bison_annotations.cocoval2014.json"
    data = [
        entry(0, 516298, 102805, [88485, 102805]),
        entry(1, 552033, 10707, [10707, 177015]),
        entry(2, 5, 7, [8, 9]),  # the true image is not a candidate
        entry(3, 6, 7, [7]),  # one candidate
    ]
    path.write_text(json.dumps({"info": {"source": "coco", "split": "val2014"}, "data": data}))
    triples, rejected = read_bison(str(path))
    assert triples.to_pylist() == [
        {"caption": "coco:cap:516298", "target": "coco:img:102805", "decoy": "coco:img:88485"},
        {"caption": "coco:cap:552033", "target": "coco:img:10707", "decoy": "coco:img:177015"},
    ]
    assert [(r.key, r.reason, r.source) for r in rejected] == [
        ("2", "bad-triple", f"{path}:data[2]"),
        ("3", "bad-triple", f"{path}:data[3]"),
    ]


def test_a_file_that_is_no_bison_json_is_one_line_error(tmp_path: Path) -> None:
    path = tmp_path / "b.json"
    path.write_text("[1, 2]")
    with pytest.raises(InputError, match="'data' list"):
        read_bison(str(path))
    path.write_text("{not json")
    with pytest.raises(InputError, match="not a JSON document"):
        read_bison(str(path))


def test_triples_the_items_do_not_hold_are_quarantined_with_reasons(tmp_path: Path) -> None:
    """Against the items: the same image twice, an id the items lack, a caption of another image."""
    image_of = {"coco:cap:1": "coco:img:10", "coco:cap:2": "coco:img:20"}
    images = frozenset({"coco:img:10", "coco:img:20", "coco:img:30"})
    path = tmp_path / "bison.json"
    data = [
        entry(0, 1, 10, [10, 20]),
        entry(1, 1, 10, [10, 10]),  # target and decoy are one image
        entry(2, 99, 10, [10, 20]),  # no such caption
        entry(3, 1, 10, [10, 77]),  # no such decoy
        entry(4, 2, 10, [10, 30]),  # caption 2 is of image 20
    ]
    path.write_text(json.dumps({"info": {"source": "coco", "split": "val2014"}, "data": data}))
    triples, rejected = read_bison(str(path), image_of, images)
    assert triples.to_pylist() == [{"caption": "coco:cap:1", "target": "coco:img:10", "decoy": "coco:img:20"}]
    assert [(r.key, r.reason, r.source) for r in rejected] == [
        ("1", "same-image", f"{path}:data[1]"),
        ("2", "unknown-id", f"{path}:data[2]"),
        ("3", "unknown-id", f"{path}:data[3]"),
        ("4", "caption-not-of-target", f"{path}:data[4]"),
    ]
    assert rejected[1].detail == "coco:cap:99 not in the items"

    table = tmp_path / "triples.csv"
    table.write_text("caption,target,decoy\ncoco:cap:1,coco:img:10,coco:img:20\ncoco:cap:1,coco:img:10,coco:img:10\n")
    triples, rejected = read_bison(str(table), image_of, images)
    assert triples.num_rows == 1
    assert [(r.reason, r.source) for r in rejected] == [("same-image", f"{table}:3")]  # the file's line: the header is line 1
    pa_table = pa.Table.from_pylist([{"caption": "coco:cap:1", "target": "coco:img:10", "decoy": "x"}])
    pq.write_table(pa_table, tmp_path / "triples.parquet")
    triples, rejected = read_bison(str(tmp_path / "triples.parquet"), image_of, images)
    assert triples.num_rows == 0 and [(r.reason, r.source) for r in rejected] == [("bad-id", f"{tmp_path / 'triples.parquet'}:row 1")]
