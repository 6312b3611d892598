"""The `crisscross` command and the DVC pipeline, run as a user runs them."""

from __future__ import annotations

import json
import re
import shlex
import subprocess
from pathlib import Path

import pyarrow.parquet as pq
import pytest
import yaml

from crisscross.embed.sets import EmbeddingSet
from crisscross.pipelines.cli import main
from crisscross.pipelines.registry import stages
from tests.shared_builds import copy_built_project, project_env

PROJECT = Path(__file__).resolve().parents[2]
DVC_FILES = (PROJECT / "dvc.yaml", *sorted(PROJECT.glob("workflows/*/dvc.yaml")))
DVC_STAGES = tuple(yaml.safe_load((PROJECT / "dvc.yaml").read_text())["stages"])  # the demo's, rounds included


def test_help_lists_every_stage_in_the_registry_order(capsys):
    assert main(["--help"]) == 0
    out = capsys.readouterr().out
    assert "crisscross <stage> --in PATH --out DIR" in out
    listed = [line.split()[0] for line in out.split("stages:\n")[1].split("\n\n")[0].splitlines()]
    assert listed == list(stages()) and listed[:4] == ["ingest", "embed", "similarity", "sample"]
    for name, stage in stages().items():
        assert f"  {name} " in out and stage.description in out
    commands = {shlex.split(stage["cmd"])[1] for path in DVC_FILES for stage in yaml.safe_load(path.read_text())["stages"].values()}
    assert commands <= set(stages())


def test_unknown_stage_and_user_errors_are_one_line_messages(tmp_path: Path, capsys):
    assert main(["no-such-stage"]) == 2
    assert "unknown stage 'no-such-stage'" in capsys.readouterr().err
    params = tmp_path / "p.yaml"
    params.write_text("ingest:\n  reader: nope\n")
    assert main(["ingest", "--in", "x.jsonl", "--out", str(tmp_path / "o"), "--params", str(params)]) == 2
    assert "p.yaml: ingest.reader must be one of ['coco-captions'" in capsys.readouterr().err


@pytest.mark.xdist_group("e2e")
def test_dvc_repro_builds_the_demo_from_a_fresh_copy(demo_repro: Path, tmp_path: Path):
    """What the Quickstart's first command does, in a fresh git work tree (offline): the session's
    ``demo_repro`` build (``dvc repro`` with no dvc.lock and no build, shared with the release test), in a copy."""
    clone = copy_built_project(demo_repro, tmp_path / "clone")
    env = project_env()
    stdout = (demo_repro / "repro.out").read_text()
    assert "ingest: done" in stdout and "embed: done" in stdout
    assert pq.read_table(clone / "build" / "items" / "captions.parquet").num_rows == 485
    means = EmbeddingSet.read(clone / "build" / "embeddings" / "text" / "use-m3" / "cocaption_mean")
    assert means.vectors.shape == (97, 512)
    locked = yaml.safe_load((clone / "dvc.lock").read_text())["stages"]
    assert set(locked) == set(DVC_STAGES)
    # the default build ends in a simulated round and its evaluation, and says so
    assert "SIMULATED" in stdout and "evaluate: done" in stdout
    assert (clone / "build" / "rated" / "sts.csv").is_file() and (clone / "build" / "evaluation" / "report.md").is_file()
    assert json.loads((clone / "releases" / "demo-simulated" / "release.json").read_text())["version"] == "1.0.0-simulated"
    again = subprocess.run(["dvc", "repro"], check=False, cwd=clone, capture_output=True, text=True, env=env)
    assert "didn't change, skipping" in again.stdout
    # the metrics dvc.yaml declares are what the stages wrote
    shown = subprocess.run(["dvc", "metrics", "show", "--json"], check=True, cwd=clone, capture_output=True, text=True, env=env)
    metrics = json.loads(shown.stdout)[""]["data"]
    assert {"build/rated/facts.json", "build/positives/bias_audit.json", "build/evaluation/metrics.json"} <= set(metrics)
    facts = json.loads((clone / "build" / "rated" / "facts.json").read_text())
    assert metrics["build/rated/facts.json"]["data"] == facts and facts["STS"]["items"] > 0


# --------------------------------------------------------------------------- params and errors a person reads

PARAMS_CASES = {
    "misspelt-section": ("similarty:\n  k: 5\n", "unknown params section(s) ['similarty']; known: ['base', 'data', 'rounds', 'aggregate'"),
    "k-zero": ("similarity:\n  k: 0\n", "similarity.k must be >= 1, got 0"),
    "k-negative": ("similarity:\n  k: -3\n", "similarity.k must be >= 1, got -3"),
    "k-not-a-number": ("similarity:\n  k: many\n", "similarity.k must be an integer, got 'many'"),
    "quantile-above-one": ("tasks:\n  negative_quantile: 1.5\n", "tasks.negative_quantile must be > 0.0 and < 1.0, got 1.5"),
    "bool-as-text": ("sample:\n  allow_cross_method: 'no'\n", "sample.allow_cross_method must be true or false"),
    "enum": ("annotate:\n  source: people\n", "annotate.source must be one of ['import', 'replay', 'simulate'], got 'people'"),
    "list-element": ("evaluate:\n  ks: [1, 0]\n", "evaluate.ks[1] must be >= 1, got 0"),
    "seed": ("base:\n  seed: -1\n", "base.seed must be >= 0"),
    "not-yaml": ("similarity:\n  k: [1\n", "p.yaml:3: not valid YAML"),
    "not-a-mapping": ("- 1\n- 2\n", "params must be a mapping of sections"),
    "round-stray-stage": ("rounds:\n  sits:\n    taks: {batch_size: 3}\n", "unknown stage section(s) ['taks'] in rounds.sits"),
    "rounds-not-a-mapping": ("rounds: [sits]\n", "rounds must map round names to sections per stage"),
    # a nested section's key, at any depth: its dotted key names it
    "nested-simulate": ("annotate:\n  simulate:\n    noise_sd: -1\n", "annotate.simulate.noise_sd must be >= 0.0, got -1"),
    "nested-anchor": ("annotate:\n  simulate:\n    anchors: {STS: [0.1]}\n", "annotate.simulate.anchors.STS must be a list of 2"),
    "nested-replication": ("annotate:\n  replication: {alpha: 2}\n", "annotate.replication.alpha must be > 0.0 and < 1.0, got 2"),
    "nested-rules": ("aggregate:\n  rules: {min_gold_accuracy: 3}\n", "aggregate.rules.min_gold_accuracy must be >= 0.0 and <= 1.0, got 3"),
}
STAGE_OF_CASE = {
    "k-zero": "similarity",
    "k-negative": "similarity",
    "k-not-a-number": "similarity",
    "quantile-above-one": "tasks",
    "bool-as-text": "sample",
    "enum": "annotate",
    "list-element": "evaluate",
    "nested-simulate": "annotate",
    "nested-anchor": "annotate",
    "nested-replication": "annotate",
    "nested-rules": "aggregate",
}


def params_mistake(case: str, tmp_path: Path) -> list[str]:
    """The arguments of a command whose params file holds the mistake of ``PARAMS_CASES[case]``."""
    params = tmp_path / "p.yaml"
    params.write_text(PARAMS_CASES[case][0])
    stage = STAGE_OF_CASE.get(case, "similarity")
    extra = {
        "tasks": ["--items", "x", "--embeddings", "y"],
        "sample": ["--items", "x"],
        "evaluate": ["--items", "x", "--truth", "coco"],
        "aggregate": ["--tasks", "x"],
    }
    return [stage, "--in", str(tmp_path / "missing"), "--out", str(tmp_path / "out"), "--params", str(params), *extra.get(stage, [])]


def assert_one_line(case: str, code: int, stderr: str, tmp_path: Path) -> None:
    assert code == 2, stderr
    lines = stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in stderr, stderr
    assert PARAMS_CASES[case][1] in lines[0]
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("case", sorted(PARAMS_CASES), ids=sorted(PARAMS_CASES))
def test_params_mistakes_are_one_line_with_the_dotted_key(case: str, tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    """Through ``main``, what the installed command runs (``test_params_mistakes_through_the_installed_command``
    runs the command itself); a process per case would start Beam once each."""
    code = main(params_mistake(case, tmp_path))
    assert_one_line(case, code, capsys.readouterr().err, tmp_path)


@pytest.mark.parametrize("case", ["misspelt-section", "quantile-above-one", "nested-simulate"])  # the whole file; a section; a nested one
def test_params_mistakes_through_the_installed_command(case: str, tmp_path: Path) -> None:
    run = subprocess.run(["crisscross", *params_mistake(case, tmp_path)], capture_output=True, text=True, check=False)
    assert_one_line(case, run.returncode, run.stderr, tmp_path)


def test_a_missing_input_is_one_line_and_debug_shows_the_traceback(tmp_path: Path) -> None:
    command = [
        "crisscross",
        "ingest",
        "--in",
        str(tmp_path / "nowhere.jsonl"),
        "--out",
        str(tmp_path / "items"),
        "--params",
        str(PROJECT / "params.yaml"),
    ]
    run = subprocess.run(command, capture_output=True, text=True, check=False, cwd=PROJECT)
    assert run.returncode == 2
    assert run.stderr.strip().splitlines() == [run.stderr.strip()] and "nowhere.jsonl" in run.stderr, run.stderr
    debug = subprocess.run([*command, "--debug"], capture_output=True, text=True, check=False, cwd=PROJECT)
    assert debug.returncode != 0 and "Traceback" in debug.stderr


def _one_line_error(command: list[str]) -> str:
    run = subprocess.run(command, capture_output=True, text=True, check=False, cwd=PROJECT)
    assert run.returncode == 2, run.stdout + run.stderr
    lines = run.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in run.stderr, run.stderr
    return lines[0]


def test_errors_raised_inside_a_pipeline_step_are_one_line(demo_chain: Path, tmp_path: Path) -> None:
    """A GoldError (raised in a Beam step, which appends the worker traceback) and a truncated
    Label Studio export each end the command with their own first line."""
    params = tmp_path / "p.yaml"
    # too few far-apart SIS pairs on the demo; the search gives up after 20,000 draws, not the default million
    params.write_text("tasks:\n  negative_quantile: 0.1\n  max_draws: 20000\n")
    line = _one_line_error(
        ["crisscross", "tasks", "--in", str(demo_chain / "candidates"), "--items", str(demo_chain / "items"),
         "--embeddings", str(demo_chain / "embeddings"), "--out", str(tmp_path / "tasks"), "--params", str(params)]
    )  # fmt: skip
    assert "known negatives" in line or "negative" in line, line
    assert not (tmp_path / "tasks").exists()
    export = tmp_path / "export.json"
    export.write_text('[{"id": 1, "annotations": [{"result": [')
    params.write_text("annotate:\n  source: import\n  format: label-studio\n")
    tasks_dir = tmp_path / "tasks-ok"
    subprocess.run(
        ["crisscross", "tasks", "--in", str(demo_chain / "candidates"), "--items", str(demo_chain / "items"),
         "--embeddings", str(demo_chain / "embeddings"), "--out", str(tasks_dir), "--params", str(PROJECT / "params.yaml")],
        check=True, capture_output=True, cwd=PROJECT,
    )  # fmt: skip
    line = _one_line_error(
        [
            "crisscross",
            "annotate",
            "--in",
            str(tasks_dir),
            "--judgments",
            str(export),
            "--out",
            str(tmp_path / "j"),
            "--params",
            str(params),
        ]
    )
    assert "export.json" in line and "JSON" in line, line


def test_a_stage_shows_its_progress_lines_on_the_terminal(demo_chain: Path, tmp_path: Path) -> None:
    """Beam configures the root logger when the flags are parsed; the stage's own INFO lines must
    still reach stderr, timestamped, and Beam's own stay quiet."""
    run = subprocess.run(
        ["crisscross", "similarity", "--in", str(demo_chain / "embeddings"), "--out", str(tmp_path / "similarity"),
         "--params", str(PROJECT / "params.yaml")],
        capture_output=True, text=True, check=True, cwd=PROJECT,
    )  # fmt: skip
    progress = [line for line in run.stderr.splitlines() if "crisscross.beam.similarity" in line]
    assert any(
        re.fullmatch(r"\d\d:\d\d:\d\d crisscross\.beam\.similarity .*: \d+ block pairs from row block 0 done", line) for line in progress
    ), run.stderr
    assert "apache_beam" not in run.stderr, run.stderr


def test_an_empty_source_and_a_missing_images_folder_are_warnings(tmp_path: Path) -> None:
    empty = tmp_path / "empty.jsonl"
    empty.write_text("")
    run = subprocess.run(
        ["crisscross", "ingest", "--in", str(empty), "--images", str(tmp_path / "no-such-folder"), "--out", str(tmp_path / "items"),
         "--params", str(PROJECT / "params.yaml")],
        capture_output=True, text=True, check=True, cwd=PROJECT,
    )  # fmt: skip
    assert "WARNING" in run.stdout and "no-such-folder does not exist" in run.stdout and "holds no records" in run.stdout
    report = yaml.safe_load((tmp_path / "items" / "report.json").read_text())
    assert len(report["warnings"]) == 2
