"""Top-up rounds for file-based crowd tools: the batches that close a round's open items.

After people's files come back (``annotate``, ``source: import``), an item is *open* when its stop
rule (:mod:`crisscross.campaign.replication`) has not decided it on the judgments that count — those
rater quality control kept, when the round's aggregate output is given — or, without a rule (the
fixed design, answer types, items nobody judged), while it has fewer than the ceiling's judgments.
So an item a rule stopped early is reopened when quality control drops judgments it stood on.
A top-up batch is a batch of the round as it was — same batch id and positions, so the files
people return validate against the round's own tasks table — holding its open items and its gold
items (raters are checked in every batch).  Every top-up batch asks for ``step`` more raters, never
more than the fewest judgments any open item may still take (:func:`raters_for`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np
import pandas as pd

from crisscross.annotate.exports import TASK_FORMATS
from crisscross.campaign.replication import FIXED, ReplicationSettings, rated_judgments, replication_decisions
from crisscross.core import io
from crisscross.core.settings import setting
from crisscross.formats.schema import NOT_GOLD

STATUS_COLUMNS = ["item_id", "task_type", "batch_id", "judgments", "needed", "open", "reason"]


@dataclass(frozen=True)
class TopUpSettings:
    """``topup:`` in params."""

    step: int = setting(1, low=1)  # raters asked per top-up batch: 1 looks after every judgment, as the stop rules assume
    formats: tuple[str, ...] = setting(("jsonl", "crowd-csv", "label-studio"), choices=tuple(TASK_FORMATS.names()))


def item_status(tasks: pd.DataFrame, judgments: pd.DataFrame, decisions: pd.DataFrame | None, replicas: int) -> pd.DataFrame:
    """Every non-gold item of the round: judgments so far, how many more it may take, whether it is open, and why."""
    items = tasks.loc[tasks["gold"] == NOT_GOLD, ["item_id", "task_type", "batch_id"]].drop_duplicates("item_id")
    counts = judgments.groupby("item_id").size()
    status = items.assign(judgments=items["item_id"].map(counts).fillna(0).astype(np.int64))
    status["needed"] = (replicas - status["judgments"]).clip(lower=0)
    status["reason"] = np.where(
        status["needed"] > 0, [f"{n} of at most {replicas} judgments" for n in status["judgments"]], f"the ceiling of {replicas} judgments"
    )
    if decisions is not None and len(decisions):
        by_item = decisions.set_index("item_id")
        decided = status["item_id"].isin(set(by_item.index[by_item["stopped"].astype(bool)]))
        reasons = status["item_id"].map(by_item["reason"])
        status.loc[decided, "needed"] = 0
        status["reason"] = reasons.where(reasons.notna(), status["reason"])
    status["open"] = status["needed"] > 0
    return status[STATUS_COLUMNS].sort_values("item_id", kind="stable").reset_index(drop=True)


def round_status(tasks: pd.DataFrame, judgments: pd.DataFrame, replicas: int, replication: ReplicationSettings) -> pd.DataFrame:
    """:func:`item_status` with the stop rule decided afresh on ``judgments`` (the ones that count)."""
    decisions = None
    if replication.rule != FIXED:
        gold = set(tasks.loc[tasks["gold"] != NOT_GOLD, "item_id"])
        decisions = replication_decisions(rated_judgments(judgments, gold), replicas, replication)
    return item_status(tasks, judgments, decisions, replicas)


def raters_for(status: pd.DataFrame, step: int) -> int:
    """Raters each top-up batch asks for: ``step``, capped by the fewest judgments an open item may take; 0 when none is open."""
    needed = status.loc[status["open"], "needed"]
    return int(min(step, needed.min())) if len(needed) else 0


def topup_tasks(tasks: pd.DataFrame, status: pd.DataFrame) -> pd.DataFrame:
    """The task rows of the top-up batches: open items and their batches' gold items, as in the round."""
    open_items = status[status["open"]]
    batches = set(open_items["batch_id"])
    rows = tasks[tasks["batch_id"].isin(batches) & (tasks["item_id"].isin(set(open_items["item_id"])) | (tasks["gold"] != NOT_GOLD))]
    return rows.sort_values(["batch_id", "position"], kind="stable").reset_index(drop=True)


def top_up(
    inputs: Mapping[str, str], replicas: int, replication: ReplicationSettings, step: int
) -> list[tuple[pd.DataFrame, pd.DataFrame, int]]:
    """The topup stage's whole-table step: the round's ``tasks`` and ``judgments`` (those that
    count) read; each item's status, the top-up batches' task rows and the raters each asks for."""
    tasks = io.read_parquet(inputs["tasks"]).to_pandas()
    status = round_status(tasks, io.read_parquet(inputs["judgments"]).to_pandas(), replicas, replication)
    return [(status, topup_tasks(tasks, status), raters_for(status, step))]
