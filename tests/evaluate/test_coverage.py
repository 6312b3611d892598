"""Partial coverage (a model scored on the sub-gallery it covers) and the R rule of mAP@R /
R-Precision (positives outside the gallery counted in R or not), on seeded synthetic data."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest

from benchmarks.reference import reference_retrieval
from crisscross.core.errors import ParamError, UserError
from crisscross.core.ids import CAPTION_KIND, IMAGE_KIND
from crisscross.core.settings import settings_from_params
from crisscross.embed.sets import EmbeddingSet
from crisscross.scoring.models import ALL, FOLDS, CoverageError, EmbeddingModel, ScoreMatrixModel, gallery_rule
from crisscross.scoring.protocol import EvaluateSettings, Settings, evaluate, evaluate_bison, model_gallery, retrieval_ranks
from crisscross.scoring.retrieval import PositiveRanks, Positives, map_at_r, metrics_from_ranks, r_precision, ranks_of_positives
from crisscross.scoring.truths import COMPAT_R, GroundTruth
from tests.scoring.test_protocol import N_IMAGES, PER_IMAGE, dense, synthetic

SETTINGS = Settings(ratings=(), folds=2, bootstrap_samples=10)


def without_images(model: EmbeddingModel, drop: set[str], kinds=(IMAGE_KIND, CAPTION_KIND)) -> EmbeddingModel:
    """The same model with no vector for the images in ``drop`` (and only ``kinds``)."""
    sets = {}
    for kind in kinds:
        ids = model.sets[kind].ids
        keep = [k for k, i in enumerate(ids) if i not in drop]
        sets[kind] = EmbeddingSet([ids[k] for k in keep], np.asarray(model.sets[kind].vectors)[keep])
    return EmbeddingModel(model.name, sets, joint=len(kinds) == 2)


def dropped_images(gallery, every: int = 4) -> set[str]:
    return set(gallery.image_ids[::every])


def test_an_image_only_model_is_scored_on_the_images_it_covers_by_default():
    gallery, joint, truth = synthetic()
    drop = dropped_images(gallery)
    image_only = without_images(joint, drop, kinds=(IMAGE_KIND,))
    chosen = model_gallery(image_only, gallery, SETTINGS)  # default rule: auto
    assert chosen.rule == "covered" and chosen.partial
    assert chosen.gallery.image_ids == tuple(i for i in gallery.image_ids if i not in drop)
    assert chosen.note == "covered (default for an image-only model): 30 of 40 images, 90 of 120 captions"
    assert chosen.summary()["images"] == 30 and chosen.summary()["of_images"] == N_IMAGES
    got = evaluate(image_only, truth, "synthetic", chosen.gallery, SETTINGS, partial=True)
    # the same numbers as the dense reference on the explicitly restricted gallery
    restricted = gallery.restrict([i for i in gallery.image_ids if i not in drop])
    want = reference_retrieval(*dense(joint, restricted, truth, "i2i"))
    for key, value in want.items():
        assert got[ALL][key]["i2i"] == pytest.approx(value), key
    assert set(got[ALL]["R@1"]) == {"i2i"}
    # i2i positives whose image has no vector are counted, not scored
    assert got[ALL]["missing_positives"]["i2i"] == sum(1 for q, g in truth.i2i if q not in drop and g in drop)
    # the full rule keeps today's refusal, one line naming model, kind and an example id
    with pytest.raises(CoverageError, match=r"model 'joint' has no img vector for 10 of the 40 gallery items \(e\.g\. t:img:") as error:
        model_gallery(image_only, gallery, SETTINGS, "full")
    assert isinstance(error.value, UserError) and "\n" not in str(error.value) and "gallery: covered" in str(error.value)


def test_covered_sub_gallery_equals_the_explicitly_restricted_gallery_for_every_task():
    gallery, joint, truth = synthetic(1)
    drop = dropped_images(gallery, 3)
    partial = without_images(joint, drop)
    chosen = model_gallery(partial, gallery, SETTINGS, "covered")
    restricted = gallery.restrict([i for i in gallery.image_ids if i not in drop])
    assert chosen.gallery == restricted and len(restricted.caption_ids) == PER_IMAGE * len(restricted.image_ids)
    got = evaluate(partial, truth, "synthetic", chosen.gallery, SETTINGS, partial=True)
    full_model_on_restricted = evaluate(joint, truth, "synthetic", restricted, SETTINGS)
    assert got == full_model_on_restricted  # all tasks, both protocols (folds of the sub-gallery)
    assert set(got[ALL]["R@1"]) == {"i2t", "t2i", "t2t", "i2i"} and FOLDS in got
    for task in ("i2t", "t2i", "t2t", "i2i"):
        want = reference_retrieval(*dense(joint, restricted, truth, task))
        for key, value in want.items():
            assert got[ALL][key][task] == pytest.approx(value), (task, key)


def test_models_with_caption_vectors_are_refused_by_default_and_captions_must_be_covered():
    gallery, joint, _ = synthetic()
    partial = without_images(joint, dropped_images(gallery))
    with pytest.raises(CoverageError, match="has no img vector for 10 of the 40 gallery items"):
        model_gallery(partial, gallery, SETTINGS)  # auto = full for a model with caption vectors
    # covered still needs every caption of the covered images
    sets = dict(partial.sets)
    ids = sets[CAPTION_KIND].ids
    sets[CAPTION_KIND] = EmbeddingSet(ids[1:], np.asarray(sets[CAPTION_KIND].vectors)[1:])
    with pytest.raises(CoverageError, match=f"has no cap vector for 1 of the 90 gallery items \\(e.g. {ids[0]}\\)"):
        model_gallery(EmbeddingModel("holes", sets, joint=True), gallery, SETTINGS, "covered")
    # a model with no vector for any gallery image
    stranger = EmbeddingModel("stranger", {IMAGE_KIND: EmbeddingSet(["t:img:999"], np.ones((1, 4), np.float32))}, joint=False)
    with pytest.raises(CoverageError, match="'stranger' has no img vector for any of the 40 gallery images"):
        model_gallery(stranger, gallery, SETTINGS)
    # a fully covered model gets the whole gallery whatever its rule
    for rule in ("auto", "full", "covered"):
        chosen = model_gallery(joint, gallery, SETTINGS, rule)
        assert chosen.gallery is gallery and not chosen.partial and chosen.summary()["rule"] == "full"
        assert chosen.note == "full: 40 images, 120 captions"


def test_gallery_option_is_checked_and_not_passed_to_the_source():
    assert gallery_rule({"image": "x"}) == "auto"
    assert gallery_rule({"image": "x", "gallery": "covered"}) == "covered"
    with pytest.raises(ParamError, match=r"p.yaml: evaluate.models.m.gallery must be one of \['auto', 'full', 'covered'\], got 'some'"):
        settings_from_params(EvaluateSettings, {"models": {"m": {"image": "x", "gallery": "some"}}}, "evaluate", "p.yaml")


def test_score_matrix_model_with_part_of_the_images_and_bison_on_the_sub_gallery():
    gallery, joint, _ = synthetic(2)
    keep = [i for i in gallery.image_ids if i not in dropped_images(gallery)]
    captions = [c for c in gallery.caption_ids if gallery.caption_image[c] in set(keep)]
    matrix = joint.block_scores(IMAGE_KIND, keep, CAPTION_KIND, captions)(0, len(keep))
    model = ScoreMatrixModel("matrix", matrix, keep, captions)
    with pytest.raises(CoverageError):
        model_gallery(model, gallery, SETTINGS)
    chosen = model_gallery(model, gallery, SETTINGS, "covered")
    assert chosen.gallery.image_ids == tuple(keep)
    inside, outside = captions[0], next(c for c in gallery.caption_ids if c not in set(captions))
    target = gallery.caption_image[inside]
    decoy = next(i for i in keep if i != target)
    triples = pa.table({"caption": [inside, outside], "target": [target, gallery.caption_image[outside]], "decoy": [decoy, decoy]})
    result = evaluate_bison(model, triples, chosen.gallery)
    assert result["triples"] == 1 and result["triples_outside_gallery"] == 1
    with pytest.raises(CoverageError):
        evaluate_bison(model, triples)  # without a sub-gallery, a triple it cannot score is refused


# --------------------------------------------------------------------------- R rule


def test_totals_set_r_of_map_at_r_and_r_precision():
    # one query, gallery of 5, positives at columns 0 and 3 ranked 1 and 3; a third positive is
    # outside the gallery
    scores = np.array([[0.9, 0.8, 0.1, 0.7, 0.0]])
    ranked = ranks_of_positives(scores, Positives.from_lists([[0, 3]]))
    assert ranked.ranks.tolist() == [1, 3] and ranked.totals is None
    assert map_at_r(ranked) == (pytest.approx((1 / 1 + 0) / 2), 0)  # R = 2: rank 3 > R
    assert r_precision(ranked) == (pytest.approx(1 / 2), 0)
    compat = ranked.with_totals(np.array([3]))
    assert map_at_r(compat) == (pytest.approx((1 / 1 + 2 / 3) / 3), 0)  # R = 3: both within R
    assert r_precision(compat) == (pytest.approx(2 / 3), 0)
    # R@K and ranks do not depend on it
    plain, counted = metrics_from_ranks(ranked), metrics_from_ranks(compat)
    assert {k: plain[k] for k in ("R@1", "R@5", "median_rank", "queries")} == {
        k: counted[k] for k in ("R@1", "R@5", "median_rank", "queries")
    }
    with pytest.raises(ValueError, match="below its 2 ranked positives"):
        ranked.with_totals(np.array([1]))
    with pytest.raises(ValueError, match="with and without totals"):
        PositiveRanks.concatenate([ranked, compat])
    both = PositiveRanks.concatenate([compat, compat])
    assert both.totals.tolist() == [3, 3] and map_at_r(both)[0] == pytest.approx(map_at_r(compat)[0])


def test_compat_rule_counts_positives_outside_the_gallery_in_r():
    gallery, joint, truth = synthetic(3)
    extra = {(gallery.image_ids[k], f"t:cap:out-{k}") for k in range(0, N_IMAGES, 5)}  # 8 queries, 1 outside positive each
    plain = GroundTruth(name="plain", i2t=truth.i2t | extra)
    compat = GroundTruth(name="compat", i2t=truth.i2t | extra, r_rule=COMPAT_R)
    ranked_plain, missing_plain = retrieval_ranks(joint, plain, gallery, "i2t")
    ranked_compat, missing_compat = retrieval_ranks(joint, compat, gallery, "i2t")
    assert missing_plain == missing_compat == len(extra)
    assert (ranked_plain.ranks == ranked_compat.ranks).all() and ranked_plain.totals is None
    assert ranked_compat.totals.tolist() == [PER_IMAGE + (k % 5 == 0) for k in range(N_IMAGES)]
    # against the dense reference with R = all positives: per query, hits in top R over R
    scores, mask, _ = dense(joint, gallery, plain, "i2t")
    order = np.lexsort((mask, -scores.astype(np.float64)), axis=1)  # pessimistic ties
    hits = np.take_along_axis(mask, order, axis=1)
    r = ranked_compat.totals
    rp = np.mean([hits[q, : r[q]].sum() / r[q] for q in range(N_IMAGES)])
    ap = np.mean([sum(hits[q, : i + 1].sum() / (i + 1) for i in range(r[q]) if hits[q, i]) / r[q] for q in range(N_IMAGES)])
    assert r_precision(ranked_compat)[0] == pytest.approx(rp) and map_at_r(ranked_compat)[0] == pytest.approx(ap)
    assert map_at_r(ranked_compat)[0] < map_at_r(ranked_plain)[0]
    with pytest.raises(ValueError, match="r_rule must be one of"):
        GroundTruth(name="x", r_rule="some")
