"""The release as DVC ships it, offline: a maintainer builds, tags and pushes two versions to the
project's default local remote, and a consumer gets, verifies, diffs and pulls them."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest
from dvc.repo import Repo

from crisscross.formats.manifest import sums_text
from tests.shared_builds import DEMO_SALT, copy_built_project, project_env

PROJECT = Path(__file__).resolve().parents[2]
RELEASE = Path("releases") / "demo-simulated"
SALT = DEMO_SALT  # the salt demo_repro built 1.0.0-simulated under: the patch must name raters the same way
GIT_USER = ["-c", "user.email=t@t", "-c", "user.name=t"]


def run(args: list[str], cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(args, cwd=cwd, capture_output=True, text=True, check=False, env=env)


def ok(args: list[str], cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """``args`` run in ``cwd``, asserted to exit 0 (the output's tail in the message)."""
    done = run(args, cwd, env)
    assert done.returncode == 0, f"{' '.join(args)} exited {done.returncode}\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    return done


def version_of(release: Path) -> str:
    return json.loads((release / "release.json").read_text(encoding="utf-8"))["version"]


@pytest.mark.xdist_group("e2e")
def test_a_release_is_tagged_pushed_got_verified_diffed_and_pulled(shared_data: Path, demo_repro: Path, tmp_path: Path) -> None:
    """Maintainer, in a git copy of the project at ``work/main`` beside ``work/shared``:
    ``dvc repro`` builds 1.0.0-simulated (verify passes against the hash dvc.lock records), commit, tag, ``dvc push`` fills the
    default remote ``work/crisscross-dvc-remote``; a licence change in params.yaml reruns only the
    release stage and gives the patch 1.0.1-simulated (its CHANGELOG says patch), commit, tag, push.
    Consumer: ``dvc get --rev v1.0.0-simulated`` gives a release that verifies and diffs against
    1.0.1 as a patch, verifies anchored on the tag's ``dvc.lock`` (``dvc get`` too), which catches
    a CSV changed together with ``SHA256SUMS``, and fails verify (exit 2, one line naming the file) once a CSV is changed; a
    fresh clone at ``work/clone`` pulls 1.0.1-simulated from the same remote and verifies it.
    The first ``dvc repro`` (the git copy, committed, then the demo build) is the session's
    ``demo_repro``, copied here; the second repro runs the release stage alone."""
    root = tmp_path / "work"
    remote = root / "crisscross-dvc-remote"
    project = copy_built_project(demo_repro, root / "main")
    (root / "shared").symlink_to(shared_data.parent, target_is_directory=True)
    env = {**project_env(), "CRISSCROSS_RELEASE_SALT": SALT}  # no salt file in the home folder

    # maintainer: the first release
    assert "Running stage 'release':" in (demo_repro / "repro.out").read_text()
    assert version_of(project / RELEASE) == "1.0.0-simulated"
    built = ok(["crisscross", "release", "verify", str(RELEASE)], project, env)
    assert f"matches the hash dvc.lock records for {RELEASE}" in built.stdout, built.stdout  # the builder's anchor, found
    ok(["git", "add", "-A"], project, env)
    ok(["git", *GIT_USER, "commit", "-qm", "release 1.0.0-simulated"], project, env)
    assert "dvc.lock" in ok(["git", "ls-files"], project, env).stdout.split()
    ok(["git", "tag", "v1.0.0-simulated"], project, env)
    ok(["dvc", "push"], project, env)
    assert remote.is_dir() and any(p.is_file() for p in remote.rglob("*")), f"dvc push left {remote} empty or absent"

    # maintainer: a licence change is a patch
    params = project / "params.yaml"
    text = params.read_text(encoding="utf-8")
    assert text.count("\n  licence: CC BY 4.0\n") == 1
    params.write_text(text.replace("\n  licence: CC BY 4.0\n", "\n  licence: CC BY-SA 4.0\n"), encoding="utf-8")
    rerun = ok(["dvc", "repro"], project, env)
    ran = [line for line in rerun.stdout.splitlines() if line.startswith("Running stage")]
    assert ran == ["Running stage 'release':"], f"only the release stage should rerun:\n{rerun.stdout[-3000:]}"
    assert version_of(project / RELEASE) == "1.0.1-simulated"
    changelog = (project / RELEASE / "CHANGELOG.md").read_text(encoding="utf-8")
    assert "## 1.0.1-simulated" in changelog and "Against 1.0.0-simulated: **patch**" in changelog, changelog
    assert "## 1.0.0-simulated" in changelog, changelog  # the earlier entry stays below
    assert json.loads((project / RELEASE / "release.json").read_text(encoding="utf-8"))["bump"] == "patch"
    ok(["crisscross", "release", "verify", str(RELEASE)], project, env)
    ok(["git", "add", "-A"], project, env)
    ok(["git", *GIT_USER, "commit", "-qm", "release 1.0.1-simulated: CC BY-SA 4.0"], project, env)
    ok(["git", "tag", "v1.0.1-simulated"], project, env)
    ok(["dvc", "push"], project, env)

    # consumer: get the first release by its tag, verify it, diff it against the second
    consumer = tmp_path / "consumer"
    consumer.mkdir()
    got = consumer / "got"
    ok(["dvc", "get", str(project), str(RELEASE), "--rev", "v1.0.0-simulated", "-o", str(got)], consumer, env)
    checked = ok(["crisscross", "release", "verify", str(got)], consumer, env)
    assert "1.0.0-simulated OK" in checked.stdout and "no anchor: checksums only" in checked.stdout, checked.stdout
    # consumer: anchored on the dvc.lock of the same tag, the release's own checksums are not the last word
    ok(["dvc", "get", str(project), "dvc.lock", "--rev", "v1.0.0-simulated", "-o", "v1.0.0.lock"], consumer, env)
    anchored = ok(["crisscross", "release", "verify", str(got), "--lock", "v1.0.0.lock", "--anchored"], consumer, env)
    assert f"matches the hash v1.0.0.lock records for {RELEASE}" in anchored.stdout, anchored.stdout
    edited = consumer / "edited" / RELEASE.name  # as `dvc get` names it: found in the lock by its name
    shutil.copytree(got, edited)
    pairs = edited / "data" / "sts_test.csv"
    rows = pairs.read_text(encoding="utf-8").splitlines(keepends=True)
    pairs.write_text("".join([rows[0], rows[2], rows[1], *rows[3:]]), encoding="utf-8")  # two rows swapped: same count
    (edited / "SHA256SUMS").write_text(sums_text(edited), encoding="utf-8")
    assert "no anchor" in ok(["crisscross", "release", "verify", str(edited)], consumer, env).stdout  # checksums alone pass it
    caught = run(["crisscross", "release", "verify", str(edited), "--lock", "v1.0.0.lock"], consumer, env)
    assert caught.returncode == 2 and len(caught.stderr.strip().splitlines()) == 1, caught.stderr
    assert "its DVC directory hash is" in caught.stderr and f"v1.0.0.lock records for {RELEASE}" in caught.stderr, caught.stderr
    assert version_of(got) == "1.0.0-simulated"
    diff = ok(["crisscross", "release", "diff", str(got), str(project / RELEASE)], consumer, env)
    assert "## 1.0.1-simulated" in diff.stdout and "Against 1.0.0-simulated: **patch**" in diff.stdout, diff.stdout
    assert "| type | pairs before |" in diff.stdout and "Metadata changed: licence." in diff.stdout, diff.stdout

    # consumer: a changed data file fails verify, naming it
    tampered = sorted((got / "data").glob("*.csv"))[0]
    assert not tampered.is_symlink()
    with tampered.open("a", encoding="utf-8") as handle:
        handle.write("tampered,row\n")
    failed = run(["crisscross", "release", "verify", str(got)], consumer, env)
    assert failed.returncode == 2, f"exit {failed.returncode}\n{failed.stdout[-2000:]}\n{failed.stderr[-2000:]}"
    assert len(failed.stderr.strip().splitlines()) == 1, failed.stderr
    assert str(tampered) in failed.stderr, failed.stderr

    # consumer: a fresh clone beside the project reaches the same remote and pulls the second release
    clone = root / "clone"
    ok(["git", "clone", "-q", str(project), str(clone)], root, env)
    with Repo(str(clone)) as repo:
        assert Path(repo.config["remote"]["local"]["url"]).resolve() == remote.resolve()
    assert not (clone / RELEASE).exists()
    ok(["dvc", "pull", str(RELEASE)], clone, env)
    pulled = ok(["crisscross", "release", "verify", str(RELEASE)], clone, env)
    assert "1.0.1-simulated OK" in pulled.stdout, pulled.stdout
    assert version_of(clone / RELEASE) == "1.0.1-simulated"
