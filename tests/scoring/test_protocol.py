"""Evaluation library: galleries and folds, models, guards, and every metric against the dense /
per-query references on seeded synthetic data."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest

from benchmarks.reference import reference_pmrp_hits, reference_retrieval
from crisscross.core.errors import InputError
from crisscross.core.ids import CAPTION_KIND, IMAGE_KIND
from crisscross.embed.sets import EmbeddingSet
from crisscross.scoring.models import (
    ALL,
    FOLDS,
    CoverageError,
    EmbeddingModel,
    Gallery,
    ScoreMatrixModel,
    map_score_blocks,
    score_matrix_model,
)
from crisscross.scoring.paired import bootstrap_spearman
from crisscross.scoring.protocol import (
    Settings,
    average_folds,
    bootstrap_rng,
    evaluate,
    evaluate_bison,
    evaluate_pmrp,
    model_ranking_agreement,
    positives_agreement,
    recall_curve,
    retrieval_ranks,
)
from crisscross.scoring.retrieval import metrics_from_ranks, pmrp
from crisscross.scoring.truths import GroundTruth

N_IMAGES, PER_IMAGE, DIM = 40, 3, 16


def synthetic(seed: int = 0) -> tuple[Gallery, EmbeddingModel, GroundTruth]:
    """40 images × 3 captions; captions lie near their image in one space; positives are the
    original links, co-captions (t2t), and a few image pairs (i2i) plus graded ratings."""
    rng = np.random.default_rng(seed)
    images = [f"t:img:{i:03d}" for i in range(N_IMAGES)]
    captions = [f"t:cap:{i:03d}-{j}" for i in range(N_IMAGES) for j in range(PER_IMAGE)]
    image_vectors = rng.standard_normal((N_IMAGES, DIM))
    caption_vectors = np.repeat(image_vectors, PER_IMAGE, axis=0) + 1.2 * rng.standard_normal((len(captions), DIM))
    links = {c: images[k // PER_IMAGE] for k, c in enumerate(captions)}
    # Source order differs from id order: the gallery must follow the source.
    order = rng.permutation(N_IMAGES)
    gallery = Gallery(
        tuple(images[i] for i in order), tuple(c for i in order for c in captions[i * PER_IMAGE : (i + 1) * PER_IMAGE]), links
    )
    i2i = {(images[i], images[(i + 1) % N_IMAGES]) for i in range(0, N_IMAGES, 4)}
    i2i |= {(b, a) for a, b in i2i}
    sts = tuple((captions[k], captions[(k + 7) % len(captions)], float(rng.integers(0, 6))) for k in range(len(captions)))
    truth = GroundTruth(
        name="synthetic",
        i2t=frozenset((img, cap) for cap, img in links.items()),
        t2i=frozenset(links.items()),
        t2t=frozenset((a, b) for a in captions for b in captions if a != b and links[a] == links[b]),
        i2i=frozenset(i2i),
        sts=sts,
    )
    sets = {
        IMAGE_KIND: EmbeddingSet(images, image_vectors.astype(np.float32)),
        CAPTION_KIND: EmbeddingSet(captions, caption_vectors.astype(np.float32)),
    }
    return gallery, EmbeddingModel("joint", sets, joint=True), truth


def dense(model: EmbeddingModel, gallery: Gallery, truth: GroundTruth, task: str):
    kinds = {
        "i2t": (IMAGE_KIND, CAPTION_KIND),
        "t2i": (CAPTION_KIND, IMAGE_KIND),
        "t2t": (CAPTION_KIND, CAPTION_KIND),
        "i2i": (IMAGE_KIND, IMAGE_KIND),
    }[task]
    q_ids, g_ids = gallery.ids(kinds[0]), gallery.ids(kinds[1])
    scores = model.block_scores(kinds[0], q_ids, kinds[1], g_ids)(0, len(q_ids))
    pairs = truth.pairs(task)
    mask = np.array([[(q, g) in pairs for g in g_ids] for q in q_ids])
    exclude = np.arange(len(q_ids)) if kinds[0] == kinds[1] else None
    return scores, mask, exclude


@pytest.mark.parametrize("task", ["i2t", "t2i", "t2t", "i2i"])
def test_retrieval_in_blocks_matches_the_per_query_reference(task, monkeypatch):
    gallery, model, truth = synthetic()
    monkeypatch.setattr("crisscross.scoring.models.SCORE_BLOCK_ELEMENTS", 7 * 120)  # several query blocks
    ranked, missing = retrieval_ranks(model, truth, gallery, task)
    got = metrics_from_ranks(ranked)
    want = reference_retrieval(*dense(model, gallery, truth, task))
    assert missing == 0
    for key, value in want.items():
        assert got[key] == pytest.approx(value), key
    # i2i: only 20 of 40 images have a positive; the rest are counted, not scored
    assert got["queries_without_positive"] == (20 if task == "i2i" else 0)


def test_score_blocks_reuse_one_buffer_and_equal_block_scores():
    gallery, model, _ = synthetic()
    images, captions = gallery.ids(IMAGE_KIND), gallery.ids(CAPTION_KIND)
    block = model.block_scores(IMAGE_KIND, images, CAPTION_KIND, captions)
    whole = block(0, len(images))
    seen = []
    for lo, hi, scores in model.score_blocks(IMAGE_KIND, images, CAPTION_KIND, captions, 7):
        np.testing.assert_array_equal(scores, block(lo, hi))  # bit for bit: the same BLAS call, into the reused buffer
        # Another row count is another GEMM call: with the policy's AVX2 kernel its last bit may differ.
        np.testing.assert_allclose(scores, whole[lo:hi], rtol=0, atol=1e-6)
        seen.append((lo, hi, scores.__array_interface__["data"][0]))
    assert [(lo, hi) for lo, hi, _ in seen] == [(lo, min(lo + 7, len(images))) for lo in range(0, len(images), 7)]
    assert len({address for _, _, address in seen}) == 1


def test_recall_curve_is_cumulative_r_at_k():
    first = np.array([1, 3, 0, 2, 60])
    curve = recall_curve(first, 5)
    assert curve == [0.25, 0.5, 0.75, 0.75, 0.75]


def test_gallery_from_items_follows_source_order_and_folds_keep_captions():
    images = pa.table({"image_id": ["x:img:b", "x:img:a", "x:img:c"], "source": ["f:10", "f:2", "f:30"]})
    captions = pa.table(
        {
            "caption_id": ["x:cap:3", "x:cap:1", "x:cap:2", "x:cap:4"],
            "image_id": ["x:img:b", "x:img:a", "x:img:a", "x:img:c"],
            "source": ["f:10", "f:2", "f:3", "f:30"],
        }
    )
    gallery = Gallery.from_items(images, captions)
    assert gallery.image_ids == ("x:img:a", "x:img:b", "x:img:c")
    assert gallery.caption_ids == ("x:cap:1", "x:cap:2", "x:cap:3", "x:cap:4")
    folds = gallery.folds(2)
    assert [f.image_ids for f in folds] == [("x:img:a", "x:img:b"), ("x:img:c",)]
    assert [f.caption_ids for f in folds] == [("x:cap:1", "x:cap:2", "x:cap:3"), ("x:cap:4",)]
    with pytest.raises(ValueError, match="cannot split 3 images into 4 folds"):
        gallery.folds(4)


def test_folds_protocol_averages_per_fold_values():
    gallery, model, truth = synthetic()
    settings = Settings(tasks=("i2t",), ratings=(), folds=4, bootstrap_samples=10)
    result = evaluate(model, truth, "synthetic", gallery, settings)
    per_fold = []
    for fold in gallery.folds(4):
        per_fold.append(reference_retrieval(*dense(model, fold, truth, "i2t")))
    for key in ("R@1", "R@5", "median_rank", "mAP@R"):
        assert result[FOLDS][key]["i2t"] == pytest.approx(np.mean([f[key] for f in per_fold]))
    assert result[FOLDS]["queries"]["i2t"] == N_IMAGES and result[FOLDS]["folds"]["i2t"] == 4
    # a smaller gallery is easier: fold recall is at least the whole-gallery recall here
    assert result[FOLDS]["R@1"]["i2t"] >= result[ALL]["R@1"]["i2t"]


def test_average_folds_sums_counts_and_averages_rates():
    merged = average_folds(
        [{"R@1": 0.5, "queries": 10.0, "recall_curve": [0.5, 1.0]}, {"R@1": 0.7, "queries": 12.0, "recall_curve": [0.7, 0.9]}]
    )
    assert merged["R@1"] == pytest.approx(0.6) and merged["queries"] == 22 and merged["recall_curve"] == pytest.approx([0.6, 0.95])


def test_text_only_model_scores_only_text_tasks_and_ratings():
    gallery, joint, truth = synthetic()
    text_only = EmbeddingModel("text", {CAPTION_KIND: joint.sets[CAPTION_KIND]}, joint=False)
    settings = Settings(folds=1, bootstrap_samples=50, seed=3)
    result = evaluate(text_only, truth, "synthetic", gallery, settings)
    assert set(result) == {ALL}
    assert set(result[ALL]["R@1"]) == {"t2t"}
    assert set(result[ALL]["spearman"]) == {"sts"}
    # the bootstrap value is bootstrap_spearman on the rated pairs with the same seeded draws
    a = [r[0] for r in truth.sts]
    b = [r[1] for r in truth.sts]
    model_scores = text_only.pair_scores(CAPTION_KIND, a, CAPTION_KIND, b)
    want = bootstrap_spearman(a, b, [r[2] for r in truth.sts], model_scores, 50, bootstrap_rng(3, "synthetic", "sts"))
    assert result[ALL]["spearman"]["sts"] == pytest.approx(want[0])
    assert result[ALL]["spearman_std"]["sts"] == pytest.approx(want[1])
    assert result[ALL]["pairs"]["sts"] == len(truth.sts)


def test_ratings_outside_the_gallery_are_counted_not_scored():
    gallery, joint, truth = synthetic()
    small = gallery.folds(2)[0]
    result = evaluate(joint, truth, "synthetic", small, Settings(tasks=(), folds=1, bootstrap_samples=20))
    inside = result[ALL]["pairs"]["sts"]
    assert 0 < inside < len(truth.sts)
    assert inside + result[ALL]["pairs_outside_gallery"]["sts"] == len(truth.sts)


def test_a_gallery_the_model_does_not_cover_is_refused():
    gallery, joint, truth = synthetic()
    sets = dict(joint.sets)
    keep = sets[CAPTION_KIND].ids[1:]
    sets[CAPTION_KIND] = EmbeddingSet(keep, np.asarray(sets[CAPTION_KIND].vectors[1:]))
    partial = EmbeddingModel("partial", sets, joint=True)
    with pytest.raises(CoverageError, match="no cap vector for 1 of the 120 t2t queries"):
        retrieval_ranks(partial, truth, gallery, "t2t")


def test_zero_vectors_are_refused():
    gallery, joint, truth = synthetic()
    vectors = np.asarray(joint.sets[IMAGE_KIND].vectors).copy()
    vectors[5] = 0
    broken = EmbeddingModel("broken", {**joint.sets, IMAGE_KIND: EmbeddingSet(joint.sets[IMAGE_KIND].ids, vectors)}, joint=True)
    with pytest.raises(CoverageError, match="1 zero or non-finite img vectors"):
        retrieval_ranks(broken, truth, gallery, "i2i")


def test_score_matrix_model_matches_embeddings_and_checks_orientation():
    gallery, joint, truth = synthetic()
    images, captions = list(gallery.image_ids), list(gallery.caption_ids)
    matrix = joint.block_scores(IMAGE_KIND, images, CAPTION_KIND, captions)(0, len(images))
    model = ScoreMatrixModel("matrix", matrix, images, captions)
    for task in ("i2t", "t2i"):
        got = metrics_from_ranks(retrieval_ranks(model, truth, gallery, task)[0])
        want = metrics_from_ranks(retrieval_ranks(joint, truth, gallery, task)[0])
        assert got == pytest.approx(want)
    assert not model.can_compare(CAPTION_KIND, CAPTION_KIND)
    with pytest.raises(ValueError, match="looks transposed"):
        ScoreMatrixModel("t", matrix.T, images, captions)
    bad = matrix.copy()
    bad[0, 0] = np.nan
    with pytest.raises(ValueError, match="1 NaN or infinite"):
        ScoreMatrixModel("nan", bad, images, captions)
    repeated = [*captions[:-1], captions[0]]
    with pytest.raises(ValueError, match=rf"caption_ids of model 'dup': id '{captions[0]}' appears at rows 0 and {len(captions) - 1}"):
        ScoreMatrixModel("dup", matrix, images, repeated)


def test_pmrp_in_blocks_matches_the_dense_call(monkeypatch):
    gallery, joint, truth = synthetic()
    rng = np.random.default_rng(4)
    labels = {img: tuple(np.flatnonzero(rng.random(6) < 0.3).tolist()) for img in gallery.image_ids}
    monkeypatch.setattr("crisscross.scoring.protocol.BLOCK_ELEMENTS", 11 * N_IMAGES * PER_IMAGE)
    settings = Settings(tasks=("i2t",), ratings=(), folds=1, pmrp_zetas=(0, 1), pmrp_r_cap=5)
    result = evaluate(joint, truth, "synthetic", gallery, settings, labels=labels)
    scores, _, _ = dense(joint, gallery, truth, "i2t")
    q_lab = np.zeros((N_IMAGES, 6), bool)
    for row, img in enumerate(gallery.image_ids):
        q_lab[row, list(labels[img])] = True
    g_lab = np.array([q_lab[gallery.image_ids.index(gallery.caption_image[c])] for c in gallery.caption_ids])
    for zeta in (0, 1):
        assert result[ALL][f"PMRP@zeta={zeta}"]["i2t"] == pytest.approx(pmrp(scores, q_lab, g_lab, zeta, 5)[0])


def pmrp_labels(gallery: Gallery, seed: int) -> tuple[dict[str, tuple[int, ...]], np.ndarray, np.ndarray]:
    """Random labels of 4 classes per image, and the image and caption label rows."""
    rng = np.random.default_rng(seed)
    labels = {img: tuple(np.flatnonzero(rng.random(4) < 0.4).tolist()) for img in gallery.image_ids}
    image_labels = np.zeros((N_IMAGES, 4), dtype=bool)
    for row, img in enumerate(gallery.image_ids):
        image_labels[row, list(labels[img])] = True
    caption_labels = np.array([image_labels[gallery.image_ids.index(gallery.caption_image[c])] for c in gallery.caption_ids])
    return labels, image_labels, caption_labels


@pytest.mark.parametrize("task", ["i2t", "t2i"])
def test_pmrp_weights_each_block_of_block_elements_by_its_queries_on_any_thread_count(task, monkeypatch):
    """The value every release wrote, to the byte: per block of BLOCK_ELEMENTS scores the mean of
    the per-query reference's hits / R, weighted by the block's queries with a match, summed in
    block order, on 1, 2 or 5 threads (scores held by the model: the reference reads the same)."""
    gallery, joint, _ = synthetic()
    labels, image_labels, caption_labels = pmrp_labels(gallery, 9)
    images, captions = gallery.ids(IMAGE_KIND), gallery.ids(CAPTION_KIND)
    model = ScoreMatrixModel("matrix", joint.block_scores(IMAGE_KIND, images, CAPTION_KIND, captions)(0, len(images)), images, captions)
    query_kind, item_kind = (IMAGE_KIND, CAPTION_KIND) if task == "i2t" else (CAPTION_KIND, IMAGE_KIND)
    q_lab, g_lab = (image_labels, caption_labels) if task == "i2t" else (caption_labels, image_labels)
    query_ids, item_ids = gallery.ids(query_kind), gallery.ids(item_kind)
    monkeypatch.setattr("crisscross.scoring.protocol.BLOCK_ELEMENTS", 3 * len(item_ids))  # blocks of 3 queries
    got = {threads: evaluate_pmrp(model, gallery, task, labels, (0, 1, 2), 4, threads) for threads in (1, 2, 5)}
    assert got[1] == got[2] == got[5]
    scores = model.block_scores(query_kind, query_ids, item_kind, item_ids)(0, len(query_ids))
    for zeta in (0, 1, 2):
        total, counted = 0.0, 0
        for lo in range(0, len(query_ids), 3):
            per_query = reference_pmrp_hits(scores[lo : lo + 3], q_lab[lo : lo + 3], g_lab, zeta, 4, None)
            rates = [hits / r for hits, r in per_query if r]
            if rates:
                total += float(np.mean(rates)) * len(rates)
                counted += len(rates)
        assert got[1][f"PMRP@zeta={zeta}"] == total / counted


def test_pmrp_of_an_intramodal_task_is_the_same_for_any_thread_count(monkeypatch):
    gallery, joint, _ = synthetic()
    labels, _, caption_labels = pmrp_labels(gallery, 5)
    monkeypatch.setattr("crisscross.scoring.protocol.BLOCK_ELEMENTS", 7 * len(gallery.caption_ids))
    got = {threads: evaluate_pmrp(joint, gallery, "t2t", labels, (0, 2), 3, threads) for threads in (1, 3)}
    assert got[1] == got[3]
    scores, _, exclude = dense(joint, gallery, GroundTruth(name="none"), "t2t")
    for zeta in (0, 2):
        assert got[1][f"PMRP@zeta={zeta}"] == pytest.approx(pmrp(scores, caption_labels, caption_labels, zeta, 3, exclude)[0])


def test_map_score_blocks_hands_every_block_in_order_on_any_thread_count():
    gallery, joint, _ = synthetic()
    images, captions = gallery.ids(IMAGE_KIND), gallery.ids(CAPTION_KIND)
    matrix = ScoreMatrixModel("matrix", joint.block_scores(IMAGE_KIND, images, CAPTION_KIND, captions)(0, len(images)), images, captions)
    for model in (joint, matrix):
        block = model.block_scores(IMAGE_KIND, images, CAPTION_KIND, captions)
        for threads in (1, 3):
            seen = map_score_blocks(model, IMAGE_KIND, images, CAPTION_KIND, captions, 6, lambda lo, hi, s: (lo, hi, s.copy()), threads)
            assert [(lo, hi) for lo, hi, _ in seen] == [(lo, min(lo + 6, len(images))) for lo in range(0, len(images), 6)]
            for lo, hi, scores in seen:
                np.testing.assert_array_equal(scores, block(lo, hi))  # bit for bit: the same BLAS call per block


def test_bison_accuracy_from_model_scores():
    gallery, joint, _ = synthetic()
    caption = gallery.caption_ids[0]
    target = gallery.caption_image[caption]
    decoy = next(i for i in gallery.image_ids if i != target)
    triples = pa.table({"caption": [caption, caption], "target": [target, decoy], "decoy": [decoy, target]})
    result = evaluate_bison(joint, triples)
    assert result == {"accuracy": 0.5, "triples": 2.0}  # one of the two orders must be right


def test_model_ranking_agreement_and_positives_agreement():
    results = {
        m: {"coco": {ALL: {"R@1": {"i2t": r}}}, "eccv": {ALL: {"mAP@R": {"i2t": p}}}}
        for m, r, p in (("a", 0.1, 0.2), ("b", 0.2, 0.1), ("c", 0.3, 0.3), ("d", 0.4, 0.4))
    }
    (row,) = model_ranking_agreement(results)
    assert row["a"] == "coco R@1" and row["b"] == "eccv mAP@R" and row["models"] == 4
    assert row["tau_b"] == pytest.approx(4 / 6)  # five concordant pairs, one discordant
    gallery, _, truth = synthetic()
    verified = GroundTruth(name="v", i2t=frozenset(sorted(truth.i2t)[:10]))
    (i2t,) = positives_agreement({"v": verified, "synthetic": truth}, "v", gallery)
    # the queries of the 10 verified pairs are 4 images with 3 captions each: 12 predicted pairs
    assert i2t["precision"] == pytest.approx(10 / 12) and i2t["recall"] == 1.0


def test_a_score_matrix_file_numpy_cannot_load_is_one_line(tmp_path):
    # np.load's ValueError (not an .npz, a pickled object array) and BadZipFile were tracebacks
    objects = tmp_path / "objects.npz"
    np.savez(objects, scores=np.zeros((1, 1)), image_ids=np.array([{"a": 1}], dtype=object), caption_ids=np.array(["coco:cap:1"]))
    for path, data in ((tmp_path / "text.npz", b"not numpy"), (tmp_path / "cut.npz", objects.read_bytes()[:200]), (objects, None)):
        if data is not None:
            path.write_bytes(data)
        with pytest.raises(InputError, match=f"score matrix {path} is no readable .npz") as raised:
            score_matrix_model("m", embeddings="", path=str(path))
        assert len(str(raised.value).splitlines()) == 1
