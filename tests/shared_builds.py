"""Builds that many tests read, made once per test run, and the git copy of the project the DVC tests start from.

Under pytest-xdist every worker is a session of its own, so a session fixture builds once per worker.
:func:`shared_build` makes the build once per run instead: the first worker to ask builds it under a
file lock in the run's shared temporary folder (the parent of every worker's basetemp), in a folder
named after the build and a digest of its inputs; the others wait for the lock and reuse the result
("Making session-scoped fixtures execute only once" in the pytest-xdist docs). Without xdist it
builds in the session's own temporary folder, as a plain session fixture would. A build that fails
leaves no finished marker, so the next asker builds again (and fails with its own traceback).
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
from collections.abc import Callable, Iterable
from pathlib import Path

import pytest
from filelock import FileLock

DONE = ".built"


def digest(inputs: Iterable[str | bytes | Path]) -> str:
    """A short digest of what a build reads: strings and bytes as given, a file by its bytes, a
    folder by its files' names and sizes."""
    h = hashlib.sha256()
    for part in inputs:
        if isinstance(part, Path):
            if part.is_dir():
                for file in sorted(p for p in part.rglob("*") if p.is_file()):
                    h.update(f"{file.relative_to(part)}:{file.stat().st_size}\n".encode())
            elif part.is_file():
                h.update(part.read_bytes())
            else:
                h.update(f"absent:{part}".encode())
        else:
            h.update(part if isinstance(part, bytes) else part.encode("utf-8"))
        h.update(b"\0")
    return h.hexdigest()[:12]


def shared_build(factory: pytest.TempPathFactory, name: str, inputs: Iterable[str | bytes | Path], build: Callable[[Path], None]) -> Path:
    """The folder ``build(folder)`` filled, made once per test run (see the module docstring).
    Callers must only read it: copy it first to change anything."""
    key = f"{name}-{digest(inputs)}"
    if os.environ.get("PYTEST_XDIST_WORKER") is None:
        folder = factory.mktemp(key)
        build(folder)
        return folder
    shared = factory.getbasetemp().parent / "shared-builds"
    shared.mkdir(exist_ok=True)
    folder = shared / key
    with FileLock(str(shared / f"{key}.lock")):
        if not (folder / DONE).is_file():
            shutil.rmtree(folder, ignore_errors=True)  # what a failed attempt left
            folder.mkdir()
            build(folder)
            (folder / DONE).touch()
    return folder


def copy_project(source: Path, target: Path, leave_out: tuple[str, ...] = ()) -> None:
    """The project's files as a clone plus the work in progress would have them: tracked and untracked
    but not ignored files, without those deleted in the work tree (as git would), nor those whose
    path starts with one of ``leave_out``."""
    listed = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"], cwd=source, capture_output=True, text=True, check=True
    ).stdout.split("\0")
    for name in filter(None, listed):
        if (source / name).is_file() and not name.startswith(leave_out):
            (target / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source / name, target / name)


def git_copy(source: Path, target: Path, env: dict[str, str], leave_out: tuple[str, ...] = ()) -> Path:
    """:func:`copy_project` at ``target``, made a git work tree with everything committed: the
    project as a new user's clone has it, for the tests that run ``dvc`` in it."""
    copy_project(source, target, leave_out)
    for command in (
        ["git", "init", "-q"],
        ["git", "add", "-A"],
        ["git", "-c", "user.email=t@t", "-c", "user.name=t", "commit", "-qm", "x"],
    ):
        subprocess.run(command, cwd=target, check=True, env=env, capture_output=True)
    return target


DEMO_SALT = "dvc-release-test-salt-0123456789"  # the pseudonym key of the demo_repro build (no salt file in the home folder)


def project_env() -> dict[str, str]:
    """The environment the DVC tests run commands in: offline DVC, this interpreter's commands first
    on PATH, and the salt from ``$CRISSCROSS_RELEASE_SALT`` rather than a file in the home folder."""
    return {
        **os.environ,
        "DVC_NO_ANALYTICS": "1",
        "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}",
        "CRISSCROSS_RELEASE_SALT": DEMO_SALT,
    }


def copy_built_project(built: Path, target: Path) -> Path:
    """A copy of ``demo_repro``'s project (work tree, ``.git``, ``.dvc`` cache, build) at ``target``, to work in."""
    shutil.copytree(built / "main", target, symlinks=True)
    return target


def new_home(home: Path) -> dict[str, str]:
    """``{"HOME": home}`` for a command that writes to the home folder as a new user's would (the
    release's salt file, ``~/.config/crisscross/release-salt``), so it neither reads nor writes the
    real one and two such tests never race to create it; git gets a name to commit under."""
    home.mkdir(parents=True, exist_ok=True)
    (home / ".gitconfig").write_text("[user]\n\tname = t\n\temail = t@t\n", encoding="utf-8")
    return {"HOME": str(home)}
