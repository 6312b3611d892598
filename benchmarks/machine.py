"""The machine a benchmark run measured on: CPU model, cores, widest vector ISA and the native float32
GEMM peak of that run, so every figure quoted from a run can name where it came from.

``python -m benchmarks`` measures it at the start and again at the end (a shared host's speed
drifts within a run), prints both, and :func:`benchmarks.save_result` writes the start's record into
every result file of the run, as ``measured_on``.
"""

from __future__ import annotations

import os
import time

from benchmarks import cpu_model, cpuinfo


def vector_isa() -> str:
    """The widest x86 vector extension the CPU reports (the native kernels' choice depends on it)."""
    flags = (cpuinfo("flags") or "").split()
    return next((isa for flag, isa in (("avx512f", "AVX-512"), ("avx2", "AVX2"), ("avx", "AVX")) if flag in flags), "no AVX")


def measure() -> dict[str, object]:
    """CPU, cores, ISA, the 1-minute load and the native GEMM peak (numpy's BLAS on every core, in a
    fresh interpreter: the same worker ``similarity_topk`` uses for its peak)."""
    from benchmarks.similarity_topk import spawn

    load = os.getloadavg()[0]
    rates = spawn("gemm")
    return {
        "cpu": cpu_model(),
        "cores": os.cpu_count(),
        "isa": vector_isa(),
        "gemm_peak_gflops": round(max(rates.values()), 1),
        "load_1min_before": round(load, 2),
        "measured_at_utc": time.strftime("%Y-%m-%d %H:%M", time.gmtime()),
    }


def describe(machine: dict[str, object]) -> str:
    return (
        f"{machine['cpu']}, {machine['cores']} cores, {machine['isa']}, native GEMM peak {machine['gemm_peak_gflops']:.0f} GFLOP/s"
        f" (load {machine['load_1min_before']:.1f}, {machine['measured_at_utc']} UTC)"
    )
