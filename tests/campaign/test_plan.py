"""Campaign plans: the pilot's estimates, and predicted interval widths against resampled panels."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest
from scipy.stats import spearmanr

from crisscross.aggregate.agreement import krippendorff_alpha
from crisscross.campaign.plan import (
    AlphaCurve,
    Pilot,
    PlanSettings,
    estimate_pilot,
    interval_alpha,
    item_half_width,
    plan_campaign,
    positive_rate_half_width,
    spearman_half_width,
)
from crisscross.core.errors import InputError
from crisscross.formats.plan import PLAN_FILE, read_plan
from crisscross.tasktypes.names import SIS, STS

SEED = 3
RATER_SD, ITEM_SD, MEAN = 0.8, 1.2, 2.4


def pilot_frame(rng: np.random.Generator, items: int = 600, replicas: int = 5, kind: str = STS) -> tuple[pd.DataFrame, np.ndarray]:
    true = MEAN + ITEM_SD * rng.standard_normal(items)
    scores = true[:, None] + RATER_SD * rng.standard_normal((items, replicas))
    frame = pd.DataFrame(
        {
            "item_id": np.repeat([f"{kind}:{i:04d}" for i in range(items)], replicas),
            "task_type": kind,
            "worker": np.tile([f"w{k}" for k in range(replicas)], items),
            "score": scores.ravel(),
            "seconds": rng.lognormal(np.log(20), 0.3, items * replicas),
        }
    )
    return frame, true


def test_the_pilot_gives_back_the_panel_it_was_drawn_from() -> None:
    frame, true = pilot_frame(np.random.default_rng(SEED), items=3000)
    pilot = estimate_pilot(frame)[STS]
    assert pilot.rater_sd == pytest.approx(RATER_SD, rel=0.03) and pilot.item_sd == pytest.approx(ITEM_SD, rel=0.05)
    assert pilot.positive_rate == pytest.approx((true >= 3.0).mean(), abs=0.03) and pilot.seconds_per_judgment == pytest.approx(
        20, rel=0.05
    )
    with pytest.raises(ValueError, match="two or more judgments"):
        estimate_pilot(frame.drop_duplicates("item_id"))


def test_interval_alpha_is_krippendorffs() -> None:
    rng = np.random.default_rng(SEED)
    scores = rng.normal(size=(1, 40, 4)) + rng.normal(size=(1, 40, 1))
    long = pd.DataFrame([{"task": f"t{i}", "worker": f"w{j}", "label": float(scores[0, i, j])} for i in range(40) for j in range(4)])
    assert interval_alpha(scores)[0] == pytest.approx(float(krippendorff_alpha(long, "interval")), abs=1e-12)


def test_predicted_half_widths_hold_within_twenty_percent_when_panels_are_resampled() -> None:
    """The issue's check: draw many panels of the planned design from the pilot's estimates and
    measure each interval's half width (half the central 95% of the resampled estimates)."""
    rng = np.random.default_rng(SEED)
    pilot = Pilot(STS, 600, 3000, RATER_SD, ITEM_SD, MEAN, 0.3, 20.0)
    settings = PlanSettings(resamples=400)

    def measured(values: np.ndarray) -> float:
        low, high = np.quantile(values, [0.025, 0.975])
        return (high - low) / 2

    errors = (RATER_SD * rng.standard_normal((20_000, 4))).mean(axis=1)
    assert measured(errors) == pytest.approx(item_half_width(pilot, 4, 0.95), rel=0.2)
    rates = rng.binomial(800, pilot.positive_rate, 4000) / 800
    assert measured(rates) == pytest.approx(positive_rate_half_width(pilot, 800, 0.95), rel=0.2)
    rho, n = 0.6, 500
    pearson = 2 * math.sin(math.pi * rho / 6)  # the normal correlation whose Spearman is rho
    draws = rng.multivariate_normal([0, 0], [[1, pearson], [pearson, 1]], size=(1000, n))
    spearmans = np.array([spearmanr(d[:, 0], d[:, 1])[0] for d in draws])
    assert measured(spearmans) == pytest.approx(spearman_half_width(rho, n, 0.95), rel=0.2)
    curve = AlphaCurve.simulate(pilot, 3, settings, SEED)
    true = MEAN + ITEM_SD * rng.standard_normal((400, 1500, 1))
    alphas = interval_alpha(true + RATER_SD * rng.standard_normal((400, 1500, 3)))
    assert measured(alphas) == pytest.approx(curve.at(1500), rel=0.2)  # simulated at 600 items, scaled to 1,500
    assert curve.expected == pytest.approx(ITEM_SD**2 / (ITEM_SD**2 + RATER_SD**2), abs=0.02)


def test_the_plan_meets_every_target_at_the_least_cost_it_finds() -> None:
    frame, _ = pilot_frame(np.random.default_rng(SEED))
    other, _ = pilot_frame(np.random.default_rng(SEED + 1), kind=SIS)
    settings = PlanSettings(budget_judgments=6000)
    plan = plan_campaign(pd.concat([frame, other]), settings, SEED)
    assert set(plan["types"]) == {STS, SIS}
    sts = plan["types"][STS]
    replicas = sts["replicas_for_item_target"]
    assert (
        item_half_width(estimate_pilot(frame)[STS], replicas, 0.95)
        <= 0.75
        < item_half_width(estimate_pilot(frame)[STS], replicas - 1, 0.95)
    )
    d = sts["design"]
    assert d["items"] == max(n for n in sts["items_for"].values() if n is not None)
    widths = d["half_widths"]
    assert widths["positive_rate"] <= 0.02 and widths["alpha"] <= 0.05 + 1e-9 and widths["spearman"] <= 0.03
    assert d["judgments"] == d["items"] * d["replicas"] and d["cost"] == pytest.approx(d["rater_hours"] * 12.0, abs=0.1)
    assert sts["budget"]["items"] == 6000 // replicas and sts["budget"]["half_widths"]["positive_rate"] > widths["positive_rate"]
    assert plan["total"]["judgments"] == sum(t["design"]["judgments"] for t in plan["types"].values())
    assert plan_campaign(pd.concat([frame, other]), settings, SEED) == plan  # seeded


def test_a_pilot_without_positives_or_times_still_plans() -> None:
    rng = np.random.default_rng(SEED)
    frame, _ = pilot_frame(rng)
    frame = frame.assign(score=frame["score"].clip(upper=2.0), seconds=np.nan)  # nothing reaches 3; no tool said the time
    plan = plan_campaign(frame, PlanSettings(budget_judgments=5), SEED)
    sts = plan["types"][STS]
    assert sts["pilot"]["positive_rate"] == 0.0 and sts["items_for"]["positive_rate"] > 90  # not "two items suffice"
    assert sts["design"]["rater_hours"] is None and plan["total"]["cost"] is None
    assert sts["budget"]["note"].startswith("5 judgments buy fewer than 4 items")


def test_a_plan_file_python_cannot_parse_is_one_line(tmp_path) -> None:
    (tmp_path / PLAN_FILE).write_text("[" * 100_000 + "]" * 100_000)  # json.loads's RecursionError was a traceback
    with pytest.raises(InputError, match=r"plan.json: not a JSON document \(maximum recursion depth"):
        read_plan(str(tmp_path))
