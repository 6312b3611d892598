"""Shared fixtures: the real data in ``../shared/data`` (skipped, with the reason shown, if absent)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

PROJECT = Path(__file__).resolve().parents[1]
SHARED_DATA = Path(os.environ.get("CRISSCROSS_SHARED_DATA", PROJECT.parent / "shared" / "data"))
DEMO = PROJECT / "data" / "demo"


@pytest.fixture(scope="session")
def shared_data() -> Path:
    """Root of the real datasets; tests that need it skip visibly when it is missing."""
    if not SHARED_DATA.is_dir():
        pytest.skip(f"real data folder {SHARED_DATA} is absent (set CRISSCROSS_SHARED_DATA)")
    return SHARED_DATA


@pytest.fixture(scope="session")
def test_photos(shared_data: Path) -> Path:
    return shared_data / "coco-images" / "karpathy-test"


@pytest.fixture(scope="session")
def demo_dir() -> Path:
    return DEMO


@pytest.fixture(scope="session")
def char_models(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, Any]:
    """Two tiny TF SavedModels hashing characters into 16 buckets (one returns a tensor, one a
    dict): a local stand-in for a TF-Hub text model, since hub handles cannot be fetched here."""
    tf = pytest.importorskip("tensorflow")
    pytest.importorskip("tensorflow_hub")

    class CharBag(tf.Module):
        @tf.function(input_signature=[tf.TensorSpec([None], tf.string)])
        def __call__(self, texts: Any) -> Any:
            buckets = tf.strings.to_hash_bucket_fast(tf.strings.unicode_split(texts, "UTF-8"), 16)
            return tf.reduce_sum(tf.one_hot(buckets, 16), axis=1) / 3.0

    class CharBagDict(tf.Module):
        def __init__(self) -> None:
            super().__init__()
            self.bag = CharBag()

        @tf.function(input_signature=[tf.TensorSpec([None], tf.string)])
        def __call__(self, texts: Any) -> Any:
            bag = self.bag(texts)
            return {"default": tf.cast(bag, tf.float64), "count": tf.reduce_sum(bag, axis=1)}

    root = tmp_path_factory.mktemp("tfhub")
    module = CharBag()
    tensor_dir, dict_dir = root / "bag", root / "bag-dict"
    tf.saved_model.save(module, str(tensor_dir))
    tf.saved_model.save(CharBagDict(), str(dict_dir))
    return tensor_dir, dict_dir, module


@pytest.fixture(scope="session")
def demo_chain(demo_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """ingest → embed → similarity → sample on the embedded demo with the project's params, once per
    session: ``<root>/build/{items,embeddings,similarity,candidates}`` (tests add their own folders)."""
    from crisscross.pipelines import embed, ingest, sample, similarity

    build = tmp_path_factory.mktemp("demo-chain") / "build"
    params = ["--params", str(PROJECT / "params.yaml")]
    ingest.main(["--in", str(demo_dir / "captions.jsonl"), "--images", str(demo_dir / "images"), "--out", str(build / "items"), *params])
    embed.main(["--in", str(build / "items"), "--out", str(build / "embeddings"), *params])
    similarity.main(["--in", str(build / "embeddings"), "--out", str(build / "similarity"), *params])
    sample.main(["--in", str(build / "similarity"), "--items", str(build / "items"), "--out", str(build / "candidates"), *params])
    return build
