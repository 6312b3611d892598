"""Every ``crisscross`` command the README shows, run in order as a new user would: from a copy
of the project beside ``shared/``, through the installed command, each one succeeding."""

from __future__ import annotations

import re
import shlex
import shutil
import subprocess
from pathlib import Path

PROJECT = Path(__file__).resolve().parents[1]


def readme_commands() -> list[str]:
    """``crisscross …`` lines of the README's bash blocks (continuations joined), in order."""
    blocks = re.findall(r"```bash\n(.*?)```", (PROJECT / "README.md").read_text(), flags=re.S)
    commands = []
    for block in blocks:
        for line in block.replace("\\\n", " ").splitlines():
            line = line.strip()
            if line.startswith("crisscross "):
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
