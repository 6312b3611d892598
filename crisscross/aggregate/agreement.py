"""Inter-rater agreement: Krippendorff's alpha over the long ``task``/``worker``/``label`` frame.

Units are tasks, coders are workers (Krippendorff 2011, "Computing Krippendorff's
Alpha-Reliability").  Only *pairable* values count: those of units with at least two labels;
a unit judged once says nothing about agreement.  ``alpha = 1 - D_o / D_e`` with ``D_o`` the
disagreement observed within units and ``D_e`` the one expected from all pairable values pooled.

* ``nominal`` (answers as unordered categories) and ``ordinal`` (categories in a given order:
  the ordinal types' answers in their order by default (VERIFY's, best first), numbers by
  value) go through the coincidence matrix, built with one ``bincount``;
* ``interval`` (0–5 ratings) uses the closed form over per-unit sums of squared deviations, in
  O(n) without any matrix.

The result carries the number of pairable units and values beside alpha, and the reason when
alpha is undefined (NaN): no unit with two labels, or no variation among the pairable values.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from crisscross.aggregate.aggregators import CATEGORICAL, RATINGS, Coded, code_long

LEVELS = ("nominal", "ordinal", "interval")


@dataclass(frozen=True)
class Alpha:
    """Krippendorff's alpha and what it was computed from; ``float(alpha)`` gives the value."""

    value: float  # NaN when undefined, see reason
    level: str
    units: int  # units with at least two labels
    values: int  # labels in those units (Krippendorff's n)
    reason: str = ""  # why value is NaN; empty when defined

    def __float__(self) -> float:
        return self.value


def krippendorff_alpha(df: pd.DataFrame, level: str, order: Sequence[Any] | None = None) -> Alpha:
    """Krippendorff's alpha of a long ``task``/``worker``/``label`` frame at ``level``.

    ``order`` lists the categories from one end of the scale to the other for ``ordinal``
    (default: VERIFY answers best first, then other labels sorted, numbers by value); every
    label must be in it.  Nominal alpha does not depend on it.
    A (task, worker) pair may occur once, as for the aggregators.
    """
    if level not in LEVELS:
        raise ValueError(f"unknown alpha level {level!r}; known: {', '.join(LEVELS)}")
    if level == "interval":
        coded = code_long(df, RATINGS)
    elif isinstance(df, pd.DataFrame) and "label" in df.columns and pd.api.types.is_numeric_dtype(df["label"]):
        # Numbers as categories: by default their own order is the ordinal scale.
        default = sorted(df["label"].dropna().unique())
        coded = code_long(df.assign(label=df["label"].astype(object)), CATEGORICAL, default if order is None else order)
    else:
        coded = code_long(df, CATEGORICAL, order)
    m = coded.counts
    pairable = (m >= 2)[coded.task]
    units, n = int((m >= 2).sum()), int(pairable.sum())
    if units == 0:
        return Alpha(float("nan"), level, 0, 0, f"no unit has two or more labels ({len(m)} units, one label each): nothing is pairable")
    used = coded.values[pairable]
    if (used == used[0]).all():  # exact, before any sum can leave a rounding residue
        return Alpha(float("nan"), level, units, n, f"all {n} pairable values are equal: no variation, so no expected disagreement")
    if level == "interval":
        observed, expected = _interval(coded, pairable)
    else:
        observed, expected = _coincidences(coded, pairable, level)
    return Alpha(float(1.0 - observed / expected), level, units, n)


def _interval(coded: Coded, pairable: np.ndarray) -> tuple[float, float]:
    """``(n - 1)·D_o`` and ``(n - 1)·D_e`` for δ² = (a - b)², from sums of squared deviations.

    Within a unit of m values, the squared differences over ordered pairs sum to 2·m·SS; the
    unit weighs 1/(m - 1), so ``D_o = Σ_u 2·m_u·SS_u/(m_u - 1) / n``; pooled, ``D_e = 2·SS/(n - 1)``.
    """
    task, x = coded.task[pairable], coded.values[pairable]
    m = np.bincount(task, minlength=len(coded.tasks)).astype(np.float64)
    with np.errstate(invalid="ignore", divide="ignore"):
        mean = np.bincount(task, weights=x, minlength=m.size) / m
    within = np.bincount(task, weights=(x - mean[task]) ** 2, minlength=m.size)
    used = m >= 2
    n = x.size
    observed = 2 * float((m[used] * within[used] / (m[used] - 1)).sum()) * (n - 1) / n
    expected = 2 * float(((x - x.mean()) ** 2).sum())
    return observed, expected


def _coincidences(coded: Coded, pairable: np.ndarray, level: str) -> tuple[float, float]:
    """``(n - 1)·D_o`` and ``(n - 1)·D_e`` from the coincidence matrix of the pairable values."""
    assert coded.labels is not None
    k = len(coded.labels)
    task, y = coded.task[pairable], coded.values[pairable]
    counts = np.bincount(task * k + y, minlength=len(coded.tasks) * k).reshape(-1, k).astype(np.float64)
    m = counts.sum(axis=1)
    counts, m = counts[m >= 2], m[m >= 2]
    # o[c, d] = Σ_u n_uc·(n_ud - [c = d]) / (m_u - 1): ordered pairs of values within units.
    coincidence = (counts / (m - 1)[:, None]).T @ counts - np.diag((counts / (m - 1)[:, None]).sum(axis=0))
    marginals = coincidence.sum(axis=1)
    n = marginals.sum()
    if level == "nominal":
        delta = 1.0 - np.eye(k)
    else:
        # Ordinal: (Σ_{g between c and d} n_g - (n_c + n_d)/2)², over the categories in order.
        cumulative = np.cumsum(marginals)
        low, high = np.minimum.outer(np.arange(k), np.arange(k)), np.maximum.outer(np.arange(k), np.arange(k))
        between = cumulative[high] - cumulative[low] + marginals[low]
        delta = (between - (marginals[:, None] + marginals[None, :]) / 2) ** 2
    observed = float((coincidence * delta).sum()) * (n - 1) / n
    expected = float((np.outer(marginals, marginals) * delta).sum()) / n
    return observed, expected
