"""The notebooks run top to bottom on a real build (the demo, built by DVC in the CLI test's way)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from pipelines import embed, ingest, sample, similarity

PROJECT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def demo_build(tmp_path_factory: pytest.TempPathFactory, demo_dir: Path) -> Path:
    root = tmp_path_factory.mktemp("demo")
    build, params = root / "build", ["--params", str(PROJECT / "params.yaml")]
    ingest.main(["--in", str(demo_dir / "captions.jsonl"), "--images", str(demo_dir / "images"), "--out", str(build / "items"), *params])
    embed.main(["--in", str(build / "items"), "--out", str(build / "embeddings"), *params])
    similarity.main(["--in", str(build / "embeddings"), "--out", str(build / "similarity"), *params])
    sample.main(["--in", str(build / "similarity"), "--items", str(build / "items"), "--out", str(build / "candidates"), *params])
    return root


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
