"""``crisscross filter``: a tiny synthetic build end to end, and ECCV's recipe on the Karpathy test split."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import yaml

from crisscross.candidates.diversity import coverage_of
from crisscross.core.errors import ParamError
from crisscross.embed.sets import CAPTIONS, COCAPTION_MEAN, EmbeddingSet, cocaption_mean, set_dir
from crisscross.formats.eccv import I2T, T2I
from crisscross.pipelines import filter as filter_stage
from crisscross.scoring.truths import load_eccv


def tiny_build(root: Path) -> tuple[Path, Path]:
    rng = np.random.default_rng(5)
    images = [f"coco:img:{n}" for n in range(1, 9)]
    captions = [f"coco:cap:{100 * n + k}" for n in range(1, 9) for k in range(4)]
    image_of = {c: f"coco:img:{int(c.split(':')[2]) // 100}" for c in captions}
    items = root / "items"
    items.mkdir(parents=True)
    pq.write_table(pa.table({"image_id": images, "source": [f"s.jsonl:{n}" for n in range(8)]}), items / "images.parquet")
    pq.write_table(
        pa.table({"caption_id": captions, "image_id": [image_of[c] for c in captions], "source": [f"s.jsonl:{n}" for n in range(32)]}),
        items / "captions.parquet",
    )
    embeddings = root / "embeddings"
    for encoder in ("one", "two"):
        vectors = rng.normal(size=(len(captions), 6)).astype(np.float32)
        EmbeddingSet(captions, vectors).write(set_dir(str(embeddings), "text", encoder, CAPTIONS))
        means = [cocaption_mean([c for c in captions if image_of[c] == i], vectors[[image_of[c] == i for c in captions]]) for i in images]
        EmbeddingSet(images, np.stack(means)).write(set_dir(str(embeddings), "text", encoder, COCAPTION_MEAN))
    return items, embeddings


def run(root: Path, items: Path, embeddings: Path, out: str, **section) -> dict:
    params = root / "params.yaml"
    params.write_text(yaml.safe_dump({"base": {"seed": 4}, "filter": {"text_proxies": ["one", "two"], **section}}))
    return filter_stage.main(["--in", str(embeddings), "--items", str(items), "--out", str(root / out), "--params", str(params)])


def test_filter_stage_writes_every_output_deterministically(tmp_path: Path):
    items, embeddings = tiny_build(tmp_path)
    section = {"queries": "sample", "image_queries": 4, "caption_queries": 6, "top_k": 2, "negative_depth": 3, "batch_candidates": 5}
    report = run(tmp_path, items, embeddings, "a", **section)
    again = run(tmp_path, items, embeddings, "b", **section)
    out = tmp_path / "a"
    for name in ("candidates.parquet", "verify_candidates.csv", "batches.parquet", "gold.parquet", "diversity.json", "counts.json"):
        assert (out / name).read_bytes() == (tmp_path / "b" / name).read_bytes(), name
    assert {k: v for k, v in report.items() if k != "summary"} == {k: v for k, v in again.items() if k != "summary"}  # summary names --out
    assert (report["image_queries"], report["caption_queries"], report["pairs_before_dedupe"]) == (4, 6, 10 * 2 * 2)
    candidates = pq.read_table(out / "candidates.parquet").to_pandas()
    assert len(candidates) == report["candidates"] <= 40
    links = pq.read_table(items / "captions.parquet").to_pandas().set_index("caption_id").image_id
    assert (links[candidates.caption_id].to_numpy() != candidates.image_id.to_numpy()).all()  # no original pair
    rows = list(csv.reader((out / "verify_candidates.csv").open()))
    assert rows[0][:2] == ["published_image", "published_caption"] and len(rows) == len(candidates) + 1
    batches = pq.read_table(out / "batches.parquet").to_pandas()
    assert batches.groupby("batch_id").gold.apply(lambda g: sorted(g.tolist()).count("")).max() <= 5
    assert (batches.groupby("batch_id").gold.apply(lambda g: sorted(set(g) - {""})).map(tuple) == ("negative", "positive")).all()
    assert report["batches"]["negative_rule_violations"] == 0
    gold = pq.read_table(out / "gold.parquet").to_pandas()
    assert len(gold) == 2 * report["batches"]["batches"] and (gold[gold.gold == "negative"].in_top_lists == 0).all()
    diversity = json.loads((out / "diversity.json").read_text())
    assert [(p["a"], p["b"]) for p in diversity[I2T]["pairs"]] == [("text-proxy:one", "text-proxy:two")]
    assert report["annotators"] == ["text-proxy:one", "text-proxy:two"] and report["rejected"] == {}


def test_filter_stage_refuses_bad_settings_with_the_key(tmp_path: Path):
    items, embeddings = tiny_build(tmp_path)
    with pytest.raises(ParamError, match="negative_depth"):
        run(tmp_path, items, embeddings, "bad", top_k=5, negative_depth=3)
    with pytest.raises(FileNotFoundError, match="run the embed stage"):
        run(tmp_path, items, embeddings, "bad", text_proxies=["absent"])


@pytest.mark.xdist_group("karpathy")
def test_eccv_recipe_on_the_karpathy_test_split(karpathy_test: Path, tmp_path: Path):
    """ECCV's query set, two offline text proxies, top-5, negatives beyond top-25: counts,
    diversity, and how many of ECCV's released (human-verified) positives the candidates hold."""
    pytest.importorskip("eccv_caption")
    params = tmp_path / "params.yaml"
    params.write_text(yaml.safe_dump({"base": {"seed": 11}, "filter": {"text_proxies": ["use-m3", "bow-glove50"], "queries": "file"}}))
    out = tmp_path / "filter"
    argv = ["--in", str(karpathy_test / "embeddings"), "--items", str(karpathy_test / "items"), "--out", str(out), "--params", str(params)]
    report = filter_stage.main(argv)
    candidates = pq.read_table(out / "candidates.parquet").to_pandas()
    diversity = json.loads((out / "diversity.json").read_text())

    eccv, _ = load_eccv()
    reference = set(eccv.i2t) | {(i, c) for c, i in eccv.t2i}
    captions = pq.read_table(karpathy_test / "items" / "captions.parquet").to_pandas()
    originals = set(zip(captions.image_id, captions.caption_id, strict=True))
    pairs = set(zip(candidates.image_id, candidates.caption_id, strict=True))
    coverage = coverage_of(reference, pairs, originals)
    # Per ECCV file: its queries' positives against the candidates touching those queries.
    image_queries, caption_queries = {q for q, _ in eccv.i2t}, {q for q, _ in eccv.t2i}
    by_direction = {
        I2T: coverage_of(set(eccv.i2t), {p for p in pairs if p[0] in image_queries}, originals),
        T2I: coverage_of({(i, c) for c, i in eccv.t2i}, {p for p in pairs if p[1] in caption_queries}, originals),
    }
    print(f"\nqueries: {report['image_queries']} images, {report['caption_queries']} captions")
    print(f"candidates: {report['pairs_before_dedupe']} → {report['candidates']} after dedupe; batches {report['batches']}")
    for direction, facts in diversity.items():
        for p in facts["pairs"]:
            print(
                f"{direction} {p['a']} vs {p['b']}: tau-b(union) {p['kendall_tau_b']:.3f}, tau-b(own lists) "
                f"{p['kendall_tau_b_on_a_list']:.3f}/{p['kendall_tau_b_on_b_list']:.3f}, top-1 rank by other "
                f"{p['mean_rank_by_b_of_a_top1']:.1f}/{p['mean_rank_by_a_of_b_top1']:.1f} (median "
                f"{p['median_rank_by_b_of_a_top1']:.0f}/{p['median_rank_by_a_of_b_top1']:.0f}), top-5 overlap {p['top5_overlap']:.3f}"
            )
        for a, f in facts["annotators"].items():
            print(f"{direction} {a}: original R@1 {f['original_R@1']:.3f} R@5 {f['original_R@5']:.3f} (leave-one-out)")
    print(f"vs ECCV positives: {coverage}; per ECCV file: {by_direction}")

    assert (report["image_queries"], report["caption_queries"]) == (1261, 1332)  # ECCV's query set
    assert report["pairs_before_dedupe"] == (1261 + 1332) * 2 * 5
    assert report["candidates"] == pytest.approx(22565, rel=0.01)  # 13% were found twice
    assert not pairs & originals and candidates.best_rank.max() == 5
    assert report["batches"]["negative_rule_violations"] == 0 and report["batches"]["negatives"] == report["batches"]["batches"]
    assert report["batches"]["batches"] == -(-report["candidates"] // 16)
    i2t = diversity[I2T]["pairs"][0]
    t2i = diversity[T2I]["pairs"][0]
    assert i2t["kendall_tau_b"] == pytest.approx(-0.307, abs=0.03) and t2i["kendall_tau_b"] == pytest.approx(-0.172, abs=0.03)
    assert 0.10 < i2t["kendall_tau_b_on_a_list"] < 0.25 and 0.15 < t2i["kendall_tau_b_on_a_list"] < 0.30
    assert i2t["top5_overlap"] == pytest.approx(0.139, abs=0.02) and t2i["top5_overlap"] == pytest.approx(0.250, abs=0.02)
    assert t2i["median_rank_by_b_of_a_top1"] == pytest.approx(11, abs=3)
    use_t2i = diversity[T2I]["annotators"]["text-proxy:use-m3"]
    assert use_t2i["original_R@1"] == pytest.approx(0.365, abs=0.03)  # leave-one-out: far from the 1.0 a self-vote gives
    assert coverage["recall"] == pytest.approx(0.189, abs=0.02) and coverage["precision"] == pytest.approx(0.180, abs=0.02)
    assert by_direction[I2T]["recall"] == pytest.approx(0.171, abs=0.02) and by_direction[T2I]["recall"] == pytest.approx(0.298, abs=0.02)
