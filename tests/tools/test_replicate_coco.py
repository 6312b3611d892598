"""tools/replicate_coco.py: an exact-size synthetic collection of the real captions under new ids,
the same bytes for the same seed, marked synthetic, and readable by ``crisscross ingest``."""

from __future__ import annotations

import importlib.util
import json
from collections import Counter
from pathlib import Path
from types import ModuleType

import pyarrow.parquet as pq
import pytest

from crisscross.core.errors import InputError
from crisscross.pipelines import ingest

TOOL = Path(__file__).resolve().parents[2] / "tools" / "replicate_coco.py"


@pytest.fixture(scope="module")
def tool() -> ModuleType:
    spec = importlib.util.spec_from_file_location("replicate_coco", TOOL)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def lines(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_replicas_cover_the_source_then_a_seeded_part_of_it(tool: ModuleType, shared_data: Path, tmp_path: Path) -> None:
    source = shared_data / "coco-karpathy" / "test5k.jsonl"
    real = {row["caption_id"]: row for row in lines(source)}
    meta = tool.main(["--out", str(tmp_path / "a"), "--images", "5003", "--source", str(source)])
    rows = lines(tmp_path / "a" / "captions.jsonl")
    assert (meta["images"], meta["captions"], len(rows), meta["synthetic"]) == (5003, 25015, 25015, True)
    images = [row["image_id"] for row in rows]
    assert sorted(set(images)) == list(range(1_000_000, 1_005_003)) and images == sorted(images)
    assert [row["caption_id"] for row in rows] == list(range(10_000_000, 10_025_015))
    for row in rows:  # the text, file name and order of the real caption it copies
        copied = real[row["synthetic_copy_of"]]
        assert (row["caption_tok"], row["caption_raw"], row["file_name"]) == (
            copied["caption_tok"],
            copied["caption_raw"],
            copied["file_name"],
        )
    sources = {}
    for row in rows:
        sources.setdefault(row["image_id"], set()).add(real[row["synthetic_copy_of"]]["image_id"])
    assert all(len(s) == 1 for s in sources.values())
    first_copy = [next(iter(sources[1_000_000 + n])) for n in range(5000)]
    source_order = list(dict.fromkeys(row["image_id"] for row in real.values()))
    assert sorted(first_copy) == sorted(source_order) and first_copy != source_order  # every real image once, in a drawn order
    assert set(Counter(images).values()) == {5}  # each replica has its source image's five captions

    tool.main(["--out", str(tmp_path / "b"), "--images", "5003", "--source", str(source)])
    tool.main(["--out", str(tmp_path / "c"), "--images", "5003", "--source", str(source), "--seed", "1"])
    for name in ("captions.jsonl", "metadata.json", "README.md"):
        assert (tmp_path / "a" / name).read_bytes() == (tmp_path / "b" / name).read_bytes()
    assert (tmp_path / "a" / "captions.jsonl").read_bytes() != (tmp_path / "c" / "captions.jsonl").read_bytes()
    assert (tmp_path / "a" / "README.md").read_text().startswith("# SYNTHETIC")
    assert json.loads((tmp_path / "a" / "metadata.json").read_text())["source_sha256"] == meta["source_sha256"]


def test_ingest_reads_a_small_replica_and_gives_photographed_replicas_pixels(
    tool: ModuleType, shared_data: Path, test_photos: Path, tmp_path: Path
) -> None:
    tool.main(["--out", str(tmp_path / "synthetic"), "--images", "400", "--source", str(shared_data / "coco-karpathy" / "test5k.jsonl")])
    rows = lines(tmp_path / "synthetic" / "captions.jsonl")
    photographed = {p.name for p in test_photos.glob("*.jpg")}
    with_photo = len({row["image_id"] for row in rows if row["file_name"] in photographed})
    assert with_photo > 0
    report = ingest.main(
        ["--in", str(tmp_path / "synthetic" / "captions.jsonl"), "--images", str(test_photos), "--out", str(tmp_path / "items")]
    )
    assert (report["images"], report["captions"]) == (400, 2000)
    images = pq.read_table(tmp_path / "items" / "images.parquet").to_pylist()
    assert sorted(r["image_id"] for r in images) == sorted(f"coco:img:{n}" for n in range(1_000_000, 1_000_400))
    assert sum(r["pixels"] == "ok" for r in images) == with_photo
    assert pq.read_table(tmp_path / "items" / "quarantine.parquet").num_rows == 0


def test_a_line_that_is_not_a_caption_names_its_file_and_line(tool: ModuleType, tmp_path: Path) -> None:
    source = tmp_path / "bad.jsonl"
    source.write_text(
        '{"image_id": 1, "file_name": "a.jpg", "caption_id": 2, "caption_tok": "x", "caption_raw": null, "karpathy_order": 0}\n{"image_id": 1}\n'
    )
    with pytest.raises(InputError, match=r"bad\.jsonl:2: not a coco-karpathy-jsonl caption line"):
        tool.main(["--out", str(tmp_path / "out"), "--source", str(source)])
