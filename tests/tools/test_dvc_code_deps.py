"""Each DVC stage's code dependencies are the import closure of its command (tools/dvc_code_deps.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tools import dvc_code_deps as tool

ROOT = Path(__file__).resolve().parents[2]


STAGES = [stage for dvc_yaml in tool.pipelines() for stage in tool.stages(dvc_yaml)]


def test_every_pipeline_is_read() -> None:
    assert len(STAGES) >= 18 + 8 + 4  # the root demo, COCO-BISON, Flickr30k Entities
    assert {s.command for s in STAGES} >= {"ingest", "embed", "filter", "positives", "release", "decoys", "boxes"}


@pytest.mark.parametrize("stage", STAGES, ids=[f"{s.dvc_yaml.parent.name}:{s.name}" for s in STAGES])
def test_code_deps_are_what_the_command_imports(stage) -> None:
    assert stage.listed == stage.wanted(), f"run `python tools/dvc_code_deps.py --write`: {stage.dvc_yaml} stage {stage.name}"


def test_the_closure_follows_imports_inside_functions_and_through_the_stage_base() -> None:
    filter_code = {p.relative_to(ROOT).as_posix() for p in tool.closure("crisscross.pipelines.filter")}
    assert {"pipelines/stage.py", "pipelines/filter.py", "crisscross/beam/filter.py", "crisscross/scoring/models.py"} <= filter_code
    assert "crisscross/annotate/catalog.py" in filter_code  # the drift the hand-written lists had
    assert (
        "crisscross/serve/app.py" not in filter_code and "crisscross/release/load.py" not in filter_code
    )  # the façade's lazy import is not followed
    assert "crisscross/beam/__init__.py" not in filter_code  # a docstring runs nothing


def test_release_depends_on_all_the_code() -> None:
    assert tool.stage_code("release") == [ROOT / "crisscross", ROOT / "pipelines"]


def test_rewrite_replaces_only_the_code_deps() -> None:
    dvc_yaml = ROOT / "dvc.yaml"
    text = dvc_yaml.read_text(encoding="utf-8")
    stale = text.replace("      - pipelines/derive.py\n", "      - pipelines/derive.py\n      - crisscross/serve\n", 1)
    stale = stale.replace("      - crisscross/beam/filter.py\n", "", 1)
    assert stale != text
    drifted = [s.name for s in tool.stages(dvc_yaml, stale) if s.listed != s.wanted()]
    assert drifted == ["filter", "derive"]
    assert tool.rewrite(dvc_yaml, stale) == text  # data deps, params and comments kept


def test_a_new_stage_gets_its_code_deps_after_its_data_deps() -> None:
    """A stage added with only its data deps: the code goes under ``deps``, never into ``outs``."""
    dvc_yaml = ROOT / "dvc.yaml"
    text = dvc_yaml.read_text(encoding="utf-8")
    plan = next(s for s in tool.stages(dvc_yaml, text) if s.name == "plan")
    bare = text.replace("".join(f"      - {path}\n" for path in plan.wanted()), "", 1)
    assert [s.listed for s in tool.stages(dvc_yaml, bare) if s.name == "plan"] == [()]
    assert tool.rewrite(dvc_yaml, bare) == text
