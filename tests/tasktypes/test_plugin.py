"""A task type from outside the package: ``tests/tasktypes/plugin`` is an installed distribution
(``crisscross_paraphrase``, entry point group ``crisscross.task_types``) whose one file is a
caption-pair paraphrase yes/no type.  With no edit to ``crisscross/``, its items go through tasks
(exports for every tool) → the rater app in a real headless Chromium → annotate (the app's store,
and the simulated panel) → aggregate → release, whose card and Croissant metadata describe it."""

from __future__ import annotations

import itertools
import json
import os
import shutil
import time
from collections.abc import Iterator
from pathlib import Path
from typing import ClassVar

import pyarrow.parquet as pq
import pytest
import yaml

import crisscross.tasktypes as registry
from crisscross.annotate.catalog import load_catalog
from crisscross.annotate.store import Store
from crisscross.candidates.cxc import Candidate, candidates_table
from crisscross.core.ids import CAPTION_KIND
from crisscross.formats.manifest import verify
from crisscross.serve.app import AppConfig, Round, create_app
from crisscross.tasktypes import TaskTypeError, missing_parts, task_type
from tests.serve.round import served
from tests.serve.test_browser import CHROMIUM, CHROMIUM_ARGS

PROJECT = Path(__file__).resolve().parents[2]
PLUGIN = Path(__file__).resolve().parent / "plugin"
# After a submit the page loads: wait until it shows another batch or says none is left.
NEXT_BATCH_OR_NONE = """shown => {
  const batch = document.getElementById('app').dataset.batch;
  return (batch !== undefined && batch !== shown) || document.body.innerText.includes('No batch is waiting for you right now');
}"""
PAIRS = 10  # caption pairs to judge: co-captions (para_cocaption) and captions of other images (para_other)


@pytest.fixture
def paraphrase(monkeypatch: pytest.MonkeyPatch) -> Iterator[registry.TaskType]:
    """The plugin installed: its distribution on the path (of this process and of the stages'
    subprocesses), the registry loading plugins afresh and forgetting them afterwards."""
    monkeypatch.syspath_prepend(str(PLUGIN))
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [str(PLUGIN), os.environ.get("PYTHONPATH")])))
    monkeypatch.setattr(registry, "_REGISTERED", dict(registry._REGISTERED))
    monkeypatch.setattr(registry, "_plugins_loaded", False)
    yield task_type("PARAPHRASE")


def test_the_plugin_registers_through_its_entry_point_with_every_part(paraphrase):
    assert [t.name for t in registry.task_types()][-1] == "PARAPHRASE" and missing_parts(paraphrase) == []
    assert type(paraphrase).__module__ == "crisscross_paraphrase"  # loaded from the distribution, not from crisscross/


def test_a_type_lacking_a_part_is_refused_by_name():
    class Half(registry.TaskType):
        name = "HALF"
        kinds = (CAPTION_KIND, CAPTION_KIND)
        title = "half a type"
        answers = ("a", "b")
        meanings: ClassVar[dict[str, str]] = {"a": "first"}
        instructions = "Pick one."
        side_labels = ("A", "B")
        anchors = (0.1, 0.9)
        seconds_mean = 5.0

    with pytest.raises(TaskTypeError, match=r"lacks meanings\['b'\], positive_answers or positive .*, answer_of_score"):
        registry.register(Half)


def paraphrase_candidates(items: Path, out: Path) -> None:
    """Caption pairs of the demo: captions of one image, and of two images."""
    captions = pq.read_table(items / "captions.parquet").to_pylist()
    by_image: dict[str, list[str]] = {}
    for row in captions:
        by_image.setdefault(row["image_id"], []).append(row["caption_id"])
    images = sorted(by_image)
    pairs = [("para_cocaption", *sorted(by_image[image])[:2]) for image in images[: PAIRS // 2]]
    pairs += [("para_other", by_image[a][0], by_image[b][0]) for a, b in itertools.pairwise(images[: PAIRS // 2 + 1])]
    image_of = {row["caption_id"]: row["image_id"] for row in captions}
    rows = [Candidate(method, *sorted((a, b)), image_of[min(a, b)], image_of[max(a, b)], ()) for method, a, b in pairs]
    out.mkdir(parents=True)
    pq.write_table(candidates_table(rows), out / "candidates.parquet")


def round_params(path: Path) -> Path:
    params = yaml.safe_load((PROJECT / "params.yaml").read_text())
    params["tasks"].update(batch_size=7, replicas=2, gold_per_batch={"positive": 1, "negative": 1})
    params["annotate"]["simulate"].update(raters_per_batch=2)
    params["aggregate"]["rules"] = {"min_gold_items": 1}
    path.write_text(yaml.safe_dump(params))
    return path


def round_app(tasks: Path, items: Path, location: Path):
    """The rater app over the round's tasks, its store a fresh SQLite file."""
    table = pq.read_table(tasks / "tasks.parquet")
    store = Store(str(location))
    store.init()
    store.load_tasks(table.to_pylist())
    return store, create_app(store, Round.of(table, load_catalog(str(items)), None), AppConfig(replicas=2))


def rate_in_the_browser(url: str, store: Store, texts: dict[str, str], shots: Path) -> int:
    """Two raters answer every batch in Chromium: yes when the captions describe one image."""
    from playwright.sync_api import sync_playwright

    answered = 0
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=str(CHROMIUM), headless=True, args=CHROMIUM_ARGS)
        for rater in ("ann", "bob"):
            page = browser.new_context(viewport={"width": 1100, "height": 900}).new_page()
            page.goto(f"{url}/signin#token={store.add_rater(rater, time.time())}")
            page.wait_for_selector("#position")
            assert page.get_by_text("Read the two captions: do they say the same thing?").is_visible()
            assert page.locator(".task .label").first.inner_text() == "Caption 1"
            assert page.get_by_text("yes: the same scene in other words.").is_visible()  # the plugin's worked example
            page.screenshot(path=str(shots / f"paraphrase-{rater}.png"), full_page=True)
            while page.locator("#position").count():
                shown = page.locator("#app").get_attribute("data-batch")
                while True:
                    first, second = (page.locator(".task .caption").nth(k).inner_text() for k in (0, 1))
                    assert first in texts and second in texts  # caption text, shown as text
                    answer = "yes" if texts[first] == texts[second] else "no"
                    page.locator(".answers label").filter(has=page.locator(f"input[value='{answer}']")).click()
                    answered += 1
                    if not page.locator("#next").count():
                        break
                    page.click("#next")
                page.click("#submit")
                page.wait_for_function(NEXT_BATCH_OR_NONE, arg=shown)
            assert page.get_by_text("No batch is waiting for you right now").is_visible()
        browser.close()
    return answered


@pytest.mark.skipif(not CHROMIUM.exists(), reason=f"{CHROMIUM} is absent: run tools/install-system-test-deps")
def test_a_plugin_type_goes_from_tasks_through_the_browser_to_a_release(
    paraphrase, demo_chain: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    from crisscross.pipelines import aggregate, annotate, release, tasks

    items, embeddings = demo_chain / "items", demo_chain / "embeddings"
    params = round_params(tmp_path / "params.yaml")
    paraphrase_candidates(items, tmp_path / "candidates")

    # tasks: items by the plugin's method prefix, gold planted, exports for every tool
    tasks.main(
        [
            "--in",
            str(tmp_path / "candidates"),
            "--items",
            str(items),
            "--embeddings",
            str(embeddings),
            "--out",
            str(tmp_path / "tasks"),
            "--params",
            str(params),
        ]
    )
    table = pq.read_table(tmp_path / "tasks" / "tasks.parquet").to_pandas()
    assert set(table["task_type"]) == {"PARAPHRASE"} and set(table["batch_id"].str.split("-").str[0]) == {"paraphrase"}
    assert (table["gold"] == "").sum() == PAIRS and set(table["gold"]) == {"", "positive", "negative"}
    export = tmp_path / "tasks" / "export"
    config = (export / "label-studio" / "paraphrase" / "config.xml").read_text()
    assert '<Choice value="yes" hint="Both captions say the same thing about the scene."/>' in config
    assert (export / "crowd-csv" / "paraphrase.instructions.txt").read_text().startswith("Read the two captions")

    # the rater app, in a real browser; the store read back by annotate
    caption_rows = pq.read_table(items / "captions.parquet").to_pylist()
    texts = {row["text"]: row["image_id"] for row in caption_rows}
    store, app = round_app(tmp_path / "tasks", items, tmp_path / "judgments.sqlite")
    shots = tmp_path / "screenshots"
    shots.mkdir()
    with served(app) as (url, _):
        assert rate_in_the_browser(url, store, texts, shots) == 2 * len(table)
    people = tmp_path / "people.yaml"
    people.write_text(yaml.safe_dump({**yaml.safe_load(params.read_text()), "annotate": {"source": "import", "format": "store"}}))
    annotate.main(
        ["--in", str(tmp_path / "tasks"), "--judgments", store.location, "--out", str(tmp_path / "judgments"), "--params", str(people)]
    )
    judgments = pq.read_table(tmp_path / "judgments" / "judgments.parquet").to_pandas()
    assert len(judgments) == 2 * len(table) and set(judgments["answer"]) <= {"yes", "no"} and judgments["score"].isna().all()
    assert pq.read_table(tmp_path / "judgments" / "quarantine.parquet").num_rows == 0

    # the plugin's simulated rater, on the same tasks
    annotate.main(
        ["--in", str(tmp_path / "tasks"), "--embeddings", str(embeddings), "--out", str(tmp_path / "simulated"), "--params", str(params)]
    )
    simulated = pq.read_table(tmp_path / "simulated" / "judgments.parquet").to_pandas()
    assert len(simulated) == 2 * len(table) and set(simulated["answer"]) == {"yes", "no"} and simulated["simulated"].all()

    # aggregate: majority vote over the answers, positive when yes
    aggregate.main(
        ["--in", str(tmp_path / "judgments"), "--tasks", str(tmp_path / "tasks"), "--out", str(tmp_path / "rated"), "--params", str(params)]
    )
    rated = pq.read_table(tmp_path / "rated" / "rated.parquet").to_pandas()
    assert len(rated) == PAIRS and (rated["positive"] == (rated["agg_label"] == "yes")).all()
    cocaptions = rated["sampling_method"] == "para_cocaption"
    assert rated.loc[cocaptions, "positive"].all() and not rated.loc[~cocaptions, "positive"].any()
    facts = json.loads((tmp_path / "rated" / "facts.json").read_text())["PARAPHRASE"]
    assert facts["alpha_level"] == "nominal" and facts["positives"] == PAIRS // 2 and facts["alpha"] == 1.0

    # release: the pairs, the card and the Croissant metadata say what the type is
    monkeypatch.setenv("CRISSCROSS_RELEASE_SALT", "plugin-release-salt-0123456789")
    out = tmp_path / "release"
    release.main(
        [
            "--rated",
            str(tmp_path / "rated"),
            "--judgments",
            str(tmp_path / "judgments"),
            "--items",
            str(items),
            "--out",
            str(out),
            "--date",
            "2026-11-27",
            "--params",
            str(params),
            "--lock",
            str(tmp_path / "no.lock"),
        ]
    )
    pairs = pq.read_table(out / "data" / "pairs.parquet").to_pandas()
    assert set(pairs["task_type"]) == {"PARAPHRASE"} and len(pairs) == PAIRS
    card = (out / "README.md").read_text()
    assert (
        "**PARAPHRASE** (caption–caption paraphrase: yes or no; crisscross-paraphrase, an example plugin): positive when the aggregated answer is “yes”."
        in card
    )
    croissant = json.loads((out / "croissant.json").read_text())
    assert "PARAPHRASE: caption–caption paraphrase: yes or no. Read the two captions" in json.dumps(croissant, ensure_ascii=False)
    assert verify(str(out))["files"] > 0
    shutil.rmtree(out)


def test_the_readme_shows_the_tested_plugin():
    """The README's "Add your own task type" example is this plugin's file, word for word."""
    readme = (PROJECT / "README.md").read_text(encoding="utf-8")
    section = readme.split("## Add your own task type", 1)[1].split("\n## ", 1)[0]
    shown = section.split("```python\n", 1)[1].split("```", 1)[0]
    assert shown == (PLUGIN / "crisscross_paraphrase.py").read_text(encoding="utf-8")
    assert 'PARAPHRASE = "crisscross_paraphrase:Paraphrase"' in section
    assert (
        "PARAPHRASE = crisscross_paraphrase:Paraphrase" in (PLUGIN / "crisscross_paraphrase-1.0.dist-info" / "entry_points.txt").read_text()
    )
