"""Arrow's memory pool: jemalloc in a step's process, unless the user chose another."""

from __future__ import annotations

import os
import subprocess
import sys

import pyarrow as pa
import pytest

from crisscross.core import arrow_pool

POOL_OF_A_STEP = (
    "import crisscross.core.io, pyarrow as pa; pa.table({'x': list(range(1000))}); print(pa.default_memory_pool().backend_name)"
)


def backend_in_a_new_process(**environ: str) -> str:
    env = {k: v for k, v in os.environ.items() if k != arrow_pool.CHOICE} | environ
    run = subprocess.run([sys.executable, "-c", POOL_OF_A_STEP], capture_output=True, text=True, check=True, env=env)
    assert not run.stderr, run.stderr  # no warning from pyarrow about its pool
    return run.stdout.strip()


@pytest.mark.skipif(arrow_pool.PREFERRED not in pa.supported_memory_backends(), reason="this pyarrow has no jemalloc")
def test_a_step_s_process_allocates_from_jemalloc_unless_the_user_chose_a_pool() -> None:
    assert backend_in_a_new_process() == "jemalloc"
    assert backend_in_a_new_process(ARROW_DEFAULT_MEMORY_POOL="system") == "system"
    assert backend_in_a_new_process(ARROW_DEFAULT_MEMORY_POOL="mimalloc") == "mimalloc"


def test_choosing_keeps_the_pool_the_environment_names() -> None:
    before = pa.default_memory_pool()
    try:
        pa.set_memory_pool(pa.system_memory_pool())
        assert arrow_pool.choose({arrow_pool.CHOICE: "system"}) == "system"
        expected = arrow_pool.PREFERRED if arrow_pool.PREFERRED in pa.supported_memory_backends() else "system"
        assert arrow_pool.choose({}) == expected
    finally:
        pa.set_memory_pool(before)
