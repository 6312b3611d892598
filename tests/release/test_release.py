"""The release stage end to end on the real CxC test release: replay → aggregate → release.

The CxC test files are replayed through ``annotate`` (replay) and ``aggregate``, released, and
the release's CSVs compared with the published ones; a simulated copy of the same round checks
the SIMULATED rules, versions, diffs, checksums, determinism, pseudonyms and the formula guard.
"""

from __future__ import annotations

import csv
import hashlib
import hmac
import json
import shutil
import time
from collections.abc import Callable
from pathlib import Path

import mlcroissant as mlc
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import crisscross
from crisscross.core import io
from crisscross.core.errors import ParamError
from crisscross.formats.manifest import ReleaseCheckError, verify
from crisscross.pipelines import aggregate, annotate, ingest
from crisscross.pipelines import release as command
from crisscross.pipelines.cli import main as cli
from crisscross.release.croissant import validate
from crisscross.release.pseudonyms import PUBLIC_SALT, Salt, pseudonym
from crisscross.scoring.truths import GROUND_TRUTHS

SALT = "test-salt-0123456789abcdef"
CXC_COUNTS = {"sts_test.csv": 44_045, "sis_test.csv": 46_719, "sits_test.csv": 44_833}


@pytest.fixture(autouse=True)
def salt(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CRISSCROSS_RELEASE_SALT", SALT)
    monkeypatch.setenv("CRISSCROSS_TEST_NO_SALT_FILE", "1")


@pytest.fixture(scope="module")
def replayed(shared_data: Path, cxc_test_replay: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Items of the Karpathy test split and the CxC test release replayed through annotate and aggregate
    (the run's ``cxc_test_replay``, copied: its params are this module's ``annotate`` section)."""
    root = tmp_path_factory.mktemp("replayed")
    (root / "params.json").write_text(
        json.dumps(
            {
                "ingest": {"reader": "coco-karpathy-jsonl", "reader_options": {"split": "test"}},
                "annotate": {"source": "replay", "replay_split": "test"},
                "release": {"cxc_rows": "source-row"},
            }
        )
    )
    p = ["--params", str(root / "params.json")]
    ingest.main(
        [
            "--in",
            str(shared_data / "coco-karpathy" / "test5k.jsonl"),
            "--images",
            str(shared_data / "coco-images" / "karpathy-test"),
            "--out",
            str(root / "items"),
            *p,
        ]
    )
    for stage in ("tasks", "judgments", "rated"):
        shutil.copytree(cxc_test_replay / stage, root / stage)
    return root


def release_args(root: Path, out: Path, *extra: str, rated: Path | None = None, params: Path | None = None) -> list[str]:
    return [
        "--rated",
        str(rated or root / "rated"),
        "--judgments",
        str(root / "judgments"),
        "--items",
        str(root / "items"),
        "--out",
        str(out),
        "--date",
        "2026-11-23",
        "--params",
        str(params or root / "params.json"),
        *extra,
    ]


@pytest.fixture(scope="module")
def cxc_release(replayed: Path, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, float]:
    out = tmp_path_factory.mktemp("releases") / "cxc-test"
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("CRISSCROSS_RELEASE_SALT", SALT)
        started = time.perf_counter()
        command.main(release_args(replayed, out, "--karpathy", str(karpathy_json(replayed, out.parent))))
        seconds = time.perf_counter() - started
    return out, seconds


def karpathy_json(root: Path, where: Path) -> Path:
    """A dataset_coco.json-shaped file of the Karpathy test split (from the ingested items)."""
    from crisscross.release.merge import karpathy_document

    images = pd.read_parquet(root / "items" / "images.parquet")
    captions = pd.read_parquet(root / "items" / "captions.parquet")
    document = karpathy_document(images, captions)
    document["images"].append({"filename": "COCO_train2014_000000000009.jpg", "split": "train", "sentids": [1]})  # untouched: not val/test
    path = where / "dataset_coco.json"
    path.write_text(json.dumps(document))
    return path


def published_rows(path: Path) -> list[tuple[str, str, float, str]]:
    """A CxC file's rows, symmetric pairs (STS, SIS) with their ids sorted, scores at the published precision."""
    frame = pd.read_csv(path, dtype=str)
    a, b = frame.columns[:2]
    symmetric = not path.name.startswith("sits")
    rows = []
    for x, y, score, method in frame[[a, b, "agg_score", "sampling_method"]].itertuples(index=False):
        if symmetric and y < x:
            x, y = y, x
        rows.append((x, y, round(float(score), 2), method))
    return sorted(rows)


# --------------------------------------------------------------------------- fidelity on real data


def test_replayed_cxc_release_gives_the_published_files_back(cxc_release: tuple[Path, float], shared_data: Path) -> None:
    out, _ = cxc_release
    for name, rows in CXC_COUNTS.items():
        ours = published_rows(out / "data" / name)
        assert len(ours) == rows
        assert ours == published_rows(shared_data / "cxc" / name), name
    info = json.loads((out / "release.json").read_text())
    assert info["version"] == "1.0.0" and not info["simulated"]
    assert info["counts"]["data/sis_test.csv"] == 46_719 and info["summary"]["SIS"]["pairs"] == 43_856
    assert info["summary"]["SIS"]["positives"] == 19_990


def test_karpathy_merge_follows_cxc_script(cxc_release: tuple[Path, float], shared_data: Path) -> None:
    out, _ = cxc_release
    merged = json.loads((out / "data" / "dataset_coco_cxc.json").read_text())
    examples = {e["filename"]: e for e in merged["images"]}
    assert "cxc_scores" not in examples["COCO_train2014_000000000009.jpg"]
    # independent expectation from the published SITS file: an image gets its rows, each caption its non-original rows
    rows = list(csv.reader((shared_data / "cxc" / "sits_test.csv").open()))[1:]
    by_image = {e["filename"]: set(e["sentids"]) for e in merged["images"] if e["split"] == "test"}
    owner = {s: f for f, ids in by_image.items() for s in ids}
    expected = sum(1 for _, image, _, _ in rows if image in by_image) + sum(
        1 for caption, _, _, method in rows if method != "c2i_original" and int(caption.rsplit(":", 1)[1]) in owner
    )
    assert sum(len(e.get("cxc_scores", [])) for e in merged["images"]) == expected > 44_833
    first = rows[0]
    entry = [int(first[0].rsplit(":", 1)[1]), first[2], first[3]]
    assert entry in examples[first[1]]["cxc_scores"] and isinstance(entry[1], str)


def plain_read_seconds(out: Path) -> float:
    """pandas reading the files the four record sets come from (the three CxC CSVs, the STS table):
    the reference beside mlcroissant's time."""
    started = time.perf_counter()
    for name in ("sts_test", "sis_test", "sits_test"):
        pd.read_csv(out / "data" / f"{name}.csv")
    pd.read_parquet(out / "data" / "sts_test.parquet")
    return time.perf_counter() - started


def write_tables_seconds(out: Path, where: Path) -> float:
    """pyarrow reading and writing again every Parquet table of the release: the floor of any
    release writer, the reference beside the release build's time."""
    started = time.perf_counter()
    for table in sorted((out / "data").glob("*.parquet")):
        pq.write_table(pq.read_table(table), where / table.name)
    return time.perf_counter() - started


def test_croissant_validates_and_checks_sha256(
    cxc_release: tuple[Path, float], tmp_path: Path, record_property: Callable[[str, object], None]
) -> None:
    out, _ = cxc_release
    assert set(validate(out / "croissant.json", record_limit=1)) >= {"pairs", "judgments", "raters"}  # every record set reads
    started = time.perf_counter()
    dataset = mlc.Dataset(jsonld=out / "croissant.json")
    # Read in full: the three CxC files and one Parquet table at CxC's size (the demo release's
    # tests read every Parquet record set row for row, tests/release/test_loaders.py).
    counts = {s: sum(1 for _ in dataset.records(s)) for s in ("sts_test", "sts_test_csv", "sis_test_csv", "sits_test_csv")}
    seconds = time.perf_counter() - started
    assert counts["sts_test_csv"] == 44_045 and counts["sis_test_csv"] == 46_719 and counts["sits_test_csv"] == 44_833  # CxC's rows
    info = json.loads((out / "release.json").read_text())
    assert counts["sts_test"] == info["summary"]["STS"]["pairs"]  # the Parquet table: its pairs
    metadata = json.loads((out / "croissant.json").read_text())
    assert metadata["rai:dataAnnotationPlatform"] and metadata["rai:annotationsPerItem"] and metadata["rai:dataAnnotationProtocol"]
    copy = tmp_path / "copy"
    shutil.copytree(out, copy)
    pq.write_table(pq.read_table(copy / "data" / "sts_test.parquet").slice(1), copy / "data" / "sts_test.parquet")
    with pytest.raises(mlc.GenerationError, match=r"Download\(data/sts_test.parquet\)") as failure:
        list(mlc.Dataset(jsonld=copy / "croissant.json").records("sts_test"))
    assert "hash of downloaded file" in str(failure.value.__cause__).lower()
    plain = plain_read_seconds(out)
    record_property(
        "figure",
        f"mlcroissant, four CxC record sets read in full (CSV and Parquet): {seconds:.1f} s, {seconds / plain:.0f}x pandas reading their files ({plain:.2f} s)",
    )


def test_release_loads_and_evaluates_as_a_truth(
    cxc_release: tuple[Path, float], tmp_path: Path, record_property: Callable[[str, object], None]
) -> None:
    out, seconds = cxc_release
    release = crisscross.load_release(out)
    assert release.tables["sts_test"].num_rows == 44_045 and len(release.frames["pairs"]) == 44_045 + 43_856 + 44_833
    assert {"judgments", "raters", "qc_exclusions", "pairs"} <= set(release.tables)
    truth, report = GROUND_TRUTHS.create(f"release:{out}")
    assert report["rated_items"] == {"STS": 44_045, "SIS": 43_856, "SITS": 44_833}
    assert len(truth.i2i) == 2 * 19_990
    floor = write_tables_seconds(out, tmp_path)
    record_property(
        "figure",
        f"release build on the CxC test split: {seconds:.1f} s, {seconds / floor:.1f}x pyarrow rewriting its Parquet tables ({floor:.2f} s)",
    )


def test_verify_passes_and_a_tampered_file_fails_naming_it(
    cxc_release: tuple[Path, float], tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    out, _ = cxc_release
    assert cli(["release", "verify", str(out)]) == 0
    copy = tmp_path / "copy"
    shutil.copytree(out, copy)
    with (copy / "data" / "sis_test.csv").open("a") as handle:
        handle.write("COCO_val2014_000000000001.jpg,COCO_val2014_000000000002.jpg,5,i2i_csim\n")
    assert cli(["release", "verify", str(copy)]) == 2
    error = capsys.readouterr().err.strip()
    assert error.count("\n") == 0 and "sis_test.csv" in error and "sha256" in error
    shutil.rmtree(copy)
    shutil.copytree(out, copy)
    (copy / "extra.txt").write_text("x")
    with pytest.raises(ReleaseCheckError, match="extra.txt"):
        verify(copy)


# --------------------------------------------------------------------------- simulated builds, versions, diffs


@pytest.fixture(scope="module")
def simulated(replayed: Path, shared_data: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The replayed round on a slice of CxC's test items, marked simulated (as the demo's panel marks
    it), with a formula in a worker id. The slice (300 items per task type, and 300 of the SIS items
    a second rater rated), and the items to the images these pairs name (with all their captions), keep
    every kind of row the release handles while a build takes a second; the whole replayed round is
    released in ``cxc_release``."""
    root = tmp_path_factory.mktemp("simulated")
    tasks = pq.read_table(replayed / "tasks" / "tasks.parquet")
    kept = pq.read_table(replayed / "rated" / "judgments_kept.parquet", columns=["item_id", "worker"]).to_pandas()
    frame = tasks.select(["item_id", "task_type"]).to_pandas()
    frame["pooled"] = frame["item_id"].isin(set(kept.loc[kept["worker"].eq("cxc-release#2"), "item_id"]))
    picked = frame.sort_values("item_id").groupby(["task_type", "pooled"]).head(300).index
    tasks = tasks.take(sorted(picked))
    io.write_parquet(str(root / "tasks" / "tasks.parquet"), tasks)
    named = set(tasks.column("id_a").to_pylist()) | set(tasks.column("id_b").to_pylist())
    captions = pq.read_table(replayed / "items" / "captions.parquet")
    images = pq.read_table(replayed / "items" / "images.parquet")
    shown = {
        i for c, i in zip(captions.column("caption_id").to_pylist(), captions.column("image_id").to_pylist(), strict=True) if c in named
    }
    shown |= named & set(images.column("image_id").to_pylist())
    for name, table in (("images", images), ("captions", captions)):
        keep = [i in shown for i in table.column("image_id").to_pylist()]
        io.write_parquet(str(root / "items" / f"{name}.parquet"), table.filter(pa.array(keep)))
    p = ["--params", str(replayed / "params.json")]
    annotate.main(["--in", str(root / "tasks"), "--judgments", f"cxc:{shared_data / 'cxc'}", "--out", str(root / "judgments"), *p])
    aggregate.main(["--in", str(root / "judgments"), "--tasks", str(root / "tasks"), "--out", str(root / "rated"), *p])
    for path in [root / "rated" / "rated.parquet", root / "rated" / "judgments_kept.parquet", root / "judgments" / "judgments.parquet"]:
        frame = pq.read_table(path).to_pandas()
        frame["simulated"] = True
        if "worker" in frame:
            frame["worker"] = frame["worker"].replace({"cxc-release#2": '=HYPERLINK("http://x")'})
        io.write_parquet(str(path), __import__("pyarrow").Table.from_pandas(frame, preserve_index=False))
    raters = pd.read_csv(root / "rated" / "raters.csv", keep_default_na=False)
    raters["worker"] = raters["worker"].replace({"cxc-release#2": '=HYPERLINK("http://x")'})
    io.write_bytes(str(root / "rated" / "raters.csv"), io.frame_csv_bytes(raters))
    (root / "params.json").write_text(json.dumps({"release": {"title": "Demo <script>alert(1)</script> [x](http://e)"}}))
    return root


def sha_tree(folder: Path) -> dict[str, str]:
    return {p.relative_to(folder).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(folder.rglob("*")) if p.is_file()}


@pytest.fixture(scope="module")
def simulated_release(simulated: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The first release of ``simulated`` (``--simulated``, no previous one), built once for the tests that
    start from it: they only read it, or work on a copy (:func:`copy_release`)."""
    out = tmp_path_factory.mktemp("first") / "demo-simulated"
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("CRISSCROSS_RELEASE_SALT", SALT)
        command.main(release_args(simulated, out, "--simulated"))
    return out


def copy_release(release: Path, out: Path) -> Path:
    shutil.copytree(release, out)
    return out


def test_simulated_build_needs_the_flag_and_is_labelled(simulated: Path, tmp_path: Path) -> None:
    with pytest.raises(ParamError, match="SIMULATED"):
        command.main(release_args(simulated, tmp_path / "demo-simulated"))
    with pytest.raises(ParamError, match="named so"):
        command.main(release_args(simulated, tmp_path / "demo", "--simulated"))
    with pytest.raises(ParamError, match="plain version"):
        command.main(release_args(simulated, tmp_path / "demo-simulated", "--simulated", "--version", "1.0.0-rc1"))
    report = command.main(release_args(simulated, tmp_path / "demo-simulated", "--simulated", "--version", "1.0.0"))
    assert report["version"] == "1.0.0-simulated" and report["name"].endswith("simulated")
    card = (tmp_path / "demo-simulated" / "README.md").read_text()
    assert card.split("\n---\n", 1)[1].splitlines()[2].startswith("> **SIMULATED**")  # below the YAML header
    assert "<script>" not in card and "\\<script\\>" in card and "\\[x\\]" in card


def test_two_builds_are_byte_identical_and_simulated_raters_are_named_under_the_public_key(
    simulated: Path, simulated_release: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Simulated raters are not people: their pseudonyms use the public key, so another machine (with
    another secret salt) builds the same release; worker ids and the secret never appear in it."""
    one, two = simulated_release, tmp_path / "b" / "demo-simulated"
    monkeypatch.setenv("CRISSCROSS_RELEASE_SALT", "another-machine-salt-0123456789")
    command.main(release_args(simulated, two, "--simulated"))
    hashes = sha_tree(one)
    assert hashes == sha_tree(two) and len(hashes) > 20
    raters = set(pq.read_table(one / "data" / "judgments.parquet").column("rater").to_pylist())
    assert raters == {pseudonym("cxc-release", PUBLIC_SALT), pseudonym('=HYPERLINK("http://x")', PUBLIC_SALT)}
    for path in one.rglob("*"):
        if path.is_file():
            data = path.read_bytes()
            assert b"HYPERLINK" not in data and SALT.encode() not in data, path  # batch ids keep "cxc-release:<file>", worker ids are gone
    assert "cxc-release," not in (one / "data" / "raters.csv").read_text()


def test_people_are_named_under_the_secret_salt(cxc_release: tuple[Path, float], replayed: Path) -> None:
    """Judgments of people (the replayed CxC raters): only the secret salt recomputes their pseudonyms."""
    out, _ = cxc_release
    raters = set(pq.read_table(out / "data" / "judgments.parquet").column("rater").to_pylist())
    workers = set(pq.read_table(replayed / "judgments" / "judgments.parquet").column("worker").to_pylist())
    assert "cxc-release" in workers and raters == {pseudonym(w, Salt(SALT.encode(), "t")) for w in workers}
    unkeyed = {
        pseudonym("cxc-release", PUBLIC_SALT),
        "rater-" + hashlib.sha256(b"cxc-release").hexdigest()[:16],
        "rater-" + hmac.new(b"another-salt-0123456", b"cxc-release", hashlib.sha256).hexdigest()[:16],
    }
    assert not unkeyed & raters


def test_an_unchanged_rebuild_keeps_the_previous_release_byte_for_byte(simulated: Path, simulated_release: Path, tmp_path: Path) -> None:
    """``dvc repro`` reruns the stage over its persisted output: nothing changed, nothing is rewritten
    (no empty changelog entry), and a copy elsewhere is the same release."""
    first = copy_release(simulated_release, tmp_path / "demo-simulated")
    before = sha_tree(first)
    report = command.main(release_args(simulated, first, "--simulated", "--previous", str(first)))
    assert report["level"] == "none" and report["version"] == "1.0.0-simulated" and sha_tree(first) == before
    copy = tmp_path / "copy" / "demo-simulated"
    command.main(release_args(simulated, copy, "--simulated", "--previous", str(first)))
    assert sha_tree(copy) == before


def test_csv_cells_never_start_a_formula(tmp_path: Path, simulated: Path) -> None:
    out = tmp_path / "demo-simulated"
    frame = pq.read_table(simulated / "judgments" / "judgments.parquet").to_pandas()
    frame.loc[frame.index[0], "batch_id"] = "=cmd|' /C calc'!A0"
    io.write_parquet(str(tmp_path / "j.parquet"), __import__("pyarrow").Table.from_pandas(frame, preserve_index=False))
    raters = pd.read_csv(simulated / "rated" / "raters.csv", keep_default_na=False)
    raters.loc[raters.index[0], "reasons"] = "@SUM(1+1)"
    raters.loc[raters.index[0], "excluded"] = True
    shutil.copytree(simulated / "rated", tmp_path / "rated")
    io.write_bytes(str(tmp_path / "rated" / "raters.csv"), io.frame_csv_bytes(raters))
    command.main(release_args(simulated, out, "--simulated", rated=tmp_path / "rated"))
    for path in out.rglob("*.csv"):
        for row in csv.reader(path.open()):
            for cell in row:
                assert not cell.startswith(("=", "+", "@")) and not (
                    cell.startswith("-") and not cell.lstrip("-").replace(".", "", 1).isdigit()
                ), (path, cell)
    assert "'@SUM(1+1)" in (out / "data" / "qc_exclusions.csv").read_text()


def test_versions_follow_the_diff(simulated: Path, simulated_release: Path, tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    first = simulated_release
    # patch: metadata only
    params = json.loads((simulated / "params.json").read_text())
    meta = tmp_path / "meta.json"
    meta.write_text(json.dumps({"release": {**params["release"], "licence": "CC0 1.0"}}))
    patch = tmp_path / "v2" / "demo-simulated"
    report = command.main(release_args(simulated, patch, "--simulated", "--previous", str(first), params=meta))
    assert report["version"] == "1.0.1-simulated" and report["level"] == "patch"
    # minor: scores refined, no positive flipped; a lower version is refused
    rated = tmp_path / "rated"
    shutil.copytree(simulated / "rated", rated)
    frame = pq.read_table(rated / "rated.parquet").to_pandas()
    safe = frame["task_type"].eq("STS") & (frame["agg_score"] < 1)
    frame.loc[safe, "agg_score"] = frame.loc[safe, "agg_score"] + 0.5
    io.write_parquet(str(rated / "rated.parquet"), __import__("pyarrow").Table.from_pandas(frame, preserve_index=False))
    with pytest.raises(ParamError, match="too low.*minor"):
        command.main(
            release_args(
                simulated, tmp_path / "v3" / "demo-simulated", "--simulated", "--previous", str(first), "--version", "1.0.1", rated=rated
            )
        )
    minor = tmp_path / "v3" / "demo-simulated"
    report = command.main(release_args(simulated, minor, "--simulated", "--previous", str(first), rated=rated))
    assert report["version"] == "1.1.0-simulated" and report["level"] == "minor"
    changelog = (minor / "CHANGELOG.md").read_text()
    assert "## 1.1.0-simulated" in changelog and "## 1.0.0-simulated" in changelog and f"{int(safe.sum())} (" in changelog
    # major: a positive flipped
    flipped = frame.copy()
    row = flipped.index[flipped["task_type"].eq("SITS") & flipped["positive"]][0]
    flipped.loc[row, ["agg_score", "positive"]] = [0.0, False]
    io.write_parquet(str(rated / "rated.parquet"), __import__("pyarrow").Table.from_pandas(flipped, preserve_index=False))
    major = tmp_path / "v4" / "demo-simulated"
    report = command.main(release_args(simulated, major, "--simulated", "--previous", str(minor), rated=rated))
    assert report["version"] == "2.0.0-simulated" and report["level"] == "major"
    assert cli(["release", "diff", str(minor), str(major)]) == 0
    out = capsys.readouterr().out
    assert "**major**" in out and "| SITS |" in out


def test_a_crash_while_writing_leaves_the_previous_release(
    simulated: Path, simulated_release: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    out = copy_release(simulated_release, tmp_path / "demo-simulated")
    before = sha_tree(out)
    from crisscross.release import build

    def crash(*args, **kwargs):
        raise RuntimeError("disk full")

    monkeypatch.setattr(build, "sums_text", crash)
    with pytest.raises(RuntimeError, match="disk full"):
        command.main(release_args(simulated, out, "--simulated"))
    assert sha_tree(out) == before
    assert verify(out)["version"] == "1.0.0-simulated"


def test_salt_file_inside_the_release_is_refused(simulated: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("CRISSCROSS_RELEASE_SALT")
    out = tmp_path / "demo-simulated"
    params = tmp_path / "p.json"
    params.write_text(json.dumps({"release": {"salt_file": str(out / "salt")}}))
    with pytest.raises(ParamError, match="inside the release"):
        command.main(release_args(simulated, out, "--simulated", params=params))
    params.write_text(json.dumps({"release": {"salt_file": str(tmp_path / "keys" / "salt")}}))
    command.main(release_args(simulated, out, "--simulated", params=params))
    assert (tmp_path / "keys" / "salt").stat().st_mode & 0o077 == 0
