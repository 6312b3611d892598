"""Inputs the probe found ending a command in a hang or a traceback, run as a user runs them: each
ends in the quarantine, or in one line and exit status 2."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from crisscross.pipelines import embed, ingest
from crisscross.pipelines.cli import main as cli
from tests.special_files import make_special

PROJECT = Path(__file__).resolve().parents[2]
TIMEOUT = 120  # seconds: these commands take a few; a hang fails the test instead of the run


def crisscross(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["crisscross", *args], capture_output=True, text=True, check=False, cwd=PROJECT, timeout=TIMEOUT)


def test_a_fifo_named_like_an_image_is_quarantined_not_waited_on(demo_dir: Path, tmp_path: Path) -> None:
    images = tmp_path / "images"
    images.mkdir()
    line = json.loads((demo_dir / "captions.jsonl").read_text().splitlines()[0])
    (images / line["file_name"]).write_bytes((demo_dir / "images" / line["file_name"]).read_bytes())
    make_special(images / "x.jpg", "fifo")
    source = tmp_path / "captions.jsonl"
    source.write_text(json.dumps(line) + "\n" + json.dumps({**line, "image_id": 1, "file_name": "x.jpg", "caption_id": 99}) + "\n")
    run = crisscross("ingest", "--in", str(source), "--images", str(images), "--out", str(tmp_path / "items"))
    assert run.returncode == 0, run.stderr
    rejected = pq.read_table(tmp_path / "items" / "quarantine.parquet").to_pylist()
    assert [(r["kind"], r["key"], r["reason"]) for r in rejected] == [
        ("caption", "coco:cap:99", "unknown-image"),
        ("image", "coco:img:1", "not-a-regular-file"),
    ]
    assert pq.read_table(tmp_path / "items" / "images.parquet").column("pixels").to_pylist() == ["ok"]


@pytest.mark.parametrize("kind", ["fifo", "directory"])
def test_a_source_that_is_not_a_regular_file_is_one_line(tmp_path: Path, kind: str) -> None:
    source = make_special(tmp_path / "captions.jsonl", kind)
    run = crisscross("ingest", "--in", str(source), "--out", str(tmp_path / "items"))
    assert run.returncode == 2 and len(run.stderr.strip().splitlines()) == 1, run.stderr
    assert "captions.jsonl is a" in run.stderr and "not a regular file" in run.stderr and "Traceback" not in run.stderr


@pytest.mark.parametrize("kind", ["fifo", "directory"])
def test_a_params_file_that_is_not_a_regular_file_is_one_line(demo_dir: Path, tmp_path: Path, kind: str) -> None:
    params = make_special(tmp_path / "params.yaml", kind)
    run = crisscross("ingest", "--in", str(demo_dir / "captions.jsonl"), "--out", str(tmp_path / "items"), "--params", str(params))
    assert run.returncode == 2 and len(run.stderr.strip().splitlines()) == 1, run.stderr
    assert "params.yaml is a" in run.stderr and "Traceback" not in run.stderr and not (tmp_path / "items").exists()


@pytest.fixture(scope="module")
def text_build(demo_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The demo's items and one text encoder's embeddings: what ``evaluate --bison`` needs."""
    root = tmp_path_factory.mktemp("bison-inputs")
    (root / "params.json").write_text(json.dumps({"embed": {"text_encoders": ["bow-glove50"], "image_encoders": []}}))
    ingest.main(["--in", str(demo_dir / "captions.jsonl"), "--out", str(root / "items")])
    embed.main(["--in", str(root / "items"), "--out", str(root / "embeddings"), "--params", str(root / "params.json")])
    return root


def test_evaluate_bison_json_python_cannot_parse_is_one_line_or_quarantined(text_build: Path, tmp_path: Path, capsys) -> None:
    base = ["evaluate", "--in", str(text_build / "embeddings"), "--items", str(text_build / "items"), "--truth", "coco"]
    deep = tmp_path / "deep.json"
    deep.write_text("[" * 100_000 + "]" * 100_000)  # RecursionError
    assert cli([*base, "--bison", str(deep), "--out", str(tmp_path / "deep")]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "deep.json: not a JSON document (maximum recursion depth" in err, err
    huge = tmp_path / "huge.json"
    entry = {"bison_id": 0, "caption_id": "9" * 5000, "true_image_id": 1, "image_candidates": [{"image_id": 1}, {"image_id": 2}]}
    huge.write_text(json.dumps({"info": {"source": "coco"}, "data": [entry]}))  # int() refused 5000 digits: ValueError
    assert cli([*base, "--bison", str(huge), "--out", str(tmp_path / "huge")]) == 0
    [rejected] = pq.read_table(tmp_path / "huge" / "quarantine.parquet").to_pylist()
    assert (rejected["kind"], rejected["reason"], rejected["source"].endswith("huge.json:data[0]")) == ("bison", "bad-id", True)
    assert "5000 digits" in rejected["detail"]
