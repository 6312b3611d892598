"""The round-one chain through Beam's portable runner protocol, workers out of process.

A Beam job service (``local_job_service_main``, the Job API) and an external worker pool
(``crisscross worker-pool``, the Fn API workers) run as separate processes started in their own
directories, the way Flink, Spark and Dataflow run workers; the stages are the README's commands
with relative paths, launched from a project folder.  Every file they write, reports included,
must equal what the default in-process runner writes from an identical folder: what the Quickstart's
``dvc repro`` (the session's ``demo_repro``) wrote with the same commands.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import PROJECT
from tests.test_readme_commands import is_portable, readme_commands

ROUND_ONE = [
    "ingest --in data/demo/captions.jsonl --images data/demo/images --out build/items",
    "embed --in build/items --out build/embeddings",
    "similarity --in build/embeddings --out build/similarity",
    "sample --in build/similarity --items build/items --out build/candidates",
    "tasks --in build/candidates --items build/items --embeddings build/embeddings --out build/tasks",
    "annotate --in build/tasks --embeddings build/embeddings --out build/judgments",
    "aggregate --in build/judgments --tasks build/tasks --out build/rated",
]


def readme_portable_flags() -> list[str]:
    """The Beam flags of the README's portable-runner example, whose commands this module runs."""
    (stage,) = [c for c in readme_commands() if "--runner=PortableRunner" in c]
    return [flag for flag in stage.split() if flag.startswith(("--runner=", "--job_endpoint=", "--environment_"))]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("localhost", 0))
        return s.getsockname()[1]


def wait_for(port: int, process: subprocess.Popen, log: Path) -> None:
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"service exited: {log.read_text()[-2000:]}")
        with socket.socket() as s:
            if s.connect_ex(("localhost", port)) == 0:
                return
        time.sleep(0.2)
    raise TimeoutError(f"nothing listens on {port}: {log.read_text()[-2000:]}")


@pytest.fixture(scope="module")
def portable_runner(tmp_path_factory: pytest.TempPathFactory) -> Iterator[list[str]]:
    """A job service and a worker pool, each in its own directory; the Beam flags that use them."""
    services = []
    job_port, pool_port = free_port(), free_port()
    commands = {
        "job-service": [sys.executable, "-m", "apache_beam.runners.portability.local_job_service_main", "--port", str(job_port)],
        "worker-pool": [sys.executable, "-m", "crisscross.pipelines.cli", "worker-pool", "--port", str(pool_port)],
    }
    try:
        for (name, command), port in zip(commands.items(), (job_port, pool_port), strict=True):
            where = tmp_path_factory.mktemp(name)
            log = where / "log.txt"
            with log.open("w") as handle:
                process = subprocess.Popen(command, cwd=where, stdout=handle, stderr=subprocess.STDOUT, start_new_session=True)
            services.append(process)
            wait_for(port, process, log)
        flags = " ".join(readme_portable_flags())  # the README's, on free ports
        yield flags.replace("localhost:8099", f"localhost:{job_port}").replace("localhost:8100", f"localhost:{pool_port}").split()
    finally:
        for process in services:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()


def project_copy(root: Path) -> Path:
    """A folder laid out like the project: the demo data and the params file."""
    shutil.copytree(PROJECT / "data" / "demo", root / "data" / "demo")
    shutil.copy(PROJECT / "params.yaml", root / "params.yaml")
    return root


def run_chain(project: Path, beam_flags: list[str]) -> None:
    for command in ROUND_ONE:
        done = subprocess.run(
            [sys.executable, "-m", "crisscross.pipelines.cli", *command.split(), "--params", "params.yaml", *beam_flags],
            cwd=project,
            capture_output=True,
            text=True,
            timeout=900,
        )
        assert done.returncode == 0, f"{command}: {done.stderr[-3000:]}"


def tree(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file() and not p.name.startswith(".")}


def test_the_readme_shows_this_setup() -> None:
    portable = [c for c in readme_commands() if is_portable(c)]
    assert portable[0].startswith("crisscross worker-pool --port 8100")
    assert readme_portable_flags() == [
        "--runner=PortableRunner",
        "--job_endpoint=localhost:8099",
        "--environment_type=EXTERNAL",
        "--environment_config=localhost:8100",
    ]
    assert "apache_beam.runners.portability.local_job_service_main --port 8099" in (PROJECT / "README.md").read_text()


@pytest.mark.xdist_group("e2e")
def test_round_one_on_the_portable_runner_writes_what_the_default_runner_writes(
    portable_runner: list[str], demo_repro: Path, tmp_path: Path
) -> None:
    """The default runner's files are those the session's ``demo_repro`` wrote: its ``dvc repro`` ran
    these same commands, in the same layout, on the in-process runner (checked here). In the e2e
    group, so it runs after that build, on the same worker."""
    repro_out = " ".join((demo_repro / "repro.out").read_text().split())
    for command in ROUND_ONE:
        assert f"> crisscross {command} --params params.yaml " in repro_out, command
    portable = project_copy(tmp_path / "portable")
    run_chain(portable, portable_runner)
    written = tree(portable / "build")
    assert len(written) > 40 and "rated/rated.parquet" in written and "items/report.json" in written
    outputs = {command.split("--out build/")[1] for command in ROUND_ONE}
    default = {name: data for name, data in tree(demo_repro / "main" / "build").items() if name.split("/")[0] in outputs}
    assert written == default
