"""The `crisscross` command and the DVC pipeline, run as a user runs them."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pyarrow.parquet as pq
import yaml

from crisscross.embeddings import EmbeddingSet
from pipelines.cli import main

PROJECT = Path(__file__).resolve().parents[2]
STAGES = ("ingest", "embed", "similarity", "sample", "tasks", "annotate", "aggregate", "evaluate")


def test_help_lists_every_stage(capsys):
    assert main(["--help"]) == 0
    out = capsys.readouterr().out
    assert "crisscross <stage> --in PATH --out DIR" in out
    for stage in STAGES:
        assert f"  {stage} " in out


def test_unknown_stage_and_user_errors_are_one_line_messages(tmp_path: Path, capsys):
    assert main(["no-such-stage"]) == 2
    assert "unknown stage 'no-such-stage'" in capsys.readouterr().err
    params = tmp_path / "p.yaml"
    params.write_text("ingest:\n  reader: nope\n")
    assert main(["ingest", "--in", "x.jsonl", "--out", str(tmp_path / "o"), "--params", str(params)]) == 1
    assert "unknown reader 'nope'; known: coco-captions" in capsys.readouterr().err


def test_dvc_repro_builds_the_demo_from_a_fresh_copy(tmp_path: Path):
    """What the Quickstart's first command does, in a fresh git work tree (offline)."""
    files = subprocess.run(["git", "ls-files"], cwd=PROJECT, capture_output=True, text=True, check=True).stdout.split()
    clone = tmp_path / "clone"
    for name in files:
        (clone / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(PROJECT / name, clone / name)
    env = {**os.environ, "DVC_NO_ANALYTICS": "1", "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}
    for command in (["git", "init", "-q"], ["git", "add", "-A"], ["git", "-c", "user.email=t@t", "-c", "user.name=t", "commit", "-qm", "x"]):
        subprocess.run(command, cwd=clone, check=True, env=env)
    (clone / "dvc.lock").unlink(missing_ok=True)
    run = subprocess.run(["dvc", "repro"], check=False, cwd=clone, capture_output=True, text=True, env=env)
    assert run.returncode == 0, run.stdout + run.stderr
    assert "ingest: done" in run.stdout and "embed: done" in run.stdout
    assert pq.read_table(clone / "build" / "items" / "captions.parquet").num_rows == 485
    means = EmbeddingSet.read(clone / "build" / "embeddings" / "text" / "use-m3" / "cocaption_mean")
    assert means.vectors.shape == (97, 512)
    stages = yaml.safe_load((clone / "dvc.lock").read_text())["stages"]
    assert set(stages) == set(STAGES)
    # the default build ends in a simulated round and its evaluation, and says so
    assert "SIMULATED" in run.stdout and "evaluate: done" in run.stdout
    assert (clone / "build" / "rated" / "sts.csv").is_file() and (clone / "build" / "evaluation" / "report.md").is_file()
    again = subprocess.run(["dvc", "repro"], check=False, cwd=clone, capture_output=True, text=True, env=env)
    assert "didn't change, skipping" in again.stdout
