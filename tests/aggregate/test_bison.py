"""BISON's rounds aggregated (CHOOSE → chosen caption, VERIFY-TRIPLE → both raters say target),
the accepted triples, their released JSON shape and the §5.1 caption baseline."""

from __future__ import annotations

from io import BytesIO

import numpy as np
import pandas as pd
import pyarrow as pa

from crisscross.aggregate.bison import (
    Triple,
    accepted_triples,
    bison_json,
    caption_baseline,
    triples_table,
    yields,
)
from crisscross.aggregate.quality import rater_report
from crisscross.aggregate.round import RoundSettings, aggregate_round
from crisscross.embed.sets import EmbeddingSet, unit_rows
from crisscross.formats.schema import item_id
from crisscross.tasktypes.names import CHOOSE, CHOOSE_NONE, TRIPLE_VERIFIERS, VERIFY_TRIPLE


def judgment(kind: str, a: str, b: str, worker: str, answer: str) -> dict[str, object]:
    return {
        "item_id": item_id(kind, a, b),
        "task_type": kind,
        "id_a": a,
        "id_b": b,
        "worker": worker,
        "score": np.nan,
        "answer": answer,
        "seconds": 10.0,
        "time": None,
        "batch_id": f"{kind.lower()}-1",
        "source": "people",
        "simulated": False,
    }


def tasks_of(judgments: pd.DataFrame) -> pd.DataFrame:
    rows = judgments.drop_duplicates("item_id")[["item_id", "task_type", "id_a", "id_b", "batch_id"]]
    return rows.assign(sampling_method="bison", gold="", position=range(1, len(rows) + 1))


CHOOSE_ROWS = [
    (f"x:img:{i}", f"x:img:{i + 100}", f"w{i % 3}", CHOOSE_NONE if i % 5 == 0 else f"x:cap:{i}") for i in range(1, 31)
]  # 30 pairs, 6 answered none; 30 judgments by three raters


def test_choose_keeps_the_chosen_caption_and_counts_the_none_pairs() -> None:
    judgments = pd.DataFrame([judgment(CHOOSE, t, d, w, a) for t, d, w, a in CHOOSE_ROWS])
    result = aggregate_round(judgments, tasks_of(judgments), RoundSettings())
    rated = result.rated.set_index("item_id")
    assert rated.loc[item_id(CHOOSE, "x:img:1", "x:img:101"), "agg_label"] == "x:cap:1"
    assert rated["positive"].sum() == 24 and not rated.loc[item_id(CHOOSE, "x:img:5", "x:img:105"), "positive"]
    facts = result.facts[CHOOSE]
    assert facts["chosen"] == 24 and facts["none_discarded"] == 6 and facts["alpha_level"] == "nominal"
    assert not result.raters["excluded"].any()  # 80% captions would be straight-lining under the rating rules


def test_a_triple_needs_two_verifiers_who_both_say_target() -> None:
    answers = {  # caption → answers of its verifiers
        "x:cap:1": ("target", "target"),
        "x:cap:2": ("target", "both"),
        "x:cap:3": ("target",),
        "x:cap:4": ("decoy", "neither"),
    }
    rows = [judgment(VERIFY_TRIPLE, c, "x:img:9", f"v{k}", a) for c, given in answers.items() for k, a in enumerate(given)]
    # 25 more accepted triples by the same two raters: a careful rater says "target" nearly always
    rows += [judgment(VERIFY_TRIPLE, f"x:cap:{c}", "x:img:9", f"v{k}", "target") for c in range(10, 35) for k in range(2)]
    judgments = pd.DataFrame(rows)
    result = aggregate_round(judgments, tasks_of(judgments), RoundSettings())
    positive = result.rated.set_index("id_a")["positive"]
    assert positive[["x:cap:1", "x:cap:2", "x:cap:3", "x:cap:4"]].tolist() == [True, False, False, False]
    facts = result.facts[VERIFY_TRIPLE]
    assert facts["accepted"] == 26 and facts["too_few_verifiers"] == 1 == TRIPLE_VERIFIERS - 1
    assert facts["answers"] == {"target": 54, "decoy": 1, "both": 1, "neither": 1}
    report = rater_report(judgments, tasks_of(judgments))
    assert (report["straightline_share"] > 0.9).all() and not report["excluded"].any()


def test_accepted_triples_refuse_a_chooser_who_verified_and_write_the_released_shape() -> None:
    image_of = {"coco:cap:11": "coco:img:1", "coco:cap:22": "coco:img:2", "coco:cap:33": "coco:img:3"}
    choose = pd.DataFrame(
        [
            judgment(CHOOSE, "coco:img:1", "coco:img:9", "c1", "coco:cap:11"),
            judgment(CHOOSE, "coco:img:2", "coco:img:9", "c2", "coco:cap:22"),
            judgment(CHOOSE, "coco:img:3", "coco:img:9", "c1", "coco:cap:33"),
        ]
    )
    verify = pd.DataFrame(
        [
            judgment(VERIFY_TRIPLE, c, "coco:img:9", w, "target")
            for c, ws in (("coco:cap:11", "v1 v2"), ("coco:cap:22", "v1 c2"))
            for w in ws.split()
        ]
        + [judgment(VERIFY_TRIPLE, "coco:cap:33", "coco:img:9", w, a) for w, a in (("v1", "target"), ("v2", "both"))]
    )
    rated = aggregate_round(verify, tasks_of(verify), RoundSettings()).rated
    triples, counts, rejected = accepted_triples(rated.to_dict("records"), choose, verify, image_of, "rated.parquet")
    assert triples == [Triple("coco:cap:11", "coco:img:1", "coco:img:9", "c1", ("v1", "v2"))]
    assert counts == {"verified": 3, "accepted": 1, "not_accepted": 1, "verifier_was_chooser": 1}
    assert sorted(r.reason for r in rejected) == ["not-accepted", "verifier-was-chooser"]
    table = triples_table(triples, {"coco:cap:11": "A dog."}, {("coco:img:1", "coco:img:9"): (0.97, "bow-glove50")})
    assert table.to_pylist()[0]["bison_id"] == 0 and table.to_pylist()[0]["encoder"] == "bow-glove50"
    document = bison_json(table, {"coco:img:1": "val2014"}, seed=7, simulated=False)
    assert document["info"]["source"] == "coco" and document["info"]["split"] == "val2014"
    (entry,) = document["data"]
    assert entry["caption_id"] == 11 and entry["true_image_id"] == 1 and entry["caption"] == "A dog."
    assert sorted(c["image_id"] for c in entry["image_candidates"]) == [1, 9]
    assert {c["image_filename"] for c in entry["image_candidates"]} == {"COCO_val2014_000000000001.jpg", "COCO_val2014_000000000009.jpg"}
    assert bison_json(table, {}, seed=7, simulated=False) == bison_json(table, {}, seed=7, simulated=False)
    assert yields(4, 3, {"chosen": 3, "none": 0}, [t.target for t in triples])["image_yield"] == 0.25


def test_candidate_order_is_seeded_and_not_always_the_target_first() -> None:
    rows = [Triple(f"coco:cap:{i}", f"coco:img:{i}", f"coco:img:{i + 1000}", "c", ("v1", "v2")) for i in range(40)]
    data = bison_json(triples_table(rows, {}, {}), {}, seed=3, simulated=True)["data"]
    first = [d["image_candidates"][0]["image_id"] == d["true_image_id"] for d in data]
    assert 10 < sum(first) < 30


def test_caption_baseline_leaves_the_scored_caption_out() -> None:
    rng = np.random.default_rng(5)
    caption_ids = [f"x:cap:{i}" for i in range(12)]
    image_of = {c: f"x:img:{i // 4}" for i, c in enumerate(caption_ids)}  # 3 images × 4 captions
    vectors = rng.normal(size=(12, 6)).astype(np.float32)
    baseline = caption_baseline("toy", EmbeddingSet(caption_ids, vectors), ["x:img:0", "x:img:1", "x:img:2"], image_of)
    unit = unit_rows(vectors.astype(np.float64))
    for i, image in enumerate(baseline.image_ids):
        for j, c in enumerate(baseline.caption_ids):
            others = [k for k, o in enumerate(caption_ids) if image_of[o] == image and o != c]
            mean = unit[others].mean(axis=0)
            expected = float(unit[caption_ids.index(c)] @ mean / np.linalg.norm(mean))
            assert abs(baseline.scores[i, j] - expected) < 1e-5
    table = pa.table({"caption": ["x:cap:0", "x:cap:5"], "target": ["x:img:0", "x:img:1"], "decoy": ["x:img:2", "x:img:0"]})
    s = baseline.scores
    expected = np.mean([s[0, 0] > s[2, 0], s[1, 5] > s[0, 5]])
    assert baseline.accuracy(table) == expected
    with np.load(BytesIO(baseline.npz())) as saved:
        assert saved["scores"].shape == (3, 12) and saved["caption_ids"].tolist() == sorted(caption_ids)
