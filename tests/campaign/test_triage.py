"""Machine triage: the regression against scikit-learn's, the certified cuts, the signals, and
what the triage decides and records on a synthetic collection whose truth is known."""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np
import pandas as pd
import pytest
from scipy.stats import binomtest
from sklearn.linear_model import LogisticRegression

from crisscross.campaign.signals import TextSpace, pair_signals
from crisscross.campaign.triage import (
    LEFT_TO_PEOPLE,
    NEGATIVE,
    POSITIVE,
    TriageSettings,
    audit_sample,
    certified_cut,
    error_bound,
    expected_scores,
    fewest_audited,
    logistic_fit,
    triage,
)
from crisscross.tasktypes.base import SAME_IMAGE
from crisscross.tasktypes.names import SIS, SITS, STS

SEED = 7


def test_the_regression_is_scikit_learns() -> None:
    rng = np.random.default_rng(SEED)
    x = rng.normal(size=(600, 4))
    y = (x @ [1.5, -1.0, 0.5, 0.0] + rng.logistic(size=600) > 0).astype(float)
    for l2 in (0.1, 1.0, 10.0):
        weights, intercept = logistic_fit(x, y, l2)
        theirs = LogisticRegression(C=1 / l2, tol=1e-12, max_iter=10_000).fit(x, y)
        assert np.allclose(weights, theirs.coef_[0], atol=1e-6) and intercept == pytest.approx(theirs.intercept_[0], abs=1e-6)


def test_the_bound_is_the_exact_one_sided_binomial_bound() -> None:
    for errors, n in ((0, 200), (3, 500), (40, 1000)):
        two_sided = (
            binomtest(errors, n).proportion_ci(confidence_level=0.90, method="exact").high
        )  # its upper end is the 95% one-sided bound
        assert error_bound(errors, n, 0.05) == pytest.approx(two_sided, rel=1e-9)
    assert error_bound(0, 198, 0.05) > 0.015 > error_bound(0, 199, 0.05)  # a flawless cut needs 199 pairs at the defaults
    assert error_bound(5, 5, 0.05) == 1.0


def test_cuts_run_in_a_fixed_sequence_and_stop_at_the_first_failure() -> None:
    settings = TriageSettings(max_error=0.015, delta=0.05, step=10)
    assert fewest_audited(settings) == 315  # where one disagreement still passes (a flawless cut: 199)
    scores = np.linspace(10, -10, 2000)  # in descending order: the sequence walks it from the top
    positive = np.ones(2000, dtype=bool)
    positive[1000:] = False  # the lower half negative
    cut = certified_cut(scores, positive, POSITIVE, settings)  # 315, 325, …, 995 clean; 1005 holds 5 negatives (bound 1.04%)
    assert cut is not None and (cut.audited, cut.errors) == (1005, 5) and cut.score == pytest.approx(scores[1004])
    assert cut.bound == pytest.approx(error_bound(5, 1005, 0.05)) and error_bound(15, 1015, 0.05) > 0.015  # the next one fails
    negative_cut = certified_cut(scores, positive, NEGATIVE, settings)
    assert negative_cut is not None and (negative_cut.audited, negative_cut.errors) == (1005, 5)
    positive[[400, 401, 402]] = False  # three disagreements early on: the cut at 405 fails, so the sequence ends there ...
    cut = certified_cut(scores, positive, POSITIVE, settings)
    assert cut is not None and (cut.audited, cut.errors) == (395, 0)
    assert error_bound(3, 995, 0.05) <= 0.015  # ... although a later cut would have passed: it is never tried
    early = positive.copy()
    early[[10, 20, 30, 40]] = False  # four among the first 315: not even the first cut passes
    assert certified_cut(scores, early, POSITIVE, settings) is None
    tied = np.round(scores, 0)  # whole-number scores: a cut takes in every pair tied with its last one
    cut = certified_cut(tied, np.ones(2000, dtype=bool), POSITIVE, settings)
    assert cut is not None and (tied > cut.score).sum() < cut.audited == (tied >= cut.score).sum()


def test_an_audit_too_small_to_certify_sends_the_type_to_people() -> None:
    space, image_of = _space("toy")
    pairs = pd.DataFrame(
        {"item_id": ["sts:1", "sts:2"], "task_type": STS, "id_a": ["coco:cap:0", "coco:cap:3"], "id_b": ["coco:cap:1", "coco:cap:4"]}
    )
    done = triage(pairs, {"sts:1": True, "sts:2": False}, [space], image_of, TriageSettings(audit_share=0.5), SEED)
    assert (done.decisions.loc[~done.decisions["audit"], "label"] == LEFT_TO_PEOPLE).all() and not done.turns[STS][0].cuts
    assert done.turns[STS][0].note.startswith("audit too small")
    assert done.decisions.loc[~done.decisions["audit"], "reason"].str.startswith("audit too small").all()


def test_the_audit_is_drawn_per_item_so_rows_and_other_items_do_not_move_it() -> None:
    items = pd.Series([f"sts:{i:05d}" for i in range(5000)])
    audit = audit_sample(items, 0.1, SEED, STS)
    shuffled = items.sample(frac=1.0, random_state=1)
    again = pd.Series(audit_sample(shuffled, 0.1, SEED, STS), index=shuffled.index).sort_index().to_numpy()
    assert np.array_equal(audit, again) and 450 < audit.sum() < 550
    assert np.array_equal(audit_sample(items[:3000], 0.1, SEED, STS), audit[:3000])  # items added later change nothing
    assert not np.array_equal(audit, audit_sample(items, 0.1, SEED, SIS)) and not np.array_equal(
        audit, audit_sample(items, 0.1, SEED + 1, STS)
    )


def _space(name: str, dims: int = 8) -> tuple[TextSpace, dict[str, str]]:
    rng = np.random.default_rng(SEED)
    captions = [f"coco:cap:{k}" for k in range(12)]
    image_of = {c: f"coco:img:{k // 3}" for k, c in enumerate(captions)}  # four images, three captions each
    return TextSpace.build(name, captions, rng.normal(size=(12, dims)), image_of), image_of


def test_image_means_leave_out_the_caption_that_describes_the_image() -> None:
    space, _ = _space("toy")
    own = space.image_means(["coco:img:0"], leave_out=["coco:cap:0"])[0]
    rows = [space.row["coco:cap:1"], space.row["coco:cap:2"]]
    expected = space.vectors[rows].mean(axis=0)
    assert np.allclose(own, expected / np.linalg.norm(expected))
    other = space.image_means(["coco:img:1"], leave_out=["coco:cap:0"])[0]  # not one of its captions: nothing left out
    whole = space.vectors[[3, 4, 5]].mean(axis=0)
    assert np.allclose(other, whole / np.linalg.norm(whole))
    assert np.isnan(space.image_means(["coco:img:9"])).all() and np.isnan(space.captions(["coco:cap:99"])).all()


def test_each_rating_type_has_its_signals() -> None:
    space, image_of = _space("toy")
    sts = pair_signals(STS, ["coco:cap:0", "coco:cap:0"], ["coco:cap:1", "coco:cap:5"], [space], image_of)
    assert list(sts.columns) == ["toy:captions", "toy:images", SAME_IMAGE] and sts[SAME_IMAGE].tolist() == [1.0, 0.0]
    assert sts["toy:captions"][0] == pytest.approx(space.vectors[0] @ space.vectors[1])
    assert sts["toy:images"][0] == pytest.approx(1.0)  # the same image
    sis = pair_signals(SIS, ["coco:img:0"], ["coco:img:1"], [space], image_of)
    assert sis["toy:best-captions"][0] == pytest.approx((space.vectors[:3] @ space.vectors[3:6].T).max())
    sits = pair_signals(SITS, ["coco:cap:0", "coco:cap:0"], ["coco:img:0", "coco:img:2"], [space], image_of)
    assert sits[SAME_IMAGE].tolist() == [1.0, 0.0] and sits["toy:images"][0] == pytest.approx(1.0)
    with pytest.raises(ValueError, match="no machine signals for task type VERIFY"):
        pair_signals("VERIFY", [], [], [space], image_of)


def synthetic_sts() -> tuple[pd.DataFrame, TextSpace, dict[str, str], np.ndarray]:
    """12,000 STS pairs of captions whose caption-vector cosine drives what people say (``truth``)."""
    rng = np.random.default_rng(SEED)
    n = 24_000
    captions = [f"coco:cap:{k}" for k in range(n)]
    image_of = {c: f"coco:img:{k // 2}" for k, c in enumerate(captions)}
    base = rng.normal(size=(n // 2, 16))
    twist = rng.uniform(0, 3, size=n // 2)  # how far the second caption of a pair wanders
    vectors = np.empty((n, 16))
    vectors[0::2] = base
    vectors[1::2] = base + twist[:, None] * rng.normal(size=(n // 2, 16))
    space = TextSpace.build("toy", captions, vectors, image_of)
    pairs = pd.DataFrame(
        {"item_id": [f"sts:{k:05d}" for k in range(n // 2)], "task_type": STS, "id_a": captions[0::2], "id_b": captions[1::2]}
    )
    cosine = pair_signals(STS, pairs["id_a"], pairs["id_b"], [space], image_of)["toy:captions"].to_numpy()
    truth = rng.random(n // 2) < 1 / (1 + np.exp(-40 * (cosine - 0.6)))
    return pairs, space, image_of, truth


def test_triage_labels_only_beyond_certified_cuts_and_says_why() -> None:
    """The machine labels the synthetic collection's clear ends and agrees with people there as certified."""
    pairs, space, image_of, truth = synthetic_sts()
    people_positive = dict(zip(pairs["item_id"], truth, strict=True))
    settings = TriageSettings()
    done = triage(pairs, people_positive, [space], image_of, settings, SEED)
    d = done.decisions.set_index("item_id").loc[pairs["item_id"]]
    assert d["audit"].mean() == pytest.approx(0.1, abs=0.02)
    assert (d.loc[d["audit"], "label"].to_numpy() == truth[d["audit"].to_numpy()]).all()  # audited pairs keep people's label
    machine = ~d["audit"].to_numpy() & (d["label"].to_numpy() != LEFT_TO_PEOPLE)
    assert machine.mean() > 0.3
    agree = (d["label"].to_numpy()[machine] == truth[machine]).mean()
    assert agree >= 1 - settings.max_error
    fit = done.turns[STS][0]
    assert set(fit.cuts) == {POSITIVE, NEGATIVE} and all(c.bound <= settings.max_error for c in fit.cuts.values())
    first = d[machine].iloc[0]
    cut = fit.cuts[int(first["label"])]
    assert f"cut {cut.score:.3f}: {cut.errors} of {cut.audited} audited pairs" in first["reason"]
    between = d[~d["audit"] & (d["label"] == LEFT_TO_PEOPLE)]
    assert (between["score"] < fit.cuts[POSITIVE].score).all() and (between["score"] > fit.cuts[NEGATIVE].score).all()
    assert between["reason"].str.startswith("score").all()
    again = triage(pairs.sample(frac=1.0, random_state=3), people_positive, [space], image_of, settings, SEED).decisions
    assert again.sort_values("item_id").reset_index(drop=True).equals(done.decisions.sort_values("item_id").reset_index(drop=True))
    summary = fit.summary()
    assert summary["audited"] == int(d["audit"].sum()) and math.isfinite(summary["intercept"])


def test_a_round_keeps_types_without_signals_and_gold_for_people() -> None:
    from crisscross.campaign.triage import DECIDED_BY_PEOPLE, UNDECIDED, triage_round

    space, image_of = _space("toy")
    tasks = pd.DataFrame(
        {
            "item_id": ["sts:a", "verify:b", "gold:c", "sts:d"],
            "task_type": [STS, "VERIFY", STS, STS],
            "id_a": ["coco:cap:0", "coco:img:1", "coco:cap:3", "coco:cap:6"],
            "id_b": ["coco:cap:1", "coco:cap:4", "coco:cap:9", "coco:cap:7"],
            "sampling_method": ["c2c_isim", "machine", "gold", "c2c_isim"],
            "gold": ["", "", "negative", ""],
            "batch_id": ["b1", "b1", "b1", "b2"],
            "position": [1, 2, 3, 1],
        }
    )
    done = triage_round(tasks, {"sts:d": False}, [space], image_of, TriageSettings(), SEED)
    fate = done.decisions.set_index("item_id")["decided_by"].to_dict()
    assert fate == {"sts:a": UNDECIDED, "verify:b": UNDECIDED, "sts:d": DECIDED_BY_PEOPLE}  # the gold item is QC, not an item to decide
    assert list(done.open_tasks["item_id"]) == ["sts:a", "verify:b", "gold:c"]  # b1 is still open, so its gold stays
    assert done.decisions.set_index("item_id").loc["verify:b", "reason"] == "no machine signals for this task type"


def test_later_turns_audit_the_band_refit_on_every_label_and_certify_on_their_own_audit() -> None:
    """A first audit too small to certify (2%): the second turn audits a quarter of the band, refits
    on both audits and labels what the first could not; a third finds the rest too ambiguous."""
    pairs, space, image_of, truth = synthetic_sts()
    people_positive = dict(zip(pairs["item_id"], truth, strict=True))
    settings = TriageSettings(audit_share=0.02, turns=3)
    one = triage(pairs, people_positive, [space], image_of, replace(settings, turns=1), SEED).decisions.set_index("item_id")
    done = triage(pairs, people_positive, [space], image_of, settings, SEED)
    three = done.decisions.set_index("item_id").loc[one.index]
    assert ((one["label"] != LEFT_TO_PEOPLE) == one["audit"]).all() and done.turns[STS][0].note.startswith("audit too small")
    assert three.loc[three["turn"] == 1, ["audit", "label", "reason"]].equals(one.loc[one["audit"], ["audit", "label", "reason"]])
    assert set(three["turn"]) == {1, 2, 3} and len(done.turns[STS]) == 3
    second, third = done.turns[STS][1], done.turns[STS][2]
    audit2 = three["audit"] & (three["turn"] == 2)
    assert not (audit2 & one["audit"]).any() and audit2.sum() == second.audited  # drawn from the band, certified on it alone
    assert audit2.mean() == pytest.approx(0.25 * (1 - one["audit"].mean()), abs=0.02)
    labelled = ~three["audit"] & (three["label"] != LEFT_TO_PEOPLE)
    assert set(three.loc[labelled, "turn"]) == {2} and labelled.mean() > 0.5
    truth_of = pd.Series(truth, index=pairs["item_id"]).loc[three.index[labelled]]
    assert (three.loc[labelled, "label"].astype(bool) == truth_of).mean() >= 1 - settings.max_error
    first = three[labelled].iloc[0]
    cut = second.cuts[int(first["label"])]
    assert f"{cut.errors} of {cut.audited} audited pairs" in first["reason"]
    assert not third.cuts and third.audited == int(
        (three["audit"] & (three["turn"] == 3)).sum()
    )  # the band's ambiguous core stays with people
    awaiting = {item: label for item, label in people_positive.items() if not audit2.get(item, False)}
    paused = triage(pairs, awaiting, [space], image_of, settings, SEED).decisions
    assert paused["turn"].max() == 2 and (paused.loc[paused["audit"] & (paused["turn"] == 2), "label"] == LEFT_TO_PEOPLE).all()
    assert paused["reason"].str.contains(r"audit \(turn 2\): awaiting people's rating").any()


def test_expected_scores_are_scikit_learns_ridge_clipped_to_the_scale() -> None:
    from sklearn.linear_model import Ridge

    rng = np.random.default_rng(SEED)
    x = rng.normal(size=(800, 3))
    y = np.clip(2.5 + x @ [1.2, -0.4, 0.0] + 0.5 * rng.normal(size=800), 0, 5)
    fitted = rng.random(800) < 0.3
    signals = pd.DataFrame(x, columns=["a", "b", "c"])
    ours = expected_scores(signals, fitted, y, 1.0)
    z = (x - x[fitted].mean(axis=0)) / x[fitted].std(axis=0)
    theirs = np.clip(Ridge(alpha=1.0).fit(z[fitted], y[fitted]).predict(z), 0, 5)
    assert np.allclose(ours, theirs, atol=1e-9) and ours.min() >= 0 and ours.max() <= 5
    assert np.isnan(expected_scores(signals, np.zeros(800, dtype=bool), y, 1.0)).all()


def test_machine_labels_of_graded_types_carry_an_expected_score() -> None:
    pairs, space, image_of, truth = synthetic_sts()
    cosine = pair_signals(STS, pairs["id_a"], pairs["id_b"], [space], image_of)["toy:captions"].to_numpy()
    score = np.clip(3 + 8 * (cosine - 0.6), 0, 5)  # people's 0–5 scores rise with the cosine
    people_positive = dict(zip(pairs["item_id"], truth, strict=True))
    done = triage(pairs, people_positive, [space], image_of, TriageSettings(), SEED, dict(zip(pairs["item_id"], score, strict=True)))
    d = done.decisions.set_index("item_id").loc[pairs["item_id"]]
    machine = (~d["audit"] & (d["label"] != LEFT_TO_PEOPLE)).to_numpy()
    assert d["expected_score"].notna().all() and np.corrcoef(d["expected_score"].to_numpy()[machine], score[machine])[0, 1] > 0.95
    assert triage(pairs, people_positive, [space], image_of, TriageSettings(), SEED).decisions["expected_score"].isna().all()
