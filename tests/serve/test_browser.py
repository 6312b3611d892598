"""The rater app in a real headless Chromium (Debian's ``chromium``, driven by Playwright), as a
rater uses it: sign in with the link, read instructions and examples, rate, submit, get the next
batch; then ``crisscross annotate`` imports what the browser stored.  Screenshots of every
interface go to the test's folder (``CRISSCROSS_SCREENSHOTS`` names another).

The README's test command installs Chromium (``tools/install-system-test-deps``); without
``/usr/bin/chromium`` these tests skip and say so.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pyarrow.parquet as pq
import pytest
import yaml

from tests.serve.conftest import LiveServer
from tests.serve.round import BATCHES, MARKUP, RoundFiles

CHROMIUM = Path("/usr/bin/chromium")
pytestmark = pytest.mark.skipif(not CHROMIUM.exists(), reason=f"{CHROMIUM} is absent: run tools/install-system-test-deps")
# The machine has no network beyond package registries: keep Chromium from trying to reach Google.
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
    "--disable-quic",
]

ALL_IMAGES_LOADED = "() => [...document.images].every((img) => img.complete && img.naturalWidth > 0)"


@pytest.fixture(scope="module")
def browser() -> Iterator:
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        launched = playwright.chromium.launch(executable_path=str(CHROMIUM), headless=True, args=CHROMIUM_ARGS)
        yield launched
        launched.close()


@pytest.fixture
def shots(tmp_path: Path) -> Path:
    folder = Path(os.environ.get("CRISSCROSS_SCREENSHOTS", tmp_path / "screenshots"))
    folder.mkdir(parents=True, exist_ok=True)
    return folder


def sign_in(browser, server: LiveServer, name: str, width: int = 1100, height: int = 900):
    token = server.store.add_rater(name, 1_800_000_000.0)
    context = browser.new_context(viewport={"width": width, "height": height})
    page = context.new_page()
    page.goto(f"{server.url}/signin#token={token}")
    page.wait_for_selector("#position")
    assert "#token" not in page.url and token not in page.url  # the token left the address bar
    return page


def rate_current_item(page) -> None:
    """Move the slider (a click on its track, as a person would) or pick an answer."""
    slider = page.locator(".scale input[type=range]")
    if slider.count():
        page.wait_for_function(ALL_IMAGES_LOADED)  # as a person waits: loading images move the slider down
        slider.scroll_into_view_if_needed()
        box = slider.bounding_box()
        page.mouse.click(box["x"] + box["width"] * 0.72, box["y"] + box["height"] / 2)
        assert "unset" not in (slider.get_attribute("class") or "")
    else:
        page.get_by_label("partially yes").check()


def finish_batch(page) -> None:
    """Rate every item of the batch on screen, submit it, and wait for what comes next."""
    shown = page.locator("#app").get_attribute("data-batch")
    while page.locator("#next").count():
        rate_current_item(page)
        page.click("#next")
    rate_current_item(page)
    page.click("#submit")
    page.wait_for_function(
        "shown => { const b = document.getElementById('app').dataset.batch; return b !== undefined && b !== shown; }", arg=shown
    )


def no_horizontal_overflow(page) -> bool:
    return page.evaluate("() => document.documentElement.scrollWidth <= window.innerWidth")


def test_a_rater_signs_in_reads_rates_submits_and_gets_the_next_batch(browser, live_server: LiveServer, shots: Path):
    page = sign_in(browser, live_server, "ann")
    assert page.locator("#position").inner_text() == "Item 1 of 2"  # sis-00001 comes first
    assert page.get_by_text("Evaluate the 2 images and answer the question below.").is_visible()
    details = page.locator("details.instructions")
    assert not details.locator(".pre").is_visible()
    details.locator("summary").click()
    assert details.get_by_text("Assign ratings according to the underlying meaning").is_visible()
    assert page.locator(".examples .example").count() == 2
    assert page.locator(".examples img").count() == 4 and page.locator(".task img").count() == 2
    page.wait_for_function(ALL_IMAGES_LOADED)

    page.click("#next")  # the slider starts unset: no way on without moving it
    assert "Move the slider" in page.locator("#error").inner_text()
    assert page.locator("#position").inner_text() == "Item 1 of 2"
    rate_current_item(page)
    page.click("#next")
    assert page.locator("#position").inner_text() == "Item 2 of 2"
    page.click("#submit")
    assert "Move the slider" in page.locator("#error").inner_text()
    assert live_server.store.judgments() == []
    rate_current_item(page)
    page.click("#submit")
    page.wait_for_function(
        "() => document.querySelector('.pair .label') && document.querySelector('.pair .label').textContent === 'Snippet of text'"
    )
    assert page.locator("#position").inner_text() == "Item 1 of 2"  # the next batch: sits-00001
    stored = live_server.store.judgments()
    assert {(j["batch_id"], j["worker"]) for j in stored} == {("sis-00001", "ann")} and len(stored) == 2
    assert all(3.4 < j["score"] < 3.8 and j["seconds"] > 0 for j in stored)  # 72% of the track, time recorded


def test_every_interface_rated_in_the_browser_round_trips_through_annotate(
    browser, live_server: LiveServer, round_files: RoundFiles, shots: Path, tmp_path: Path
):
    page = sign_in(browser, live_server, "ann")
    seen = []
    while page.locator("#position").count():
        label = page.locator(".task .label").first.inner_text()
        kind = {"Image 1": "sis", "Snippet of text": "sits", "Sentence 1": "sts", "Image": "verify"}[label]
        if kind == "sits":
            page.wait_for_function(ALL_IMAGES_LOADED)
            page.locator(".ticks li.hover").nth(4).hover()
            assert page.locator(".ticks li.hover").nth(4).locator(".tip").is_visible()  # SITS: long description on hover
        page.screenshot(path=str(shots / f"{len(seen) - seen.count('markup') + 1}-{kind}.png"), full_page=True)
        if page.get_by_text(MARKUP, exact=True).count():
            assert page.locator(".caption b, .caption script, .caption img").count() == 0  # shown as text, never as markup
            seen.append("markup")
        seen.append(kind)
        finish_batch(page)
    assert page.get_by_text("No batch is waiting for you right now").is_visible()
    assert sorted(k for k in seen if k != "markup") == ["sis", "sits", "sts", "sts", "verify"] and "markup" in seen

    params = tmp_path / "params.yaml"
    params.write_text(yaml.safe_dump({"annotate": {"source": "import", "format": "store"}}))
    from crisscross.pipelines import annotate

    out = tmp_path / "judgments"
    annotate.main(["--in", str(round_files.tasks), "--judgments", live_server.store.location, "--out", str(out), "--params", str(params)])
    judgments = pq.read_table(out / "judgments.parquet").to_pylist()
    assert len(judgments) == sum(len(items) for _, _, items in BATCHES) == len(live_server.store.judgments())
    assert {j["worker"] for j in judgments} == {"ann"} and {j["source"] for j in judgments} == {"people"}
    assert all(j["seconds"] is not None and j["time"].endswith("Z") for j in judgments)
    assert pq.read_table(out / "quarantine.parquet").num_rows == 0


def test_the_page_works_at_phone_width(browser, live_server: LiveServer, shots: Path):
    page = sign_in(browser, live_server, "pat", width=375, height=740)
    page.locator("details.instructions summary").click()
    assert no_horizontal_overflow(page)
    page.screenshot(path=str(shots / "phone-sis.png"), full_page=True)
    finish_batch(page)  # sis → sits, whose tooltips must stay on screen too
    page.wait_for_function(ALL_IMAGES_LOADED)
    page.locator(".ticks li.hover").nth(2).hover()
    page.locator(".ticks li.hover").nth(2).locator(".tip").wait_for(state="visible")
    assert no_horizontal_overflow(page)
    tip = page.locator(".ticks li.hover").nth(2).locator(".tip").bounding_box()
    assert tip["x"] >= 0 and tip["x"] + tip["width"] <= 375
    page.screenshot(path=str(shots / "phone-sits.png"), full_page=True)
    rate_current_item(page)
    page.click("#next")
    assert page.locator("#position").inner_text() == "Item 2 of 2"
