"""The numeric policy: one kernel family and one BLAS thread, in the command and in every worker."""

from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import pytest

from crisscross.core import numerics


def test_pin_sets_every_variable_and_overrides_other_choices() -> None:
    environ = {"OPENBLAS_CORETYPE": "SkylakeX", "ATEN_CPU_CAPABILITY": "avx512", "OTHER": "x"}
    numerics.pin(environ)
    assert environ == {**numerics.POLICY, "OTHER": "x"}


def test_native_leaves_the_environment_alone_and_a_typo_is_refused() -> None:
    environ = {numerics.SWITCH: "native", "OPENBLAS_CORETYPE": "SkylakeX"}
    assert numerics.pin(environ) == [] and environ["OPENBLAS_CORETYPE"] == "SkylakeX"
    with pytest.raises(numerics.NumericPolicyError, match="CRISSCROSS_NUMERICS must be"):
        numerics.enabled({numerics.SWITCH: "fast"})


def test_this_process_runs_under_the_policy() -> None:
    """crisscross was imported before numpy here (tests/conftest.py), so the kernels are the policy's."""
    chosen = numerics.loaded_kernels()
    assert any(name.startswith("openblas") for name in chosen)
    assert numerics.problems(chosen) == []
    assert os.environ["OPENBLAS_CORETYPE"] == "Haswell"


def test_problems_name_each_library_that_chose_otherwise() -> None:
    chosen = {"openblas libscipy_openblas": "SkylakeX", "numpy simd": "x86-64-v4", "torch": "AVX512"}
    assert numerics.problems(chosen) == ["openblas libscipy_openblas uses SkylakeX", "numpy uses its AVX-512 loops", "torch uses AVX512"]
    assert numerics.problems({"openblas x": "Haswell", "numpy simd": "x86-64-v3 or lower", "torch": "AVX2"}) == []


def test_a_worker_that_loaded_numpy_with_other_kernels_is_refused() -> None:
    """numpy loaded before crisscross, with another OpenBLAS kernel (Sandybridge runs on every AVX2
    CPU): the check a numeric step runs in ``setup`` says what is wrong and what to do."""
    code = "import numpy; import crisscross; from crisscross.core import numerics; numerics.check('embed use-m3')"
    env = {k: v for k, v in os.environ.items() if k not in numerics.POLICY} | {"OPENBLAS_CORETYPE": "Sandybridge"}
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode != 0
    assert "embed use-m3: this process loaded its numeric libraries before the numeric policy was set" in done.stderr
    assert "uses Sandybridge" in done.stderr and "crisscross worker-pool" in done.stderr


def test_gemm_bytes_follow_the_thread_count_which_is_why_the_policy_fixes_it() -> None:
    """The reason for OPENBLAS_NUM_THREADS=1: the same product with two threads has other last bits."""
    from threadpoolctl import threadpool_limits

    rng = np.random.default_rng(0)
    a, b = rng.standard_normal((64, 512), dtype=np.float32), rng.standard_normal((512, 512), dtype=np.float32)
    with threadpool_limits(1):
        one = (a @ b).tobytes()
    with threadpool_limits(2):
        two = (a @ b).tobytes()
    assert one != two


def test_dockerfile_env_lines() -> None:
    lines = numerics.dockerfile_env().splitlines()
    assert 'ENV OPENBLAS_CORETYPE="Haswell"' in lines and len(lines) == len(numerics.POLICY)
