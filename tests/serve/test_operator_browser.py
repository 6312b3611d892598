"""The operator page in a real headless Chromium on the demo build: the round's tasks, a plan and a
triage made by the stage commands, ``crisscross serve --round adaptive --plan --triage`` as the
command builds it, raters rating (one in the browser), then the operator signing in.  What the page
shows is checked against the store, its screenshot is checked, and the page follows new judgments
while it is open.

``CRISSCROSS_SCREENSHOTS=<folder>`` saves the screenshot there as ``operator.png`` (the README's picture
is ``docs/see-it/operator.png``).  Without ``/usr/bin/chromium`` these tests skip and say so.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from decimal import ROUND_HALF_UP, Decimal
from pathlib import Path
from typing import Any

import httpx
import pandas as pd
import pyarrow.parquet as pq
import pytest
from PIL import Image

from crisscross.aggregate.quality import QualityRules, rater_report
from crisscross.annotate.store import Store, now_iso
from crisscross.formats.schema import GOLD_NEGATIVE, GOLD_POSITIVE
from crisscross.pipelines import cli
from tests.conftest import PROJECT
from tests.serve.conftest import LiveServer
from tests.serve.round import LOOPBACK_TLS, query, served
from tests.serve.test_browser import CHROMIUM, browser, finish_batch, sign_in  # noqa: F401  (browser: the module's Chromium fixture)

pytestmark = pytest.mark.skipif(not CHROMIUM.exists(), reason=f"{CHROMIUM} is absent: run tools/install-system-test-deps")
SEE_IT = "CRISSCROSS_SCREENSHOTS"  # the folder every browser test keeps its screenshots in (tests/serve/test_browser.py)
MARKUP_NAME = "<img src=x onerror=alert(1)>"  # add-rater refuses it; a database edited by hand may still hold it
SECTIONS = ("#summary", "#progress", "#pace", "#stops", "#machine", "#raters", "#budget")


@dataclass(frozen=True)
class DemoRound:
    build: Path  # items, embeddings, candidates of the demo chain
    out: Path  # tasks, judgments (the simulated pilot), plan, triage

    def tasks(self) -> pd.DataFrame:
        return pq.read_table(self.out / "tasks" / "tasks.parquet").to_pandas()

    def plan(self) -> dict[str, Any]:
        return json.loads((self.out / "plan" / "plan.json").read_text())


@pytest.fixture(scope="module")
def demo_round(demo_chain: Path, tmp_path_factory: pytest.TempPathFactory) -> DemoRound:
    """The demo's round one as ``dvc repro`` makes it (tasks, the simulated pilot, the plan), and a
    triage of it: the stage commands with the project's params."""
    out = tmp_path_factory.mktemp("operator-demo")
    params = ["--params", str(PROJECT / "params.yaml")]
    build = [
        ["tasks", "--in", demo_chain / "candidates", "--items", demo_chain / "items", "--embeddings", demo_chain / "embeddings"],
        ["annotate", "--in", out / "tasks", "--embeddings", demo_chain / "embeddings", "--items", demo_chain / "items"],
        ["plan", "--in", out / "judgments"],
        ["triage", "--in", out / "tasks", "--embeddings", demo_chain / "embeddings", "--items", demo_chain / "items"],
    ]
    for step, name in zip(build, ("tasks", "judgments", "plan", "triage"), strict=True):
        assert cli.main([str(arg) for arg in [*step, "--out", out / name, *params]]) == 0, step
    return DemoRound(demo_chain, out)


@pytest.fixture
def campaign(database: str, demo_round: DemoRound, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[LiveServer]:
    """``crisscross serve --round adaptive --plan --triage`` over the demo round, under uvicorn on a free port;
    the project's params, but the QC report rebuilt whenever judgments change (``serve.qc_refresh: 0``)."""
    import uvicorn
    import yaml

    params = yaml.safe_load((PROJECT / "params.yaml").read_text())
    params["serve"]["qc_refresh"] = 0
    (tmp_path / "params.yaml").write_text(yaml.safe_dump(params))
    apps: list = []
    monkeypatch.setattr(uvicorn, "run", lambda app, **options: apps.append(app))
    argv = ["serve", "--tasks", demo_round.out / "tasks", "--items", demo_round.build / "items", "--db", database]
    argv += ["--params", tmp_path / "params.yaml", "--round", "adaptive", "--plan", demo_round.out / "plan"]
    argv += ["--triage", demo_round.out / "triage", "--root", os.getcwd()]  # the chain ran here: image paths are relative to it
    assert cli.main([str(arg) for arg in argv]) == 0 and len(apps) == 1
    with served(apps[0]) as (url, server):
        yield LiveServer(url, Store(database), server)


def latent(item_id: str) -> float:
    """A seeded 'true' score per item, which careful raters share (so their agreement is real)."""
    return int(hashlib.sha256(item_id.encode()).hexdigest()[:8], 16) % 51 / 10


def http_rater(server: LiveServer, name: str) -> httpx.Client:
    client = httpx.Client(base_url=server.url, headers={"Origin": server.url}, verify=LOOPBACK_TLS)
    assert client.post("/signin", data={"token": server.store.add_rater(name, time.time())}).status_code == 303
    return client


def rate(client: httpx.Client, rows: dict[tuple[str, int], tuple[str, str]], careless: bool, offset: float) -> bool:
    """Rate the batch the app gives: careful raters near each item's latent score and right on gold,
    a careless one 0 everywhere; False when no batch is left."""
    view = client.get("/api/batch").json()
    if view["batch"] is None:
        return False
    answers = []
    for item in view["batch"]["items"]:
        item_id, gold = rows[view["batch"]["id"], item["position"]]
        score = {GOLD_POSITIVE: 4.6, GOLD_NEGATIVE: 0.4}.get(gold, min(5.0, max(0.0, latent(item_id) + offset)))
        answers.append({"position": item["position"], "score": 0.0 if careless else round(score, 1), "seconds": 6.0 + offset})
    response = client.post(
        "/api/submit", json={"batch_id": view["batch"]["id"], "answers": answers}, headers={"X-CSRF-Token": view["csrf"]}
    )
    assert response.status_code == 200, response.text
    return True


def fixed(x: float, digits: int) -> str:
    """``x.toFixed(digits)`` with thousands commas, as the page writes numbers (halves away from zero)."""
    text = str(Decimal(x).quantize(Decimal(1).scaleb(-digits), rounding=ROUND_HALF_UP))
    whole, _, part = text.partition(".")
    sign = "-" if whole.startswith("-") else ""
    return sign + f"{int(whole.lstrip('-')):,}" + (f".{part}" if part else "")


def text(page, selector: str) -> str:
    return page.locator(selector).inner_text().strip()


def check_against_the_store(page, store: Store, demo_round: DemoRound) -> None:
    """Every figure the page shows, from the store (and the plan, the triage) directly."""
    judgments, gold, closed = store.judgments(), store.gold(), store.closed()
    tasks, plan = demo_round.tasks(), demo_round.plan()
    kind_of = dict(zip(tasks["item_id"], tasks["task_type"], strict=True))
    assert text(page, "#summary [data-field=judgments]") == f"{len(judgments):,}"
    assert text(page, "#summary [data-field=raters]") == str(len({j["worker"] for j in judgments}))
    assert text(page, "#summary [data-field=closed]") == f"{len(closed):,}"

    rated = Counter(j["item_id"] for j in judgments if j["item_id"] not in gold)
    for kind, entry in plan["types"].items():
        items, replicas = entry["design"]["items"], entry["design"]["replicas"]
        done = {i for i, n in rated.items() if kind_of[i] == kind and n >= replicas} | {i for i in closed if kind_of[i] == kind}
        judged = sum(n for i, n in rated.items() if kind_of[i] == kind)
        row = f"#progress tr[data-type={kind}]"
        assert text(page, f"{row} [data-field=items]") == f"{len(done):,} / {items:,}"
        assert text(page, f"{row} [data-field=judgments]") == f"{judged:,} / {items * replicas:,}"
        assert text(page, f"#stops tr[data-type={kind}] [data-field=closed]").startswith(
            f"{sum(1 for i in closed if kind_of[i] == kind):,} / "
        )
        spent = sum(1 for j in judgments if j["task_type"] == kind)
        assert text(page, f"#budget tr[data-type={kind}] [data-field=left]").startswith(f"{entry['budget']['judgments'] - spent:,} · ")
        cost = entry["design"]["cost"] / entry["design"]["judgments"]
        assert text(page, f"#budget tr[data-type={kind}] [data-field=spent]") == f"{spent:,} · {fixed(round(spent * cost, 2), 2)} USD"
    assert text(page, "#stops [data-field=rule]") == "threshold"
    # Every judgment was made during the test, minutes ago: all in the last hour, all in the hours listed.
    assert text(page, "#pace [data-field=last_hour]") == f"{len(judgments):,}"
    listed = page.locator("#pace tbody [data-field=count]").all_inner_texts()
    assert 1 <= len(listed) <= 2 and sum(int(n.replace(",", "")) for n in listed) == len(judgments)

    decisions = pq.read_table(demo_round.out / "triage" / "decisions.parquet").to_pandas()
    for kind, rows in decisions.groupby("task_type"):
        machine = int((rows["decided_by"] == "machine").sum())
        assert text(page, f"#machine tr[data-type={kind}] [data-field=items]") == f"{len(rows):,}"
        assert text(page, f"#machine tr[data-type={kind}] [data-field=machine]") == f"{machine:,}"

    frame = pd.DataFrame(judgments)
    report = rater_report(frame, pd.DataFrame({"item_id": list(gold), "gold": list(gold.values())}), QualityRules())
    assert page.locator("#raters tbody tr").count() == len(report)
    for r in report.itertuples(index=False):
        row = f'#raters tr[data-rater="{r.worker}"][data-type={r.task_type}]'
        assert text(page, f"{row} [data-field=judgments]") == f"{r.judgments:,}" == f"{Counter(frame['worker'])[r.worker]:,}"
        gold_text = f"{r.gold_passed}/{r.gold_seen} ({fixed(100 * r.gold_accuracy, 0)}%)" if r.gold_seen else "no gold yet"
        assert text(page, f"{row} [data-field=gold]") == gold_text
        agreement = "—" if pd.isna(r.loo_correlation) else f"r {fixed(r.loo_correlation, 2)} over {r.loo_items:,}"
        assert text(page, f"{row} [data-field=agreement]") == agreement
        assert text(page, f"{row} [data-field=seconds]") == f"{fixed(r.median_seconds, 1)} s"
        assert text(page, f"{row} [data-field=verdict]") == (f"excluded: {r.reasons}" if r.excluded else "kept")


def test_the_operator_page_shows_the_demo_campaign_as_the_store_holds_it(
    browser,  # noqa: F811  (the Chromium fixture imported above)
    campaign: LiveServer,
    demo_round: DemoRound,
    database: str,
    tmp_path: Path,
) -> None:
    tasks = demo_round.tasks()
    rows = {(b, int(p)): (i, g) for b, p, i, g in zip(tasks["batch_id"], tasks["position"], tasks["item_id"], tasks["gold"], strict=True)}
    raters = {name: http_rater(campaign, name) for name in ("ann", "bob", "cy", "dan", "eve")}
    for turn in range(3):
        for offset, name in enumerate(("ann", "bob", "cy", "dan")):
            assert rate(raters[name], rows, careless=False, offset=0.1 * offset - 0.15 + 0.05 * turn)
    while sum(j["worker"] == "eve" for j in campaign.store.judgments()) < QualityRules().min_judgments:
        assert rate(raters["eve"], rows, careless=True, offset=0.0)  # straight-lines: the QC rules exclude her
    pat = sign_in(browser, campaign, "pat")  # a rater in the browser, as in tests/serve/test_browser.py
    finish_batch(pat)
    pat.context.close()

    context = browser.new_context(viewport={"width": 1280, "height": 900})
    page = context.new_page()
    dialogs: list[str] = []
    page.on("dialog", lambda dialog: (dialogs.append(dialog.message), dialog.dismiss()))
    token = campaign.store.add_operator("operator", time.time())
    page.goto(f"{campaign.url}/operator/signin#token={token}")
    page.wait_for_selector("#campaign[data-updated]")
    assert token not in page.url and page.url.endswith("/operator")
    reloaded = page.reload()
    assert reloaded.status == 200 and reloaded.headers["content-security-policy"].startswith("default-src 'none'; script-src 'self'")
    page.wait_for_selector("#campaign[data-updated]")
    check_against_the_store(page, campaign.store, demo_round)
    verdict = text(page, "#raters tr[data-rater=eve] [data-field=verdict]")
    assert verdict.startswith("excluded: ") and "straight-lining 1.00 of judgments on one value > 0.9" in verdict
    assert text(page, "#who") == "operator" and text(page, "#error") == ""

    # The screenshot: the whole page in the viewport, every section visible when it is taken.
    height = page.evaluate("() => document.documentElement.scrollHeight")
    page.set_viewport_size({"width": 1280, "height": height})
    for section in SECTIONS:
        box = page.locator(section).bounding_box()
        assert page.locator(section).is_visible() and box["y"] >= 0 and box["y"] + box["height"] <= height, section
    shot = tmp_path / "operator.png"
    page.screenshot(path=str(shot))
    with Image.open(shot) as image:
        assert image.format == "PNG" and image.size == (1280, height)
        assert len(image.convert("RGB").getcolors(maxcolors=1 << 20)) > 50  # text, bars and table rules, not a blank page
    if os.environ.get(SEE_IT) and "://" not in database:  # the README's picture, from the SQLite run
        Path(os.environ[SEE_IT]).mkdir(parents=True, exist_ok=True)
        shutil.copy(shot, Path(os.environ[SEE_IT]) / "operator.png")

    # Live: what raters submit while the page is open shows within a few polls; names are text, never markup.
    first = query(campaign.store.location, "SELECT batch_id, position, item_id, task_type FROM tasks ORDER BY batch_id, position")[0]
    with campaign.store._transaction() as run:
        run(
            "INSERT INTO judgments (rater, batch_id, position, item_id, task_type, score, answer, seconds, time) "
            "VALUES (?, ?, ?, ?, ?, ?, NULL, ?, ?)",
            (MARKUP_NAME, *first, 2.0, 7.0, now_iso(time.time())),
        )
    assert rate(raters["dan"], rows, careless=False, offset=0.05)
    count, rated = f"{len(campaign.store.judgments()):,}", now_iso(time.time())
    page.wait_for_function("n => document.querySelector('#summary [data-field=judgments]').textContent === n", arg=count, timeout=20_000)
    # The QC report is rebuilt at most 1/QC_SHARE times the time it took after the judgments changed: wait for one built since.
    page.wait_for_function("t => document.querySelector('#campaign').dataset.qc >= t", arg=rated, timeout=20_000)
    check_against_the_store(page, campaign.store, demo_round)
    assert text(page, f'#raters tr[data-rater="{MARKUP_NAME}"] [data-field=worker]') == MARKUP_NAME
    assert page.locator("#campaign img, #campaign script").count() == 0 and dialogs == []
    context.close()


def test_a_raters_session_cannot_open_the_operator_page(
    browser,  # noqa: F811  (the Chromium fixture imported above)
    campaign: LiveServer,
) -> None:
    page = sign_in(browser, campaign, "ann")
    response = page.goto(f"{campaign.url}/operator")
    assert response.status == 403 and "content-security-policy" in response.headers
    assert json.loads(page.inner_text("body")) == {
        "detail": "the operator page is for the campaign's operators: a rater's sign-in cannot open it"
    }
    api = page.goto(f"{campaign.url}/api/operator/campaign")
    assert api.status == 403 and "default-src 'none'" in api.headers["content-security-policy"]
    page.context.close()


def test_the_page_polls_less_often_when_the_app_answers_slowly(
    browser,  # noqa: F811  (the Chromium fixture imported above)
    campaign: LiveServer,
) -> None:
    context = browser.new_context()
    page = context.new_page()
    token = campaign.store.add_operator("operator", time.time())
    page.goto(f"{campaign.url}/operator/signin#token={token}")
    page.wait_for_selector("#campaign[data-wait]")
    quick = int(page.get_attribute("#campaign", "data-wait"))
    assert 5000 <= quick < 10_000

    def slow(route) -> None:  # the app taking a second to answer
        time.sleep(1.0)
        route.continue_()

    page.route("**/api/operator/campaign", slow)
    page.reload()
    page.wait_for_selector("#campaign[data-wait]")
    assert 10_000 <= int(page.get_attribute("#campaign", "data-wait")) <= 60_000  # ten times the answer's time, at most a minute
    context.close()
