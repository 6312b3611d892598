"""The ingest stage program on the real data and the demo: counts, quarantine, strict mode, bytes."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from crisscross.quarantine import RejectionError
from pipelines import ingest

PARAMS = Path(__file__).resolve().parents[2] / "params.yaml"


def run(source: Path, out: Path, *flags: str) -> dict:
    return ingest.main(["--in", str(source), "--out", str(out), *flags])


def reasons(out: Path) -> dict[tuple[str, str], int]:
    table = pq.read_table(out / "quarantine.parquet").to_pylist()
    counts: dict[tuple[str, str], int] = {}
    for row in table:
        counts[(row["kind"], row["reason"])] = counts.get((row["kind"], row["reason"]), 0) + 1
    return counts


def test_karpathy_test_split_ingests_whole_with_its_photos(shared_data: Path, tmp_path: Path):
    out = tmp_path / "items"
    report = run(shared_data / "coco-karpathy" / "test5k.jsonl", out, "--images", str(shared_data / "coco-images" / "karpathy-test"))
    assert (report["images"], report["captions"], report["rejected_total"]) == (5000, 25000, 0)
    assert report["pixels"] == {"missing": 4630, "ok": 370}
    images = pq.read_table(out / "images.parquet").to_pylist()
    assert [row["image_id"] for row in images] == sorted(row["image_id"] for row in images)
    assert {row["n_captions"] for row in images} == {5}
    photo = next(row for row in images if row["image_id"] == "coco:img:42")
    assert (photo["pixels"], photo["width"], photo["height"]) == ("ok", 640, 478)
    assert json.loads((out / "report.json").read_text())["captions"] == 25000


def test_val_partial_quarantines_exactly_its_null_text_captions(shared_data: Path, tmp_path: Path):
    out = tmp_path / "items"
    report = run(shared_data / "coco-karpathy" / "val5k_partial.jsonl", out)
    assert reasons(out) == {("caption", "null-text"): 17650, ("image", "no-captions"): 3530}
    assert (report["images"], report["captions"]) == (1470, 7350)
    assert report["pixels"] == {"unchecked": 1470}


def test_strict_fails_and_keeps_the_quarantine_aside(shared_data: Path, tmp_path: Path):
    out = tmp_path / "items"
    with pytest.raises(RejectionError, match="caption null-text: 17650"):
        run(shared_data / "coco-karpathy" / "val5k_partial.jsonl", out, "--strict")
    assert not out.exists()
    assert pq.read_table(tmp_path / "items.failed" / "quarantine.parquet").num_rows == 21180


def test_flickr30k_test_split(shared_data: Path, tmp_path: Path):
    params = tmp_path / "params.yaml"
    params.write_text("ingest:\n  reader: flickr30k-karpathy-jsonl\n")
    report = run(shared_data / "flickr30k-karpathy" / "test.jsonl", tmp_path / "items", "--params", str(params))
    assert (report["images"], report["captions"], report["rejected_total"]) == (1000, 5000, 0)


def test_same_input_gives_the_same_bytes(demo_dir: Path, tmp_path: Path):
    for name in ("a", "b"):
        run(demo_dir / "captions.jsonl", tmp_path / name, "--images", str(demo_dir / "images"), "--params", str(PARAMS))
    for table in ("images.parquet", "captions.parquet", "quarantine.parquet"):
        assert (tmp_path / "a" / table).read_bytes() == (tmp_path / "b" / table).read_bytes()


def test_unknown_params_key_is_refused(demo_dir: Path, tmp_path: Path):
    params = tmp_path / "params.yaml"
    params.write_text("ingest:\n  readr: table\n")
    with pytest.raises(SystemExit, match="unknown ingest params \\['readr'\\]"):
        run(demo_dir / "captions.jsonl", tmp_path / "items", "--params", str(params))
