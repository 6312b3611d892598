"""``crisscross release verify`` on a small hand-made release: one line and exit 2 on every
malformed input (never a traceback, never a hang), and anchored outside the release on the
directory hash DVC recorded for it, so a file edited together with ``SHA256SUMS`` is caught."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
from collections.abc import Callable
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import yaml
from dvc_data.hashfile.hash_info import HashInfo
from dvc_data.hashfile.tree import Tree
from hypothesis import example, given, settings
from hypothesis import strategies as st

from crisscross.formats.dvclock import Anchor, dir_md5
from crisscross.formats.manifest import CROISSANT, INFO, SUMS, ReleaseCheckError, data_counts, sums_text, verify
from crisscross.pipelines.cli import main as cli

FUZZ = settings(max_examples=150, derandomize=True, database=None, deadline=None)


def make_release(root: Path) -> Path:
    """A release folder as the release stage lays one out: data files of each counted kind, a card,
    Croissant, release.json with the counts, SHA256SUMS over it all."""
    data = root / "data"
    data.mkdir(parents=True)
    (data / "pairs.csv").write_text("a,b,score\nx,y,1\nx,z,2\n", encoding="utf-8")
    pq.write_table(pa.table({"a": ["x", "x", "y"], "score": [1.0, 2.0, 3.0]}), data / "pairs.parquet")
    (data / "maps.json").write_text(json.dumps({"x": ["y"], "y": ["x"]}), encoding="utf-8")
    (root / "README.md").write_text("# a release\n", encoding="utf-8")
    (root / CROISSANT).write_text(json.dumps({"name": "t"}), encoding="utf-8")
    (root / INFO).write_text(json.dumps({"name": "t", "version": "1.0.0", "counts": data_counts(root)}), encoding="utf-8")
    (root / SUMS).write_text(sums_text(root), encoding="utf-8")
    return root


@pytest.fixture
def release(tmp_path: Path) -> Path:
    return make_release(tmp_path / "release")


def resummed(root: Path) -> None:
    """SHA256SUMS rewritten to match the folder: what someone who edits a file consistently does."""
    (root / SUMS).write_text(sums_text(root), encoding="utf-8")


def run_verify(args: list[str], capsys: pytest.CaptureFixture) -> tuple[int, str, str]:
    code = cli(["release", "verify", *args])
    out, err = capsys.readouterr()
    return code, out, err


def assert_one_line_exit_2(code: int, err: str, *expected: str) -> None:
    assert code == 2, err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err, err
    assert all(part in err for part in expected), err


def append_sums(line: str) -> Callable[[Path], None]:
    return lambda root: (root / SUMS).write_text((root / SUMS).read_text(encoding="utf-8") + line + "\n", encoding="utf-8")


def consistent(name: str, data: bytes) -> Callable[[Path], None]:
    """``name`` replaced by ``data`` with SHA256SUMS updated to match."""

    def edit(root: Path) -> None:
        (root / name).write_bytes(data)
        resummed(root)

    return edit


def replaced_by(name: str, make: Callable[[Path], None]) -> Callable[[Path], None]:
    def edit(root: Path) -> None:
        (root / name).unlink()
        make(root / name)

    return edit


HEX = "0" * 64
COUNTS = {"data/maps.json": 2, "data/pairs.csv": 2, "data/pairs.parquet": 3}
# mutation → what the one line must say
MALFORMED: dict[str, tuple[Callable[[Path], None], tuple[str, ...]]] = {
    "binary junk in SHA256SUMS": (lambda r: (r / SUMS).write_bytes((r / SUMS).read_bytes() + b"\xff\xfe\x00junk"), ("SHA256SUMS", "UTF-8")),
    "a line that is no checksum": (append_sums("hello world"), ("SHA256SUMS:7", "not a '<sha256>  <file>' line")),
    "bad hex": (append_sums(f"{'z' * 64}  data/pairs.csv"), ("SHA256SUMS:7",)),
    "a repeated name": (lambda r: append_sums((r / SUMS).read_text().splitlines()[0])(r), ("SHA256SUMS:7", "repeats")),
    "an absolute name": (append_sums(f"{HEX}  /etc/hostname"), ("SHA256SUMS:7", "/etc/hostname")),
    "a name climbing out": (append_sums(f"{HEX}  data/../../x"), ("SHA256SUMS:7",)),
    "a name with ./": (lambda r: (r / SUMS).write_text((r / SUMS).read_text().replace("  data/", "  ./data/")), ("SHA256SUMS:",)),
    "a listed file missing": (lambda r: (r / "data" / "pairs.csv").unlink(), ("data/pairs.csv", "listed in SHA256SUMS but missing")),
    "a file not listed": (lambda r: (r / "data" / "extra.csv").write_text("x\n"), ("data/extra.csv", "not listed in SHA256SUMS")),
    "a folder where a file is listed": (replaced_by("data/pairs.csv", Path.mkdir), ("data/pairs.csv", "is a directory")),
    "a FIFO where a file is listed": (replaced_by("data/pairs.csv", os.mkfifo), ("data/pairs.csv", "is a named pipe (FIFO)")),
    "a FIFO named like a data file": (lambda r: os.mkfifo(r / "data" / "more.csv"), ("data/more.csv", "a named pipe (FIFO)")),
    "a symlink leaving the folder": (
        replaced_by("data/pairs.csv", lambda p: p.symlink_to("/dev/zero")),
        ("data/pairs.csv", "a symlink to /dev/zero, leaving the release"),
    ),
    "a symlinked folder leaving it": (lambda r: (r / "data" / "up").symlink_to("/"), ("data/up", "leaving the release")),
    "SHA256SUMS a folder": (replaced_by(SUMS, Path.mkdir), ("SHA256SUMS", "not a regular file")),
    "SHA256SUMS a symlink": (replaced_by(SUMS, lambda p: p.symlink_to(p.parent / "README.md")), ("SHA256SUMS", "a symlink")),
    "release.json not JSON": (consistent(INFO, b"{"), ("release.json", "not a JSON document")),
    "release.json a list": (consistent(INFO, b"[]"), ("release.json", "not a JSON object")),
    "release.json nested past the parser's depth": (consistent(INFO, b"[" * 100_000), ("release.json", "not a JSON document")),
    "release.json counts not a map": (
        consistent(INFO, json.dumps({"name": "t", "version": "1", "counts": "x"}).encode()),
        ("release.json", "'counts'"),
    ),
    "croissant.json not JSON": (consistent(CROISSANT, b"{"), ("croissant.json", "not a JSON document")),
    "a Parquet file that is not Parquet": (consistent("data/pairs.parquet", b"junk"), ("data/pairs.parquet", "rows cannot be counted")),
    "a CSV file that is not UTF-8": (consistent("data/pairs.csv", b"a,b\n\xff\xfe,1\n"), ("data/pairs.csv", "rows cannot be counted")),
    "a JSON data file that is not JSON": (consistent("data/maps.json", b"{"), ("data/maps.json", "rows cannot be counted")),
    "a name with a line break": (lambda r: (r / "data" / "a\nb.csv").write_text("x\n"), ("'", "a\\nb.csv", "not listed")),
    "no release.json": (lambda r: [(r / INFO).unlink(), resummed(r)], ("is not a release folder", "release.json")),
    "not a release at all": (lambda r: shutil.rmtree(r) or r.mkdir(), ("is not a release folder", "SHA256SUMS")),
}


@pytest.mark.timeout(60)
@pytest.mark.parametrize("case", sorted(MALFORMED))
def test_every_malformed_input_is_one_line_and_exit_2(case: str, release: Path, capsys: pytest.CaptureFixture) -> None:
    mutate, expected = MALFORMED[case]
    mutate(release)
    code, out, err = run_verify([str(release)], capsys)
    assert_one_line_exit_2(code, err, *expected)
    assert out == ""


def test_every_problem_is_named_in_the_one_line(release: Path, capsys: pytest.CaptureFixture) -> None:
    (release / "data" / "pairs.csv").write_text("changed\n")
    (release / "data" / "maps.json").unlink()
    (release / "stray.txt").write_text("x")
    code, _, err = run_verify([str(release)], capsys)
    assert_one_line_exit_2(
        code, err, "3 problem(s)", "data/pairs.csv: sha256 does not match", "data/maps.json: listed", "stray.txt: not listed"
    )


def test_a_pristine_release_verifies_and_says_it_is_not_anchored(release: Path, capsys: pytest.CaptureFixture) -> None:
    code, out, err = run_verify([str(release)], capsys)
    assert (code, err) == (0, "")
    assert "t 1.0.0 OK — 6 files" in out and "7 rows" in out and "no anchor: checksums only" in out, out
    code, _, err = run_verify([str(release), "--anchored"], capsys)
    assert_one_line_exit_2(code, err, "--anchored", "--lock or --md5")


# --------------------------------------------------------------------------- DVC's directory hash


def dvc_data_digest(md5s: dict[str, str]) -> str:
    tree = Tree()
    for name, md5 in md5s.items():
        tree.add(tuple(name.split("/")), None, HashInfo("md5", md5))
    tree.digest()
    return tree.hash_info.value


NAME = st.text(st.characters(blacklist_categories=("Cs",), blacklist_characters="/\x00"), min_size=1, max_size=6)


@FUZZ
@given(
    st.dictionaries(st.lists(NAME, min_size=1, max_size=3).map("/".join), st.text("0123456789abcdef", min_size=32, max_size=32), max_size=8)
)
def test_dir_md5_is_the_digest_dvc_data_computes(md5s: dict[str, str]) -> None:
    assert dir_md5(md5s) == dvc_data_digest(md5s)


def dvc(args: list[str], cwd: Path) -> None:
    env = {**os.environ, "DVC_NO_ANALYTICS": "1"}
    done = subprocess.run(["dvc", *args], cwd=cwd, capture_output=True, text=True, check=False, env=env)
    assert done.returncode == 0, done.stderr


@pytest.fixture(scope="module")
def dvc_repo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A DVC repository whose root dvc.lock records releases/demo and whose workflows/w/dvc.lock
    records ../../releases/w, their hashes computed by DVC itself (``dvc commit``); tests copy it
    to change it."""
    repo = tmp_path_factory.mktemp("dvc") / "repo"
    make_release(repo / "releases" / "demo")
    make_release(repo / "releases" / "w")
    (repo / "releases" / "w" / "README.md").write_text("# another\n")
    resummed(repo / "releases" / "w")
    (repo / "workflows" / "w").mkdir(parents=True)
    dvc(["init", "--no-scm", "-q"], repo)
    for where, out in ((repo, "releases/demo"), (repo / "workflows" / "w", "../../releases/w")):
        dvc(["stage", "add", "-q", "-n", "release", "-o", out, "true"], where)
        dvc(["commit", "-q", "-f", "release"], where)
    return repo


def test_the_builder_verifies_against_the_hash_dvc_lock_records(dvc_repo: Path, capsys: pytest.CaptureFixture) -> None:
    for folder, lock in (("releases/demo", "dvc.lock"), ("releases/w", "workflows/w/dvc.lock")):
        recorded = load_lock(dvc_repo / lock)["stages"]["release"]["outs"][0]["md5"]
        assert verify(dvc_repo / folder)["md5"] == recorded
        code, out, err = run_verify([str(dvc_repo / folder)], capsys)
        assert (code, err) == (0, ""), err
        assert f"matches the hash {os.path.relpath(dvc_repo / lock)} records for" in out and recorded in out, out


def load_lock(path: Path) -> dict:
    return yaml.safe_load(path.read_text())


def test_a_consistent_edit_passes_the_checksums_but_not_the_anchor(dvc_repo: Path, tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    repo = tmp_path / "repo"
    shutil.copytree(dvc_repo, repo, symlinks=True)
    release = repo / "releases" / "demo"
    recorded = load_lock(repo / "dvc.lock")["stages"]["release"]["outs"][0]["md5"]
    (release / "data" / "pairs.csv").write_text("a,b,score\nx,y,5\nx,z,2\n")  # same rows, a score changed
    resummed(release)
    consumer = tmp_path / "consumer" / "demo"
    shutil.copytree(release, consumer)
    code, out, _ = run_verify([str(consumer)], capsys)
    assert code == 0 and "no anchor: checksums only" in out  # what SHA256SUMS alone can say
    code, out, _ = run_verify([str(release)], capsys)  # in the repository the lock is found and the difference said
    assert code == 0 and f"but its DVC directory hash is {verify(release)['md5']}, not {recorded}" in out and "--anchored" in out
    code, _, err = run_verify([str(release), "--anchored"], capsys)
    assert_one_line_exit_2(code, err, "its DVC directory hash is", f"not {recorded}", "dvc.lock records for releases/demo")
    # a consumer anchors on the dvc.lock of the tag (found by the folder's name) or on the hash itself
    lock_copy = tmp_path / "tag.lock"
    shutil.copy(repo / "dvc.lock", lock_copy)
    for anchor in (["--lock", str(lock_copy)], ["--md5", recorded], ["--md5", recorded.removesuffix(".dir")]):
        code, _, err = run_verify([str(consumer), *anchor], capsys)
        assert_one_line_exit_2(code, err, "its DVC directory hash is", f"not {recorded}")
    with pytest.raises(ReleaseCheckError, match="DVC directory hash"):
        verify(consumer, Anchor({"the test's hash": recorded}, "the test"))


def test_a_consumer_copy_verifies_against_the_lock_of_its_tag(dvc_repo: Path, tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    """Found in the lock by the folder's name, or, renamed (``dvc get -o got``), among its directory outputs."""
    lock = dvc_repo / "workflows" / "w" / "dvc.lock"
    for name in ("w", "got"):
        got = tmp_path / name
        shutil.copytree(dvc_repo / "releases" / "w", got)
        code, out, err = run_verify([str(got), "--lock", str(lock), "--anchored"], capsys)
        assert (code, err) == (0, ""), err
        assert f"matches the hash {lock} records for ../../releases/w" in out, out
    (got / "README.md").write_text("# changed\n")
    resummed(got)
    code, _, err = run_verify([str(got), "--lock", str(lock)], capsys)
    assert_one_line_exit_2(code, err, "its DVC directory hash is", f"{lock} records for ../../releases/w")


BAD_ANCHORS: dict[str, tuple[list[str], tuple[str, ...]]] = {
    "both --lock and --md5": (["--lock", "dvc.lock", "--md5", "0" * 32], ("not both",)),
    "--md5 not a hash": (["--md5", "xyz"], ("--md5 'xyz'",)),
    "--lock missing": (["--lock", "absent.lock"], ("absent.lock", "cannot be read")),
    "--lock not YAML": (["--lock", "junk.lock"], ("junk.lock", "cannot be read as a dvc.lock")),
    "--lock not a dvc.lock": (["--lock", "list.lock"], ("list.lock", "not a dvc.lock")),
    "--lock a folder": (["--lock", "releases"], ("releases", "cannot be read")),
    "--lock a FIFO": (["--lock", "fifo.lock"], ("fifo.lock", "named pipe")),  # read, it would wait for a writer forever
    "--lock without a directory output": (["--lock", "other.lock"], ("other.lock", "records no directory output")),
    "--lock with a DVC 2 hash": (["--lock", "legacy.lock"], ("legacy.lock", "no DVC 3 directory hash")),
}


@pytest.mark.parametrize("case", sorted(BAD_ANCHORS))
def test_a_bad_anchor_is_one_line(
    case: str, dvc_repo: Path, tmp_path: Path, capsys: pytest.CaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    Path("releases").mkdir()
    Path("junk.lock").write_text("stages: [unclosed\n")
    Path("list.lock").write_text("- 1\n")
    Path("other.lock").write_text("schema: '2.0'\nstages:\n  s:\n    outs:\n    - path: elsewhere\n      hash: md5\n      md5: x\n")
    os.mkfifo("fifo.lock")
    Path("legacy.lock").write_text(f"stages:\n  s:\n    outs:\n    - path: demo\n      md5: {'0' * 32}.dir\n")
    args, expected = BAD_ANCHORS[case]
    code, _, err = run_verify([str(dvc_repo / "releases" / "demo"), *args], capsys)
    assert_one_line_exit_2(code, err, *expected)


# --------------------------------------------------------------------------- mutated SHA256SUMS and release.json


def verify_outcome(root: Path) -> str:
    """``ok``, or the one-line error; any other exception fails the property with the input shown."""
    try:
        verify(root)
    except ReleaseCheckError as error:
        message = str(error)
        assert len(message.splitlines()) == 1 and str(root) in message, message
        return message
    return "ok"


@pytest.fixture(scope="module")
def pristine(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_release(tmp_path_factory.mktemp("pristine") / "release")


def mutated(pristine: Path, name: str, data: bytes, *, resum: bool) -> str:
    with tempfile.TemporaryDirectory() as scratch:
        root = Path(scratch) / "release"
        shutil.copytree(pristine, root)
        (root / name).write_bytes(data)
        if resum:
            resummed(root)
        return verify_outcome(root)


def sums_lines(pristine: Path) -> list[str]:
    return (pristine / SUMS).read_text(encoding="utf-8").splitlines()


TRICKY_NAMES = ["/etc/passwd", "../x", "data/../x", "./data/pairs.csv", "data//pairs.csv", "data/", ".", "", "data\\pairs.csv", "a\x00b"]
SUM_LINE = st.one_of(
    st.text(max_size=80),
    st.builds(
        "{}{}{}".format,
        st.text("0123456789abcdefABCDEFg", min_size=62, max_size=66),
        st.sampled_from(["  ", " *", " ", "\t"]),
        st.one_of(st.sampled_from(TRICKY_NAMES + ["data/pairs.csv", INFO, SUMS]), st.text(max_size=20)),
    ),
)


@FUZZ
@given(data=st.data())
def test_mutated_sha256sums_is_ok_or_one_line(pristine: Path, data: st.DataObject) -> None:
    original = sums_lines(pristine)
    lines = data.draw(st.one_of(st.permutations(original), st.lists(st.one_of(st.sampled_from(original), SUM_LINE), max_size=10)))
    ending = data.draw(st.sampled_from(["\n", "\r\n", "\r", ""]))
    raw = data.draw(st.one_of(st.just(ending.join(lines).encode("utf-8", "surrogatepass")), st.binary(max_size=300)))
    outcome = mutated(pristine, SUMS, raw, resum=False)
    # only the original lines, each once, in any order, check out
    assert outcome != "ok" or sorted(raw.decode().splitlines()) == sorted(original), raw


JSON_VALUE = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=10),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=12,
)
INFO_DOCUMENT = st.fixed_dictionaries(
    {},
    optional={"name": JSON_VALUE | st.just("t"), "version": JSON_VALUE | st.just("1"), "counts": JSON_VALUE | st.just(COUNTS)},
)


def valid_info(data: bytes) -> bool:
    """A release.json verify accepts: a JSON object with a text name and version and the folder's counts."""
    try:
        info = json.loads(data)
    except (ValueError, RecursionError):
        return False
    return (
        isinstance(info, dict)
        and isinstance(info.get("name"), str)
        and isinstance(info.get("version"), str)
        and info.get("counts") == COUNTS
    )


@FUZZ
@example(document={"name": "t", "version": "1", "counts": COUNTS}, raw=None)
@given(document=st.one_of(JSON_VALUE, INFO_DOCUMENT), raw=st.one_of(st.none(), st.binary(max_size=200)))
def test_mutated_release_json_is_ok_or_one_line(pristine: Path, document: object, raw: bytes | None) -> None:
    data = raw if raw is not None else json.dumps(document).encode()
    outcome = mutated(pristine, INFO, data, resum=True)  # the checksums match: the document itself is what is read
    assert (outcome == "ok") == valid_info(data), outcome
