"""The papers' six types as their classes say: what an answer may be, the rule in the card's words,
and a type crossing to a worker as its registered self."""

from __future__ import annotations

import pickle

import numpy as np
import pandas as pd
import pytest

import crisscross.tasktypes as registry
from crisscross.core.ids import CAPTION_KIND
from crisscross.tasktypes import TaskTypeError, task_type, task_types
from crisscross.tasktypes.base import Scale, TaskType


def test_each_type_refuses_the_other_kind_of_value_and_keeps_its_own():
    assert task_type("sts").value_problem(3.2, None) is None
    assert task_type("STS").value_problem(None, "yes")[0] == "wrong-value-kind"
    assert task_type("SIS").value_problem(5.5, None) == ("score-out-of-range", "score 5.5 is outside 0–5")
    assert task_type("VERIFY").value_problem(None, "partially yes") is None
    assert (
        task_type("VERIFY").value_problem(None, "maybe")[1]
        == "answer 'maybe' is not one of the four answers (100% yes, partially yes, mostly no, 100% no)"
    )
    assert task_type("CHOOSE").value_problem(None, "none") is None and task_type("CHOOSE").value_problem(None, "coco:cap:1") is None
    assert task_type("VERIFY-TRIPLE").value_problem(None, "both") is None
    with pytest.raises(TaskTypeError, match="unknown task type 'XYZ'; known: STS, SIS, SITS, VERIFY, CHOOSE, VERIFY-TRIPLE"):
        task_type("XYZ")


def test_the_card_states_the_threshold_a_build_applied():
    assert task_type("SIS").positive_rule() == "aggregated score ≥ 2.5"
    assert task_type("SIS").positive_rule(3.0) == "aggregated score ≥ 3"  # aggregate.thresholds moved it
    assert task_type("VERIFY").positive_rule() == "the aggregated answer is “100% yes” or “partially yes”"


def test_qc_values_and_gold_follow_the_answers_order():
    answers = pd.Series(["100% yes", "partially yes", "mostly no", "100% no"])
    verify = task_type("VERIFY")
    values = verify.qc_values(np.full(4, np.nan), answers)
    assert values.tolist() == [3.0, 2.0, 1.0, 0.0]
    assert verify.passes_gold(values, answers, True, 3.0, 2.0).tolist() == [True, True, False, False]
    assert verify.passes_gold(values, answers, False, 3.0, 2.0).tolist() == [False, False, True, True]


def test_a_type_pickles_as_its_registered_instance():
    for kind in task_types():
        assert pickle.loads(pickle.dumps(kind)) is kind


def _plugin(**facts):
    """A yes/no caption-pair type with ``facts`` changed."""
    base = {
        "name": "YESNO",
        "kinds": (CAPTION_KIND, CAPTION_KIND),
        "title": "yes or no",
        "answers": ("yes", "no"),
        "meanings": {"yes": "y", "no": "n"},
        "positive_answers": frozenset({"yes"}),
        "instructions": "Say yes or no.",
        "side_labels": ("A", "B"),
        "anchors": (0.1, 0.9),
        "seconds_mean": 5.0,
        "answer_of_score": lambda self, scores, cuts: np.where(scores >= 2.5, "yes", "no").astype(object),
    }
    return type("YesNo", (TaskType,), {**base, **facts})


@pytest.mark.parametrize(
    ("facts", "refusal"),
    [
        ({"name": "yes/no"}, "lacks name"),
        ({"name": "A" * 33}, "lacks name"),
        ({"scale": Scale(5.0, {0: ("", "")}, high=10.0)}, "scale from 0 to 5"),
        ({"methods": ("c2c_para",)}, "method prefix 'c2c_para' overlaps STS's 'c2c_'"),
    ],
)
def test_a_plugin_that_would_break_a_stage_is_refused_when_it_registers(monkeypatch, facts, refusal):
    monkeypatch.setattr(registry, "_REGISTERED", dict(registry._REGISTERED))
    with pytest.raises(TaskTypeError, match=refusal):
        registry.register(_plugin(**facts))
    assert "YESNO" not in registry.type_names()
    registry.register(_plugin())  # the same type without the fault registers
    assert registry.task_type("yesno").name == "YESNO"


def test_a_choose_gold_item_is_passed_by_choosing_a_caption_or_none():
    choose, answers = task_type("CHOOSE"), pd.Series(["coco:cap:1", "none"])
    values = choose.qc_values(np.full(2, np.nan), answers)
    assert choose.passes_gold(values, answers, True, 3.0, 2.0).tolist() == [True, False]
    assert choose.passes_gold(values, answers, False, 3.0, 2.0).tolist() == [False, True]
