"""EvaluateModels with TestPipeline: every (model, truth) job on the demo's real embeddings gives
what the scoring library gives for that pair, computed here without Beam."""

from __future__ import annotations

from pathlib import Path

from apache_beam.testing.test_pipeline import TestPipeline
from apache_beam.testing.util import assert_that, equal_to

from crisscross.beam.evaluate import EvaluateModels, EvaluationInputs
from crisscross.core import io
from crisscross.scoring.models import Gallery, embedded_models, gallery_rule, load_model
from crisscross.scoring.protocol import Settings, evaluate, model_gallery
from crisscross.scoring.truths import GROUND_TRUTHS

SEED = 5


def test_every_job_is_the_scoring_library(demo_chain: Path) -> None:
    embeddings, items = str(demo_chain / "embeddings"), str(demo_chain / "items")
    models = embedded_models(embeddings, "all")
    assert {"use-m3", "bow-glove50"} <= set(models)
    settings = Settings(folds=2, seed=SEED)
    captions = io.read_parquet(io.join(items, "captions.parquet"))
    gallery = Gallery.from_items(io.read_parquet(io.join(items, "images.parquet")), captions)
    truth, _ = GROUND_TRUTHS.create("coco", captions=captions)
    expected = []
    for name, spec in sorted(models.items()):
        model = load_model(name, spec, embeddings)
        chosen = model_gallery(model, gallery, settings, gallery_rule(spec))
        expected.append(
            (name, truth.name, evaluate(model, truth, truth.name, chosen.gallery, settings, None, None, partial=chosen.partial))
        )
    assert all(results for name, _, results in expected if name in ("use-m3", "bow-glove50"))  # t2t under COCO's caption groups
    with TestPipeline() as pipeline:
        results = pipeline | EvaluateModels(["coco"], EvaluationInputs(embeddings, items, models, settings))
        assert_that(results, equal_to(expected))
