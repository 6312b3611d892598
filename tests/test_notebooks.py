"""The notebooks run top to bottom on a real build (the demo, built by DVC in the CLI test's way)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

PROJECT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def demo_build(demo_chain: Path) -> Path:
    return demo_chain.parent


@pytest.mark.parametrize("notebook", sorted((PROJECT / "notebooks").glob("*.ipynb")), ids=lambda p: p.name)
def test_notebook_runs(notebook: Path, demo_build: Path, capsys: pytest.CaptureFixture[str]):
    cells = [c for c in json.loads(notebook.read_text())["cells"] if c["cell_type"] == "code"]
    namespace: dict = {}
    cwd = os.getcwd()
    os.chdir(demo_build)
    try:
        for cell in cells:
            exec(compile("".join(cell["source"]), f"{notebook.name}", "exec"), namespace)
    finally:
        os.chdir(cwd)
    out = capsys.readouterr().out
    assert "97 images, 485 captions" in out and "c2c_cocaption" in out
