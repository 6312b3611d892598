"""A build without pixels (a captions file and no photos) runs end to end: the image spaces are
empty, the methods that need them report zero pairs and why, and nothing fails."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow.parquet as pq

from crisscross.pipelines import aggregate, annotate, embed, evaluate, ingest, sample, similarity, tasks

PROJECT = Path(__file__).resolve().parents[2]


def test_a_text_only_build_runs_through_aggregate(demo_dir: Path, tmp_path: Path) -> None:
    p = ["--params", str(PROJECT / "params.yaml")]
    ingest.main(["--in", str(demo_dir / "captions.jsonl"), "--out", str(tmp_path / "items"), *p])
    embed.main(["--in", str(tmp_path / "items"), "--out", str(tmp_path / "embeddings"), *p])
    report = similarity.main(["--in", str(tmp_path / "embeddings"), "--out", str(tmp_path / "similarity"), *p])
    assert report["spaces"]["image/efficientnet-lite0/images"]["rows"] == 0
    assert pq.read_table(tmp_path / "similarity" / "image/efficientnet-lite0/images" / "neighbours.parquet").num_rows == 0
    report = sample.main(
        ["--in", str(tmp_path / "similarity"), "--items", str(tmp_path / "items"), "--out", str(tmp_path / "candidates"), *p]
    )
    assert report["candidates"]["c2c_isim"] == 0 and report["candidates"]["i2i_csim"] > 0
    assert "S^V is empty" in report["summary"]["c2c_isim"] and "cocaption_ratio" in report["summary"]["c2c_cocaption"]
    tasks.main(
        [
            "--in",
            str(tmp_path / "candidates"),
            "--items",
            str(tmp_path / "items"),
            "--embeddings",
            str(tmp_path / "embeddings"),
            "--out",
            str(tmp_path / "tasks"),
            *p,
        ]
    )
    rejected = pq.read_table(tmp_path / "tasks" / "quarantine.parquet").to_pylist()
    assert rejected and {r["reason"] for r in rejected} == {"no-pixels"}  # SIS items need images raters can see
    annotate.main(["--in", str(tmp_path / "tasks"), "--embeddings", str(tmp_path / "embeddings"), "--out", str(tmp_path / "judgments"), *p])
    report = aggregate.main(["--in", str(tmp_path / "judgments"), "--tasks", str(tmp_path / "tasks"), "--out", str(tmp_path / "rated"), *p])
    assert report["task_types"] == {} and "none to aggregate" in report["summary"]["judgments"]
    assert json.loads((tmp_path / "rated" / "report.json").read_text())["excluded_raters"] == 0
    report = evaluate.main(
        ["--in", str(tmp_path / "embeddings"), "--items", str(tmp_path / "items"), "--truth", "coco", "--truth", f"release:{tmp_path / 'rated'}",
         "--out", str(tmp_path / "evaluation"), *p]
    )  # fmt: skip
    assert set(report["skipped_models"]) == {"efficientnet-lite0"}  # an image encoder with no pixels to see
    assert set(json.loads((tmp_path / "evaluation" / "metrics.json").read_text())["results"]) == {"use-m3", "bow-glove50"}


def test_sample_without_image_encoders_draws_image_pairs_only(demo_dir: Path, tmp_path: Path) -> None:
    params = tmp_path / "params.yaml"
    text = (PROJECT / "params.yaml").read_text()
    params.write_text(text.replace("text_encoders: [use-m3, bow-glove50]\n  image_encoders: [efficientnet-lite0]", "text_encoders: [bow-glove50]\n  image_encoders: []")
                      .replace("i2i_text_encoders: [use-m3, bow-glove50]", "i2i_text_encoders: [bow-glove50]")
                      .replace("c2c_image_encoders: [efficientnet-lite0]", "c2c_image_encoders: []"))  # fmt: skip
    p = ["--params", str(params)]
    ingest.main(["--in", str(demo_dir / "captions.jsonl"), "--out", str(tmp_path / "items"), *p])
    embed.main(["--in", str(tmp_path / "items"), "--out", str(tmp_path / "embeddings"), *p])
    similarity.main(["--in", str(tmp_path / "embeddings"), "--out", str(tmp_path / "similarity"), *p])
    report = sample.main(
        ["--in", str(tmp_path / "similarity"), "--items", str(tmp_path / "items"), "--out", str(tmp_path / "candidates"), *p]
    )
    assert report["candidates"]["i2i_csim"] > 0 and report["candidates"]["c2c_isim"] == report["candidates"]["c2c_cocaption"] == 0
    assert "c2c_image_encoders is empty" in report["summary"]["c2c_isim"]


def test_a_round_section_is_laid_over_the_stage_section(tmp_path: Path) -> None:
    from crisscross.annotate.tasks import TaskParams
    from crisscross.pipelines.annotate import AnnotateSettings
    from crisscross.pipelines.stage import load_params

    params = tmp_path / "p.yaml"
    params.write_text("tasks:\n  batch_size: 12\n  replicas: 3\nrounds:\n  sits:\n    tasks:\n      replicas: 7\n")
    plain, _ = load_params(str(params), "tasks", TaskParams)
    sits, _ = load_params(str(params), "tasks", TaskParams, "sits")
    assert (plain.batch_size, plain.replicas) == (12, 3) and (sits.batch_size, sits.replicas) == (12, 7)
    params.write_text(
        "annotate:\n  replication: {rule: fixed, alpha: 0.05, rater_sd: {STS: 0.8}}\n"
        "rounds:\n  adaptive:\n    annotate: {replication: {rule: threshold}}\n"
    )
    adaptive, _ = load_params(str(params), "annotate", AnnotateSettings, "adaptive")
    replication = adaptive.replication  # a mapping laid over key by key
    assert (replication.rule, replication.alpha, dict(replication.rater_sd)) == ("threshold", 0.05, {"STS": 0.8})
