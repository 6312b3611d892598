"""Kernels compile (and numba loads) on their first call, together with the kernels they call."""

from __future__ import annotations

import importlib
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pytest

KERNELS = """
import numpy as np

from crisscross.core.kernels import njit


@njit
def _twice(value: float) -> float:
    return 2.0 * value


@njit
def total(values: np.ndarray) -> float:
    out = 0.0
    for value in values:
        out += _twice(value)
    return out
"""


def test_first_call_swaps_in_dispatchers_for_every_kernel_of_the_module(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "lazy_kernels.py").write_text(KERNELS)
    monkeypatch.syspath_prepend(str(tmp_path))
    module = importlib.import_module("lazy_kernels")
    assert not hasattr(module.total, "py_func")  # a plain wrapper until called
    with ThreadPoolExecutor(4) as pool:  # first calls racing on threads, as top-K's block pairs do
        assert list(pool.map(lambda _: module.total(np.arange(4.0)), range(8))) == [12.0] * 8
    from numba.core.registry import CPUDispatcher

    assert isinstance(module.total, CPUDispatcher) and isinstance(module._twice, CPUDispatcher)
    assert module._twice(1.5) == 3.0
