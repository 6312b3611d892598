"""The Entities commands on the demo: a release written by ``boxes`` replays to the same files,
Label Studio's export of the box tasks imports back to the same boxes, a proposals file is read,
and what a user can fix is a one-line error."""

from __future__ import annotations

import filecmp
import json
import shutil
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from crisscross.core.errors import InputError
from crisscross.entities.merge import ImageResult, MergedImage
from crisscross.pipelines import boxes, coref, ingest, localize, mentions
from crisscross.pipelines.cli import main

PROJECT = Path(__file__).resolve().parents[2]
PARAMS = ["--params", str(PROJECT / "workflows" / "entities" / "params.yaml")]


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory, demo_dir: Path) -> Path:
    root = tmp_path_factory.mktemp("entities")
    ingest.main(
        [
            "--in",
            str(demo_dir / "captions.jsonl"),
            "--images",
            str(demo_dir / "images"),
            "--out",
            str(root / "items"),
            "--params",
            str(PROJECT / "params.yaml"),
        ]
    )
    mentions.main(["--in", str(root / "items"), "--out", str(root / "mentions"), *PARAMS])
    coref.main(["--in", str(root / "mentions"), "--out", str(root / "coref"), *PARAMS])
    boxes.main(
        [
            "--in",
            str(root / "coref"),
            "--mentions",
            str(root / "mentions"),
            "--items",
            str(root / "items"),
            "--out",
            str(root / "boxes"),
            *PARAMS,
        ]
    )
    return root


def _same_tree(a: Path, b: Path, ignore: tuple[str, ...] = ()) -> bool:
    compared = filecmp.dircmp(a, b, ignore=list(ignore))
    if compared.left_only or compared.right_only or filecmp.cmpfiles(a, b, compared.common_files, shallow=False)[1]:
        return False
    return all(_same_tree(a / sub, b / sub, ignore) for sub in compared.common_dirs)


def test_the_same_inputs_and_seed_give_the_same_bytes(built: Path, tmp_path: Path):
    coref.main(["--in", str(built / "mentions"), "--out", str(tmp_path / "coref"), *PARAMS])
    assert _same_tree(built / "coref", tmp_path / "coref", ignore=("report.json",))  # a report names its folder
    boxes.main(
        [
            "--in",
            str(tmp_path / "coref"),
            "--mentions",
            str(built / "mentions"),
            "--items",
            str(built / "items"),
            "--out",
            str(tmp_path / "boxes"),
            *PARAMS,
        ]
    )
    assert _same_tree(built / "boxes", tmp_path / "boxes", ignore=("report.json",))


def test_two_images_with_one_file_name_cannot_share_release_files(tmp_path: Path):
    images = [ImageResult(image_id, "same", MergedImage((), 0, 0), b"", b"", (), 0) for image_id in ("a", "b")]
    with pytest.raises(InputError, match=r"images a and b would both be release/Sentences/same.txt"):
        boxes.write_results(images, str(tmp_path))


def test_a_written_release_replays_to_the_same_files(built: Path):
    release = built / "boxes" / "release"
    replay = built / "replay"
    report = mentions.main(["--in", f"entities:{release}", "--out", str(replay / "mentions"), *PARAMS])
    assert report["mentions"] == 1522 and report["rejected"] == {}  # the 2 mentions of the 2 chains sent to review are plain words
    assert coref.main(["--in", str(replay / "mentions"), "--out", str(replay / "coref"), *PARAMS])["links"]["links_asked"] == 0
    again = boxes.main(
        [
            "--in",
            str(replay / "coref"),
            "--mentions",
            str(replay / "mentions"),
            "--release",
            str(release),
            "--out",
            str(replay / "boxes"),
            *PARAMS,
        ]
    )
    assert again["boxes"] == 895 and again["merging"]["merged_chains"] == 0 and again["answers"]["drawing"] == 0
    assert _same_tree(release, replay / "boxes" / "release")


def test_a_sentences_file_linked_out_of_the_release_is_quarantined(built: Path, tmp_path: Path):
    sentences = tmp_path / "release" / "Sentences"
    sentences.mkdir(parents=True)
    first, second = sorted((built / "boxes" / "release" / "Sentences").glob("*.txt"))[:2]
    shutil.copy(first, sentences / first.name)
    (sentences / second.name).symlink_to(second)
    report = mentions.main(["--in", f"entities:{tmp_path / 'release'}", "--out", str(tmp_path / "m"), *PARAMS])
    assert report["captions"] == 5 and report["rejected"] == {"sentences": {"outside-folder": 1}}


def test_the_label_studio_export_imports_back_to_the_same_boxes(built: Path):
    export = built / "boxes" / "label_studio" / "annotations.json"
    out = built / "imported"
    report = boxes.main(
        [
            "--in",
            str(built / "coref"),
            "--mentions",
            str(built / "mentions"),
            "--items",
            str(built / "items"),
            "--import",
            str(export),
            "--out",
            str(out),
            *PARAMS,
        ]
    )
    assert report["boxes"] == 895 and report["rejected"] == {}
    assert pq.read_table(out / "boxes.parquet").equals(pq.read_table(built / "boxes" / "boxes.parquet"))


def test_localize_reads_a_proposals_file(built: Path, tmp_path: Path):
    first = pq.read_table(built / "boxes" / "boxes.parquet").to_pylist()[0]
    chain = next(
        r
        for r in pq.read_table(built / "boxes" / "chains.parquet").to_pylist()
        if r["image_id"] == first["image_id"] and r["chain"] == first["chains"].split("/")[0]
    )
    box = [first["xmin"], first["ymin"], first["xmax"], first["ymax"], 0.9]
    proposals = tmp_path / "proposals.jsonl"
    proposals.write_text(json.dumps({"caption_id": chain["caption_id"], "index": chain["index"], "boxes": [box]}) + "\nnot json\n")
    params = tmp_path / "p.yaml"
    params.write_text("localize:\n  proposals: file\n  k: 5\n")
    report = localize.main(
        [
            "--in",
            str(built / "boxes"),
            "--mentions",
            str(built / "mentions"),
            "--items",
            str(built / "items"),
            "--proposals",
            str(proposals),
            "--out",
            str(tmp_path / "loc"),
            "--params",
            str(params),
        ]
    )
    assert report["metrics"]["overall"]["instances"] == 1280
    assert report["metrics"]["overall"]["r_at_1"] == pytest.approx(100 / 1280)
    assert report["rejected"] == {"proposal": {"malformed-proposals": 1}}


def test_what_a_user_can_fix_is_one_line(built: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]):
    common = ["--in", str(built / "coref"), "--mentions", str(built / "mentions"), "--out", str(tmp_path / "o")]
    assert main(["boxes", *common, "--items", str(built / "items"), "--release", str(built / "boxes" / "release")]) == 2
    assert "--release replays a release's boxes and sizes: give it without --items and --import" in capsys.readouterr().err
    assert main(["mentions", "--in", f"entities:{tmp_path}", "--out", str(tmp_path / "m")]) == 2
    assert f"no {tmp_path}/Sentences/*.txt" in capsys.readouterr().err
    params = tmp_path / "p.yaml"
    params.write_text("coref:\n  link_eror: 0.1\n")
    assert main(["coref", "--in", str(built / "mentions"), "--out", str(tmp_path / "c"), "--params", str(params)]) == 2
    assert "unknown coref params ['link_eror']" in capsys.readouterr().err
    broken = tmp_path / "broken"
    shutil.copytree(built / "boxes" / "release", broken)
    first = sorted((broken / "Annotations").glob("*.xml"))[0]
    first.write_text("<annotation><size>")
    assert main(["boxes", *common, "--release", str(broken)]) == 2
    err = capsys.readouterr().err
    assert f"{first}: not XML (no element found" in err and len(err.strip().splitlines()) == 1
    first.write_text((built / "boxes" / "release" / "Annotations" / first.name).read_text().replace(first.stem, "other", 1))
    assert main(["boxes", *common, "--release", str(broken)]) == 2
    assert f"{first}: <filename> other.jpg is not the image of {first.name}" in capsys.readouterr().err
    first.unlink()
    first.symlink_to(built / "boxes" / "release" / "Annotations" / first.name)
    assert main(["boxes", *common, "--release", str(broken)]) == 2
    assert f"{first}: a link to {built / 'boxes' / 'release' / 'Annotations' / first.name}, outside" in capsys.readouterr().err
    params.write_text("localize:\n  proposals: file\n")
    located = ["--mentions", str(built / "mentions"), "--items", str(built / "items"), "--params", str(params)]
    assert (
        main(["localize", "--in", str(built / "boxes"), "--out", str(tmp_path / "l"), *located, "--proposals", str(tmp_path / "none")]) == 2
    )
    assert f"no proposals file {tmp_path / 'none'}" in capsys.readouterr().err
    params.write_text("boxes:\n  wrong_answer: 0.3\n")
    assert main(["boxes", *common, "--items", str(built / "items"), "--params", str(params), "--strict"]) == 2
    assert "boxes: --strict and records were rejected (chain needs-review:" in capsys.readouterr().err
