import numpy as np
import pandas as pd
import pytest

from crisscross.aggregate.quality import (
    EXCLUDED_RATER,
    RATER_COLUMNS,
    QualityRules,
    rater_report,
    split_by_exclusion,
    split_gold,
)
from crisscross.core.errors import ParamError
from crisscross.tasktypes.names import VERIFY_ANSWERS

YES, PARTLY, MOSTLY_NO, NO = VERIFY_ANSWERS
RULES = {"min_judgments": 4, "min_gold_items": 2}
GOLD = pd.DataFrame({"item_id": ["g+", "g-", "gv+", "gv-", "i1"], "gold": ["positive", "negative", "positive", "negative", ""]})


def sts(worker: str, scores: list[float], seconds: list[float | None]) -> list[dict[str, object]]:
    items = ["i1", "i2", "i3", "i4", "g+", "g-"]
    return [
        {"item_id": i, "task_type": "STS", "worker": worker, "score": s, "answer": None, "seconds": t}
        for i, s, t in zip(items, scores, seconds, strict=True)
    ]


def verify(worker: str, answers: list[str]) -> list[dict[str, object]]:
    items = ["v1", "v2", "v3", "v4", "gv+", "gv-"]
    return [
        {"item_id": i, "task_type": "VERIFY", "worker": worker, "score": None, "answer": a, "seconds": 10.0}
        for i, a in zip(items, answers, strict=True)
    ]


def a_round() -> pd.DataFrame:
    """a, b, c agree on i1–i4 (1, 2, 3, 4), d rates them backwards; gold g+ / g- last.

    a is careful; b takes 1 s per item; c fails both gold items (2.9 is not >= 3, 2.1 is not
    <= 2) and times only three judgments; d fails gold and the others' consensus.  In VERIFY, a
    always answers "100% yes" (so fails the negative gold), b is careful.
    """
    rows = [
        *sts("a", [1, 2, 3, 4, 5, 0], [10.0] * 6),
        *sts("b", [1, 2, 3, 4, 4, 2], [1.0] * 6),
        *sts("c", [1, 2, 3, 4, 2.9, 2.1], [None, None, None, 1.0, 1.0, 1.0]),
        *sts("d", [4, 3, 2, 1, 0, 5], [5.0] * 6),
        *verify("a", [YES] * 6),
        *verify("b", [YES, PARTLY, MOSTLY_NO, NO, PARTLY, MOSTLY_NO]),
    ]
    return pd.DataFrame(rows).sample(frac=1.0, random_state=0)


def test_report_statistics_by_hand():
    report = rater_report(a_round(), GOLD, RULES)
    assert list(zip(report["worker"], report["task_type"], strict=True)) == [
        ("a", "STS"),
        ("a", "VERIFY"),
        ("b", "STS"),
        ("b", "VERIFY"),
        ("c", "STS"),
        ("d", "STS"),
    ]
    assert report["judgments"].tolist() == [6] * 6
    assert report["gold_seen"].tolist() == [2] * 6
    assert report["gold_passed"].tolist() == [2, 1, 2, 2, 0, 0]
    np.testing.assert_allclose(report["gold_accuracy"], [1.0, 0.5, 1.0, 1.0, 0.0, 0.0])
    # STS: a's others on i1..i4 average (1+1+4)/3 … (4+4+1)/3, a straight line in a's scores → 1;
    # d's others are exactly 1, 2, 3, 4 → -1.  VERIFY: a is constant, so no correlation.
    assert report["loo_items"].tolist() == [4] * 6
    np.testing.assert_allclose(report["loo_correlation"], [1.0, np.nan, 1.0, np.nan, 1.0, -1.0])
    assert report["seconds_known"].tolist() == [6, 6, 6, 6, 3, 6]
    np.testing.assert_allclose(report["median_seconds"], [10.0, 10.0, 1.0, 10.0, 1.0, 5.0])
    np.testing.assert_allclose(report["straightline_share"], [1 / 6, 1.0, 2 / 6, 2 / 6, 1 / 6, 1 / 6])  # b: 2 and 4 twice


def test_every_failed_rule_is_a_reason():
    report = rater_report(a_round(), GOLD, RULES).set_index(["worker", "task_type"])
    assert report["excluded"].to_dict() == {
        ("a", "STS"): False,
        ("a", "VERIFY"): True,
        ("b", "STS"): True,
        ("b", "VERIFY"): False,
        ("c", "STS"): True,  # c's 1 s median rests on 3 timed judgments: not used
        ("d", "STS"): True,
    }
    assert report.loc[("a", "VERIFY"), "reasons"] == (
        "gold-accuracy 0.50 < 0.7 (1/2 gold items passed); straight-lining 1.00 of judgments on one value > 0.9"
    )
    assert report.loc[("b", "STS"), "reasons"] == "median-seconds 1.0 < 2 (over 6 timed judgments)"
    assert report.loc[("c", "STS"), "reasons"] == "gold-accuracy 0.00 < 0.7 (0/2 gold items passed)"
    assert (
        report.loc[("d", "STS"), "reasons"]
        == "gold-accuracy 0.00 < 0.7 (0/2 gold items passed); loo-correlation -1.00 < 0.3 (over 4 items)"
    )
    assert report.loc[("a", "STS"), "reasons"] == ""


def test_statistics_on_too_little_work_are_not_used():
    report = rater_report(a_round(), GOLD, {"min_judgments": 7, "min_gold_items": 3})
    assert not report["excluded"].any() and (report["reasons"] == "").all()


def test_thresholds_come_from_the_rules():
    report = rater_report(a_round(), GOLD, {**RULES, "positive_min_score": 2.9, "negative_max_score": 2.1, "min_median_seconds": 0.5})
    assert report.set_index(["worker", "task_type"]).loc[("c", "STS"), "gold_accuracy"] == 1.0
    assert not report.set_index(["worker", "task_type"]).loc[[("b", "STS"), ("c", "STS")], "excluded"].any()


def test_leave_one_out_correlation_matches_a_slow_reference():
    rng = np.random.default_rng(6)
    rows = [
        {"item_id": f"i{j}", "task_type": "SIS", "worker": f"w{w}", "score": float(rng.uniform(0, 5)), "answer": None, "seconds": 3.0}
        for j in range(60)
        for w in rng.choice(12, int(rng.integers(1, 6)), replace=False)
    ]
    judgments = pd.DataFrame(rows)
    report = rater_report(judgments, GOLD, {"min_judgments": 1}).set_index("worker")
    for worker, mine in judgments.groupby("worker"):
        others = judgments[judgments["worker"] != worker].groupby("item_id")["score"].mean()
        paired = mine.set_index("item_id")["score"].to_frame("x").join(others.rename("y"), how="inner")
        assert report.loc[worker, "loo_items"] == len(paired)
        assert report.loc[worker, "loo_correlation"] == pytest.approx(np.corrcoef(paired["x"], paired["y"])[0, 1], abs=1e-12)


def test_splits_lose_nothing():
    judgments = a_round()
    report = rater_report(judgments, GOLD, RULES)
    kept, dropped = split_by_exclusion(judgments, report)
    assert sorted([*kept.index, *dropped.index]) == sorted(judgments.index)
    assert list(kept.columns) == list(judgments.columns)
    assert set(zip(kept["worker"], kept["task_type"], strict=True)) == {("a", "STS"), ("b", "VERIFY")}
    assert (dropped["reason"] == EXCLUDED_RATER).all() and len(dropped) == 24
    assert set(dropped.loc[dropped["worker"] == "b", "detail"]) == {"b STS: median-seconds 1.0 < 2 (over 6 timed judgments)"}
    regular, gold = split_gold(kept, GOLD)
    assert sorted(gold["item_id"]) == ["g+", "g-", "gv+", "gv-"]
    assert sorted(regular["item_id"]) == ["i1", "i2", "i3", "i4", "v1", "v2", "v3", "v4"]
    with pytest.raises(ValueError, match=r"1 \(worker, task_type\) pairs of the judgments are not in the report, e.g. \[\('d', 'STS'\)\]"):
        split_by_exclusion(judgments, report[report["worker"] != "d"])


def test_rules_from_params():
    assert QualityRules.from_params(None) == QualityRules()
    rules = QualityRules.from_params({"min_judgments": 30, "min_loo_correlation": 0.5})
    assert (rules.min_judgments, rules.min_loo_correlation, rules.min_gold_accuracy) == (30, 0.5, 0.7)
    with pytest.raises(ParamError, match=r"unknown rules params \['min_gold'\]; known: \['max_straightline_share'"):
        QualityRules.from_params({"min_gold": 1})
    for value in ("30", "many", 20.5):  # a rule is a number of its type, never read from a string or rounded
        with pytest.raises(ParamError, match=f"rules.min_judgments must be an integer, got {value!r}"):
            QualityRules.from_params({"min_judgments": value})
    with pytest.raises(ParamError, match="rules.min_gold_accuracy must be >= 0.0 and <= 1.0, got 70"):
        QualityRules.from_params({"min_gold_accuracy": 70})


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (lambda j: j.drop(columns="seconds"), r"judgments lack column\(s\) seconds"),
        (lambda j: j.assign(task_type="XYZ"), r"unknown task type\(s\) \['XYZ'\]"),
        (lambda j: j.assign(score=np.where(j["task_type"] == "STS", 6.0, np.nan)), r"\d+ STS judgments have no score in \[0, 5\]"),
        (
            lambda j: j.assign(answer=j["answer"].replace(NO, "nope")),
            r"1 VERIFY judgments have an answer that is not one of the four answers",
        ),
        (lambda j: pd.concat([j, j.iloc[:1]]), r"1 judgments repeat a \(worker, item\) pair, e.g. worker '[a-d]' on item '[gvi0-9+-]+'"),
    ],
)
def test_bad_judgments_are_refused(change, message):
    with pytest.raises(ValueError, match=message):
        rater_report(change(a_round()), GOLD, RULES)


def test_a_round_nobody_judged_has_an_empty_report():
    """A text-only build's image tasks are never shown, so a round can have no judgments at all."""
    report = rater_report(a_round().iloc[:0], GOLD, RULES)
    assert report.empty and list(report.columns) == list(RATER_COLUMNS)
    kept, excluded = split_by_exclusion(a_round().iloc[:0], report)
    assert kept.empty and excluded.empty


def test_bad_gold_is_refused():
    with pytest.raises(ValueError, match=r"gold values must be 'positive' or 'negative' \(or ''\), got \['yes'\]"):
        rater_report(a_round(), GOLD.assign(gold=["yes", "", "", "", ""]), RULES)
    clash = pd.concat([GOLD, pd.DataFrame({"item_id": ["g+"], "gold": ["negative"]})])
    with pytest.raises(ValueError, match=r"1 gold items are marked both positive and negative, e.g. \['g\+'\]"):
        rater_report(a_round(), clash, RULES)
