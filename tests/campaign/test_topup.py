"""Top-up rounds: which items are open, and the batches that close them."""

from __future__ import annotations

import pandas as pd

from crisscross.campaign.topup import item_status, topup_tasks
from crisscross.formats.schema import STS


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
    rows, raters = topup_tasks(tasks, item_status(tasks, judgments, None, 4), step=3)
    assert list(zip(rows["batch_id"], rows["position"], strict=True)) == [("b1", 1), ("b1", 2), ("b2", 1), ("b2", 2)]
    assert raters == 1  # x may take one more judgment only
    nothing, none = topup_tasks(tasks, item_status(tasks, pd.DataFrame({"item_id": ["x", "y", "z"] * 4}), None, 4), step=1)
    assert nothing.empty and none == 0
