"""Releases of the COCO-BISON and Flickr30k Entities workflows, built from their real stage outputs.

The demo runs through the BISON stages (decoys → CHOOSE round → chosen → VERIFY-TRIPLE round →
triples) and the Entities stages (mentions → coref → boxes) in process, with the workflows'
params.yaml (the BISON panel judges with bow-glove50, with anchors for its cosines, so only that
encoder is embedded); each
workflow's ``release`` stage command is then run as DVC would run it, from the workflow folder.
"""

from __future__ import annotations

import hashlib
import json
import shlex
import shutil
from pathlib import Path
from typing import Any

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import yaml

import crisscross
from crisscross.core import io
from crisscross.core.errors import ParamError
from crisscross.entities.files import read_annotation
from crisscross.formats.manifest import ReleaseCheckError, verify
from crisscross.pipelines import aggregate, annotate, bison, boxes, coref, decoys, embed, ingest, mentions, tasks
from crisscross.pipelines import release as command
from crisscross.pipelines.cli import main as cli
from crisscross.release.croissant import validate
from crisscross.release.pseudonyms import PREFIX
from tests.release.loaders import check_croissant, check_hugging_face, parquet_tables

PROJECT = Path(__file__).resolve().parents[2]
SALT = "workflow-release-salt-0123456789"
# the release stage and params for workflows/entities (proposed there; used here until that file has them)
ENTITIES_STAGE = {
    "cmd": "crisscross release --entities ../../build/entities/boxes --attribution ../../data/demo/ATTRIBUTION.csv --lock dvc.lock "
    "--previous ../../releases/entities-demo-simulated --simulated --out ../../releases/entities-demo-simulated --params params.yaml",
    "deps": ["../../build/entities/boxes", "../../data/demo/ATTRIBUTION.csv", "../../crisscross", "../../pipelines"],
}
ENTITIES_PARAMS = {
    "name": "entities-demo",
    "title": "Flickr30k Entities demo: phrases, coreference chains and boxes",
    "date": "2026-11-23",
    "entities_source": "simulate",
}


@pytest.fixture(autouse=True)
def salt(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CRISSCROSS_RELEASE_SALT", SALT)


def workflow(name: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """A workflow's params and its release stage (the proposed one for Entities until its files have it)."""
    folder = PROJECT / "workflows" / name
    params = yaml.safe_load((folder / "params.yaml").read_text(encoding="utf-8"))
    stages = yaml.safe_load((folder / "dvc.yaml").read_text(encoding="utf-8"))["stages"]
    if name == "entities" and "release" not in stages:
        return {**params, "release": ENTITIES_PARAMS}, ENTITIES_STAGE
    return params, stages["release"]


@pytest.fixture(scope="module")
def project(demo_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """``work/main`` with the build/ folders both workflows' release stages read, made by the stages."""
    main = tmp_path_factory.mktemp("work") / "main"
    build = main / "build"
    root = yaml.safe_load((PROJECT / "params.yaml").read_text(encoding="utf-8"))
    bison_params, _ = workflow("bison")
    entities_params, _ = workflow("entities")
    # bow-glove50 cosines sit in 0.9–1.0 and a target's best caption beats its decoy by a median 0.03 on the demo
    bow = {"encoder": "bow-glove50", "anchors": {"CHOOSE": [-0.01, 0.06], "VERIFY-TRIPLE": [0.9, 1.0]}}
    panel = {**bison_params["annotate"]["simulate"], **bow}
    verify_panel = {**bison_params["rounds"]["verify_triple"]["annotate"]["simulate"], **bow}
    bison_params = {
        **bison_params,
        "ingest": root["ingest"],
        "embed": {**root["embed"], "text_encoders": ["bow-glove50"], "image_encoders": []},
        "tasks": {**bison_params["tasks"], "gold_text_encoders": ["bow-glove50"], "gold_image_encoders": []},
        "annotate": {**bison_params["annotate"], "simulate": panel},
        "bison": {**bison_params["bison"], "baselines": ["bow-glove50"]},
    }
    bison_params["rounds"]["verify_triple"]["annotate"]["simulate"] = verify_panel
    for name, params in (("bison", bison_params), ("entities", entities_params)):
        (main / "workflows" / name).mkdir(parents=True)
        (main / "workflows" / name / "params.yaml").write_text(yaml.safe_dump(params), encoding="utf-8")
    (main / "data" / "demo").mkdir(parents=True)
    shutil.copy(demo_dir / "ATTRIBUTION.csv", main / "data" / "demo" / "ATTRIBUTION.csv")
    p = ["--params", str(main / "workflows" / "bison" / "params.yaml")]
    items, vectors, b = str(build / "items"), str(build / "embeddings"), build / "bison"
    ingest.main(["--in", str(demo_dir / "captions.jsonl"), "--images", str(demo_dir / "images"), "--out", items, *p])
    embed.main(["--in", items, "--out", vectors, *p])
    decoys.main(["--in", vectors, "--items", items, "--out", str(b / "decoys"), *p])
    for name, source, folder in (("choose", b / "decoys", "choose"), ("verify_triple", b / "chosen", "verify")):
        if name == "verify_triple":
            bison.main(["--in", str(b / "choose" / "rated"), "--items", items, "--decoys", str(b / "decoys"), "--out", str(source), *p])
        r = ["--round", name]
        tasks.main([*r, "--in", str(source), "--items", items, "--embeddings", vectors, "--out", str(b / folder / "tasks"), *p])
        annotate.main(
            [*r, "--in", str(b / folder / "tasks"), "--embeddings", vectors, "--items", items, "--out", str(b / folder / "judgments"), *p]
        )
        aggregate.main(
            [*r, "--in", str(b / folder / "judgments"), "--tasks", str(b / folder / "tasks"), "--out", str(b / folder / "rated"), *p]
        )
    bison.main(
        [
            *("--in", str(b / "choose" / "rated"), "--verified", str(b / "verify" / "rated"), "--items", items),
            *("--decoys", str(b / "decoys"), "--embeddings", vectors, "--out", str(b / "triples"), *p),
        ]
    )
    e, q = build / "entities", ["--params", str(main / "workflows" / "entities" / "params.yaml")]
    mentions.main(["--in", items, "--out", str(e / "mentions"), *q])
    coref.main(["--in", str(e / "mentions"), "--out", str(e / "coref"), *q])
    boxes.main(["--in", str(e / "coref"), "--mentions", str(e / "mentions"), "--items", items, "--out", str(e / "boxes"), *q])
    return main


def run_stage(name: str, main: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    """The workflow's release stage command, run from its folder as ``dvc repro`` does; every path
    it names is a dependency of the stage (or its output, or the lock)."""
    _, stage = workflow(name)
    argv = shlex.split(stage["cmd"])
    assert argv[:2] == ["crisscross", "release"]
    named = {v for a in argv[2:] if not a.startswith("--") for v in a.split(",") if v.startswith("../")}
    assert named - set(stage["deps"]) <= {f"../../releases/{name}-demo-simulated"}, named - set(stage["deps"])
    monkeypatch.chdir(main / "workflows" / name)
    return command.main(argv[2:])


def sha_tree(folder: Path) -> dict[str, str]:
    return {p.relative_to(folder).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(folder.rglob("*")) if p.is_file()}


@pytest.fixture(scope="module")
def bison_release(project: Path) -> Path:
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("CRISSCROSS_RELEASE_SALT", SALT)
        run_stage("bison", project, patch)
    return project / "releases" / "bison-demo-simulated"


@pytest.fixture(scope="module")
def entities_release(project: Path) -> Path:
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("CRISSCROSS_RELEASE_SALT", SALT)
        run_stage("entities", project, patch)
    return project / "releases" / "entities-demo-simulated"


# --------------------------------------------------------------------------- COCO-BISON


def test_bison_release_holds_the_triples_and_both_rounds(bison_release: Path, project: Path) -> None:
    triples = project / "build" / "bison" / "triples"
    report = json.loads((triples / "report.json").read_text())
    accepted = report["yields"]["triples_accepted"]
    assert accepted == report["verification"]["accepted"] > 0
    assert verify(bison_release)["version"] == "1.0.0-simulated"
    # the released JSON is the stage's, byte for byte; the table keeps every id, raters pseudonymous
    assert (bison_release / "data" / "bison" / "bison_annotations.json").read_bytes() == (triples / "bison_annotations.json").read_bytes()
    given, released = pd.read_csv(triples / "triples.csv"), pd.read_csv(bison_release / "data" / "bison" / "triples.csv")
    assert len(released) == accepted
    ids = ["bison_id", "caption", "target", "decoy", "caption_text", "similarity", "encoder"]
    pd.testing.assert_frame_equal(released[ids], given[ids])
    assert released["chooser"].str.startswith(PREFIX).all() and not set(released["chooser"]) & set(given["chooser"])
    release = crisscross.load_release(bison_release)
    assert release.documents["bison/bison_annotations"] == json.loads((triples / "bison_annotations.json").read_text())
    assert release.tables["bison/triples"].num_rows == accepted
    # a chooser's pseudonym is the one judgments.parquet gives the same worker
    judgments = release.frames["judgments"]
    chose = judgments[(judgments["task_type"] == "CHOOSE") & (judgments["answer"] != "none")]
    pseudonym_of = dict(zip(chose["answer"], chose["rater"], strict=False))
    assert all(pseudonym_of[f"{c}"] == r for c, r in zip(released["caption"], released["chooser"], strict=True))
    pairs = release.frames["pairs"]
    facts = {r: json.loads((project / "build" / "bison" / r / "rated" / "facts.json").read_text()) for r in ("choose", "verify")}
    assert (pairs["task_type"] == "CHOOSE").sum() == facts["choose"]["CHOOSE"]["items"] == report["yields"]["with_decoy"]
    assert (pairs["task_type"] == "VERIFY-TRIPLE").sum() == facts["verify"]["VERIFY-TRIPLE"]["items"] == report["verification"]["verified"]
    assert int(pairs.loc[pairs["task_type"] == "VERIFY-TRIPLE", "positive"].sum()) == accepted
    assert len(judgments) == facts["choose"]["CHOOSE"]["judgments"] + facts["verify"]["VERIFY-TRIPLE"]["judgments"]
    info = release.info
    assert info["parts"]["bison"]["triples"] == accepted and info["parts"]["bison"]["yields"] == report["yields"]
    assert info["counts"]["data/bison/triples.csv"] == accepted and info["name"] == "bison-demo-simulated"
    assert {i["role"] for i in info["inputs"]} >= {"bison", "round 1 rated", "round 2 judgments"}
    card = (bison_release / "README.md").read_text()
    assert "## COCO-BISON triples" in card and "Evaluating Text-to-Image Matching using Binary Image Selection ({BISON})" in card
    assert f"| triples accepted | {accepted:,} |" in card and "CHOOSE and VERIFY-TRIPLE are COCO-BISON's annotation rounds" in card
    assert card.split("\n---\n", 1)[1].splitlines()[2].startswith("> **SIMULATED**")  # below the YAML header
    counts = validate(bison_release / "croissant.json")
    assert counts["bison_triples"] == accepted


def test_a_bison_release_alone_verifies_loads_and_rebuilds_to_the_same_bytes(project: Path, tmp_path: Path) -> None:
    triples = project / "build" / "bison" / "triples"
    out = tmp_path / "one" / "bison-simulated"
    args = ["--bison", str(triples), "--date", "2026-11-23", "--simulated"]
    report = command.main([*args, "--out", str(out)])
    assert report["summary"] == {} and not (out / "data" / "pairs.parquet").exists()
    assert sorted(p.relative_to(out).as_posix() for p in (out / "data").rglob("*") if p.is_file()) == [
        "data/bison/bison_annotations.json",
        "data/bison/triples.csv",
        "data/bison/triples.parquet",
    ]
    assert (
        crisscross.load_release(out).frames["bison/triples"]["caption"].tolist() == pd.read_csv(triples / "triples.csv")["caption"].tolist()
    )
    before = sha_tree(out)
    again = command.main([*args, "--out", str(out), "--previous", str(out)])
    assert again["level"] == "none" and sha_tree(out) == before
    elsewhere = tmp_path / "two" / "bison-simulated"
    command.main([*args, "--out", str(elsewhere)])
    assert sha_tree(elsewhere) == before
    with pytest.raises(ParamError, match="SIMULATED"):
        command.main(["--bison", str(triples), "--out", str(tmp_path / "bison-simulated")])


def test_the_diff_counts_added_and_removed_triples(project: Path, tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    triples = project / "build" / "bison" / "triples"
    fewer = tmp_path / "fewer"
    shutil.copytree(triples, fewer)
    table = pq.read_table(triples / "triples.parquet").to_pandas()
    io.write_parquet(str(fewer / "triples.parquet"), pa.Table.from_pandas(table.iloc[:-1], preserve_index=False))
    document = json.loads((triples / "bison_annotations.json").read_text())
    io.write_json(str(fewer / "bison_annotations.json"), {**document, "data": document["data"][:-1]})
    args = ["--date", "2026-11-23", "--simulated"]
    v1, v2, v3 = (tmp_path / f"v{n}" / "bison-simulated" for n in (1, 2, 3))
    command.main(["--bison", str(fewer), "--out", str(v1), *args])
    added = command.main(["--bison", str(triples), "--out", str(v2), "--previous", str(v1), *args])
    assert added["version"] == "1.1.0-simulated" and added["level"] == "minor" and "1 data rows added" in added["reason"]
    n = len(table)
    assert f"| bison/triples | {n - 1} | {n} | 1 | 0 |" in (v2 / "CHANGELOG.md").read_text()
    removed = command.main(["--bison", str(fewer), "--out", str(v3), "--previous", str(v2), *args])
    assert removed["version"] == "2.0.0-simulated" and "1 data rows removed" in removed["reason"]
    assert cli(["release", "diff", str(v2), str(v3)]) == 0
    assert f"| bison/triples | {n} | {n - 1} | 0 | 1 |" in capsys.readouterr().out


# --------------------------------------------------------------------------- Flickr30k Entities


def test_entities_release_holds_the_files_and_tables(entities_release: Path, project: Path) -> None:
    boxes_out = project / "build" / "entities" / "boxes"
    report = json.loads((boxes_out / "report.json").read_text())
    checked = verify(entities_release)
    images = sorted((boxes_out / "release" / "Annotations").glob("*.xml"))
    others = {"ATTRIBUTION.csv", "CHANGELOG.md", "README.md", "croissant.json", "release.json"}
    others |= {f"data/entities/{t}.{x}" for t in ("boxes", "chains") for x in ("csv", "parquet")}
    listed = {line.split("  ", 1)[1] for line in (entities_release / "SHA256SUMS").read_text().splitlines()}
    assert len(images) == 97 and listed == others | {
        f"data/entities/{s}/{p.stem}.{x}" for p in images for s, x in (("Sentences", "txt"), ("Annotations", "xml"))
    }
    assert checked["files"] == len(listed)
    for sub in ("Sentences", "Annotations"):
        for path in sorted((boxes_out / "release" / sub).iterdir()):
            assert (entities_release / "data" / "entities" / sub / path.name).read_bytes() == path.read_bytes(), path.name
    release = crisscross.load_release(entities_release)
    table = release.frames["entities/boxes"]
    assert len(table) == report["boxes"] == release.info["parts"]["entities"]["boxes"]
    stem = images[0].stem
    annotation = read_annotation((entities_release / "data" / "entities" / "Annotations" / f"{stem}.xml").read_bytes(), stem)
    own = table[table["image_id"] == f"coco:img:{int(stem[-12:])}"]
    assert sorted(map(tuple, own[["xmin", "ymin", "xmax", "ymax"]].to_numpy().tolist())) == sorted(
        o.box for o in annotation.objects if o.box is not None
    )
    chains = release.frames["entities/chains"]
    outcomes = release.info["parts"]["entities"]["chain_outcomes"]
    assert outcomes == chains.drop_duplicates(["image_id", "chain"])["outcome"].value_counts().sort_index().to_dict()
    assert sum(outcomes.values()) == release.info["parts"]["entities"]["chains"] and set(outcomes) == set(report["outcomes"])
    assert len(release.files("entities/Sentences")) == 97 and release.simulated and release.version == "1.0.0-simulated"
    card = (entities_release / "README.md").read_text()
    assert "## Flickr30k Entities boxes" in card and "Flickr30k Entities: Collecting Region-to-Phrase Correspondences" in card
    assert f"| {len(table):,} |" in card and "pairs = release.frames" not in card
    metadata = json.loads((entities_release / "croissant.json").read_text())
    sets = {d["@id"]: d for d in metadata["distribution"] if d["@type"] == "cr:FileSet"}
    assert sets["data/entities/Annotations"]["includes"] == "data/entities/Annotations/*.xml"
    counts = validate(entities_release / "croissant.json")
    assert (counts["entities_boxes"], counts["entities_chains"], counts["ATTRIBUTION"]) == (report["boxes"], len(chains), 97)


def test_hugging_face_and_croissant_give_the_parts_tables_row_for_row(bison_release: Path, entities_release: Path, tmp_path: Path) -> None:
    """Every table of both releases through ``load_dataset`` and ``mlcroissant`` (``tests/release/loaders.py``):
    a part's table is config ``<part>_<stem>`` (split ``full``); BISON's pairs hold CHOOSE, whose answers
    are per item, so their labels stay strings."""
    pytest.importorskip("datasets")
    from datasets import Value, load_dataset

    for release in (bison_release, entities_release):
        rows = {key: table.num_rows for key, table in parquet_tables(release).items()}
        assert check_hugging_face(release, tmp_path / "hf") == rows == check_croissant(release)
    assert set(rows) == {"entities/boxes", "entities/chains"}
    pairs = load_dataset(str(bison_release), "pairs", split="full", cache_dir=str(tmp_path / "hf"))
    assert pairs.features["agg_label"] == Value("string") and {"CHOOSE", "VERIFY-TRIPLE"} == set(pairs["task_type"])
    triples = load_dataset(str(bison_release), "bison_triples", split="full", cache_dir=str(tmp_path / "hf"))
    assert triples.features["similarity"] == Value("float64") and triples["caption_text"][0]


def test_a_tampered_entities_or_bison_file_fails_verify_naming_it(
    entities_release: Path, bison_release: Path, tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    for release, name in ((entities_release, "data/entities/Annotations"), (bison_release, "data/bison/bison_annotations.json")):
        copy = tmp_path / release.name
        shutil.copytree(release, copy)
        target = sorted((copy / name).glob("*.xml"))[0] if (copy / name).is_dir() else copy / name
        target.write_bytes(target.read_bytes().replace(b"1", b"2", 1))
        assert cli(["release", "verify", str(copy)]) == 2
        error = capsys.readouterr().err.strip()
        assert error.count("\n") == 0 and str(target) in error and "sha256" in error
    (tmp_path / "entities-demo-simulated" / "data" / "entities" / "Sentences" / "extra.txt").write_text("x")
    with pytest.raises(ReleaseCheckError, match="extra.txt"):
        verify(tmp_path / "entities-demo-simulated")


def test_an_unchanged_entities_rerun_keeps_the_bytes_and_nothing_given_is_one_line(
    entities_release: Path, project: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture
) -> None:
    before = sha_tree(entities_release)
    report = run_stage("entities", project, monkeypatch)
    assert report["level"] == "none" and sha_tree(entities_release) == before
    assert cli(["release", "--out", str(project / "releases" / "nothing")]) == 2
    error = capsys.readouterr().err.strip()
    assert error.count("\n") == 0 and "nothing to release" in error and "--bison" in error and "--entities" in error
    assert cli(["release", "--rated", "x", "--out", str(project / "releases" / "nothing")]) == 2
    assert "--items" in capsys.readouterr().err


def test_entities_drawn_by_people_are_released_without_the_simulated_label(project: Path, tmp_path: Path) -> None:
    params = tmp_path / "params.json"
    params.write_text(json.dumps({"release": {"name": "entities", "entities_source": "people"}}))
    boxes_out = str(project / "build" / "entities" / "boxes")
    with pytest.raises(ParamError, match="no judgment is simulated"):
        command.main(["--entities", boxes_out, "--simulated", "--out", str(tmp_path / "entities-simulated"), "--params", str(params)])
    report = command.main(["--entities", boxes_out, "--out", str(tmp_path / "entities"), "--params", str(params), "--date", "2026-11-23"])
    assert report["version"] == "1.0.0" and report["name"] == "entities" and not report["simulated"]
    card = (tmp_path / "entities" / "README.md").read_text()
    assert "SIMULATED" not in card and "people's judgments imported" in (tmp_path / "entities" / "croissant.json").read_text()


def test_a_release_without_rated_pairs_is_no_retrieval_truth(entities_release: Path) -> None:
    """``evaluate --truth release:`` on an Entities (or BISON-only) release says what to do instead."""
    from crisscross.scoring.truths import load_release as truth_of_release

    with pytest.raises(FileNotFoundError, match=r"has no rated pairs .* --bison instead"):
        truth_of_release(entities_release)
