"""The COCO-BISON workflow as DVC runs it: ``dvc repro workflows/bison/dvc.yaml`` in a copy of the
project, on the demo with the simulated panel, reusing the root build's items and embeddings."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pandas as pd
import pytest
import yaml

from tests.shared_builds import git_copy, project_env

PROJECT = Path(__file__).resolve().parents[2]
BISON = Path("build") / "bison"
BISON_STAGES = (  # the chain of §4.1 and its evaluation; the workflow may add stages after them (release)
    "decoys",
    "tasks_choose",
    "annotate_choose",
    "aggregate_choose",
    "chosen",
    "tasks_verify_triple",
    "annotate_verify_triple",
    "aggregate_verify_triple",
    "triples",
    "evaluate",
)
WORKFLOW_STAGES = tuple(yaml.safe_load((PROJECT / "workflows" / "bison" / "dvc.yaml").read_text())["stages"])


def ok(args: list[str], cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(args, cwd=cwd, capture_output=True, text=True, check=False, env=env)
    assert done.returncode == 0, f"{' '.join(args)} exited {done.returncode}\n{done.stdout[-4000:]}\n{done.stderr[-3000:]}"
    return done


@pytest.mark.xdist_group("e2e")
def test_dvc_repro_of_the_bison_workflow(shared_data: Path, demo_chain: Path, tmp_path: Path) -> None:
    """The root build's ingest and embed outputs come from the session's demo build (``dvc commit``
    records them as the root stages' outputs, so ``dvc repro`` does not build them again); then
    ``dvc repro workflows/bison/dvc.yaml`` runs the ten BISON stages, and the JSON, the table and
    the evaluation agree with each other and with the yields in the report."""
    env = {**project_env(), "CRISSCROSS_RELEASE_SALT": "bison-test-salt-0123456789abcdef"}
    project = git_copy(PROJECT, tmp_path / "work" / "main", env, leave_out=("workflows/bison/dvc.lock",))
    (tmp_path / "work" / "shared").symlink_to(shared_data.parent, target_is_directory=True)
    for output in ("items", "embeddings"):  # built from the same demo with the same params.yaml: the same bytes
        shutil.copytree(demo_chain / output, project / "build" / output)
    ok(["dvc", "commit", "-f", "ingest", "embed"], project, env)

    run = ok(["dvc", "repro", "workflows/bison/dvc.yaml"], project, env)
    ran = [line.split("'")[1] for line in run.stdout.splitlines() if line.startswith("Running stage")]
    ran = [stage.removeprefix("workflows/bison/dvc.yaml:") for stage in ran]
    assert sorted(ran) == sorted(WORKFLOW_STAGES) and set(BISON_STAGES) <= set(ran), run.stdout[-3000:]
    assert [stage for stage in ran if stage in BISON_STAGES] == list(BISON_STAGES)  # the chain in its order
    lock = yaml.safe_load((project / "workflows" / "bison" / "dvc.lock").read_text())["stages"]
    assert set(lock) == set(WORKFLOW_STAGES)

    decoys = json.loads((project / BISON / "decoys" / "report.json").read_text())
    assert decoys["targets_with_decoy"] == 97 and decoys["encoder"] == "bow-glove50"
    report = json.loads((project / BISON / "triples" / "report.json").read_text())
    funnel = report["yields"]
    assert funnel["images"] == 97 and funnel["with_decoy"] == 97
    assert funnel["choose_kept"] + funnel["choose_none"] == 97 and funnel["choose_kept"] > 80
    assert report["verification"]["verified"] == funnel["choose_kept"]
    assert report["verification"]["accepted"] == funnel["triples_accepted"] > 50
    assert report["verification"]["verifier_was_chooser"] == 0  # the verify round's panel is other people
    assert funnel["image_yield"] == round(funnel["target_images"] / 97, 6) and funnel["paper_image_yield"] == 0.954967

    document = json.loads((project / BISON / "triples" / "bison_annotations.json").read_text())
    table = pd.read_csv(project / BISON / "triples" / "triples.csv")
    assert document["info"]["source"] == "coco" and document["info"]["simulated"] is True
    assert len(document["data"]) == len(table) == funnel["triples_accepted"]
    for entry, row in zip(document["data"], table.itertuples(), strict=True):
        assert entry["bison_id"] == row.bison_id and f"coco:cap:{entry['caption_id']}" == row.caption
        assert f"coco:img:{entry['true_image_id']}" == row.target
        assert sorted(c["image_id"] for c in entry["image_candidates"]) == sorted(int(x.rsplit(":", 1)[1]) for x in (row.target, row.decoy))

    metrics = json.loads((project / BISON / "evaluation" / "metrics.json").read_text())["results"]
    for encoder, accuracy in report["verification"]["baseline_accuracy"].items():
        scored = metrics[f"baseline-{encoder}"]["coco"]["all"]
        assert scored["triples"]["bison"] == funnel["triples_accepted"]
        assert abs(scored["accuracy"]["bison"] - accuracy) < 1e-6  # evaluate reads the JSON to the stage's own number
    assert report["verification"]["baseline_accuracy"]["bow-glove50"] < report["verification"]["baseline_accuracy"]["use-m3"]
