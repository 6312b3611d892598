"""Top-up rounds: which items are open, and the batches that close them."""

from __future__ import annotations

import pandas as pd

from crisscross.campaign.replication import THRESHOLD, ReplicationSettings
from crisscross.campaign.topup import item_status, raters_for, round_status, topup_tasks
from crisscross.tasktypes.names import STS


def round_tasks() -> pd.DataFrame:
    rows = [("b1", 1, "x", ""), ("b1", 2, "g1", "positive"), ("b1", 3, "y", ""), ("b2", 1, "z", ""), ("b2", 2, "g2", "negative")]
    return pd.DataFrame(rows, columns=["batch_id", "position", "item_id", "gold"]).assign(task_type=STS)


def test_an_item_is_open_until_its_rule_decides_it_or_it_reaches_the_ceiling() -> None:
    judgments = pd.DataFrame({"item_id": ["x", "x", "y", "y", "y", "y", "g1"]})
    status = item_status(round_tasks(), judgments, None, 4).set_index("item_id")
    assert status["judgments"].to_dict() == {"x": 2, "y": 4, "z": 0}  # gold is no item of the round
    assert status["needed"].to_dict() == {"x": 2, "y": 0, "z": 4} and status["open"].to_dict() == {"x": True, "y": False, "z": True}
    decisions = pd.DataFrame({"item_id": ["x"], "stopped": [True], "reason": ["threshold after 2: mean 0.50 < 3 by 2.50 (needs 1.10)"]})
    decided = item_status(round_tasks(), judgments, decisions, 4).set_index("item_id")
    assert decided.loc["x", "needed"] == 0 and not decided.loc["x", "open"] and decided.loc["x", "reason"].startswith("threshold after 2")


def test_topup_batches_keep_their_positions_and_gold_and_never_overshoot_the_ceiling() -> None:
    tasks = round_tasks()
    judgments = pd.DataFrame({"item_id": ["x", "x", "x", "y", "y", "y", "y"]})
    status = item_status(tasks, judgments, None, 4)
    rows = topup_tasks(tasks, status)
    assert list(zip(rows["batch_id"], rows["position"], strict=True)) == [("b1", 1), ("b1", 2), ("b2", 1), ("b2", 2)]
    assert raters_for(status, 3) == 1  # x may take one more judgment only
    closed = item_status(tasks, pd.DataFrame({"item_id": ["x", "y", "z"] * 4}), None, 4)
    assert topup_tasks(tasks, closed).empty and raters_for(closed, 1) == 0


def test_an_item_stopped_on_judgments_quality_control_dropped_reopens() -> None:
    rule = ReplicationSettings(rule=THRESHOLD, alpha=0.1, rater_sd={STS: 0.8})
    scores = {"x": [0.0, 0.0], "y": [1.0, 5.0, 0.0, 4.0], "z": [0.5, 0.0]}
    judgments = pd.DataFrame(
        [(item, f"w{k}", score, None) for item, given in scores.items() for k, score in enumerate(given)],
        columns=["item_id", "worker", "score", "time"],
    ).assign(task_type=STS)
    status = round_status(round_tasks(), judgments, 4, rule).set_index("item_id")
    assert status["open"].to_dict() == {"x": False, "y": False, "z": False}  # x, z clear at two; y at its ceiling
    assert status.loc["x", "reason"].startswith("threshold after 2")
    kept = judgments[~((judgments["item_id"] == "z") & (judgments["worker"] == "w1"))]  # QC dropped one of z's two
    after = round_status(round_tasks(), kept, 4, rule).set_index("item_id")
    assert bool(after.loc["z", "open"]) and after.loc["z", "needed"] == 3 and after.loc["z", "reason"].startswith("open: 1 of at most 4")
    fixed = round_status(round_tasks(), kept, 4, ReplicationSettings()).set_index("item_id")
    assert fixed["needed"].to_dict() == {"x": 2, "y": 0, "z": 3}  # the fixed design: open until the ceiling
