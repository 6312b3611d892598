"""Performance benchmarks, run with ``python -m benchmarks`` (see ``benchmarks/README.md``).

Each benchmark times something against a reference measured in the same run, so its ratios
mean the same on any machine; results go to ``benchmarks/results/`` (git-ignored).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from crisscross import io

RESULTS_DIR = Path(__file__).resolve().parent / "results"


def save_result(name: str, value: Any) -> Path:
    """Write one benchmark's result as ``results/<name>.json`` (atomic, sorted keys)."""
    RESULTS_DIR.mkdir(exist_ok=True)
    path = RESULTS_DIR / f"{name}.json"
    io.write_json(str(path), value)
    return path
