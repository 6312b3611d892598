"""FilterCandidates with TestPipeline: the composite gives what the library gives, rejects listed."""

from __future__ import annotations

from pathlib import Path

import apache_beam as beam
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
from apache_beam.testing.test_pipeline import TestPipeline
from apache_beam.testing.util import assert_that, equal_to

from crisscross.beam.filter import FilterCandidates, read_gallery
from crisscross.candidates.annotators import load_annotators
from crisscross.candidates.machine import FilterSettings, candidate_pairs, retrieve, select_queries
from crisscross.embed.sets import CAPTIONS, COCAPTION_MEAN, EmbeddingSet, cocaption_mean, set_dir


def build_inputs(root: Path, n_images: int = 7, per_image: int = 3) -> tuple[str, str, str]:
    """A tiny ingest output, a text embed output ("fake" encoder) and a score-matrix annotator."""
    rng = np.random.default_rng(7)
    images = [f"coco:img:{n}" for n in range(1, n_images + 1)]
    captions = [f"coco:cap:{100 * n + k}" for n in range(1, n_images + 1) for k in range(per_image)]
    image_of = {c: images[int(c.split(":")[2]) // 100 - 1] for c in captions}
    items = root / "items"
    items.mkdir(parents=True)
    pq.write_table(pa.table({"image_id": images, "source": [f"src.jsonl:{n}" for n in range(len(images))]}), items / "images.parquet")
    pq.write_table(
        pa.table(
            {
                "caption_id": captions,
                "image_id": [image_of[c] for c in captions],
                "source": [f"src.jsonl:{n}" for n in range(len(captions))],
            }
        ),
        items / "captions.parquet",
    )
    topics = rng.normal(size=(n_images, 8))
    vectors = np.stack([topics[images.index(image_of[c])] + rng.normal(scale=0.8, size=8) for c in captions]).astype(np.float32)
    embeddings = root / "embeddings"
    EmbeddingSet(captions, vectors).write(set_dir(str(embeddings), "text", "fake", CAPTIONS))
    means = [cocaption_mean([c for c in captions if image_of[c] == i], vectors[[image_of[c] == i for c in captions]]) for i in images]
    EmbeddingSet(images, np.stack(means)).write(set_dir(str(embeddings), "text", "fake", COCAPTION_MEAN))
    matrix = root / "scores.npz"
    np.savez(matrix, scores=rng.normal(size=(n_images, len(captions))), image_ids=np.array(images), caption_ids=np.array(captions))
    return str(items), str(embeddings), str(matrix)


def settings_for(matrix: str, **overrides) -> FilterSettings:
    base = dict(
        annotators={"random": {"source": "score-matrix", "path": matrix}},
        text_proxies=("fake",),
        queries="all",
        top_k=2,
        negative_depth=3,
        batch_candidates=4,
        query_block=5,
    )
    return FilterSettings(**{**base, **overrides})


def test_filter_composite_matches_the_library(tmp_path: Path):
    items, embeddings, matrix = build_inputs(tmp_path)
    settings = settings_for(matrix)
    gallery = read_gallery(items)
    models = load_annotators(settings, embeddings, gallery)
    queries, _ = select_queries(settings, gallery, seed=3)
    lists = [e for d, block in queries.blocks(100) for e in retrieve(models, gallery, d, block, settings.negative_depth)]
    expected = sorted(candidate_pairs(lists, settings.top_k))
    assert len(lists) == 7 + 21 and len(expected) < 2 * 2 * len(lists)  # some pairs found twice, from both ends or by both

    with TestPipeline() as pipeline:
        outputs = pipeline | FilterCandidates(embeddings, items, settings, seed=3)
        assert_that(
            outputs.result
            | beam.Map(lambda r: sorted(zip(r.candidates.column("image_id").to_pylist(), r.candidates.column("caption_id").to_pylist()))),
            equal_to([expected]),
            label="candidates",
        )
        assert_that(
            outputs.result
            | "Facts"
            >> beam.Map(
                lambda r: (r.before_dedupe, r.plan.facts["negative_rule_violations"], r.plan.facts["batches"], sorted(r.diversity))
            ),
            equal_to([(2 * 2 * 28, 0, -(-len(expected) // 4), ["i2t", "t2i"])]),
            label="facts",
        )
        assert_that(outputs.rejected, equal_to([]), label="rejected")


def test_filter_composite_routes_unknown_query_ids(tmp_path: Path):
    items, embeddings, matrix = build_inputs(tmp_path)
    listing = tmp_path / "queries.txt"
    listing.write_text("coco:img:2\ncoco:cap:301\ncoco:img:404\n")
    settings = settings_for(matrix, queries="file", query_file=str(listing))
    with TestPipeline() as pipeline:
        outputs = pipeline | FilterCandidates(embeddings, items, settings, seed=3)
        assert_that(
            outputs.result
            | beam.Map(lambda r: (r.queries.images, r.queries.captions, sorted(set(r.candidates.column("direction").to_pylist())))),
            equal_to([(("coco:img:2",), ("coco:cap:301",), ["i2t", "t2i"])]),
            label="queries",
        )
        assert_that(
            outputs.rejected | beam.Map(lambda r: (r.key, r.reason)), equal_to([("coco:img:404", "unknown-query")]), label="rejected"
        )
