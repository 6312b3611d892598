"""DeriveC2I with TestPipeline: the same candidates as the library in memory, every bad row
quarantined with its reason, other task types counted, both input forms (rated.parquet, CxC files)."""

from __future__ import annotations

from pathlib import Path

import apache_beam as beam
import pyarrow as pa
import pyarrow.parquet as pq
from apache_beam.testing.test_pipeline import TestPipeline
from apache_beam.testing.util import assert_that, equal_to

from crisscross.beam.derive import DeriveC2I
from crisscross.candidates.c2i import CaptionIndex, DeriveSettings, derive_all, rated_pair
from crisscross.tasktypes.names import SIS, STS

CAPTIONS = {1: (11, 12), 2: (21, 22), 3: (31,), 4: (41, 42, 43)}
CAPTION_ROWS = [{"caption_id": f"coco:cap:{c}", "image_id": f"coco:img:{i}", "text": "t"} for i, cs in CAPTIONS.items() for c in cs]


def rated_rows() -> list[dict]:
    def row(task: str, a: str, b: str, score: float | None) -> dict:
        return {"item_id": f"{task.lower()}:{a}|{b}", "task_type": task, "id_a": a, "id_b": b, "agg_score": score, "sampling_method": "m"}

    return [
        row(STS, "coco:cap:11", "coco:cap:21", 4.0),
        row(STS, "coco:cap:11", "coco:cap:12", 4.8),  # co-captions: no candidate
        row(STS, "coco:cap:31", "coco:cap:41", 2.0),
        row(SIS, "coco:img:1", "coco:img:4", 4.5),
        row(SIS, "coco:img:3", "coco:img:4", 1.0),
        row(SIS, "coco:img:2", "coco:img:3", 3.3),
        row(STS, "coco:cap:11", "coco:cap:99", 3.0),  # unknown caption
        row(SIS, "coco:img:1", "coco:img:2", 6.0),  # out of range
        row("SITS", "coco:cap:11", "coco:img:2", 3.0),  # not intramodal: counted, not derived from
    ]


def write_inputs(tmp_path: Path) -> tuple[str, str]:
    rated, captions = tmp_path / "rated.parquet", tmp_path / "captions.parquet"
    pq.write_table(pa.Table.from_pylist(rated_rows()), rated)
    pq.write_table(pa.Table.from_pylist(CAPTION_ROWS), captions)
    return str(rated), str(captions)


def expected(settings: DeriveSettings, seed: int):
    index = CaptionIndex.from_rows(CAPTION_ROWS)
    made = [rated_pair(r, index, "rated.parquet") for r in rated_rows() if r["task_type"] in (STS, SIS)]
    return derive_all([m for m in made if not hasattr(m, "reason")], index, settings, seed)


def test_derive_composite_matches_the_library_and_quarantines_bad_rows(tmp_path: Path) -> None:
    rated, captions = write_inputs(tmp_path)
    settings = DeriveSettings(quota=5)
    kept, _, facts = expected(settings, 9)
    with TestPipeline() as pipeline:
        outputs = pipeline | DeriveC2I(rated, captions, settings, 9)
        assert_that(outputs.candidates | beam.Map(sorted), equal_to([sorted(kept)]), label="Candidates")
        assert_that(
            outputs.rejected | beam.Map(lambda r: (r.key, r.reason)),
            equal_to([("sts:coco:cap:11|coco:cap:99", "unknown-caption"), ("sis:coco:img:1|coco:img:2", "score-out-of-range")]),
            label="Rejected",
        )
        assert_that(
            outputs.facts | beam.Map(lambda f: (f["selected"], f["shortfall"], f["rated"], f["ignored"])),
            equal_to([(5, 0, {"C2C": 2, "C2C-cocaption": 1, "I2I": 3}, {"SITS": 1})]),
            label="Facts",
        )
    assert facts["selected"] == 5


def test_derive_composite_replays_cxc_release_files(tmp_path: Path) -> None:
    _, captions = write_inputs(tmp_path)
    (tmp_path / "sts_test.csv").write_text(
        "caption1,caption2,agg_score,sampling_method\n"
        "COCO_val2014:sentid:11,COCO_val2014:sentid:21,4.0,c2c_isim\n"
        "COCO_val2014:sentid:11,COCO_val2014:sentid:12,4.8,c2c_cocaption\n"
        "COCO_val2014:sentid:11,COCO_val2014:sentid:21,not-a-number,c2c_isim\n"
    )
    (tmp_path / "sis_test.csv").write_text(
        "image1,image2,agg_score,sampling_method\n"
        "COCO_val2014_000000000001.jpg,COCO_val2014_000000000004.jpg,4.5,i2i_csim\n"
        "COCO_val2014_000000000004.jpg,COCO_val2014_000000000001.jpg,2.0,i2i_csim\n"  # both orderings, as in CxC
        "COCO_val2014_000000000001.jpg,COCO_val2014_000000000077.jpg,2.0,i2i_csim\n"  # no such image
    )
    settings = DeriveSettings(quota=4, directions="first")
    files = {STS: str(tmp_path / "sts_test.csv"), SIS: str(tmp_path / "sis_test.csv")}
    with TestPipeline() as pipeline:
        outputs = pipeline | DeriveC2I(files, captions, settings, 0)
        assert_that(
            outputs.candidates | beam.Map(lambda cs: sorted((c.method, c.caption, c.image) for c in cs if c.method == "c2i_intrasim")),
            equal_to([sorted([("c2i_intrasim", "coco:cap:21", "coco:img:1")] + [("c2i_intrasim", c, i) for c, i in _i2i_first()])]),
            label="Candidates",
        )
        assert_that(outputs.rejected | beam.Map(lambda r: r.reason), equal_to(["bad-score", "unknown-image"]), label="Rejected")
        assert_that(outputs.facts | beam.Map(lambda f: f["shortfall"]), equal_to([1]), label="Shortfall")


def _i2i_first() -> list[tuple[str, str]]:
    from crisscross.candidates.c2i import RatedPair, caption_for, derive

    index = CaptionIndex.from_rows(CAPTION_ROWS)
    out = []
    for a, b in ((1, 4), (4, 1)):
        (d,) = derive(RatedPair(SIS, f"coco:img:{a}", f"coco:img:{b}", 3.0, "i2i_csim", "x"), index, "first")
        out.append((caption_for(d, index, 0), d.image))
    return out
