"""Every ``crisscross`` command the README shows, run in order as a new user would: from a copy
of the project beside ``shared/``, through the installed command, each one succeeding."""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import time
import urllib.request
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


def wait_for(url: str, server: subprocess.Popen, seconds: float = 60) -> None:
    """Poll ``url`` until the server answers 200 (or fail with its stderr if it exits)."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        assert server.poll() is None, server.stderr.read().decode()[-2000:] if server.stderr else "server exited"
        try:
            with urllib.request.urlopen(url, timeout=2) as response:
                if response.status == 200:
                    return
        except OSError:
            time.sleep(0.3)
    raise AssertionError(f"{url} did not answer within {seconds} s")


def test_the_readme_shows_the_stage_commands() -> None:
    stages = [shlex.split(c)[1] for c in readme_commands() if "--in" in c]
    assert {"ingest", "embed", "similarity", "sample", "tasks", "annotate", "aggregate", "evaluate"} <= set(stages)


def test_every_readme_pipeline_is_run_by_a_test() -> None:
    """The README's ``dvc repro <workflow>`` commands (the BISON and Entities pipelines) are the
    ones their tests run, so a renamed or moved workflow cannot leave the README behind."""
    tested = "".join(path.read_text() for path in (PROJECT / "tests").rglob("test_*.py"))
    targets = [shlex.split(command)[2:] for command in readme_commands("dvc") if command.startswith("dvc repro ")]
    assert ["workflows/bison/dvc.yaml"] in targets and ["workflows/entities/dvc.yaml"] in targets
    for target in targets:
        assert f'"dvc", "repro", "{target[0]}"' in tested, f"no test runs dvc repro {target[0]}"


def test_every_readme_command_runs(shared_data: Path, tmp_path: Path) -> None:
    root = tmp_path / "work"
    project = root / "main"
    shutil.copytree(PROJECT, project, ignore=shutil.ignore_patterns(".git", "build", ".dvc", "*.failed", "__pycache__", ".*.staging-*"))
    (root / "shared").symlink_to(shared_data.parent, target_is_directory=True)
    servers = []
    try:
        for command in readme_commands():
            args = shlex.split(command)
            if args[1:2] == ["serve"] and args[2].startswith("--"):  # the rater app runs until stopped
                servers.append(subprocess.Popen(args, cwd=project, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE))
                wait_for(f"http://127.0.0.1:{args[args.index('--port') + 1]}/signin", servers[-1])
                continue
            run = subprocess.run(args, cwd=project, capture_output=True, text=True, check=False)
            assert run.returncode == 0, f"{command}\n{run.stdout[-2000:]}\n{run.stderr[-2000:]}"
            if "--out" in args:  # every stage reports; a release's report is its release.json
                out = project / args[args.index("--out") + 1]
                assert (out / "report.json").is_file() or (out / "release.json").is_file(), command
            if args[1:3] == ["serve", "add-rater"]:
                assert "http://127.0.0.1:8000/" in run.stdout and "#" in run.stdout  # the sign-in link, token after '#'
    finally:
        for server in servers:
            server.terminate()
            server.wait(timeout=30)
    assert servers, "the README shows the rater app"
    report = (project / "build" / "evaluation" / "report.md").read_text()
    assert "cxc-test" in report and "eccv" in report


def test_the_readme_experiment_runs(shared_data: Path, tmp_path: Path) -> None:
    """The README's ``dvc exp run`` on the Karpathy test split (5,000 images, 370 with photos, a third
    text encoder), from a git copy of the project as a new user has it: every stage, both rounds,
    and an image encoder scored on the images it covers (minutes: the whole build on real data)."""
    (experiment,) = [command for command in readme_commands("dvc") if command.startswith("dvc exp run ")]
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
    audit = json.loads((project / "build" / "positives" / "bias_audit.json").read_text())
    assert set(audit["models"]) == {f"text-proxy:{name}" for name in ("use-m3", "bow-glove50")}  # filter.text_proxies, not every encoder
    release = json.loads((project / "releases" / "demo-simulated" / "release.json").read_text())
    assert release["version"] == "1.0.0-simulated"
    assert (project / "build" / "verify" / "rated" / "verify.csv").is_file() and (
        project / "build" / "sits" / "rated" / "sits.csv"
    ).is_file()
