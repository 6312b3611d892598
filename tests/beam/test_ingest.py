"""IngestItems with TestPipeline: every record comes out kept or rejected, with the right reason."""

from __future__ import annotations

import json
from pathlib import Path

import apache_beam as beam
import pytest
from apache_beam.testing.test_pipeline import TestPipeline
from apache_beam.testing.util import assert_that, equal_to

from crisscross.beam.ingest import IngestItems
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


@pytest.mark.parametrize("batch", [8192, 2])  # one element, or records of one id spread over several
def test_ingest_composite_routes_every_record(tmp_path: Path, test_photos: Path, batch: int):
    source = tmp_path / "captions.jsonl"
    write_source(source)
    images_dir = tmp_path / "images"
    images_dir.mkdir()
    photo = sorted(test_photos.glob("*.jpg"))[0]
    (images_dir / "COCO_val2014_000000000001.jpg").write_bytes(photo.read_bytes())

    with TestPipeline() as pipeline:
        outputs = pipeline | IngestItems(READERS.create("coco-karpathy-jsonl"), str(source), str(images_dir), batch=batch)
        assert_that(
            outputs.images | beam.FlatMap(lambda batch: [(image.image_id, image.pixels, n) for image, n in batch]),
            equal_to([("coco:img:1", "ok", 3)]),
            label="images",
        )
        assert_that(
            outputs.captions | beam.FlatMap(lambda batch: [(c.caption_id, c.text) for c in batch]),
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
