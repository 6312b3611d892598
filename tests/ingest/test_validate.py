"""Validation functions on small cases, on real photos, and composed over ``val5k_partial.jsonl``."""

from __future__ import annotations

import json
import shutil
from collections import defaultdict
from pathlib import Path

import pytest

from crisscross.ingest.readers import READERS
from crisscross.ingest.records import (
    PIXELS_MISSING,
    PIXELS_OK,
    PIXELS_UNCHECKED,
    PIXELS_UNREADABLE,
    CaptionRecord,
    ImageRecord,
)
from crisscross.ingest.validate import check_caption_text, check_image_file, first_of_duplicates, join_image_and_captions
from crisscross.quarantine import Rejected, count_reasons


def caption(caption_id: str = "ds:cap:1", image_id: str = "ds:img:1", text: str | None = "a dog", position: int = 1) -> CaptionRecord:
    return CaptionRecord(caption_id, image_id, text, "test", f"f.jsonl:{position}", position)


def image(image_id: str = "ds:img:1", file_name: str = "1.jpg", position: int = 1) -> ImageRecord:
    return ImageRecord(image_id, file_name, "test", f"f.jsonl:{position}", position)


def test_check_caption_text() -> None:
    assert check_caption_text(caption(text="  A  dog\t on\n a  mat .  ")).text == "A dog on a mat ."
    clean = caption(text="a dog")
    assert check_caption_text(clean) is clean
    null = check_caption_text(caption(text=None))
    assert isinstance(null, Rejected)
    assert (null.kind, null.key, null.reason, null.source) == ("caption", "ds:cap:1", "null-text", "f.jsonl:1")
    assert json.loads(null.record)["text"] is None
    for blank in ("", "   ", "\t\n", "\u3000"):
        rejected = check_caption_text(caption(text=blank))
        assert isinstance(rejected, Rejected) and rejected.reason == "empty-text"


def test_first_of_duplicates_keeps_the_lowest_position() -> None:
    records = [caption(text="third", position=9), caption(text="first", position=2), caption(text=None, position=5)]
    kept, rejected = first_of_duplicates("ds:cap:1", iter(records))
    assert kept.text == "first"
    assert [(r.kind, r.reason, r.source) for r in rejected] == [
        ("caption", "duplicate-id", "f.jsonl:5"),
        ("caption", "duplicate-id", "f.jsonl:9"),
    ]
    assert "f.jsonl:2" in rejected[0].detail
    single, none = first_of_duplicates("ds:img:1", [image()])
    assert single == image() and none == []
    with pytest.raises(ValueError):
        first_of_duplicates("ds:img:1", [])


def test_join_image_and_captions() -> None:
    captions = [caption("ds:cap:b"), caption("ds:cap:a")]
    kept, joined, rejected = join_image_and_captions("ds:img:1", [image()], captions)
    assert kept == image()
    assert [c.caption_id for c in joined] == ["ds:cap:a", "ds:cap:b"]
    assert rejected == []

    kept, joined, rejected = join_image_and_captions("ds:img:1", [], captions)
    assert (kept, joined) == (None, [])
    assert [(r.kind, r.key, r.reason) for r in rejected] == [
        ("caption", "ds:cap:a", "unknown-image"),
        ("caption", "ds:cap:b", "unknown-image"),
    ]

    kept, joined, rejected = join_image_and_captions("ds:img:1", [image(position=7), image(position=3)], [])
    assert (kept, joined) == (None, [])
    assert [(r.kind, r.reason, r.source) for r in rejected] == [
        ("image", "duplicate-id", "f.jsonl:7"),
        ("image", "no-captions", "f.jsonl:3"),
    ]

    with pytest.raises(ValueError):
        join_image_and_captions("ds:img:2", [image()], captions)


def test_check_image_file(test_photos: Path, tmp_path: Path) -> None:
    name = "COCO_val2014_000000391895.jpg"
    assert check_image_file(image(file_name=name), None).pixels == PIXELS_UNCHECKED

    found = check_image_file(image(file_name=name), str(test_photos))
    assert (found.pixels, found.path, found.width, found.height) == (PIXELS_OK, str(test_photos / name), 640, 360)
    by_base_name = check_image_file(image(file_name=f"val2014/{name}"), str(test_photos))
    assert (by_base_name.pixels, by_base_name.path) == (PIXELS_OK, str(test_photos / name))

    missing = check_image_file(image(file_name="COCO_val2014_000000000001.jpg"), str(test_photos))
    assert (missing.pixels, missing.path, missing.width, missing.height) == (PIXELS_MISSING, "", 0, 0)

    data = (test_photos / name).read_bytes()
    (tmp_path / name).write_bytes(data[: len(data) // 2])
    truncated = check_image_file(image(file_name=name), str(tmp_path))
    assert isinstance(truncated, ImageRecord)
    assert (truncated.pixels, truncated.path, truncated.width) == (PIXELS_UNREADABLE, str(tmp_path / name), 0)

    (tmp_path / "sub").mkdir()
    shutil.copy(test_photos / name, tmp_path / "sub" / name)
    nested = check_image_file(image(file_name=f"sub/{name}"), str(tmp_path))
    assert (nested.pixels, nested.path) == (PIXELS_OK, str(tmp_path / "sub" / name))


def validate_by_hand(items: list) -> tuple[list[ImageRecord], list[CaptionRecord], list[Rejected]]:
    """The ingest composite's steps in plain Python, grouping with dicts as Beam would by key."""
    rejected = [i for i in items if isinstance(i, Rejected)]
    images = [i for i in items if isinstance(i, ImageRecord)]
    captions = []
    for record in (i for i in items if isinstance(i, CaptionRecord)):
        checked = check_caption_text(record)
        (rejected if isinstance(checked, Rejected) else captions).append(checked)

    def dedup(records: list, key: str) -> list:
        groups: dict[str, list] = defaultdict(list)
        for record in records:
            groups[getattr(record, key)].append(record)
        kept = []
        for group_key, group in groups.items():
            first, duplicates = first_of_duplicates(group_key, group)
            kept.append(first)
            rejected.extend(duplicates)
        return kept

    by_image: dict[str, tuple[list, list]] = defaultdict(lambda: ([], []))
    for record in dedup(images, "image_id"):
        by_image[record.image_id][0].append(record)
    for record in dedup(captions, "caption_id"):
        by_image[record.image_id][1].append(record)
    kept_images, kept_captions = [], []
    for image_id, (group_images, group_captions) in sorted(by_image.items()):
        kept, joined, bad = join_image_and_captions(image_id, group_images, group_captions)
        rejected.extend(bad)
        if kept is not None:
            kept_images.append(kept)
            kept_captions.extend(joined)
    return kept_images, kept_captions, rejected


def test_val5k_partial_validation(shared_data: Path) -> None:
    path = shared_data / "coco-karpathy" / "val5k_partial.jsonl"
    raw = [json.loads(line) for line in path.read_text().splitlines()]
    with_text = {r["image_id"] for r in raw if (r["caption_tok"] or r["caption_raw"] or "").strip()}
    expected_no_captions = len({r["image_id"] for r in raw} - with_text)
    assert expected_no_captions == 3530

    images, captions, rejected = validate_by_hand(list(READERS.create("coco-karpathy-jsonl").read(str(path))))
    assert count_reasons(rejected) == {"caption": {"null-text": 17650}, "image": {"no-captions": expected_no_captions}}
    assert len(captions) == 25000 - 17650 == 7350
    assert len(images) == 5000 - expected_no_captions == 1470
    assert {c.image_id for c in captions} == {i.image_id for i in images}
    assert all(c.text == " ".join(c.text.split()) for c in captions)


def test_duplicates_across_the_pipeline_steps(tmp_path: Path) -> None:
    path = tmp_path / "dups.jsonl"
    lines = [
        {"image_id": 1, "file_name": "a.jpg", "caption_id": 10, "caption_tok": "one", "caption_raw": None},
        {"image_id": 1, "file_name": "a.jpg", "caption_id": 10, "caption_tok": "again", "caption_raw": None},
        {"image_id": 2, "file_name": "b.jpg", "caption_id": 20, "caption_tok": " ", "caption_raw": None},
    ]
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    images, captions, rejected = validate_by_hand(list(READERS.create("coco-karpathy-jsonl").read(str(path))))
    assert [(c.caption_id, c.text) for c in captions] == [("coco:cap:10", "one")]
    assert [i.image_id for i in images] == ["coco:img:1"]
    assert sorted((r.reason, r.source) for r in rejected) == [
        ("duplicate-id", "dups.jsonl:2"),
        ("empty-text", "dups.jsonl:3"),
        ("no-captions", "dups.jsonl:3"),
    ]
