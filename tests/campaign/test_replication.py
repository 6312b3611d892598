"""Adaptive replication: where an item stops under each rule, the error rate the threshold rule
bounds, and the rater spread read from items published twice."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest
from scipy.stats import norm

from crisscross.campaign.replication import (
    CI_WIDTH,
    THRESHOLD,
    ReplicationSettings,
    adapt_round,
    arrival_order,
    decide,
    normal_quantile,
    rater_sd_from_repeats,
    replication_decisions,
    with_pilot_spread,
)
from crisscross.core.errors import ParamError
from crisscross.core.settings import settings_from_params
from crisscross.tasktypes.names import SIS, STS

SD = {STS: 0.84, SIS: 0.84}


def test_the_normal_quantile_is_scipy_stats_norm_ppf_to_the_bit() -> None:
    chances = [*np.linspace(1e-9, 1 - 1e-9, 2_001), 0.975, 0.995, 1 - 0.05 / 7, 0.5]
    assert [normal_quantile(p) for p in chances] == [float(norm.ppf(p)) for p in chances]


def test_the_threshold_rule_stops_at_the_first_look_that_is_clear_of_the_threshold() -> None:
    settings = ReplicationSettings(rule=THRESHOLD, alpha=0.1, rater_sd=SD)
    z = norm.ppf(1 - 0.1 / 4)  # looks at 2, 3, 4 and 5 judgments
    assert 0.84 * z / math.sqrt(2) == pytest.approx(1.1642, abs=1e-4)
    far = decide(np.array([0.0, 0.5, 4.0, 4.0, 4.0]), STS, 5, settings)  # mean 0.25 at two: 2.75 below 3
    assert (far.used, far.stopped, far.mean) == (2, True, 0.25) and far.reason.startswith("threshold after 2: mean 0.25 < 3 by 2.75")
    near = decide(np.array([2.5, 3.5, 3.0, 2.0, 4.0]), STS, 5, settings)
    assert (near.used, near.stopped) == (5, False) and near.reason == "the ceiling of 5 judgments"
    later = decide(np.array([4.0, 5.0, 5.0, 5.0]), STS, 5, settings)  # 1.5 above at two (needs 1.16)
    assert (later.used, later.stopped) == (2, True)
    waiting = decide(np.array([3.5, 3.0]), STS, 5, settings)
    assert (waiting.used, waiting.stopped) == (2, False) and waiting.reason.startswith("open: 2 of at most 5")
    untuned = decide(np.array([0.0, 0.0, 0.0, 0.0, 0.0]), "SITS", 5, settings)  # no rater sd for SITS: never early
    assert (untuned.used, untuned.stopped) == (5, False)


def test_the_ci_width_rule_asks_every_item_for_the_same_precision() -> None:
    settings = ReplicationSettings(rule=CI_WIDTH, alpha=0.05, half_width=0.75, rater_sd=SD)
    n = math.ceil((norm.ppf(0.975) * 0.84 / 0.75) ** 2)  # 5: the first count whose interval is narrow enough
    assert decide(np.full(5, 4.9), SIS, 6, settings).used == n
    assert decide(np.full(6, 2.5), SIS, 6, settings).used == n


def test_the_threshold_rule_errs_on_the_side_at_most_alpha_of_the_time() -> None:
    """Items whose true mean sits just above the threshold: the share stopped below it stays under alpha."""
    rng = np.random.default_rng(5)
    settings = ReplicationSettings(rule=THRESHOLD, alpha=0.1, rater_sd=SD)
    for offset in (0.05, 0.3, 0.8):
        scores = 3.0 + offset + 0.84 * rng.standard_normal((4000, 5))
        frame = pd.DataFrame({"item_id": np.repeat([f"i{k:05d}" for k in range(4000)], 5), "task_type": STS, "score": scores.ravel()})
        d = replication_decisions(frame, 5, settings)
        wrong = (d["stopped"] & (d["mean"] < 3.0)).mean()
        assert wrong <= 0.1, (offset, wrong)
    assert set(d.columns) == {"item_id", "task_type", "used", "stopped", "open", "mean", "reason"} and not d["open"].any()


def test_the_rater_spread_comes_from_items_published_twice() -> None:
    rng = np.random.default_rng(9)
    true = rng.uniform(0, 5, 3000)
    rows = [(f"p{k}", m + 0.8 * rng.standard_normal(5).mean()) for k, m in enumerate(true) for _ in range(2)]
    rows += [("once", 2.0)]
    sd = rater_sd_from_repeats(pd.DataFrame(rows, columns=["item_id", "score"]), 5)
    assert sd == pytest.approx(0.8, rel=0.05)
    with pytest.raises(ValueError, match="two published means"):
        rater_sd_from_repeats(pd.DataFrame([("a", 1.0)], columns=["item_id", "score"]), 5)


def test_settings_are_checked_like_every_section() -> None:
    with pytest.raises(ParamError, match="replication.rule must be one of"):
        settings_from_params(ReplicationSettings, {"rule": "sprt"}, "replication")
    with pytest.raises(ParamError, match="replication.alpha must be > 0.0 and < 1.0"):
        settings_from_params(ReplicationSettings, {"alpha": 1.5}, "replication")
    with pytest.raises(ParamError, match=r"replication.rater_sd.SIS must be > 0.0"):
        settings_from_params(ReplicationSettings, {"rater_sd": {"SIS": 0}}, "replication")
    with pytest.raises(ParamError, match=r"replication.rater_sd has key 'sts'; its keys must be among \['STS', 'SIS', 'SITS'\]"):
        settings_from_params(ReplicationSettings, {"rater_sd": {"sts": 0.8}}, "replication")
    assert settings_from_params(ReplicationSettings, {"rater_sd": {"STS": 1}}, "replication").rater_sd == {"STS": 1.0}


def test_a_ceiling_below_the_minimum_is_the_ceiling() -> None:
    settings = ReplicationSettings(rule=THRESHOLD, min_judgments=3, rater_sd=SD)
    d = decide(np.array([0.0]), STS, 1, settings)
    assert (d.used, d.stopped, d.reason) == (1, False, "the ceiling of 1 judgments")


def test_the_rater_spread_does_not_depend_on_which_copy_comes_first() -> None:
    rows = [("a", 1.0), ("a", 2.0), ("b", 4.0), ("b", 3.2), ("c", 0.5), ("c", 0.1)]
    flipped = [rows[1], rows[0], rows[2], rows[3], rows[5], rows[4]]
    one, two = (rater_sd_from_repeats(pd.DataFrame(r, columns=["item_id", "score"]), 5) for r in (rows, flipped))
    assert one == pytest.approx(two) == pytest.approx(math.sqrt(5 * np.mean([1.0, 0.64, 0.16]) / 2))


def judgments_frame(rows: list[tuple[str, str, float, str | None, str]]) -> pd.DataFrame:
    return pd.DataFrame(rows, columns=["item_id", "worker", "score", "time", "source"]).assign(task_type=STS)


def test_arrival_is_the_stamped_time_then_the_table_order() -> None:
    frame = judgments_frame(
        [("a", "w1", 1.0, None, "simulate"), ("a", "w2", 2.0, "2026-11-02T00:00:00Z", "people"), ("a", "w3", 3.0, "2026-11-01T00:00:00Z", "people"),
         ("a", "w4", 4.0, None, "simulate"), ("a", "w5", 4.0, "2026-11-01T00:00:00.400000Z", "people")]
    )  # fmt: skip
    assert arrival_order(frame)["worker"].tolist() == ["w3", "w5", "w2", "w1", "w4"]  # .4 s after w3, though it sorts first as text


def test_a_round_under_the_rule_drops_only_what_a_campaign_would_not_have_asked() -> None:
    settings = ReplicationSettings(rule=THRESHOLD, alpha=0.1, rater_sd=SD)
    clear = [("clear", f"w{k}", 0.0, None, "simulate") for k in range(5)]  # decided at two judgments
    made = [("made", f"w{k}", 0.0, f"2026-11-0{k + 1}T00:00:00Z", "people") for k in range(5)]  # people's: all kept
    gold = [("gold", f"w{k}", 5.0, None, "simulate") for k in range(5)]  # every rater of a batch judges gold
    frame = judgments_frame(clear + made + gold)
    keep, decisions = adapt_round(frame, {"gold"}, 5, settings)
    assert frame[keep].groupby("item_id").size().to_dict() == {"clear": 2, "made": 5, "gold": 5}
    assert decisions.set_index("item_id")["used"].to_dict() == {"clear": 2, "made": 2}
    assert decisions["stopped"].all() and "gold" not in set(decisions["item_id"])


def test_a_plan_fills_the_spread_params_leave_out() -> None:
    plan = {"types": {STS: {"pilot": {"rater_sd": 0.9}}, SIS: {"pilot": {"rater_sd": 0.7}}}}
    settings = with_pilot_spread(ReplicationSettings(rater_sd={STS: 0.5}), plan)
    assert dict(settings.rater_sd) == {STS: 0.5, SIS: 0.7}
