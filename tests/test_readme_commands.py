"""Every ``crisscross`` command the README shows, run in order as a new user would: from a copy
of the project beside ``shared/``, through the installed command, each one succeeding."""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
import time
import urllib.request
from pathlib import Path

import pytest

from tests.serve.round import free_port
from tests.shared_builds import git_copy, new_home, project_env

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


def is_portable(command: str) -> bool:
    """A command of the README's portable-runner example (a worker pool, a stage sent to a job service)."""
    return "--runner=PortableRunner" in command or command.startswith("crisscross worker-pool --port")


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


def karpathy_slice(shared_data: Path, data: Path, photos: int, others: int) -> tuple[int, int]:
    """``data`` laid out as ``shared/data`` for the README experiment, whose ``test5k.jsonl`` keeps the
    captions of the split's first ``photos`` images that have a photo and first ``others`` that do not
    (in the file's order); the photos, their attribution and the rest are the real ones. Returns
    (images with a photo, images)."""
    folder = shared_data / "coco-images" / "karpathy-test"
    have = {path.name for path in folder.glob("*.jpg")}
    lines = (shared_data / "coco-karpathy" / "test5k.jsonl").read_text(encoding="utf-8").splitlines()
    names = list(dict.fromkeys(json.loads(line)["file_name"] for line in lines))
    keep = {*[n for n in names if n in have][:photos], *[n for n in names if n not in have][:others]}
    (data / "coco-karpathy").mkdir(parents=True)
    (data / "coco-karpathy" / "test5k.jsonl").write_text(
        "".join(line + "\n" for line in lines if json.loads(line)["file_name"] in keep), encoding="utf-8"
    )
    (data / "coco-images").symlink_to(shared_data / "coco-images", target_is_directory=True)
    return len(keep & have), len(keep)


@pytest.mark.xdist_group("e2e")
def test_the_readme_experiment_runs(shared_data: Path, tmp_path: Path) -> None:
    """The README's ``dvc exp run`` on the Karpathy test split (a third text encoder, an image encoder
    for the images with photos), from a git copy of the project as a new user has it: every stage,
    both rounds, and an image encoder scored on the images it covers. It runs on a slice of the split
    (``karpathy_slice``: 40 images with photos and 40 without, about the demo's size) to keep the
    suite short; the whole split's build, with its 370 of 5,000 images covered, is ``karpathy_test``'s,
    scored in ``tests/pipelines/test_evaluate_stage.py``."""
    (experiment,) = [command for command in readme_commands("dvc") if command.startswith("dvc exp run ")]
    root = tmp_path / "work"
    project = root / "main"
    covered, images = karpathy_slice(shared_data, root / "shared" / "data", photos=40, others=40)
    env = {**project_env(), **new_home(tmp_path / "home")}  # the release's salt file goes to a new home folder, as a new user's would
    env.pop("CRISSCROSS_RELEASE_SALT")
    git_copy(PROJECT, project, env)
    run = subprocess.run(shlex.split(experiment), cwd=project, capture_output=True, text=True, check=False, env=env)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    assert "efficientnet-lite0 gallery: covered" in run.stdout and f"{covered} of {images:,} images" in run.stdout
    assert (project / "build" / "embeddings" / "text" / "minilm" / "captions" / "vectors.npy").is_file()
    assert "minilm / coco: t2t R@1/5/10" in run.stdout  # an encoder added to embed is evaluated without a second edit
    audit = json.loads((project / "build" / "positives" / "bias_audit.json").read_text())
    assert set(audit["models"]) == {f"text-proxy:{name}" for name in ("use-m3", "bow-glove50")}  # filter.text_proxies, not every encoder
    release = json.loads((project / "releases" / "demo-simulated" / "release.json").read_text())
    assert release["version"] == "1.0.0-simulated"
    assert (project / "build" / "verify" / "rated" / "verify.csv").is_file() and (
        project / "build" / "sits" / "rated" / "sits.csv"
    ).is_file()
    # the README's next step: compare the experiment through the metrics and plots dvc.yaml declares
    views = {c.split()[1]: c for c in readme_commands("dvc") if c.startswith(("dvc exp show", "dvc metrics diff", "dvc plots diff"))}
    assert sorted(views) == ["exp", "metrics", "plots"]
    shown = {
        name: subprocess.run(shlex.split(c), cwd=project, capture_output=True, text=True, check=False, env=env) for name, c in views.items()
    }
    assert all(r.returncode == 0 for r in shown.values()), {n: r.stderr[-1000:] for n, r in shown.items()}
    assert "STS.alpha" in shown["exp"].stdout and "minilm" in shown["exp"].stdout  # the experiment's metrics beside its params
    facts = json.loads((project / "build" / "rated" / "facts.json").read_text())
    assert "| build/rated/facts.json" in shown["metrics"].stdout and str(facts["STS"]["items"]) in shown["metrics"].stdout
    page = (project / "dvc_plots" / "index.html").read_text()
    assert all(name in page for name in ("score_distribution.png", "item_std.png", "recall_at_k.png"))


def ran_by_dvc(command: str, repro_out: str) -> bool:
    """Whether ``dvc repro`` ran ``command`` as written (dvc prints each stage's command after ``> ``)."""
    return f"\n> {command}\n" in "\n" + "\n".join(" ".join(line.split()) for line in repro_out.splitlines()) + "\n"


def outputs(folder: Path) -> dict[str, bytes]:
    """Every file under ``folder`` but the reports (they hold no bytes a worker count changes, only the run's summary)."""
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file() and p.name != "report.json"}


@pytest.mark.xdist_group("e2e")
def test_every_readme_command_runs(shared_data: Path, demo_repro: Path, tmp_path: Path) -> None:
    """A new user's order: the Quickstart's ``dvc repro`` first (the session's ``demo_repro``, from a
    fresh copy of the project beside ``shared/``), then the README's commands in the project it built.
    Those dvc.yaml runs as the README writes them (round one, round two, the VERIFY round, positives,
    plan) ran in that ``dvc repro``: each is checked to have run there, as written, and reported; every
    other command runs here, in order, through the installed command, and must succeed. The README's
    second embed (two worker processes) must write the bytes the first (one process) wrote.

    Run alongside other tests (and other people's runs): the release the Quickstart built is set aside
    (the README's release command builds a first one, as in a clone that never ran it), the rater app
    and the release browser take free ports rather than the README's, and the home folder, where the release keeps its
    salt file, is a new one."""
    root = tmp_path / "work"
    project = root / "main"
    shutil.copytree(demo_repro / "main", project, symlinks=True, ignore=shutil.ignore_patterns(".git", ".dvc"))
    shutil.rmtree(project / "releases")
    (root / "shared").symlink_to(shared_data.parent, target_is_directory=True)
    repro_out = (demo_repro / "repro.out").read_text()
    env, port = {**os.environ, **new_home(tmp_path / "home")}, free_port()
    servers, by_dvc, browsed, one_process, operators = [], [], [], None, 0
    try:
        for command in readme_commands():
            if is_portable(command):
                continue  # tests/pipelines/test_portable_runner.py runs them, with its own job service and worker pool
            args = shlex.split(command)
            if ran_by_dvc(command, repro_out):
                by_dvc.append(args[1])
            else:
                if args[1:2] == ["embed"]:  # the README's second embed: two worker processes, the bytes of one
                    one_process = outputs(project / args[args.index("--out") + 1])
                if args[1:2] == ["serve"]:  # the README's port 8000 may be taken
                    args = [arg.replace("127.0.0.1:8000", f"127.0.0.1:{port}") for arg in args]
                    args = [str(port) if arg == "8000" and args[i - 1] == "--port" else arg for i, arg in enumerate(args)]
                if args[1:2] == ["serve"] and args[2].startswith("--"):  # the rater app runs until stopped
                    servers.append(subprocess.Popen(args, cwd=project, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env))
                    wait_for(f"http://127.0.0.1:{args[args.index('--port') + 1]}/signin", servers[-1])
                    continue
                if args[1:2] == ["browse"]:  # the release browser runs until stopped, on a free port
                    args[args.index("--port") + 1] = str(free_port())
                    servers.append(subprocess.Popen(args, cwd=project, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env))
                    wait_for(f"http://127.0.0.1:{args[args.index('--port') + 1]}/api/release", servers[-1])
                    browsed.append(args[2])
                    continue
                run = subprocess.run(args, cwd=project, capture_output=True, text=True, check=False, env=env)
                assert run.returncode == 0, f"{command}\n{run.stdout[-2000:]}\n{run.stderr[-2000:]}"
                if args[1:3] == ["serve", "add-rater"]:
                    assert f"http://127.0.0.1:{port}/" in run.stdout and "#" in run.stdout  # the sign-in link, token after '#'
                if args[1:3] == ["serve", "add-operator"]:  # the operator page's sign-in link, on the rater app's server
                    assert f"http://127.0.0.1:{port}/operator/signin#token=" in run.stdout
                    operators += 1
                if args[1:2] == ["embed"]:
                    assert "--direct_num_workers=2" in args and one_process
                    assert outputs(project / args[args.index("--out") + 1]) == one_process
            if "--out" in args:  # every stage reports; a release's report is its release.json
                out = project / args[args.index("--out") + 1]
                assert (out / "report.json").is_file() or (out / "release.json").is_file(), command
    finally:
        for server in servers:
            server.terminate()
            server.wait(timeout=30)
    assert servers, "the README shows the rater app"
    assert browsed == ["releases/demo-simulated"], "the README shows the release browser on the demo release"
    assert operators, "the README shows how to make an operator's link"
    assert one_process is not None, "the README shows embed on two worker processes"
    # dvc.yaml runs the first round's commands as the README writes them; if the two drift apart, this test runs them itself
    assert {"ingest", "embed", "tasks", "annotate", "aggregate"} <= set(by_dvc), by_dvc
    report = (project / "build" / "evaluation" / "report.md").read_text()
    assert "cxc-test" in report and "eccv" in report
