"""Performance benchmarks, run with ``python -m benchmarks`` (see ``benchmarks/README.md``).

Each benchmark times something against a reference measured in the same run, so its ratios
mean the same on any machine; results go to ``benchmarks/results/`` (git-ignored).  This module
imports nothing heavy: benchmark workers may import the package.
"""

from __future__ import annotations

import json
import os
import statistics
from pathlib import Path
from typing import Any

RESULTS_DIR = Path(__file__).resolve().parent / "results"
# The real data beside the project (``shared/data``), or where ``$CRISSCROSS_SHARED_DATA`` says, as for the tests.
SHARED_DATA = Path(os.environ.get("CRISSCROSS_SHARED_DATA", Path(__file__).resolve().parents[2] / "shared" / "data"))
KARPATHY_PHOTOS = SHARED_DATA / "coco-images" / "karpathy-test"  # the Karpathy test split's 370 photos
DEMO_BUILD = "DVC_NO_ANALYTICS=1 dvc repro"  # builds the demo (build/, releases/demo-simulated/) in the project root
# The run's machine (``benchmarks.machine.measure``), set by ``python -m benchmarks`` before the first benchmark.
RUN_MACHINE: dict[str, Any] = {}


def save_result(name: str, value: Any) -> Path:
    """Write one benchmark's result as ``results/<name>.json`` (sorted keys, so runs diff cleanly),
    with the machine the run measured on beside it."""
    RESULTS_DIR.mkdir(exist_ok=True)
    path = RESULTS_DIR / f"{name}.json"
    path.write_text(json.dumps({**value, "measured_on": RUN_MACHINE}, indent=2, sort_keys=True) + "\n")
    return path


def percentiles(seconds: list[float]) -> dict[str, float]:
    """How many, the median and the 95th percentile (the nearest rank: a value that was measured)."""
    ordered = sorted(seconds)
    return {"n": len(ordered), "p50": statistics.median(ordered), "p95": ordered[round(0.95 * (len(ordered) - 1))]}


def cpuinfo(field: str) -> str | None:
    """The first CPU's ``field`` in /proc/cpuinfo (``model name``, ``flags``), or None."""
    with open("/proc/cpuinfo") as handle:
        return next((line.split(":", 1)[1].strip() for line in handle if line.startswith(field)), None)


def cpu_model() -> str:
    """The CPU's name as Linux reports it (``model name`` in /proc/cpuinfo)."""
    return cpuinfo("model name") or "unknown CPU"
