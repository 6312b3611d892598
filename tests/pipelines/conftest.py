"""Builds shared by the stage tests: the full Karpathy test split through every build stage."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from crisscross.pipelines import embed, ingest, sample, similarity


@pytest.fixture(scope="session")
def karpathy_test(shared_data: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("karpathy")
    (root / "params.json").write_text(
        json.dumps(
            {
                "base": {"seed": 11},
                "embed": {"text_encoders": ["use-m3", "bow-glove50"], "image_encoders": ["efficientnet-lite0"], "batch_size": 256},
            }
        )
    )
    params = ["--params", str(root / "params.json")]
    ingest.main(
        [
            "--in",
            str(shared_data / "coco-karpathy" / "test5k.jsonl"),
            "--images",
            str(shared_data / "coco-images" / "karpathy-test"),
            "--out",
            str(root / "items"),
        ]
    )
    embed.main(["--in", str(root / "items"), "--out", str(root / "embeddings"), *params])
    similarity.main(["--in", str(root / "embeddings"), "--out", str(root / "similarity"), *params])
    sample.main(["--in", str(root / "similarity"), "--items", str(root / "items"), "--out", str(root / "candidates"), *params])
    return root
