"""BISON's CHOOSE and VERIFY-TRIPLE in the rater app: what the page gets (options by number, the
triple's images in their seeded order, never which one is the target), how answers are stored,
and a rater doing both in a real headless Chromium, captions shown as text, never as markup."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import yaml

from crisscross.annotate.catalog import load_catalog
from crisscross.annotate.store import Store
from crisscross.formats.schema import NOT_GOLD, TASKS_SCHEMA, item_id
from crisscross.serve.app import CSRF_HEADER, AppConfig, Round, create_app
from crisscross.tasktypes.names import CHOOSE, VERIFY_TRIPLE, decoy_first
from tests.serve.round import MARKUP, RoundFiles, browser, cap, img, served
from tests.serve.test_browser import CHROMIUM, CHROMIUM_ARGS

NOW = 1_800_000_000.0
SEED = 11
# caption i describes image (i - 1) % 8 + 1 (tests/serve/conftest.py): image 1 has captions 1 (markup), 9, 17
BISON_BATCHES = [
    (CHOOSE, "choose-00001", [(img(1), img(2)), (img(3), img(4))]),
    (VERIFY_TRIPLE, "verify-triple-00001", [(cap(1), img(2)), (cap(3), img(4)), (cap(5), img(6))]),
]


def bison_tasks() -> pa.Table:
    rows = [
        {
            "item_id": item_id(kind, a, b),
            "task_type": kind,
            "id_a": a,
            "id_b": b,
            "sampling_method": "bison_decoy" if kind == CHOOSE else "bison_chosen",
            "gold": NOT_GOLD,
            "batch_id": batch,
            "position": position,
        }
        for kind, batch, members in BISON_BATCHES
        for position, (a, b) in enumerate(members, start=1)
    ]
    return pa.Table.from_pylist(rows, schema=TASKS_SCHEMA)


def bison_app(location: str, files: RoundFiles):
    store = Store(location)
    store.init()
    store.load_tasks(bison_tasks().to_pylist())
    round_ = Round.of(bison_tasks(), load_catalog(str(files.items)), str(files.images), seed=SEED)
    return store, create_app(store, round_, AppConfig(replicas=1))


def test_the_page_gets_options_by_number_and_answers_are_stored_canonically(database: str, round_files: RoundFiles) -> None:
    store, app = bison_app(database, round_files)
    client = browser(app)
    client.post("/signin", data={"token": store.add_rater("ann", NOW)}, follow_redirects=False)
    view = client.get("/api/batch").json()
    batch = view["batch"]
    assert batch["task_type"] == CHOOSE and batch["labels"] == ["Target image", "Other image"] and "answers" not in batch
    first = batch["items"][0]
    assert [o["answer"] for o in first["options"]] == ["1", "2", "3", "none"]
    assert [o["text"] for o in first["options"][:3]] == [
        MARKUP,
        "Caption 17: a person with a kite in the park.",  # captions in id order: demo:cap:17 < demo:cap:9
        "Caption 9: a person with a kite in the park.",
    ]
    assert "cap:" not in str(batch) and "img:" not in str(batch)  # no ids reach the page
    bad = [{"position": 1, "answer": "4", "seconds": 2.0}, {"position": 2, "answer": "none", "seconds": 2.0}]
    refused = client.post("/api/submit", json={"batch_id": batch["id"], "answers": bad}, headers={CSRF_HEADER: view["csrf"]})
    assert refused.status_code == 422 and "3 captions or none" in refused.json()["detail"]
    good = [{"position": 1, "answer": "3", "seconds": 2.0}, {"position": 2, "answer": "none", "seconds": 2.0}]
    assert client.post("/api/submit", json={"batch_id": batch["id"], "answers": good}, headers={CSRF_HEADER: view["csrf"]}).json()["stored"]

    view = client.get("/api/batch").json()
    batch = view["batch"]
    assert batch["task_type"] == VERIFY_TRIPLE and all("b" not in i for i in batch["items"])  # the decoy is not named
    assert [o["answer"] for o in batch["items"][0]["options"]] == ["1", "2", "both", "neither"]
    colours = []
    for item in batch["items"]:
        sizes = [client.get(image["image"]).content for image in item["images"]]
        colours.append(sizes)
        assert client.get(f"/api/image/{item['position']}/b?batch={batch['id']}").status_code == 404
    picks = [{"position": i["position"], "answer": "1", "seconds": 3.0} for i in batch["items"]]
    assert client.post("/api/submit", json={"batch_id": batch["id"], "answers": picks}, headers={CSRF_HEADER: view["csrf"]}).json()[
        "stored"
    ]
    stored = {(j["item_id"], j["answer"]) for j in store.judgments()}
    expected_triples = {
        (item_id(VERIFY_TRIPLE, a, b), "decoy" if decoy_first(item_id(VERIFY_TRIPLE, a, b), SEED) else "target")
        for a, b in BISON_BATCHES[1][2]
    }
    assert stored == {(item_id(CHOOSE, img(1), img(2)), cap(9)), (item_id(CHOOSE, img(3), img(4)), "none")} | expected_triples
    assert len({answer for _, answer in expected_triples}) == 2  # the seeded order puts the target first for some, second for others
    assert all(len(set(pair)) == 2 for pair in colours)


@pytest.fixture
def bison_server(database: str, round_files: RoundFiles) -> Iterator[tuple[str, Store]]:
    store, app = bison_app(database, round_files)
    with served(app) as (url, _):
        yield url, store


@pytest.mark.skipif(not CHROMIUM.exists(), reason=f"{CHROMIUM} is absent: run tools/install-system-test-deps")
def test_a_rater_chooses_and_verifies_in_the_browser(bison_server, round_files: RoundFiles, tmp_path: Path) -> None:
    from playwright.sync_api import sync_playwright

    url, store = bison_server
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=str(CHROMIUM), headless=True, args=CHROMIUM_ARGS)
        page = browser.new_context(viewport={"width": 1100, "height": 900}).new_page()
        page.goto(f"{url}/signin#token={store.add_rater('ann', NOW)}")
        page.wait_for_selector("#position")
        assert page.get_by_text("You see two similar images, the target image and another image").is_visible()
        assert page.locator(".task img").count() == 2 and page.locator(".task .label").first.inner_text() == "Target image"
        assert page.get_by_text(MARKUP, exact=True).is_visible()  # the markup caption, shown as its text
        assert "null" not in page.locator("#app").inner_text()  # no worked examples: no section at all
        assert page.locator(".answers b, .answers script, .answers img").count() == 0
        page.click("#next")
        assert "Choose an answer" in page.locator("#error").inner_text()
        page.get_by_label("Caption 9: a person with a kite in the park.").check()
        page.click("#next")
        page.get_by_label("None of the above").check()
        page.screenshot(path=str(tmp_path / "choose.png"), full_page=True)
        page.click("#submit")
        page.wait_for_function(
            "() => document.querySelector('.task .label') && document.querySelector('.task .label').textContent === 'Caption'"
        )
        assert page.locator(".task img").count() == 2 and page.get_by_text("Image 2", exact=True).first.is_visible()
        assert page.get_by_text(MARKUP, exact=True).is_visible()  # the triple's caption, as text too
        for _ in range(2):
            page.get_by_label("both").check()
            page.click("#next")
        page.get_by_label("neither").check()
        page.screenshot(path=str(tmp_path / "verify-triple.png"), full_page=True)
        page.click("#submit")
        page.wait_for_selector("text=No batch is waiting for you right now")
        browser.close()

    params = tmp_path / "params.yaml"
    params.write_text(yaml.safe_dump({"annotate": {"source": "import", "format": "store"}}))
    tasks = tmp_path / "tasks"
    tasks.mkdir()
    pq.write_table(bison_tasks(), tasks / "tasks.parquet")
    from crisscross.pipelines import annotate

    out = tmp_path / "judgments"
    annotate.main(["--in", str(tasks), "--judgments", store.location, "--out", str(out), "--params", str(params)])
    judgments = {(j["item_id"], j["answer"]) for j in pq.read_table(out / "judgments.parquet").to_pylist()}
    assert judgments == {
        (item_id(CHOOSE, img(1), img(2)), cap(9)),
        (item_id(CHOOSE, img(3), img(4)), "none"),
        (item_id(VERIFY_TRIPLE, cap(1), img(2)), "both"),
        (item_id(VERIFY_TRIPLE, cap(3), img(4)), "both"),
        (item_id(VERIFY_TRIPLE, cap(5), img(6)), "neither"),
    }
    assert pq.read_table(out / "quarantine.parquet").num_rows == 0
