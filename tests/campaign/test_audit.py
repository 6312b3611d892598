"""People's labels for a triage round, read from rated tables: a later table's label wins, a
labels-only table has no scores, a simulated panel is noticed, and a rated item outside the round's
tasks is rejected, never dropped silently."""

from __future__ import annotations

import math
from pathlib import Path

import pyarrow as pa

from crisscross.campaign.audit import people_labels
from crisscross.core import io


def test_people_labels_merge_the_tables_and_reject_items_outside_the_tasks(tmp_path: Path) -> None:
    graded, labels = str(tmp_path / "graded.parquet"), str(tmp_path / "labels.parquet")
    io.write_parquet(graded, pa.table({"item_id": ["a", "b", "z"], "positive": [True, False, True], "agg_score": [4.0, 1.0, 3.0]}))
    io.write_parquet(labels, pa.table({"item_id": ["b"], "positive": [True], "simulated": [True]}))
    people = people_labels([graded, labels], {"a", "b", "c"})
    assert people.positive == {"a": True, "b": True}
    assert people.scores["a"] == 4.0 and math.isnan(people.scores["b"])
    assert people.simulated
    assert [(r.key, r.reason, r.source) for r in people.rejected] == [("z", "not-in-tasks", f"{graded},{labels}")]
    assert not people_labels([graded], {"a", "b", "z"}).simulated
