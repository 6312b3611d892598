"""Every ``crisscross`` command the README shows, run in order as a new user would: from a copy
of the project beside ``shared/``, through the installed command, each one succeeding."""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

PROJECT = Path(__file__).resolve().parents[1]


def readme_commands(program: str = "crisscross") -> list[str]:
    """``crisscross …`` (or ``program``) lines of the README's bash blocks (continuations joined), in order."""
    blocks = re.findall(r"```bash\n(.*?)```", (PROJECT / "README.md").read_text(), flags=re.S)
    commands = []
    for block in blocks:
        for line in block.replace("\\\n", " ").splitlines():
            line = line.strip()
            if line.startswith(f"{program} "):
                commands.append(" ".join(line.split()))
    return commands


def test_the_readme_shows_the_stage_commands() -> None:
    stages = [shlex.split(c)[1] for c in readme_commands() if "--in" in c]
    assert {"ingest", "embed", "similarity", "sample", "tasks", "annotate", "aggregate", "evaluate"} <= set(stages)


def test_every_readme_command_runs(shared_data: Path, tmp_path: Path) -> None:
    root = tmp_path / "work"
    project = root / "main"
    shutil.copytree(PROJECT, project, ignore=shutil.ignore_patterns(".git", "build", ".dvc", "*.failed", "__pycache__", ".*.staging-*"))
    (root / "shared").symlink_to(shared_data.parent, target_is_directory=True)
    for command in readme_commands():
        run = subprocess.run(shlex.split(command), cwd=project, capture_output=True, text=True, check=False)
        assert run.returncode == 0, f"{command}\n{run.stdout[-2000:]}\n{run.stderr[-2000:]}"
        args = shlex.split(command)
        if "--out" in args:
            assert (project / args[args.index("--out") + 1] / "report.json").is_file(), command
    report = (project / "build" / "evaluation" / "report.md").read_text()
    assert "cxc-test" in report and "eccv" in report


def test_the_readme_experiment_runs(shared_data: Path, tmp_path: Path) -> None:
    """The README's ``dvc exp run`` on the Karpathy test split (5,000 images, 370 with photos, a third
    text encoder), from a git copy of the project as a new user has it: every stage, both rounds,
    and an image encoder scored on the images it covers (minutes: the whole build on real data)."""
    (experiment,) = readme_commands("dvc")
    root = tmp_path / "work"
    project = root / "main"
    files = subprocess.run(["git", "ls-files"], cwd=PROJECT, capture_output=True, text=True, check=True).stdout.split()
    for name in files:
        (project / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(PROJECT / name, project / name)
    (root / "shared").symlink_to(shared_data.parent, target_is_directory=True)
    env = {**os.environ, "DVC_NO_ANALYTICS": "1", "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}
    for command in (
        ["git", "init", "-q"],
        ["git", "add", "-A"],
        ["git", "-c", "user.email=t@t", "-c", "user.name=t", "commit", "-qm", "x"],
    ):
        subprocess.run(command, cwd=project, check=True, env=env)
    run = subprocess.run(shlex.split(experiment), cwd=project, capture_output=True, text=True, check=False, env=env)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    assert "efficientnet-lite0 gallery: covered" in run.stdout and "370 of 5,000 images" in run.stdout
    assert (project / "build" / "embeddings" / "text" / "minilm" / "captions" / "vectors.npy").is_file()
    assert "minilm / coco: t2t R@1/5/10" in run.stdout  # an encoder added to embed is evaluated without a second edit
    assert (project / "build" / "verify" / "rated" / "verify.csv").is_file() and (
        project / "build" / "sits" / "rated" / "sits.csv"
    ).is_file()
