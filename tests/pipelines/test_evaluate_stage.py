"""``crisscross evaluate`` on the real Karpathy test split (CxC, COCO, ECCV ground truths) and on
the demo (score-matrix models, guards, determinism, outputs)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest

from crisscross.embed.sets import EmbeddingSet
from crisscross.evaluate.tables import read_labels
from crisscross.pipelines import embed, evaluate, ingest
from crisscross.pipelines.cli import main as cli
from crisscross.scoring.models import ALL, FOLDS
from tests.shared_builds import shared_build


def run(tmp: Path, embeddings: Path, items: Path, truths: list[str], models: dict, name: str, *extra: str) -> dict:
    params = tmp / f"{name}.json"
    params.write_text(json.dumps({"base": {"seed": 5}, "evaluate": {"models": models, "bootstrap_samples": 200}}))
    out = tmp / name
    argv = ["--in", str(embeddings), "--items", str(items), "--out", str(out), "--params", str(params), *extra]
    for truth in truths:
        argv += ["--truth", truth]
    evaluate.main(argv)
    return json.loads((out / "metrics.json").read_text())


@pytest.fixture(scope="module")
def karpathy_run(karpathy_test: Path, shared_data: Path, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict]:
    """The README experiment: text models and an image model with vectors for the 370 of 5,000
    test images that have pixels (scored on those, the default for an image-only model)."""
    models = {"use-m3": {"text": "use-m3"}, "bow-glove50": {"text": "bow-glove50"}, "efficientnet-lite0": {"image": "efficientnet-lite0"}}
    truths = ["coco", f"cxc:{shared_data / 'cxc'}", "eccv"]
    inputs = [json.dumps([models, truths], sort_keys=True), str(karpathy_test)]

    def evaluated(root: Path) -> None:  # once per run, as karpathy_test is
        run(root, karpathy_test / "embeddings", karpathy_test / "items", truths, models, "karpathy")

    root = shared_build(tmp_path_factory, "karpathy-eval", inputs, evaluated)
    return root / "karpathy", json.loads((root / "karpathy" / "metrics.json").read_text())


@pytest.fixture(scope="module")
def karpathy_metrics(karpathy_run: tuple[Path, dict]) -> dict:
    return karpathy_run[1]


@pytest.mark.xdist_group("karpathy")
def test_text_encoders_on_cxc_land_near_the_paper(karpathy_metrics: dict) -> None:
    """CxC Table 3 / Table 5 baselines (BoW, USE-large); ours are 50-d GloVe and USE-m3, so the
    ranges are wide on purpose: they catch a broken protocol, not a weaker encoder."""
    results = karpathy_metrics["results"]
    use, glove = results["use-m3"]["cxc-test"][ALL], results["bow-glove50"]["cxc-test"][ALL]
    assert use["queries"]["t2t"] == 25_000 and use["queries_without_positive"]["t2t"] == 0
    assert 0.25 < use["R@1"]["t2t"] < 0.33 and 4 <= use["median_rank"]["t2t"] <= 8  # paper 31.2, 5
    assert 0.65 < use["spearman"]["sts"] < 0.74  # paper 71.4
    assert 0.40 < glove["spearman"]["sts"] < 0.58  # paper 55.1
    assert glove["R@1"]["t2t"] < use["R@1"]["t2t"]
    assert use["pairs"]["sts"] == 44_045 and use["pairs_outside_gallery"]["sts"] == 0
    # CxC adds positives to COCO's co-captions, so recall can only grow
    coco = results["use-m3"]["coco"][ALL]
    assert use["R@1"]["t2t"] >= coco["R@1"]["t2t"] and use["R@10"]["t2t"] >= coco["R@10"]["t2t"]
    # the 1K protocol (five folds of 1,000 images) is easier than 5K
    assert results["use-m3"]["cxc-test"][FOLDS]["R@1"]["t2t"] > use["R@1"]["t2t"]
    # text-only models have nothing to score against ECCV (image-caption only)
    assert "eccv" not in results["use-m3"]


@pytest.mark.xdist_group("karpathy")
def test_an_image_model_covering_part_of_the_split_is_scored_on_its_images(karpathy_run: tuple[Path, dict]) -> None:
    out, metrics = karpathy_run
    gallery = metrics["galleries"]["efficientnet-lite0"]
    note = "covered (default for an image-only model): 370 of 5,000 images, 1,850 of 25,000 captions"
    assert gallery == {"rule": "covered", "images": 370, "of_images": 5000, "captions": 1850, "of_captions": 25000, "note": note}
    assert metrics["galleries"]["use-m3"]["note"] == "full: 5,000 images, 25,000 captions"
    cxc = metrics["results"]["efficientnet-lite0"]["cxc-test"][ALL]
    assert set(cxc["R@1"]) == {"i2i"} and 0 < cxc["queries"]["i2i"] <= 370
    assert cxc["missing_positives"]["i2i"] > 0  # SIS positives among images without pixels: counted, not scored
    assert cxc["pairs"]["sis"] > 0 and cxc["pairs_outside_gallery"]["sis"] > cxc["pairs"]["sis"]
    assert cxc["R@10"]["i2i"] > 0.2  # an image encoder finds CxC's similar images among 370
    assert set(metrics["results"]["efficientnet-lite0"]) == {"cxc-test"}  # COCO and ECCV have no image-image task
    report = (out / "report.md").read_text()
    assert f"- gallery of efficientnet-lite0: {note}" in report and f"| efficientnet-lite0 ({note}) |" in report
    assert "| use-m3 |" in report


@pytest.mark.xdist_group("karpathy")
def test_positive_sets_against_eccv_match_its_table_2_pattern(karpathy_metrics: dict) -> None:
    """ECCV Caption Table 2: COCO and CxC positives are precise (all verified-or-original) but
    miss most ECCV positives."""
    rows = {(r["benchmark"], r["direction"]): r for r in karpathy_metrics["positives_agreement"]}
    for benchmark in ("coco", "cxc-test"):
        for direction in ("i2t", "t2i"):
            row = rows[(benchmark, direction)]
            assert row["precision"] > 0.9 and row["recall"] < 0.5


@pytest.fixture(scope="module")
def demo_build(demo_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("demo-eval")
    (root / "params.json").write_text(json.dumps({"embed": {"text_encoders": ["bow-glove50"], "image_encoders": []}}))
    ingest.main(["--in", str(demo_dir / "captions.jsonl"), "--out", str(root / "items")])
    embed.main(["--in", str(root / "items"), "--out", str(root / "embeddings"), "--params", str(root / "params.json")])
    captions = EmbeddingSet.read(root / "embeddings" / "text" / "bow-glove50" / "captions")
    images = EmbeddingSet.read(root / "embeddings" / "text" / "bow-glove50" / "cocaption_mean")
    unit = lambda v: v / np.linalg.norm(v, axis=1, keepdims=True)
    scores = unit(np.asarray(images.vectors)) @ unit(np.asarray(captions.vectors)).T
    np.savez(root / "proxy.npz", scores=scores, image_ids=np.array(images.ids), caption_ids=np.array(captions.ids))
    np.savez(root / "transposed.npz", scores=scores.T, image_ids=np.array(images.ids), caption_ids=np.array(captions.ids))
    return root


def test_score_matrix_model_on_eccv_and_outputs(demo_build: Path, tmp_path: Path) -> None:
    models = {"proxy": {"source": "score-matrix", "path": str(demo_build / "proxy.npz")}, "glove": {"text": "bow-glove50"}}
    metrics = run(tmp_path, demo_build / "embeddings", demo_build / "items", ["coco", "eccv"], models, "a")
    eccv = metrics["results"]["proxy"]["eccv"][ALL]
    assert set(eccv["mAP@R"]) == {"i2t", "t2i"}
    # ECCV queries among the 97 demo images; positives outside the gallery are counted
    assert 0 < eccv["queries"]["i2t"] < 97 and eccv["missing_positives"]["i2t"] > 0
    assert 0 < eccv["mAP@R"]["i2t"] < 1 and 0 < eccv["mAP@R"]["t2i"] < 1
    coco = metrics["results"]["proxy"]["coco"][ALL]
    assert coco["queries"]["i2t"] == 97 and coco["queries"]["t2i"] == 485
    assert set(metrics["results"]["glove"]["coco"][ALL]["R@1"]) == {"t2t"}
    out = tmp_path / "a"
    assert (out / "recall_at_k.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    report = (out / "report.md").read_text()
    assert "### I2T, whole gallery" in report and "| proxy |" in report
    # byte-identical on a rerun
    again = run(tmp_path, demo_build / "embeddings", demo_build / "items", ["coco", "eccv"], models, "b")
    assert again == metrics
    for name in ("metrics.json", "report.md", "recall_at_k.png"):  # report.json names the out dir
        assert (tmp_path / "a" / name).read_bytes() == (tmp_path / "b" / name).read_bytes(), name


def test_guards_reach_the_user_as_one_line_errors(demo_build: Path, tmp_path: Path, capsys) -> None:
    params = tmp_path / "p.json"
    params.write_text(json.dumps({"evaluate": {"models": {"bad": {"source": "score-matrix", "path": str(demo_build / "transposed.npz")}}}}))
    base = [
        "evaluate",
        "--in",
        str(demo_build / "embeddings"),
        "--items",
        str(demo_build / "items"),
        "--truth",
        "coco",
        "--params",
        str(params),
    ]
    assert cli([*base, "--out", str(tmp_path / "t")]) == 2
    assert "transposed.npz: score matrix of model 'bad' has shape" in (err := capsys.readouterr().err) and "looks transposed" in err
    params.write_text(json.dumps({"evaluate": {"models": {"use": {"text": "use-m3"}}}}))
    assert cli([*base, "--out", str(tmp_path / "u")]) == 2
    assert "no embedding set" in capsys.readouterr().err
    # a model missing one caption of the gallery is refused, not scored on a smaller gallery
    captions = EmbeddingSet.read(demo_build / "embeddings" / "text" / "bow-glove50" / "captions")
    partial = tmp_path / "partial.npz"
    images = EmbeddingSet.read(demo_build / "embeddings" / "text" / "bow-glove50" / "cocaption_mean").ids
    np.savez(
        partial, scores=np.zeros((len(images), len(captions.ids) - 1)), image_ids=np.array(images), caption_ids=np.array(captions.ids[1:])
    )
    params.write_text(json.dumps({"evaluate": {"models": {"partial": {"source": "score-matrix", "path": str(partial)}}}}))
    assert cli([*base, "--out", str(tmp_path / "p")]) == 2
    assert "has no cap vector for 1 of the 485 gallery items" in capsys.readouterr().err


def test_labels_and_bison_tables_from_csv(demo_build: Path, tmp_path: Path) -> None:
    images = EmbeddingSet.read(demo_build / "embeddings" / "text" / "bow-glove50" / "cocaption_mean").ids
    captions = EmbeddingSet.read(demo_build / "embeddings" / "text" / "bow-glove50" / "captions").ids
    labels = tmp_path / "labels.csv"
    rows = [f"{image},{i % 3}" if i % 2 else f"{image},{i % 3};{3 + i % 2}" for i, image in enumerate(images)]
    labels.write_text("image_id,labels\n" + "\n".join(rows) + "\nCOCO_val2014_000000000001.jpg,1\ncoco:img:1,-2\n")
    bison = tmp_path / "bison.csv"
    table = pq.read_table(demo_build / "items" / "captions.parquet").to_pydict()
    owner = dict(zip(table["caption_id"], table["image_id"], strict=True))
    triples = [f"{c},{owner[c]},{next(i for i in images if i != owner[c])}" for c in captions[:20]]
    bison.write_text("caption,target,decoy\n" + "\n".join(triples) + "\nnot-an-id,coco:img:1,coco:img:2\n")
    models = {"proxy": {"source": "score-matrix", "path": str(demo_build / "proxy.npz")}}
    metrics = run(
        tmp_path, demo_build / "embeddings", demo_build / "items", ["coco"], models, "lb", "--labels", str(labels), "--bison", str(bison)
    )
    coco = metrics["results"]["proxy"]["coco"][ALL]
    assert set(coco["PMRP@zeta=0"]) == {"i2t", "t2i"} and 0 < coco["PMRP@zeta=1"]["i2t"] <= 1
    assert coco["triples"]["bison"] == 20 and 0.5 < coco["accuracy"]["bison"] <= 1
    report = json.loads((tmp_path / "lb" / "report.json").read_text())
    assert report["rejected"] == {"bison": {"bad-id": 1}, "label": {"bad-label-row": 2}}
    # a CSV whose labels are all single numbers (and one class 0) is still read as text
    single = tmp_path / "single.csv"
    single.write_text("image_id,labels\ncoco:img:1,0\ncoco:img:2,7\n")
    assert read_labels(str(single)) == ({"coco:img:1": (0,), "coco:img:2": (7,)}, [])


def test_a_score_matrix_covering_part_of_the_images_runs_when_asked(demo_build: Path, tmp_path: Path, capsys) -> None:
    with np.load(demo_build / "proxy.npz") as data:
        scores, images, captions = data["scores"], data["image_ids"].tolist(), data["caption_ids"].tolist()
    table = pq.read_table(demo_build / "items" / "captions.parquet").to_pydict()
    owner = dict(zip(table["caption_id"], table["image_id"], strict=True))
    keep = images[::2]  # 49 of the 97 images, with their captions
    rows = [images.index(i) for i in keep]
    cols = [k for k, c in enumerate(captions) if owner[c] in set(keep)]
    np.savez(
        tmp_path / "half.npz",
        scores=scores[np.ix_(rows, cols)],
        image_ids=np.array(keep),
        caption_ids=np.array([captions[k] for k in cols]),
    )
    spec = {"source": "score-matrix", "path": str(tmp_path / "half.npz")}
    # a model with caption scores is refused by default: its figures would sit beside full-gallery ones
    params = tmp_path / "p.json"
    params.write_text(json.dumps({"evaluate": {"models": {"half": spec}}}))
    base = ["evaluate", "--in", str(demo_build / "embeddings"), "--items", str(demo_build / "items"), "--truth", "coco"]
    assert cli([*base, "--params", str(params), "--out", str(tmp_path / "refused")]) == 2
    err = capsys.readouterr().err
    assert "model 'half' has no img vector for 48 of the 97 gallery items (e.g. coco:img:" in err and "gallery: covered" in err
    assert len(err.strip().splitlines()) == 1
    params.write_text(json.dumps({"evaluate": {"models": {"half": {**spec, "gallery": "sometimes"}}}}))
    assert cli([*base, "--params", str(params), "--out", str(tmp_path / "bad")]) == 2
    assert f"{params}: evaluate.models.half.gallery must be one of ['auto', 'full', 'covered'], got 'sometimes'" in capsys.readouterr().err
    # asked for, it is scored on its 49 images and their captions, and says so
    models = {"half": {**spec, "gallery": "covered"}, "proxy": {"source": "score-matrix", "path": str(demo_build / "proxy.npz")}}
    metrics = run(tmp_path, demo_build / "embeddings", demo_build / "items", ["coco"], models, "covered")
    half, proxy = metrics["results"]["half"]["coco"][ALL], metrics["results"]["proxy"]["coco"][ALL]
    assert half["queries"] == {"i2t": 49, "t2i": len(cols)} and proxy["queries"] == {"i2t": 97, "t2i": 485}
    assert half["missing_positives"] == {"i2t": 0, "t2i": 0}
    assert half["R@1"]["i2t"] >= proxy["R@1"]["i2t"] - 0.1  # a smaller gallery is not harder
    assert metrics["galleries"]["half"]["note"] == f"covered: 49 of 97 images, {len(cols)} of 485 captions"
    assert metrics["results"]["half"]["coco"][FOLDS]["queries"]["i2t"] == 49
    report = (tmp_path / "covered" / "report.md").read_text()
    assert f"| half (covered: 49 of 97 images, {len(cols)} of 485 captions) |" in report
    summary = json.loads((tmp_path / "covered" / "report.json").read_text())
    assert summary["models"]["half"]["gallery"].startswith("covered: 49 of 97 images")


def test_every_embedded_encoder_is_a_model_unless_the_params_say_otherwise(demo_build: Path, tmp_path: Path, capsys) -> None:
    metrics = run(tmp_path, demo_build / "embeddings", demo_build / "items", ["coco"], {}, "auto")
    assert set(metrics["results"]) == {"bow-glove50"} and set(metrics["results"]["bow-glove50"]["coco"][ALL]["R@1"]) == {"t2t"}
    params = tmp_path / "p.json"
    base = ["evaluate", "--in", str(demo_build / "embeddings"), "--items", str(demo_build / "items"), "--truth", "coco"]
    base += ["--params", str(params), "--out", str(tmp_path / "x")]
    params.write_text(json.dumps({"evaluate": {"encoders": []}}))
    assert cli(base) == 2
    assert "nothing to evaluate: evaluate.models is empty and evaluate.encoders finds no vectors" in capsys.readouterr().err
    params.write_text(json.dumps({"evaluate": {"encoders": ["use-m3"]}}))
    assert cli(base) == 2
    assert (
        "evaluate.encoders names ['use-m3'], which have no vectors in" in (err := capsys.readouterr().err)
        and "embedded: ['bow-glove50']" in err
    )
    for section, message in (
        ({"encoders": 3}, "evaluate.encoders must be a non-empty string, got 3; or must be a list, got 3"),
        ({"tasks": ["i2t", "x2y"]}, "evaluate.tasks[1] must be one of ['i2t', 't2i', 't2t', 'i2i'], got 'x2y'"),
        ({"models": ["clip"]}, "evaluate.models must be a mapping, got ['clip']"),
        ({"seed": 3}, "unknown evaluate params ['seed']"),
        ({"verified": ""}, "evaluate.verified must be a non-empty string, got ''"),
    ):
        params.write_text(json.dumps({"evaluate": section}))
        assert cli(base) == 2
        assert message in capsys.readouterr().err, section
