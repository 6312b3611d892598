"""The papers' six types as their classes say: what an answer may be, the rule in the card's words,
and a type crossing to a worker as its registered self."""

from __future__ import annotations

import pickle

import numpy as np
import pandas as pd
import pytest

from crisscross.tasktypes import TaskTypeError, task_type, task_types


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
