"""The ECCV machine-annotator filter on small hand-checkable cases."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from crisscross.annotate.catalog import Catalog
from crisscross.annotate.items import verify_items
from crisscross.candidates.annotators import TextProxyModel
from crisscross.candidates.diversity import coverage_of, diversity_report
from crisscross.candidates.machine import (
    FilterSettings,
    QueryLists,
    candidate_pairs,
    candidates_table,
    read_query_file,
    retrieve,
    select_queries,
    top_columns,
)
from crisscross.candidates.verify_batches import plan_batches
from crisscross.core.errors import InputError, ParamError
from crisscross.embed.sets import EmbeddingSet, cocaption_mean
from crisscross.scoring.models import Gallery, ScoreMatrixModel

I = [f"coco:img:{n}" for n in range(5)]  # noqa: E741 - images i0..i4
C = [f"coco:cap:{10 + n}" for n in range(5)]  # caption c_n belongs to image i_n


def small_gallery() -> Gallery:
    return Gallery(tuple(I), tuple(C), {c: i for c, i in zip(C, I, strict=True)})


def two_annotators() -> dict[str, ScoreMatrixModel]:
    """Rows images, columns captions.  Query c0 (t2i) and query i1 (i2t) are the ones that matter."""
    a = np.zeros((5, 5))
    a[:, 0] = [9, 4, 3, 2, 1]  # c0: i0 (its own image) then i1 > i2 > i3 > i4
    a[1] = [4, 5, 1, 2, 3]  # i1: c1 (own) then c0 > c4 > c3 > c2
    b = np.zeros((5, 5))
    b[:, 0] = [0, 1, 4, 3, 2]  # c0: i2 > i3 > i4 > i1, own image last
    b[1] = [1, 9, 2, 3, 4]  # i1: c4 > c3 > c2 > c0
    return {"A": ScoreMatrixModel("A", a, I, C), "B": ScoreMatrixModel("B", b, I, C)}


def lists_for(depth: int = 2) -> list[QueryLists]:
    gallery, models = small_gallery(), two_annotators()
    return retrieve(models, gallery, "t2i", [C[0]], depth) + retrieve(models, gallery, "i2t", [I[1]], depth)


# --------------------------------------------------------------------------- text proxy


def proxy_fixture() -> tuple[TextProxyModel, dict[str, np.ndarray], dict[str, str]]:
    rng = np.random.default_rng(3)
    links = {"coco:cap:1": "coco:img:1", "coco:cap:2": "coco:img:1", "coco:cap:3": "coco:img:1"}
    links |= {"coco:cap:4": "coco:img:2", "coco:cap:5": "coco:img:2", "coco:cap:6": "coco:img:3"}
    captions = sorted(links)
    vectors = rng.normal(size=(len(captions), 4)).astype(np.float32) * rng.uniform(0.5, 3, size=(len(captions), 1)).astype(np.float32)
    images = sorted(set(links.values()))
    means = np.stack(
        [
            cocaption_mean([c for c in captions if links[c] == i], vectors[[captions.index(c) for c in captions if links[c] == i]])
            for i in images
        ]
    )
    model = TextProxyModel("proxy", EmbeddingSet(captions, vectors), EmbeddingSet(images, means), links)
    unit = {c: vectors[k] / np.linalg.norm(vectors[k]) for k, c in enumerate(captions)}
    return model, unit, links


def cos(x: np.ndarray, y: np.ndarray) -> float:
    return float(x @ y / np.linalg.norm(x) / np.linalg.norm(y))


def test_text_proxy_scores_an_own_pair_by_the_other_captions_only():
    model, unit, links = proxy_fixture()
    captions, images = sorted(links), sorted(set(links.values()))
    expected = np.zeros((len(images), len(captions)))
    for r, image in enumerate(images):
        members = [c for c in captions if links[c] == image]
        for col, caption in enumerate(captions):
            others = [unit[c] for c in members if c != caption]
            if caption in members and not others:
                expected[r, col] = -np.inf  # a lone caption has nobody else to vote
            else:
                expected[r, col] = cos(unit[caption], np.mean(others if caption in members else [unit[c] for c in members], axis=0))
    got_i2t = model.block_scores("img", images, "cap", captions)(0, len(images))
    got_t2i = model.block_scores("cap", captions, "img", images)(0, len(captions))
    np.testing.assert_allclose(got_i2t, expected, atol=1e-5)
    np.testing.assert_allclose(got_t2i, expected.T, atol=1e-5)
    # Blocks that start mid-way fix the right own pairs too.
    np.testing.assert_allclose(model.block_scores("img", images, "cap", captions)(1, 3), expected[1:3], atol=1e-5)
    np.testing.assert_allclose(model.block_scores("cap", captions, "img", images)(2, 5), expected.T[2:5], atol=1e-5)
    pairs = [(i, c) for i in images for c in captions]
    pair = model.pair_scores("img", [p[0] for p in pairs], "cap", [p[1] for p in pairs])
    np.testing.assert_allclose(pair, expected.ravel(), atol=1e-5)
    # Without leave-one-out an own caption would score far above what its co-captions give it.
    own = model.pair_scores("cap", ["coco:cap:1"], "img", ["coco:img:1"])[0]
    full = cos(unit["coco:cap:1"], np.mean([unit[c] for c in ("coco:cap:1", "coco:cap:2", "coco:cap:3")], axis=0))
    assert own < full


def test_text_proxy_refuses_means_that_are_not_the_caption_means():
    _, unit, links = proxy_fixture()
    captions = sorted(links)
    bad = EmbeddingSet(["coco:img:1", "coco:img:2", "coco:img:3"], np.ones((3, 4), dtype=np.float32))
    with pytest.raises(ValueError, match="not the means"):
        TextProxyModel("proxy", EmbeddingSet(captions, np.stack([unit[c] for c in captions])), bad, links)


# --------------------------------------------------------------------------- lists and candidates


def test_top_columns_break_ties_by_position():
    scores = np.array([[1.0, 3.0, 3.0, 2.0], [0.0, 0.0, 0.0, 0.0]])
    assert top_columns(scores, 3).tolist() == [[1, 2, 3], [0, 1, 2]]


def test_top_k_union_dedupes_across_directions_keeps_provenance_and_never_holds_originals():
    lists = lists_for()
    candidates = candidate_pairs(lists, top_k=2)
    assert set(candidates) == {(I[1], C[0]), (I[2], C[0]), (I[3], C[0]), (I[1], C[4]), (I[1], C[3])}  # 8 findings → 5 pairs
    assert [(f.rank, f.annotator, f.direction, f.query) for f in candidates[(I[2], C[0])]] == [(1, "B", "t2i", C[0]), (2, "A", "t2i", C[0])]
    assert [(f.annotator, f.direction) for f in candidates[(I[1], C[0])]] == [("A", "i2t"), ("A", "t2i")]  # found from both ends
    assert candidates[(I[1], C[0])][0].score == 4.0
    assert not {(I[0], C[0]), (I[1], C[1])} & set(candidates)  # the queries' own pairs are gold, never candidates
    table = candidates_table(candidates)
    row = table.to_pylist()[[r["image_id"] for r in table.to_pylist()].index(I[1])]
    assert (row["caption_id"], row["annotators"], row["n_annotators"], row["best_rank"]) == (C[0], "A", 1, 1)
    assert row["published_image"] == "COCO_val2014_000000000001.jpg" and row["method"] == "retrieved"
    assert json.loads(row["provenance"])[0] == {"annotator": "A", "direction": "i2t", "query": I[1], "rank": 1, "score": 4.0}
    # The tasks stage turns the table into VERIFY items as it is.
    catalog = Catalog(
        texts={c: f"caption {c}" for c in C},
        image_of=dict(zip(C, I, strict=True)),
        paths={i: f"{i}.jpg" for i in I},
        pixels=dict.fromkeys(I, "ok"),
    )
    items, rejected = verify_items(table, catalog)
    assert items.num_rows == 5 and not rejected and set(items.column("task_type").to_pylist()) == {"VERIFY"}


def test_batches_hold_an_original_positive_and_a_negative_outside_every_top_list():
    lists = lists_for(depth=2)
    candidates = candidate_pairs(lists, top_k=2)
    plan = plan_batches(candidates, lists, small_gallery(), per_batch=3, seed=5)
    rows = plan.batches.to_pylist()
    by_batch: dict[str, list[dict]] = {}
    for r in rows:
        by_batch.setdefault(r["batch_id"], []).append(r)
    first, second = (by_batch[k] for k in sorted(by_batch))
    gold = lambda batch, kind: [(r["image_id"], r["caption_id"]) for r in batch if r["gold"] == kind]
    # Batch 1 holds query i1's candidates: c2 is the only caption in neither top-2 list nor original.
    assert gold(first, "positive") == [(I[1], C[1])] and gold(first, "negative") == [(I[1], C[2])]
    # Batch 2 holds query c0's: i4 is the only image left for its negative.
    assert gold(second, "positive") == [(I[0], C[0])] and gold(second, "negative") == [(I[4], C[0])]
    assert [len(first), len(second)] == [5, 4]  # 3 + 2 candidates, each with 2 gold
    assert sorted(r["position"] for r in first) == [1, 2, 3, 4, 5]
    assert plan.facts["negative_rule_violations"] == 0 and plan.facts["negatives"] == 2
    assert all(r["in_top_lists"] == 0 for r in rows if r["gold"] == "negative")
    assert all(r["in_top_lists"] >= 1 for r in rows if r["gold"] == "")
    # Deeper lists leave no allowed negative for c0 at all: counted, never faked.
    deep = lists_for(depth=4)
    plan = plan_batches(candidate_pairs(deep, top_k=2), deep, small_gallery(), per_batch=3, seed=5)
    assert plan.facts["missing_negative"] == 2 and plan.facts["negative_rule_violations"] == 0


def test_diversity_numbers_by_hand():
    report = diversity_report(lists_for(depth=2), top_k=2)
    pair = report["t2i"]["pairs"][0]
    assert (pair["a"], pair["b"]) == ("A", "B")
    # Union of top-2 lists {i1, i2, i3}: A 4 > 3 > 2, B 1 < 4 > 3 → 1 concordant, 2 discordant pairs.
    assert pair["kendall_tau_b"] == pytest.approx(-1 / 3)
    assert pair["kendall_tau_b_on_a_list"] == pytest.approx(-1.0)  # {i1, i2}: A 4 > 3, B 1 < 4
    assert pair["kendall_tau_b_on_b_list"] == pytest.approx(1.0)  # {i2, i3}: both decrease
    assert pair["mean_rank_by_b_of_a_top1"] == 4.0  # B puts A's best (i1) below i2, i3, i4
    assert pair["mean_rank_by_a_of_b_top1"] == 2.0  # A puts B's best (i2) after i1
    assert pair["top2_overlap"] == 0.5 and pair["top1_agree"] == 0.0
    assert report["t2i"]["annotators"]["A"]["original_R@1"] == 1.0  # own image i0 first under A
    assert report["t2i"]["annotators"]["B"]["original_median_rank"] == 5.0  # and last under B


# --------------------------------------------------------------------------- queries


def test_sampled_queries_are_seeded_and_file_queries_reject_unknown_ids(tmp_path: Path):
    gallery = small_gallery()
    settings = FilterSettings(image_queries=2, caption_queries=3)
    first, _ = select_queries(settings, gallery, seed=1)
    assert (len(first.images), len(first.captions)) == (2, 3) and first == select_queries(settings, gallery, seed=1)[0]
    listing = tmp_path / "queries.txt"
    listing.write_text(f"{I[2]}\n# a comment\n{C[4]}\ncoco:img:99\nnot-an-id\n")
    queries, rejected = select_queries(FilterSettings(queries="file", query_file=str(listing)), gallery, seed=1)
    assert (queries.images, queries.captions) == ((I[2],), (C[4],))
    assert sorted(r.reason for r in rejected) == ["bad-id", "unknown-query"]


def test_the_eccv_query_set_is_read_from_the_package():
    pytest.importorskip("eccv_caption")
    listed, rejected = read_query_file("eccv")
    kinds = pd.Series([q.split(":")[1] for q, _ in listed]).value_counts().to_dict()
    assert kinds == {"img": 1261, "cap": 1332} and not rejected


def test_settings_cross_checks():
    with pytest.raises(ParamError, match="negative_depth"):
        FilterSettings(top_k=30).check()
    with pytest.raises(ParamError, match="both empty"):
        FilterSettings(text_proxies=()).check()


def test_coverage_counts_new_positives_only():
    facts = coverage_of(reference={("i", "a"), ("i", "b"), ("i", "o")}, candidates={("i", "a"), ("i", "x")}, originals={("i", "o")})
    assert (facts["recall"], facts["precision"]) == (0.5, 0.5)


def test_query_files_python_cannot_read_are_one_line_errors(tmp_path: Path):
    # a file that is not UTF-8 raised UnicodeDecodeError; an ECCV folder's file that is no JSON object,
    # or nested too deeply, raised AttributeError / RecursionError
    listing = tmp_path / "queries.txt"
    listing.write_bytes(b"coco:img:1\n\xff\n")
    with pytest.raises(InputError, match="queries.txt: not UTF-8"):
        read_query_file(str(listing))
    folder = tmp_path / "eccv"
    folder.mkdir()
    (folder / "eccv_caption_to_image.json").write_text("{}")
    for data in ("[1, 2]", "[" * 100_000 + "]" * 100_000):
        (folder / "eccv_image_to_caption.json").write_text(data)
        with pytest.raises(InputError, match="eccv_image_to_caption.json: ") as raised:
            read_query_file(str(folder))
        assert len(str(raised.value).splitlines()) == 1
