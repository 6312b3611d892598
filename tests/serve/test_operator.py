"""The operator page's routes through FastAPI's TestClient, on each backend: operators sign in apart
from raters and the roles never mix; the figures are what the store holds (and what the aggregate
stage's QC report says); a plan, a stop rule and a triage each add what they should."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import yaml
from fastapi.testclient import TestClient

from crisscross.aggregate.quality import QualityRules, rater_report
from crisscross.annotate.store import OPERATOR, SessionPolicy, Store, token_hash
from crisscross.campaign.monitor import CampaignInputs, machine_share
from crisscross.campaign.replication import ReplicationSettings
from crisscross.campaign.triage import DECIDED_BY_MACHINE, DECIDED_BY_PEOPLE, UNDECIDED
from crisscross.pipelines import cli, serve
from crisscross.serve import assets
from crisscross.serve.app import CSRF_HEADER, SESSION_COOKIE
from tests.serve.round import Clock, RoundFiles, browser, make_app, query, token_holder

NOW = 1_800_000_000.0
CAMPAIGN = "/api/operator/campaign"
# A plan as the plan stage writes it, cut to what the app reads: STS with a budget and a price, SIS with neither.
PLAN = {
    "types": {
        "STS": {
            "pilot": {"rater_sd": 0.8},
            "design": {"items": 10, "replicas": 2, "judgments": 20, "cost": 5.0, "currency": "USD"},
            "budget": {"items": 8, "replicas": 2, "judgments": 16, "cost": 4.0, "currency": "USD"},
        },
        "SIS": {"pilot": {"rater_sd": 0.7}, "design": {"items": 4, "replicas": 3, "judgments": 12, "cost": None, "currency": "USD"}},
    }
}


def operator_client(store: Store, files: RoundFiles, name: str = "boss", **config) -> TestClient:
    client = browser(make_app(store, files, **config))
    response = client.post("/operator/signin", data={"token": store.add_operator(name, NOW)}, follow_redirects=False)
    assert response.status_code == 303 and response.headers["location"] == "/operator"
    assert "httponly" in response.headers["set-cookie"].lower() and "samesite=strict" in response.headers["set-cookie"].lower()
    return client


def rater_client(store: Store, files: RoundFiles, name: str, **config) -> TestClient:
    client = browser(make_app(store, files, **config))
    assert client.post("/signin", data={"token": store.add_rater(name, NOW)}, follow_redirects=False).status_code == 303
    return client


def rate(client: TestClient, batches: int, score: float, clock: Clock | None = None, seconds: float = 4.0) -> None:
    """Rate ``batches`` batches the rater is given, every item ``score`` (VERIFY: "partially yes")."""
    for _ in range(batches):
        view = client.get("/api/batch").json()
        batch = view["batch"]
        if "scale" in batch:
            given = [{"position": i["position"], "score": score, "seconds": seconds} for i in batch["items"]]
        else:
            given = [{"position": i["position"], "answer": "partially yes", "seconds": seconds} for i in batch["items"]]
        if clock is not None:
            clock.now += 60
        response = client.post("/api/submit", json={"batch_id": batch["id"], "answers": given}, headers={CSRF_HEADER: view["csrf"]})
        assert response.status_code == 200 and response.json()["stored"] is True


def test_the_roles_never_mix(store: Store, round_files: RoundFiles):
    ann = rater_client(store, round_files, "ann")
    boss = operator_client(store, round_files)
    nobody = browser(make_app(store, round_files))
    for client, status in ((ann, 403), (nobody, 401)):
        refused = client.get(CAMPAIGN)
        assert refused.status_code == status and list(refused.json()) == ["detail"] and "\n" not in refused.json()["detail"]
    assert "a rater's sign-in cannot open it" in ann.get(CAMPAIGN).json()["detail"]
    assert ann.get("/operator", follow_redirects=False).status_code == 403  # the page too, never its figures
    assert nobody.get("/operator", follow_redirects=False).headers["location"] == "/operator/signin"

    view = ann.get("/api/batch").json()
    for response in (
        boss.get("/api/batch"),
        boss.post("/api/submit", json={"batch_id": view["batch"]["id"], "answers": []}, headers={CSRF_HEADER: view["csrf"]}),
        boss.get(f"/api/image/1/a?batch={view['batch']['id']}"),
        boss.get("/api/example/SIS/0/a"),
    ):
        assert response.status_code == 403 and "an operator's sign-in, which cannot rate" in response.json()["detail"]
    assert boss.get("/", follow_redirects=False).headers["location"] == "/operator"
    assert boss.get(CAMPAIGN).json()["operator"] == "boss" and boss.get("/operator").status_code == 200
    assert store.judgments() == []


def test_each_token_signs_in_only_on_its_own_page(store: Store, round_files: RoundFiles):
    client = browser(make_app(store, round_files))
    rater_token, operator_token = store.add_rater("ann", NOW), store.add_operator("boss", NOW)
    wrong = client.post("/operator/signin", data={"token": rater_token}, follow_redirects=False)
    assert wrong.status_code == 401 and "add-operator" in wrong.text and "set-cookie" not in wrong.headers
    assert client.post("/signin", data={"token": operator_token}, follow_redirects=False).status_code == 401
    assert token_holder(store, rater_token, OPERATOR) is None and token_holder(store, operator_token) is None
    stored = str(query(store.location, "SELECT * FROM operators"))
    assert operator_token not in stored and token_hash(operator_token) in stored
    page = client.get("/operator/signin")
    assert page.status_code == 200 and 'action="/operator/signin"' in page.text and "/static/signin.js" in page.text


def test_operator_sessions_end_like_raters(store: Store, round_files: RoundFiles):
    clock = Clock()
    policy = SessionPolicy(idle=600.0, lifetime=3600.0, touch_every=60.0)
    boss = operator_client(store, round_files, clock=clock, sessions=policy)
    session = boss.cookies[SESSION_COOKIE]
    assert query(store.location, "SELECT id_hash, operator FROM operator_sessions") == [(token_hash(session), "boss")]
    clock.now += 601
    assert boss.get(CAMPAIGN).status_code == 401  # idle too long

    boss = operator_client(store, round_files, "cy", clock=clock, sessions=policy)
    copied = boss.cookies[SESSION_COOKIE]
    out = boss.post("/operator/signout", follow_redirects=False)
    assert out.status_code == 303 and out.headers["location"] == "/operator/signin"
    replay = browser(make_app(store, round_files, clock=clock, sessions=policy))
    replay.cookies.set(SESSION_COOKIE, copied)
    assert replay.get(CAMPAIGN).status_code == 401

    boss = operator_client(store, round_files, "dee", clock=clock, sessions=policy)
    store.add_operator("dee", NOW, replace=True)  # serve add-operator dee --new-token
    assert boss.get(CAMPAIGN).status_code == 401


def test_signing_in_as_operator_ends_the_browsers_rater_session(store: Store, round_files: RoundFiles):
    client = rater_client(store, round_files, "ann")
    rater_session = client.cookies[SESSION_COOKIE]
    client.post("/operator/signin", data={"token": store.add_operator("boss", NOW)})
    assert query(store.location, "SELECT COUNT(*) FROM sessions") == [(0,)] and client.cookies[SESSION_COOKIE] != rater_session
    assert client.get(CAMPAIGN).status_code == 200 and client.get("/api/batch").status_code == 403


def test_the_figures_are_what_the_store_holds(store: Store, round_files: RoundFiles):
    clock = Clock()
    for name, batches, score in (("ann", 3, 4.5), ("bob", 2, 1.0), ("cy", 3, 3.0)):
        rate(rater_client(store, round_files, name, clock=clock), batches, score, clock)
    rater_client(store, round_files, "dan", clock=clock).get("/api/batch")  # holds a batch, rates nothing
    figures = operator_client(store, round_files, clock=clock).get(CAMPAIGN).json()

    judgments, gold = store.judgments(), store.gold()
    # ann: sis, sits, sts-00001; bob: the batches ann started first, sis and sits; cy: what is left, the three others
    assert figures["pace"]["judgments"] == len(judgments) == (2 + 2 + 3) + (2 + 2) + (3 + 3 + 3)
    progress = {p["task_type"]: p for p in figures["progress"]}
    for p in store.progress(2, clock.now, 3600):
        assert {k: progress[p.task_type][k] for k in p.__dict__} == p.__dict__
    rated = Counter(j["item_id"] for j in judgments if j["item_id"] not in gold)
    kinds = {j["item_id"]: j["task_type"] for j in judgments}
    for kind, p in progress.items():
        assert p["against"] == "tasks" and p["replicas"] == 2 and p["items_planned"] == p["items"]
        assert p["judgments_planned"] == 2 * p["items"]
        assert p["items_done"] == sum(1 for item, n in rated.items() if kinds[item] == kind and n >= 2)
        assert p["judgments_rated"] == sum(n for item, n in rated.items() if kinds[item] == kind)
    assert progress["STS"]["items_done"] == 1 and progress["SIS"]["items_done"] == 1  # sts-00001 and sis-00001 by two raters

    expected = rater_report(pd.DataFrame(judgments), pd.DataFrame({"item_id": list(gold), "gold": list(gold.values())}))
    assert [(r["worker"], r["task_type"], r["judgments"], r["gold_seen"], r["gold_passed"]) for r in figures["raters"]] == list(
        expected[["worker", "task_type", "judgments", "gold_seen", "gold_passed"]].itertuples(index=False, name=None)
    )
    sis = {r["worker"]: r for r in figures["raters"] if r["task_type"] == "SIS"}
    assert sis["ann"]["gold_accuracy"] == 0.0 and sis["bob"]["gold_accuracy"] == 1.0  # sis-00001's gold is a known negative
    assert sis["ann"]["loo_correlation"] is None and sis["ann"]["median_seconds"] == 4.0  # one rated item: no spread to correlate
    assert not any(r["excluded"] for r in figures["raters"])  # too few judgments for any rule

    # Every judgment was made in the last hour of the test's clock, in the clock hour it ends in.
    assert figures["pace"]["last_hour"] == len(judgments) and figures["pace"]["hours"][-1]["judgments"] == len(judgments)
    assert figures["pace"]["per_hour"] == len(judgments) and figures["pace"]["first"] == "2027-01-15T08:01:00.000Z"
    assert len(figures["pace"]["hours"]) == 12 and sum(h["judgments"] for h in figures["pace"]["hours"][:-1]) == 0
    assert figures["machine"] is None and figures["budget"] is None and figures["stops"] == {"rule": "fixed", "recent": []}


def test_the_qc_report_is_kept_between_polls_and_rebuilt_after_new_judgments(store: Store, round_files: RoundFiles):
    clock = Clock()
    rate(rater_client(store, round_files, "ann", clock=clock), 1, 4.5, clock)
    boss = operator_client(store, round_files, clock=clock, qc_refresh=600.0)
    first = boss.get(CAMPAIGN).json()
    assert [r["worker"] for r in first["raters"]] == ["ann"] and first["raters_as_of"] == first["time"]

    rate(rater_client(store, round_files, "bob", clock=clock), 2, 1.0, clock)
    stale = boss.get(CAMPAIGN).json()
    assert stale["pace"]["judgments"] == len(store.judgments()) > first["pace"]["judgments"]  # the counts are live
    assert stale["raters"] == first["raters"] and stale["raters_as_of"] == first["raters_as_of"]  # the QC report waits

    clock.now += 600
    fresh = boss.get(CAMPAIGN).json()
    assert fresh["raters_as_of"] == fresh["time"] and {r["worker"] for r in fresh["raters"]} == {"ann", "bob"}
    gold = store.gold()
    expected = rater_report(pd.DataFrame(store.judgments()), pd.DataFrame({"item_id": list(gold), "gold": list(gold.values())}))
    assert [(r["worker"], r["task_type"], r["judgments"]) for r in fresh["raters"]] == list(
        expected[["worker", "task_type", "judgments"]].itertuples(index=False, name=None)
    )
    clock.now += 600
    assert boss.get(CAMPAIGN).json()["raters_as_of"] == fresh["raters_as_of"]  # nothing new: not rebuilt


def test_the_qc_rules_verdicts_and_their_reasons(store: Store, round_files: RoundFiles):
    strict = QualityRules(min_gold_items=1, min_median_seconds=3.0, min_judgments=2, max_straightline_share=1.0)
    clock = Clock()
    rate(rater_client(store, round_files, "ann", clock=clock), 1, 4.5, clock, seconds=1.0)  # sis-00001: fast, its negative gold failed
    figures = operator_client(store, round_files, clock=clock, campaign=CampaignInputs(rules=strict)).get(CAMPAIGN).json()
    (row,) = figures["raters"]
    assert row["excluded"] is True
    assert row["reasons"] == "gold-accuracy 0.00 < 0.7 (0/1 gold items passed); median-seconds 1.0 < 3 (over 2 timed judgments)"


def test_a_stop_rule_shows_the_items_it_closed_and_why(store: Store, round_files: RoundFiles):
    rule = ReplicationSettings(rule="threshold", min_judgments=2, alpha=0.1, rater_sd={"STS": 0.5, "SIS": 0.5})
    clock = Clock()
    for name in ("ann", "bob"):
        rate(rater_client(store, round_files, name, clock=clock, replicas=3, replication=rule), 5, 5.0, clock)
    figures = operator_client(store, round_files, clock=clock, replicas=3, replication=rule).get(CAMPAIGN).json()
    assert figures["stops"]["rule"] == "threshold"
    closures = store.closures()
    assert figures["stops"]["recent"] == closures and {c["item_id"]: c["reason"] for c in closures} == store.closed()
    assert {c["task_type"] for c in closures} == {"STS", "SIS"} and all(c["reason"].startswith("threshold after 2") for c in closures)
    progress = {p["task_type"]: p for p in figures["progress"]}
    assert (progress["STS"]["closed"], progress["STS"]["items_done"], progress["STS"]["saved"]) == (3, 3, 3)  # closed at 2 of 3
    assert (progress["SITS"]["closed"], progress["SITS"]["items_done"]) == (0, 0)  # no rater spread: never closes early


def test_a_plan_gives_the_targets_and_the_budget(store: Store, round_files: RoundFiles):
    clock = Clock()
    for name in ("ann", "bob"):
        rate(rater_client(store, round_files, name, clock=clock), 5, 4.0, clock)
    config = {"clock": clock, "campaign": CampaignInputs(plan=PLAN)}
    figures = operator_client(store, round_files, **config).get(CAMPAIGN).json()
    progress = {p["task_type"]: p for p in figures["progress"]}
    assert {k: progress["STS"][k] for k in ("against", "items_planned", "replicas", "judgments_planned", "items_done")} == {
        "against": "plan",
        "items_planned": 10,
        "replicas": 2,
        "judgments_planned": 20,
        "items_done": 3,
    }
    assert (progress["SIS"]["items_planned"], progress["SIS"]["replicas"], progress["SIS"]["items_done"]) == (4, 3, 0)  # 2 of 3
    assert progress["VERIFY"]["against"] == "tasks"  # a type the plan leaves out

    spent = Counter(j["task_type"] for j in store.judgments())
    assert spent["STS"] == 12  # 2 raters × 6 (gold included)
    budget = {t["task_type"]: t for t in figures["budget"]["types"]}
    assert budget["STS"] == {
        "task_type": "STS",
        "judgments": 16,
        "from_budget": True,
        "currency": "USD",
        "cost_per_judgment": 0.25,
        "spent_judgments": 12,
        "spent_cost": 3.0,
        "left_judgments": 4,
        "left_cost": 1.0,
    }
    assert budget["SIS"]["judgments"] == 12 and budget["SIS"]["from_budget"] is False  # no budget: the design's spend
    assert budget["SIS"]["cost_per_judgment"] is None and budget["SIS"]["left_cost"] is None  # a pilot without times: no price
    assert budget["SIS"]["left_judgments"] == 12 - spent["SIS"]
    total = figures["budget"]["total"]
    assert total["left_cost"] is None and total["unplanned_judgments"] == spent["SITS"] + spent["VERIFY"] == 10


def test_a_triage_gives_the_machine_share(store: Store, round_files: RoundFiles):
    decisions = pd.DataFrame(
        {
            "task_type": ["STS"] * 5 + ["VERIFY"] * 2,
            "decided_by": [DECIDED_BY_MACHINE] * 3 + [DECIDED_BY_PEOPLE, UNDECIDED] + [UNDECIDED] * 2,
        }
    )
    share = machine_share(decisions)
    assert share == {
        "STS": {"items": 5, "machine": 3, "people": 1, "open": 1},
        "VERIFY": {"items": 2, "machine": 0, "people": 0, "open": 2},
    }
    figures = operator_client(store, round_files, campaign=CampaignInputs(triage=share)).get(CAMPAIGN).json()
    assert figures["machine"] == [{"task_type": "STS", **share["STS"]}, {"task_type": "VERIFY", **share["VERIFY"]}]
    with pytest.raises(ValueError, match="decided_by"):
        machine_share(decisions.drop(columns="decided_by"))


def test_the_operator_pages_carry_the_security_headers_and_set_text_only(store: Store, round_files: RoundFiles):
    boss = operator_client(store, round_files)
    for path in ("/operator", CAMPAIGN, "/operator/signin", "/static/operator.js", "/static/operator.css"):
        response = boss.get(path)
        assert response.status_code == 200, path
        assert "default-src 'none'" in response.headers["content-security-policy"] and response.headers["x-frame-options"] == "DENY"
    page = boss.get("/operator").text
    assert "/static/operator.js" in page and "<script>" not in page and " style=" not in page
    for forbidden in ("innerHTML", "outerHTML", "insertAdjacentHTML", "document.write", "eval("):
        assert forbidden not in assets.OPERATOR_JS


def test_serve_add_operator_and_status_with_a_plan_and_a_triage(
    store: Store, round_files: RoundFiles, tmp_path: Path, capsys: pytest.CaptureFixture[str]
):
    serve.main(["add-operator", "boss", "--db", store.location, "--url", "http://10.0.0.5:8080/"])
    link = capsys.readouterr().out.strip()
    assert link.startswith("http://10.0.0.5:8080/operator/signin#token=")
    assert token_holder(store, link.split("#token=", 1)[1], OPERATOR) == "boss" and token_holder(store, link.split("#token=", 1)[1]) is None

    clock = Clock()
    for name in ("ann", "bob"):
        rate(rater_client(store, round_files, name, clock=clock), 5, 4.0, clock)
    (tmp_path / "plan").mkdir()
    (tmp_path / "plan" / "plan.json").write_text(json.dumps(PLAN))
    (tmp_path / "triage").mkdir()
    decisions = {"item_id": ["a", "b", "c"], "task_type": ["STS"] * 3, "decided_by": [DECIDED_BY_MACHINE, DECIDED_BY_MACHINE, UNDECIDED]}
    pq.write_table(pa.table(decisions), tmp_path / "triage" / "decisions.parquet")
    params = tmp_path / "params.yaml"
    params.write_text(yaml.safe_dump({"tasks": {"replicas": 2}}))
    flags = ["--db", store.location, "--params", str(params), "--plan", str(tmp_path / "plan"), "--triage", str(tmp_path / "triage")]
    report = serve.main(["status", *flags])
    out = capsys.readouterr().out
    assert "    against the plan: 3 of 10 items done, 6 of 20 judgments" in out
    assert "  STS: the machine labelled 2 of 3 items (triage)" in out
    assert "  STS: 4 of 16 judgments left (1.00 USD)" in out and "  SIS: 8 of 12 judgments left\n" in out
    assert "  ann SIS: 2 judgments, 0/1 gold passed; kept by the QC rules" in out
    assert report["machine"] == [{"task_type": "STS", "items": 3, "machine": 2, "people": 0, "open": 1}]

    pq.write_table(pa.table({"task_type": ["STS"]}), tmp_path / "triage" / "decisions.parquet")
    assert cli.main(["serve", "status", *flags]) == 2
    err = capsys.readouterr().err.strip()
    assert "--triage" in err and "decided_by" in err and len(err.splitlines()) == 1
    assert cli.main(["serve", "add-operator", "<img src=x>", "--db", store.location]) == 2
    assert "operator name" in capsys.readouterr().err


def test_the_app_takes_the_campaign_inputs_from_its_flags(round_files: RoundFiles, tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    import uvicorn

    served: list = []
    monkeypatch.setattr(uvicorn, "run", lambda app, **options: served.append(app))
    (tmp_path / "plan").mkdir()
    (tmp_path / "plan" / "plan.json").write_text(json.dumps(PLAN))
    db = str(tmp_path / "round.sqlite")
    argv = ["serve", "--tasks", str(round_files.tasks), "--items", str(round_files.items), "--db", db, "--plan", str(tmp_path / "plan")]
    assert cli.main(argv) == 0
    client = browser(served[0])
    client.post("/operator/signin", data={"token": Store(db).add_operator("boss", NOW)})
    figures = client.get(CAMPAIGN).json()
    assert figures["replicas"] == 3 and figures["budget"]["types"][0]["task_type"] == "SIS"  # the plan's ceiling and budget
    assert cli.main([*argv, "--triage", str(tmp_path / "none")]) == 2  # no triage output there: one line, exit 2


def test_the_readme_shows_the_operator_page_and_how_to_redraw_it():
    from PIL import Image

    from tests.conftest import PROJECT

    readme = (PROJECT / "README.md").read_text()
    section = readme.split("### A running campaign: the operator page", 1)[1].split("\n## ", 1)[0]
    assert "crisscross serve add-operator" in section and "](docs/see-it/operator.png)" in section
    assert "CRISSCROSS_SCREENSHOTS=docs/see-it" in section and "tests/serve/test_operator_browser.py" in section
    with Image.open(PROJECT / "docs" / "see-it" / "operator.png") as picture:
        assert picture.format == "PNG" and picture.size[0] == 1280 and picture.size[1] > 900


def test_a_type_the_plan_names_but_the_round_does_not_load_shows_nothing_done():
    from crisscross.annotate.store import TypeProgress
    from crisscross.campaign.monitor import progress_rows

    loaded = [TypeProgress("STS", 2, 0, 0, 2, 0, items=3, closed=0, saved=0)]
    rows = progress_rows(loaded, [], 5, PLAN)
    assert [(r["task_type"], r["against"], r["batches"], r["items_planned"], r["items_done"]) for r in rows] == [
        ("STS", "plan", 2, 10, 0),
        ("SIS", "plan", 0, 4, 0),  # planned, not loaded into this database
    ]
