import math

import numpy as np
import pandas as pd
import pytest

from crisscross.aggregate.agreement import krippendorff_alpha
from crisscross.tasktypes.names import VERIFY_ANSWERS

# Krippendorff (2011), "Computing Krippendorff's Alpha-Reliability", the example with missing
# values: 4 coders × 12 units, one row per coder, None = not coded.
RELIABILITY_DATA = {
    "A": [1, 2, 3, 3, 2, 1, 4, 1, 2, None, None, None],
    "B": [1, 2, 3, 3, 2, 2, 4, 1, 2, 5, None, 3],
    "C": [None, 3, 3, 3, 2, 3, 4, 2, 2, 5, 1, None],
    "D": [1, 2, 3, 3, 2, 4, 4, 1, 2, 5, 1, None],
}


def long(data: dict[str, list[object]]) -> pd.DataFrame:
    rows = [(f"u{u:02d}", coder, value) for coder, values in data.items() for u, value in enumerate(values, 1) if value is not None]
    return pd.DataFrame(rows, columns=["task", "worker", "label"])


@pytest.mark.parametrize(
    ("level", "published", "exact"),
    [("nominal", 0.743, 0.743421052631579), ("ordinal", 0.815, 0.8153875037548813), ("interval", 0.849, 0.8491071428571428)],
)
def test_krippendorff_published_example(level, published, exact):
    alpha = krippendorff_alpha(long(RELIABILITY_DATA), level)
    assert round(alpha.value, 3) == published
    assert alpha.value == pytest.approx(exact, abs=1e-12)  # as the `krippendorff` package computes it
    # Unit 12 has one value (B: 3): not pairable, so 11 units and 40 of the 41 values count.
    assert (alpha.units, alpha.values, alpha.reason, alpha.level) == (11, 40, "", level)
    assert float(alpha) == alpha.value


def test_small_cases_by_hand():
    # Interval: u1 = {1, 3}, u2 = {2, 2}.  D_o = (4 + 4) / 4 = 2, D_e = 16 / 12, alpha = 1 - 1.5.
    interval = pd.DataFrame({"task": ["u1", "u1", "u2", "u2"], "worker": ["a", "b", "a", "b"], "label": [1.0, 3.0, 2.0, 2.0]})
    assert krippendorff_alpha(interval, "interval").value == pytest.approx(-0.5)
    # Nominal: u1 = {x, x}, u2 = {x, y}: o_xy = o_yx = 1, n_x = 3, n_y = 1: 1 - 3 · 2 / (2 · 3) = 0.
    nominal = interval.assign(label=["x", "x", "x", "y"])
    assert krippendorff_alpha(nominal, "nominal").value == pytest.approx(0.0)


def test_verify_answers_are_ordered_best_first():
    answers = long({"A": [0, 1, 2, 3, 0, 1, 3], "B": [0, 2, 2, 3, 1, 1, 2], "C": [1, 1, 3, 3, 0, None, 3]})
    coded = answers.assign(label=answers["label"].astype(int))
    named = answers.assign(label=[VERIFY_ANSWERS[int(v)] for v in answers["label"]])
    by_number = krippendorff_alpha(coded, "ordinal").value
    assert krippendorff_alpha(named, "ordinal").value == pytest.approx(by_number, abs=1e-12)
    assert krippendorff_alpha(named, "ordinal", order=VERIFY_ANSWERS[::-1]).value == pytest.approx(by_number, abs=1e-12)
    # Another order changes the distances, hence alpha; nominal alpha ignores order.
    shuffled = [VERIFY_ANSWERS[i] for i in (0, 3, 1, 2)]
    assert krippendorff_alpha(named, "ordinal", order=shuffled).value != pytest.approx(by_number)
    assert krippendorff_alpha(named, "nominal", order=shuffled).value == pytest.approx(
        krippendorff_alpha(coded, "nominal").value, abs=1e-12
    )
    with pytest.raises(ValueError, match=r"not in the given labels"):
        krippendorff_alpha(named, "ordinal", order=VERIFY_ANSWERS[:3])


@pytest.mark.parametrize("level", ["nominal", "ordinal", "interval"])
def test_perfect_agreement_is_one(level):
    df = pd.DataFrame({"task": ["u1", "u1", "u2", "u2", "u2", "u3"], "worker": list("ababca"), "label": [1.0, 1.0, 4.0, 4.0, 4.0, 2.0]})
    alpha = krippendorff_alpha(df, level)
    assert alpha.value == 1.0 and (alpha.units, alpha.values) == (2, 5)


def test_undefined_alpha_says_why():
    single = pd.DataFrame({"task": ["u1", "u2"], "worker": ["a", "b"], "label": [1.0, 2.0]})
    alpha = krippendorff_alpha(single, "interval")
    assert math.isnan(alpha.value) and (alpha.units, alpha.values) == (0, 0)
    assert alpha.reason == "no unit has two or more labels (2 units, one label each): nothing is pairable"
    constant = pd.DataFrame({"task": ["u1", "u1", "u2", "u2", "u3"], "worker": list("ababa"), "label": [3.0] * 5})
    for level in ("nominal", "interval"):
        alpha = krippendorff_alpha(constant.assign(label=0.1), level)  # 0.1: a mean of it need not be exact
        assert math.isnan(alpha.value) and alpha.reason == "all 4 pairable values are equal: no variation, so no expected disagreement"


def test_bad_inputs():
    df = long(RELIABILITY_DATA)
    with pytest.raises(ValueError, match="unknown alpha level 'ratio'; known: nominal, ordinal, interval"):
        krippendorff_alpha(df, "ratio")
    with pytest.raises(ValueError, match="ratings need numeric labels"):
        krippendorff_alpha(df.assign(label="x"), "interval")
    with pytest.raises(ValueError, match=r"pairs occur more than once"):
        krippendorff_alpha(pd.concat([df, df.iloc[:1]]), "nominal")


@pytest.mark.parametrize("level", ["nominal", "ordinal", "interval"])
def test_agrees_with_the_krippendorff_package(level):
    krippendorff = pytest.importorskip("krippendorff", reason="the krippendorff package is not installed (optional cross-check)")
    rng = np.random.default_rng(4)
    values = rng.integers(0, 6, (7, 300)).astype(float)
    values[rng.random(values.shape) < 0.4] = np.nan
    df = pd.DataFrame(
        [(f"u{u:03d}", f"c{c}", values[c, u]) for c in range(7) for u in range(300) if not np.isnan(values[c, u])],
        columns=["task", "worker", "label"],
    )
    expected = krippendorff.alpha(reliability_data=values, level_of_measurement=level)
    assert krippendorff_alpha(df, level).value == pytest.approx(expected, abs=1e-9)
