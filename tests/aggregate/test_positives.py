"""After verification: the merged ECCV-shaped truth and the bias audit on hand-checkable cases."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pytest

from crisscross.aggregate.positives import (
    FULL,
    ORIGINAL,
    VERIFIED,
    audit_scores,
    bias_audit,
    eccv_associations,
    finders,
    merge_positives,
    truth_variants,
    verified_pairs,
    write_eccv_json,
)
from crisscross.scoring.models import Gallery, ScoreMatrixModel
from crisscross.scoring.truths import GROUND_TRUTHS, GroundTruth, load_eccv

I = [f"coco:img:{n}" for n in range(5)]  # noqa: E741 - images i0..i4
C = [f"coco:cap:{10 + n}" for n in range(5)]  # caption c_n belongs to image i_n


def small_gallery() -> Gallery:
    return Gallery(tuple(I), tuple(C), {c: i for c, i in zip(C, I, strict=True)})


def rated_rows() -> pd.DataFrame:
    rows = [
        ("VERIFY", I[1], C[3], "100% yes", True),
        ("VERIFY", I[2], C[0], "partially yes", None),  # no positive value: decided by the label
        ("VERIFY", I[2], C[4], "mostly no", False),
        ("VERIFY", "coco:img:99", C[1], "100% yes", True),  # not in the items
        ("STS", C[1], C[2], None, True),
    ]
    return pd.DataFrame(rows, columns=["task_type", "id_a", "id_b", "agg_label", "positive"])


FOUND_BY = {(I[1], C[3]): frozenset({"A"}), (I[2], C[0]): frozenset({"B"}), (I[2], C[4]): frozenset({"A", "B"})}


def test_verified_pairs_read_the_verify_rows_only():
    assert verified_pairs(rated_rows()).values.tolist() == [
        ["coco:img:1", "coco:cap:13", True],
        ["coco:img:2", "coco:cap:10", True],
        ["coco:img:2", "coco:cap:14", False],
        ["coco:img:99", "coco:cap:11", True],
    ]


def test_finders_read_the_candidates_table():
    table = pa.table({"image_id": [I[1], I[2]], "caption_id": [C[3], C[0]], "annotators": ["A,B", "B"]})
    assert finders(table) == {(I[1], C[3]): frozenset({"A", "B"}), (I[2], C[0]): frozenset({"B"})}


def test_merge_keeps_every_source_and_quarantines_unknown_ids():
    extra = GroundTruth(name="cxc-test", i2t=frozenset({(I[1], C[3]), ("coco:img:77", C[0])}), t2i=frozenset({(C[4], I[0])}))
    merged = merge_positives(verified_pairs(rated_rows()), small_gallery(), {"cxc-test": extra}, "rated.parquet")
    assert merged.sources[(I[1], C[3])] == ("cxc-test", VERIFIED)
    assert merged.sources[(I[2], C[0])] == (VERIFIED,)
    assert merged.sources[(I[0], C[4])] == ("cxc-test",)  # a t2i positive, turned to (image, caption)
    assert merged.sources[(I[0], C[0])] == (ORIGINAL,)
    assert (I[2], C[4]) not in merged.sources  # "mostly no"
    assert ("coco:img:77", C[0]) not in merged.sources  # the merged truth's pairs outside the gallery stay out
    assert merged.per_source() == {"cxc-test": 2, ORIGINAL: 5, VERIFIED: 2}
    assert [(r.key, r.reason) for r in merged.rejected] == [("coco:img:99|coco:cap:11", "unknown-id")]
    assert (merged.verified, merged.verified_positive) == (4, 2)


def test_truth_variants_remove_sole_finds_no_other_source_vouches_for():
    extra = GroundTruth(name="cxc-test", i2t=frozenset({(I[1], C[3])}))
    merged = merge_positives(verified_pairs(rated_rows()), small_gallery(), {"cxc-test": extra}, "rated.parquet")
    variants = truth_variants(merged, FOUND_BY)
    assert set(variants) == {FULL, "A", "B"}
    assert variants[FULL] - variants["B"] == {(I[2], C[0])}
    assert variants["A"] == variants[FULL]  # A's only find is a CxC positive too


def audit_model() -> ScoreMatrixModel:
    scores = np.zeros((5, 5))
    scores[:, 0] = [9, 4, 3, 2, 1]  # query c0 ranks i0 > i1 > i2 > i3 > i4
    scores[1] = [4, 5, 1, 2, 3]  # query i1 ranks c1 > c0 > c4 > c3 > c2
    return ScoreMatrixModel("m", scores, I, C)


def test_audit_scores_rank_once_against_every_variant():
    merged = merge_positives(verified_pairs(rated_rows()), small_gallery(), {}, "rated.parquet")
    variants = truth_variants(merged, FOUND_BY)
    scores = audit_scores(audit_model(), small_gallery(), {"i2t": [I[1]], "t2i": [C[0]]}, variants)
    # full: i1 → {c1, c3} (R = 2; top-2 c1, c0) and c0 → {i0, i2} (R = 2; top-2 i0, i1): one hit each, at rank 1
    assert scores[FULL] == {"i2t": {"mAP@R": 0.5, "R-Precision": 0.5}, "t2i": {"mAP@R": 0.5, "R-Precision": 0.5}}
    assert scores["A"]["i2t"] == {"mAP@R": 1.0, "R-Precision": 1.0} and scores["A"]["t2i"] == scores[FULL]["t2i"]
    assert scores["B"]["t2i"] == {"mAP@R": 1.0, "R-Precision": 1.0} and scores["B"]["i2t"] == scores[FULL]["i2t"]


def test_bias_audit_compares_model_rankings_on_full_and_reduced_truths():
    merged = merge_positives(verified_pairs(rated_rows()), small_gallery(), {}, "rated.parquet")

    def scores(full: float, without_a: float) -> dict:
        return {FULL: {"i2t": {"R-Precision": full}}, "A": {"i2t": {"R-Precision": without_a}}, "B": {"i2t": {"R-Precision": full}}}

    audit = bias_audit(merged, FOUND_BY, {"m1": scores(0.3, 0.1), "m2": scores(0.2, 0.2), "m3": scores(0.1, 0.15)})
    a, b = audit["annotators"]["A"], audit["annotators"]["B"]
    assert a["kendall_tau_b"] == {"i2t": {"R-Precision": pytest.approx(-1 / 3)}}  # m1 falls from first to last
    assert b["kendall_tau_b"] == {"i2t": {"R-Precision": pytest.approx(1.0)}}
    assert (a["positives_found"], a["positives_found_alone"], b["positives_found_alone"]) == (1, 1, 1)
    assert (audit["verified_positives"], audit["found_by_one_annotator"], audit["truth_pairs"]) == (2, 2, 7)
    lone = bias_audit(merged, FOUND_BY, {"m1": scores(0.3, 0.1)})
    assert lone["annotators"]["A"]["kendall_tau_b"] == {"i2t": {"R-Precision": None}}  # one model: no ranking to compare


def test_eccv_json_round_trips_through_our_loader_and_the_registry(tmp_path: Path):
    merged = merge_positives(verified_pairs(rated_rows()), small_gallery(), {}, "rated.parquet")
    i2t, t2i = eccv_associations(merged.pairs(), image_queries=[I[1], I[2]], caption_queries=[C[0], C[4]])
    assert i2t == {"1": [11, 13], "2": [10, 12]}  # image 2's "mostly no" pair is not there
    assert t2i == {"10": [0, 2], "14": [4]}
    write_eccv_json(str(tmp_path), i2t, t2i)
    truth, report = load_eccv(tmp_path)
    assert not report["rejected"] and report["queries"] == {"i2t": 2, "t2i": 2}
    assert truth.i2t == {(i, c) for i, c in merged.pairs() if i in (I[1], I[2])}
    assert truth.t2i == {(c, i) for i, c in merged.pairs() if c in (C[0], C[4])}
    # The same shape as the package's own files: string keys, integer values.
    assert all(isinstance(v, int) for values in json.loads((tmp_path / "eccv_image_to_caption.json").read_text()).values() for v in values)
    assert GROUND_TRUTHS.create(f"eccv:{tmp_path}")[0].name == f"eccv:{tmp_path.name}"
    assert GROUND_TRUTHS.create(f"eccv-gallery:{tmp_path}")[0].r_rule == "gallery"


def test_an_eccv_folder_without_its_files_is_a_clear_error(tmp_path: Path):
    with pytest.raises(FileNotFoundError, match="eccv_image_to_caption.json and eccv_caption_to_image.json"):
        GROUND_TRUTHS.create(f"eccv:{tmp_path}")
