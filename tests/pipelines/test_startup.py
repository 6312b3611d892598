"""Stage commands start fast: importing one loads no heavy library; those load when a stage uses them."""

from __future__ import annotations

import subprocess
import sys

from crisscross.pipelines.cli import STAGES

HEAVY = ("torch", "tensorflow", "matplotlib", "faiss", "sentence_transformers", "fastapi", "scipy", "numba", "mlcroissant")


def test_importing_every_stage_command_loads_no_heavy_library() -> None:
    modules = [STAGES.create(name) for name in STAGES.names()]
    code = f"import sys\nfor m in {modules!r}: __import__(m)\nprint(' '.join(h for h in {HEAVY!r} if h in sys.modules))"
    loaded = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split()
    assert loaded == [], f"importing the stage commands loaded {loaded}: import them inside the functions that use them"
