"""IngestItems with TestPipeline: every record comes out kept or rejected, with the right reason."""

from __future__ import annotations

import json
from pathlib import Path

import apache_beam as beam
import pytest
from apache_beam.testing.test_pipeline import TestPipeline
from apache_beam.testing.util import assert_that, equal_to

from crisscross.beam.ingest import IngestItems
from crisscross.ingest import readers
from crisscross.ingest.readers import READERS


def write_source(path: Path) -> None:
    def line(image_id: int, caption_id: int, text: str | None, file_name: str | None = None) -> str:
        return json.dumps(
            {
                "image_id": image_id,
                "file_name": file_name or f"COCO_val2014_{image_id:012d}.jpg",
                "caption_id": caption_id,
                "caption_tok": text,
                "caption_raw": None,
                "karpathy_order": 0,
            }
        )

    lines = [
        line(1, 10, "a dog on a mat ."),
        line(1, 11, "a  dog\tsleeping ."),
        line(1, 10, "a duplicate caption id ."),
        line(2, 20, None),  # image 2 is left without captions
        "{not json",
        line(3, 30, "   "),
        line(1, 12, "conflicting file name .", file_name="other.jpg"),
    ]
    path.write_text("\n".join(lines) + "\n")


@pytest.mark.parametrize(
    ("batch", "parts"),
    [(8192, 1), (2, 1), (8192, 3)],  # one element, records of one id spread over several, the file read in three parts
)
def test_ingest_composite_routes_every_record(tmp_path: Path, test_photos: Path, batch: int, parts: int, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setattr(readers, "PART_LINES", 1)  # part p reads lines p+1, p+1+parts, …: image 1's rows in every part
    source = tmp_path / "captions.jsonl"
    write_source(source)
    images_dir = tmp_path / "images"
    images_dir.mkdir()
    photo = sorted(test_photos.glob("*.jpg"))[0]
    for image_id in (1, 2):  # image 2's file is checked before the join refuses the image
        (images_dir / f"COCO_val2014_{image_id:012d}.jpg").write_bytes(photo.read_bytes())

    with TestPipeline() as pipeline:
        outputs = pipeline | IngestItems(READERS.create("coco-karpathy-jsonl"), str(source), str(images_dir), batch=batch, parts=parts)
        assert_that(
            outputs.images
            | beam.FlatMap(lambda table: table.select(["image_id", "source", "pixels", "n_captions"]).to_pylist())
            | beam.Map(lambda row: tuple(row.values())),
            equal_to([("coco:img:1", "captions.jsonl:1", "ok", 3)]),
            label="images",
        )
        assert_that(
            outputs.captions | beam.FlatMap(lambda table: zip(table["caption_id"].to_pylist(), table["text"].to_pylist(), strict=True)),
            equal_to(
                [
                    ("coco:cap:10", "a dog on a mat ."),
                    ("coco:cap:11", "a dog sleeping ."),
                    ("coco:cap:12", "conflicting file name ."),
                ]
            ),
            label="captions",
        )
        assert_that(
            outputs.rejected | beam.Map(lambda r: (r.kind, r.key, r.reason, r.source.rsplit(":", 1)[1])),
            equal_to(
                [
                    ("caption", "coco:cap:10", "duplicate-id", "3"),
                    ("caption", "coco:cap:20", "null-text", "4"),
                    ("row", "", "malformed-row", "5"),
                    ("caption", "coco:cap:30", "empty-text", "6"),
                    ("image", "coco:img:1", "conflicting-image", "7"),
                    ("image", "coco:img:2", "no-captions", "4"),
                    ("image", "coco:img:3", "no-captions", "6"),
                ]
            ),
            label="rejected",
        )
        assert_that(  # a refused image is quarantined as the source gave it, not as its file check found it
            outputs.rejected
            | beam.Filter(lambda r: r.reason == "no-captions" and r.key == "coco:img:2")
            | beam.Map(lambda r: {k: json.loads(r.record)[k] for k in ("path", "pixels", "width")}),
            equal_to([{"path": "", "pixels": "unchecked", "width": 0}]),
            label="refused-as-read",
        )


def test_a_part_whose_first_row_of_an_image_contradicts_the_file_is_read_again(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """Read in three parts of one line each, image 5's first row in parts 2 and 3 gives another file
    name than line 1: those parts are read again, and every row that contradicts line 1 is rejected
    against it, as one reading of the whole file rejects them, line 5 (which only contradicts its
    part's first row) not at all."""
    monkeypatch.setattr(readers, "PART_LINES", 1)
    names = ["a.jpg", "b.jpg", "b.jpg", "a.jpg", "a.jpg", "c.jpg"]
    source = tmp_path / "captions.jsonl"
    source.write_text(
        "".join(
            json.dumps({"image_id": 5, "file_name": name, "caption_id": 50 + n, "caption_tok": "a cat ."}) + "\n"
            for n, name in enumerate(names)
        )
    )
    whole = "but 'a.jpg', split '' at captions.jsonl:1"
    expected = [
        (f"captions.jsonl:{n}", f"file_name '{name}', split '' here, {whole}") for n, name in ((2, "b.jpg"), (3, "b.jpg"), (6, "c.jpg"))
    ]
    for parts in (1, 3):
        with TestPipeline() as pipeline:
            outputs = pipeline | IngestItems(READERS.create("coco-karpathy-jsonl"), str(source), None, parts=parts)
            conflicts = outputs.rejected | beam.Filter(lambda r: r.reason == "conflicting-image") | beam.Map(lambda r: (r.source, r.detail))
            assert_that(conflicts, equal_to(expected))
