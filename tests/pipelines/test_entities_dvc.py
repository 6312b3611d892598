"""The Flickr30k Entities workflow as DVC runs it: ``dvc repro workflows/entities/dvc.yaml`` in a
fresh copy of the project builds the root ingest output it needs, then mentions → coref → boxes →
localize on the demo with the simulated crowd of ``workflows/entities/params.yaml``."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest
import yaml

from crisscross.entities.files import read_annotation, sentences_file
from tests.shared_builds import git_copy, project_env

PROJECT = Path(__file__).resolve().parents[2]


@pytest.mark.xdist_group("e2e")
def test_dvc_repro_runs_the_entities_workflow_on_the_demo(tmp_path: Path):
    env = {**project_env(), "CRISSCROSS_RELEASE_SALT": "entities-test-salt-0123456789abcdef"}
    project = git_copy(PROJECT, tmp_path / "main", env)
    (project / "workflows" / "entities" / "dvc.lock").unlink(missing_ok=True)
    run = subprocess.run(["dvc", "repro", "workflows/entities/dvc.yaml"], cwd=project, capture_output=True, text=True, env=env, check=False)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    for stage in ("ingest", "mentions", "coref", "boxes", "localize"):
        assert f"{stage}: done" in run.stdout
    assert "embed: done" not in run.stdout  # only what the workflow needs from the root pipeline
    build = project / "build" / "entities"

    mentions = json.loads((build / "mentions" / "report.json").read_text())
    assert (mentions["mentions"], mentions["captions"], mentions["images"]) == (1524, 485, 97)
    assert mentions["types"]["people"] == 360 and mentions["skipped"] == {"non-visual": 11, "pronoun": 30}

    coref = json.loads((build / "coref" / "report.json").read_text())
    assert coref["links"] == {"links_asked": 1976, "naive_links": 11493, "split": 82, "verified": 350}
    assert coref["chains"] == 917 and round(coref["accuracy"]["exact"], 4) == 0.9317 and round(coref["accuracy"]["link_f1"], 4) == 0.9448

    boxes = json.loads((build / "boxes" / "report.json").read_text())
    assert boxes["boxes"] == 895 and boxes["outcomes"] == {"boxes": 737, "nobox": 32, "scene": 118}
    assert boxes["merging"] == {"boxes_drawn": 932, "merged_boxes": 37, "merged_chains": 28}
    assert boxes["rejected"] == {"chain": {"needs-review": 2}}
    release = build / "boxes" / "release"
    assert len(list((release / "Sentences").glob("*.txt"))) == 97 and len(list((release / "Annotations").glob("*.xml"))) == 97
    table = pq.read_table(build / "boxes" / "boxes.parquet")
    assert table.num_rows == 895
    stem = "COCO_val2014_000000102805"
    annotation = read_annotation((release / "Annotations" / f"{stem}.xml").read_bytes(), stem)
    own = table.filter(pc.equal(table.column("image_id"), f"coco:img:{int(stem[-12:])}")).to_pylist()
    assert sorted(tuple(r[k] for k in ("xmin", "ymin", "xmax", "ymax")) for r in own) == sorted(
        o.box for o in annotation.objects if o.box is not None
    )
    captions, _ = sentences_file(str(release / "Sentences" / f"{stem}.txt"), (release / "Sentences" / f"{stem}.txt").read_text())
    assert len(captions) == 5
    tasks = json.loads((build / "boxes" / "label_studio" / "tasks.json").read_text())
    assert len(tasks) == 765 and tasks[0]["data"]["image"] == f"/data/local-files/?d={stem}.jpg"

    metrics = json.loads((build / "localize" / "metrics.json").read_text())
    assert metrics["overall"]["instances"] == 1280 and round(metrics["overall"]["r_at_1"], 1) == 56.2
    lock = yaml.safe_load((project / "workflows" / "entities" / "dvc.lock").read_text())
    assert set(lock["stages"]) == {"mentions", "coref", "boxes", "localize", "release"}
