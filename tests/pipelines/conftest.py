"""Builds shared by the stage tests: the full Karpathy test split through every build stage."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from crisscross.pipelines import embed, ingest, sample, similarity
from tests.shared_builds import shared_build

PARAMS = {
    "base": {"seed": 11},
    "embed": {"text_encoders": ["use-m3", "bow-glove50"], "image_encoders": ["efficientnet-lite0"], "batch_size": 256},
}


@pytest.fixture(scope="session")
def karpathy_test(shared_data: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The build, made once per run (``tests/shared_builds.py``): tests only read it."""
    source, photos = shared_data / "coco-karpathy" / "test5k.jsonl", shared_data / "coco-images" / "karpathy-test"
    return shared_build(
        tmp_path_factory, "karpathy", [json.dumps(PARAMS, sort_keys=True), source, photos], lambda root: _build(root, source, photos)
    )


def _build(root: Path, source: Path, photos: Path) -> None:
    (root / "params.json").write_text(json.dumps(PARAMS))
    params = ["--params", str(root / "params.json")]
    # without params (the reader's defaults): test_ingest_stage.py checks this ingest of the whole split
    ingest.main(
        [
            "--in",
            str(source),
            "--images",
            str(photos),
            "--out",
            str(root / "items"),
        ]
    )
    embed.main(["--in", str(root / "items"), "--out", str(root / "embeddings"), *params])
    similarity.main(["--in", str(root / "embeddings"), "--out", str(root / "similarity"), *params])
    sample.main(["--in", str(root / "similarity"), "--items", str(root / "items"), "--out", str(root / "candidates"), *params])
