"""The ingest stage program on the real data and the demo: counts, quarantine, strict mode, bytes."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from crisscross.core.errors import ParamError
from crisscross.core.quarantine import RejectionError
from crisscross.pipelines import ingest

PARAMS = Path(__file__).resolve().parents[2] / "params.yaml"


def run(source: Path, out: Path, *flags: str) -> dict:
    return ingest.main(["--in", str(source), "--out", str(out), *flags])


def reasons(out: Path) -> dict[tuple[str, str], int]:
    table = pq.read_table(out / "quarantine.parquet").to_pylist()
    counts: dict[tuple[str, str], int] = {}
    for row in table:
        counts[(row["kind"], row["reason"])] = counts.get((row["kind"], row["reason"]), 0) + 1
    return counts


@pytest.mark.xdist_group("karpathy")
def test_karpathy_test_split_ingests_whole_with_its_photos(karpathy_test: Path):
    """The ingest of the run's ``karpathy_test`` build (tests/pipelines/conftest.py): this command, without params."""
    out = karpathy_test / "items"
    report = json.loads((out / "report.json").read_text())
    assert (report["images"], report["captions"], report["rejected_total"]) == (5000, 25000, 0)
    assert report["pixels"] == {"missing": 4630, "ok": 370}
    images = pq.read_table(out / "images.parquet").to_pylist()
    assert [row["image_id"] for row in images] == sorted(row["image_id"] for row in images)
    assert {row["n_captions"] for row in images} == {5}
    photo = next(row for row in images if row["image_id"] == "coco:img:42")
    assert (photo["pixels"], photo["width"], photo["height"]) == ("ok", 640, 478)


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
    with pytest.raises(ParamError, match="unknown ingest params \\['readr'\\]"):
        run(demo_dir / "captions.jsonl", tmp_path / "items", "--params", str(params))


# ---------------------------------------------------------------------------- hardening: image paths, text length


def karpathy_line(image_id: int, caption_id: int, text: str, file_name: str) -> str:
    return json.dumps({"image_id": image_id, "file_name": file_name, "caption_id": caption_id, "caption_tok": text, "caption_raw": None})


def test_paths_outside_the_images_folder_and_long_texts_are_quarantined(test_photos: Path, tmp_path: Path):
    images = tmp_path / "images"
    images.mkdir()
    photo = sorted(test_photos.glob("*.jpg"))[0]
    (images / "COCO_val2014_000000000001.jpg").write_bytes(photo.read_bytes())
    (tmp_path / "secret").mkdir()
    (tmp_path / "secret" / "private.jpg").write_bytes(photo.read_bytes())  # a real image, so only confinement stops it
    source = tmp_path / "captions.jsonl"
    lines = [
        karpathy_line(1, 10, "a dog on a mat .", "COCO_val2014_000000000001.jpg"),
        karpathy_line(1, 11, "x" * 20000, "COCO_val2014_000000000001.jpg"),
        karpathy_line(2, 20, "a private photo .", "../secret/private.jpg"),
        karpathy_line(3, 30, "the password file .", "../../../../etc/passwd"),
    ]
    source.write_text("\n".join(lines) + "\n")
    params = tmp_path / "params.yaml"
    params.write_text("ingest:\n  max_text_length: 1000\n")
    out = tmp_path / "items"
    report = run(source, out, "--images", str(images), "--params", str(params))

    rows = pq.read_table(out / "images.parquet").to_pylist()
    assert [(r["image_id"], r["pixels"], r["n_captions"]) for r in rows] == [("coco:img:1", "ok", 1)]
    assert not any("secret" in r["path"] or "passwd" in r["path"] for r in rows)
    assert pq.read_table(out / "captions.parquet").column("caption_id").to_pylist() == ["coco:cap:10"]
    quarantine = {(r["kind"], r["key"]): r for r in pq.read_table(out / "quarantine.parquet").to_pylist()}
    assert {key: r["reason"] for key, r in quarantine.items()} == {
        ("image", "coco:img:2"): "path-outside-images",
        ("image", "coco:img:3"): "path-outside-images",
        ("caption", "coco:cap:11"): "text-too-long",
        ("caption", "coco:cap:20"): "unknown-image",  # the captions of a refused image are not kept either
        ("caption", "coco:cap:30"): "unknown-image",
    }
    private = quarantine[("image", "coco:img:2")]
    # the folder named as outputs name paths: relative to the directory the stage ran in
    assert "'../secret/private.jpg'" in private["detail"] and f"images folder {os.path.relpath(images)}:" in private["detail"]
    assert private["source"] == "captions.jsonl:3"
    assert "20000 characters" in quarantine[("caption", "coco:cap:11")]["detail"]
    assert report["rejected"] == {
        "caption": {"text-too-long": 1, "unknown-image": 2},
        "image": {"path-outside-images": 2},
    }


def test_max_text_length_must_be_a_positive_integer(demo_dir: Path, tmp_path: Path):
    params = tmp_path / "params.yaml"
    params.write_text("ingest:\n  max_text_length: 0\n")
    with pytest.raises(ParamError, match="ingest.max_text_length must be >= 1, got 0"):
        run(demo_dir / "captions.jsonl", tmp_path / "items", "--params", str(params))
    assert not (tmp_path / "items").exists()


@pytest.mark.parametrize(
    ("beam_args", "parts"),
    [
        ([], 1),  # in process: nothing to share
        (["--direct_num_workers=2", "--direct_running_mode=multi_processing"], 2),
        (["--direct_num_workers=3", "--direct_running_mode=multi_processing"], 3),
        (["--runner=PortableRunner", "--job_endpoint=localhost:8099"], ingest.REMOTE_READ_PARTS),
    ],
)
def test_a_line_source_is_read_in_a_part_per_worker_process(beam_args: list[str], parts: int) -> None:
    assert ingest.read_parts(beam_args) == parts
