"""The round's whole-table composites with TestPipeline, each against its library function on the
demo's real candidates: BuildTasks (items, gold, batches), CollectJudgments (the simulated panel)
and the aggregate stage's WholeTable (rater QC, aggregation).  Each yields the library's tables and routes the
library's rejects to the quarantine output, none lost."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import apache_beam as beam
import pytest
from apache_beam.testing.test_pipeline import TestPipeline
from apache_beam.testing.util import assert_that, equal_to

from crisscross.aggregate.excluded import aggregate_files
from crisscross.aggregate.round import RoundSettings, aggregate_round
from crisscross.annotate.catalog import load_catalog
from crisscross.annotate.gold import gold_spaces
from crisscross.annotate.items import items_from_candidates
from crisscross.annotate.sources import JUDGMENT_SOURCES, SimulateSettings, SourceSettings
from crisscross.annotate.tasks import TaskParams, build_tasks
from crisscross.beam.annotate import CollectJudgments
from crisscross.beam.common import WholeTable
from crisscross.beam.tasks import BuildTasks
from crisscross.core import io

SEED = 11


@pytest.fixture(scope="module")
def paths(demo_chain: Path) -> dict[str, str]:
    return {
        "items": str(demo_chain / "items"),
        "embeddings": str(demo_chain / "embeddings"),
        "candidates": str(demo_chain / "candidates" / "candidates.parquet"),
    }


@pytest.fixture(scope="module")
def tasks(paths: dict[str, str], tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The library's tasks table for the demo's candidates, written where the later composites read it."""
    settings = TaskParams()
    catalog = load_catalog(paths["items"])
    items, _ = items_from_candidates(io.read_parquet(paths["candidates"]), catalog)
    spaces = gold_spaces(paths["embeddings"], settings.gold_text_encoders, settings.gold_image_encoders)
    path = tmp_path_factory.mktemp("round") / "tasks.parquet"
    io.write_parquet(str(path), build_tasks(items, catalog, spaces, settings, SEED))
    return path


def keyed(rejected: Any) -> tuple[str, str, str]:
    return (rejected.kind, rejected.key, rejected.reason)


def test_build_tasks_is_the_library_and_keeps_its_rejects(paths: dict[str, str], tasks: Path) -> None:
    catalog = load_catalog(paths["items"])
    _, refused = items_from_candidates(io.read_parquet(paths["candidates"]), catalog)
    expected = io.read_parquet(str(tasks))
    assert expected.num_rows > 100
    with TestPipeline() as pipeline:
        out = pipeline | BuildTasks(paths["candidates"], paths["items"], paths["embeddings"], TaskParams(), SEED)
        assert_that(out.tasks | beam.Map(lambda table: table.equals(expected)), equal_to([True]), label="Tasks")
        assert_that(out.rejected | beam.Flatten() | beam.Map(keyed), equal_to([keyed(r) for r in refused]), label="Rejected")


def test_collect_judgments_is_the_simulated_panel(paths: dict[str, str], tasks: Path) -> None:
    settings = SourceSettings(embeddings=paths["embeddings"], items=paths["items"], simulate=SimulateSettings(encoder="use-m3"), seed=SEED)
    collected = JUDGMENT_SOURCES.create("simulate", settings=settings)(io.read_parquet(str(tasks)))
    assert collected.judgments.num_rows > 1000
    with TestPipeline() as pipeline:
        out = pipeline | CollectJudgments(str(tasks), "simulate", settings)
        assert_that(
            out.collected
            | beam.Map(lambda c: (c[0].equals(collected.judgments), c[1].equals(collected.unjudged), c[2] == collected.facts)),
            equal_to([(True, True, True)]),
            label="Collected",
        )
        assert_that(out.rejected | beam.Map(keyed), equal_to([keyed(r) for r in collected.rejected]), label="Rejected")


def test_aggregate_round_is_the_library_and_quarantines_excluded_raters(paths: dict[str, str], tasks: Path, tmp_path: Path) -> None:
    settings = SourceSettings(embeddings=paths["embeddings"], items=paths["items"], seed=SEED)
    judgments = JUDGMENT_SOURCES.create("simulate", settings=settings)(io.read_parquet(str(tasks))).judgments
    judgments_path = tmp_path / "judgments.parquet"
    io.write_parquet(str(judgments_path), judgments)
    expected = aggregate_round(judgments.to_pandas(), io.read_parquet(str(tasks)).to_pandas(), RoundSettings())
    assert len(expected.rated) > 100 and len(expected.excluded) > 0  # the panel's careless raters fail QC

    def same(result: Any) -> bool:
        return all(getattr(result, name).equals(getattr(expected, name)) for name in ("rated", "kept", "excluded", "raters"))

    with TestPipeline() as pipeline:
        out = pipeline | WholeTable("aggregate", aggregate_files, str(judgments_path), str(tasks), RoundSettings())
        assert_that(out.kept | beam.Map(same), equal_to([True]), label="Result")
        excluded = sorted(zip(expected.excluded["item_id"], expected.excluded["reason"], strict=True))
        assert_that(out.rejected | beam.Map(lambda r: (r.key, r.reason)), equal_to(excluded), label="Rejected")
