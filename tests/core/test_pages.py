"""numpy's huge-page advice: off in a step's process, whether numpy loaded before crisscross or after,
unless the user set numpy's own variable."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from crisscross.core import pages

# _set_madvise_hugepage returns the setting it replaces: what the process had been running with.
ADVICE_IN_FORCE = "from numpy._core.multiarray import _set_madvise_hugepage; print(_set_madvise_hugepage(False))"


def advice_in_a_new_process(imports: str, **environ: str) -> str:
    env = {k: v for k, v in os.environ.items() if k != pages.VARIABLE} | environ
    run = subprocess.run([sys.executable, "-c", f"{imports}; {ADVICE_IN_FORCE}"], capture_output=True, text=True, check=True, env=env)
    return run.stdout.strip()


@pytest.mark.parametrize("imports", ["import crisscross, numpy", "import numpy, crisscross"])
def test_a_step_s_process_makes_arrays_without_huge_page_advice(imports: str) -> None:
    assert advice_in_a_new_process("import numpy") == "True"  # numpy's default, which the project turns off
    assert advice_in_a_new_process(imports) == "False"


def test_the_user_s_setting_is_kept_and_reaches_the_processes_a_step_starts() -> None:
    assert advice_in_a_new_process("import crisscross, numpy", NUMPY_MADVISE_HUGEPAGE="1") == "True"
    environ: dict[str, str] = {}
    pages.advise(environ)
    assert environ == {pages.VARIABLE: "0"}
    kept = {pages.VARIABLE: "1"}
    pages.advise(kept)
    assert kept == {pages.VARIABLE: "1"}
