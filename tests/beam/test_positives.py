"""BuildPositives with TestPipeline on the demo build's real VERIFY round: the merged truth and the
bias audit are what the library gives, step by step without Beam, and the quarantine gets the
library's rejects."""

from __future__ import annotations

import json
from pathlib import Path

import apache_beam as beam
import pytest
from apache_beam.testing.test_pipeline import TestPipeline
from apache_beam.testing.util import assert_that, equal_to

from crisscross.aggregate.positives import audit_scores, bias_audit, finders, merge_positives, truth_variants, verified_pairs
from crisscross.beam.positives import BuildPositives, PositivesInputs
from crisscross.candidates.annotators import load_annotators
from crisscross.candidates.machine import read_queries, settings_of_annotators
from crisscross.core import io
from crisscross.formats.eccv import I2T, T2I
from crisscross.scoring.models import Gallery
from crisscross.scoring.truths import GROUND_TRUTHS


@pytest.mark.xdist_group("e2e")
def test_build_positives_is_the_library(demo_repro: Path) -> None:
    build = demo_repro / "main" / "build"
    items, filter_dir, rated = build / "items", build / "filter", build / "verify" / "rated" / "rated.parquet"
    merge = f"release:{build / 'sits' / 'rated'}"
    specs = json.loads((filter_dir / "annotators.json").read_text())
    inputs = PositivesInputs(str(rated), str(filter_dir), str(items), str(build / "embeddings"), (merge,), specs, {}, True)

    captions = io.read_parquet(str(items / "captions.parquet"))
    gallery = Gallery.from_items(io.read_parquet(str(items / "images.parquet")), captions)
    truth, truth_report = GROUND_TRUTHS.create(merge, captions=captions)
    merged = merge_positives(verified_pairs(io.read_parquet(str(rated))), gallery, {truth.name: truth}, str(rated))
    found = finders(io.read_parquet(str(filter_dir / "candidates.parquet")))
    variants = truth_variants(merged, found)
    queries = read_queries(io.read_parquet(str(filter_dir / "queries.parquet")))
    annotators = load_annotators(settings_of_annotators(specs), str(build / "embeddings"), gallery)
    scores = {
        name: audit_scores(model, gallery, {I2T: queries.images, T2I: queries.captions}, variants) for name, model in annotators.items()
    }
    audit = bias_audit(merged, found, scores)
    assert len(merged.sources) > 1000 and set(audit["models"]) == set(annotators)
    rejected = [(r.key, r.reason) for r in [*merged.rejected, *truth_report.get("rejected", [])]]

    with TestPipeline() as pipeline:
        out = pipeline | BuildPositives(inputs)
        assert_that(
            out.merged | beam.Map(lambda m: (m.sources, m.verified, m.verified_positive)),
            equal_to([(merged.sources, merged.verified, merged.verified_positive)]),
            label="Merged",
        )
        assert_that(out.audit, equal_to([audit]), label="Audit")
        assert_that(out.rejected | beam.Map(lambda r: (r.key, r.reason)), equal_to(rejected), label="Rejected")
