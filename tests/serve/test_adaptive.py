"""Adaptive replication in the rater app: items whose stop rule has decided them are closed, the
next raters are shown only the open items (and gold), closed batches are not handed out, and a
fixed rule changes nothing."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from contextlib import ExitStack
from pathlib import Path

import numpy as np
import pytest
import yaml
from fastapi.testclient import TestClient

from crisscross.annotate.store import Answer, Store
from crisscross.campaign.replication import ReplicationSettings, decide
from crisscross.pipelines import serve
from crisscross.serve.app import CSRF_HEADER
from crisscross.tasktypes.names import POSITIVE_THRESHOLDS
from tests.serve.round import Clock, RoundFiles, browser, make_app, tasks_table

NOW = 1_800_000_000.0
REPLICAS = 3
CLEAR = 5.0  # position 1 of every batch: far above each type's threshold
# z(0.95) · 0.5 / √2 = 0.58: two clear judgments decide STS and SIS; SITS has no spread, so never stops early.
THRESHOLD = ReplicationSettings(rule="threshold", min_judgments=2, alpha=0.1, rater_sd={"STS": 0.5, "SIS": 0.5})
ITEM = {(r["batch_id"], r["position"]): r["item_id"] for r in tasks_table().to_pylist()}
EVERY_BATCH = {"sis-00001": [1, 2], "sits-00001": [1, 2], "sts-00001": [1, 2, 3], "sts-00002": [1, 2, 3], "verify-00001": [1, 2, 3]}


SignIn = Callable[[str, Clock, ReplicationSettings], TestClient]


@pytest.fixture
def sign_in(store: Store, round_files: RoundFiles) -> Iterator[SignIn]:
    """A rater's signed-in client, open until the test ends: it keeps its threads, so its database
    connections (one per thread) are made once, not once per request."""
    with ExitStack() as clients:

        def signed_in(name: str, clock: Clock, settings: ReplicationSettings) -> TestClient:
            client = clients.enter_context(browser(make_app(store, round_files, replicas=REPLICAS, replication=settings, clock=clock)))
            client.post("/signin", data={"token": store.add_rater(name, NOW)})
            return client

        yield signed_in


def answers(batch: dict, positions: list[int] | None = None) -> list[dict]:
    """Position 1 rated clearly positive, the rest exactly on the type's threshold (never decided)."""
    chosen = positions or [i["position"] for i in batch["items"]]
    if "scale" not in batch:
        return [{"position": p, "answer": "partially yes", "seconds": 2.0} for p in chosen]
    return [{"position": p, "score": CLEAR if p == 1 else POSITIVE_THRESHOLDS[batch["task_type"]], "seconds": 2.0} for p in chosen]


def post(client: TestClient, view: dict, positions: list[int] | None = None):
    return client.post(
        "/api/submit",
        json={"batch_id": view["batch"]["id"], "answers": answers(view["batch"], positions)},
        headers={CSRF_HEADER: view["csrf"]},
    )


def rate_all(client: TestClient, clock: Clock) -> dict[str, list[int]]:
    """Rate every batch the rater is given, a few seconds apart; batch → positions shown."""
    seen = {}
    while (view := client.get("/api/batch").json())["batch"]:
        seen[view["batch"]["id"]] = [i["position"] for i in view["batch"]["items"]]
        clock.now += 10
        response = post(client, view)
        assert response.status_code == 200 and response.json()["stored"] is True
    return seen


def test_clear_items_close_after_min_judgments_and_later_raters_see_only_open_items_and_gold(
    store: Store, sign_in: SignIn, tmp_path: Path, capsys: pytest.CaptureFixture[str]
):
    clock = Clock(NOW)
    for name in ("ann", "bob"):
        assert rate_all(sign_in(name, clock, THRESHOLD), clock) == EVERY_BATCH
    reason = decide(np.array([CLEAR, CLEAR]), "STS", REPLICAS, THRESHOLD).reason
    assert reason.startswith("threshold after 2: mean 5.00 ≥ 3")
    assert store.closed() == {
        ITEM["sts-00001", 1]: reason,
        ITEM["sts-00002", 1]: reason,
        ITEM["sis-00001", 1]: decide(np.array([CLEAR, CLEAR]), "SIS", REPLICAS, THRESHOLD).reason,
    }  # not the SITS item (no rater spread), nor the items on the threshold, nor gold rated 5

    cy = sign_in("cy", clock, THRESHOLD)
    shown = {}
    while (view := cy.get("/api/batch").json())["batch"]:
        batch = view["batch"]["id"]
        shown[batch] = [i["position"] for i in view["batch"]["items"]]
        if batch == "sts-00002":  # its closed item is withheld: only what cy was shown is taken, and images follow
            assert store.shows("cy", batch, 2, clock.now, 3600) and not store.shows("cy", batch, 1, clock.now, 3600)
            refused = post(cy, view, [1, 2, 3])
            assert refused.status_code == 422 and "has no item 1" in refused.json()["detail"]
        clock.now += 10
        assert post(cy, view).status_code == 200
    # sis-00001 and sts-00001 hold no open item: never handed out again; sts-00002 shows its open item and its gold.
    assert shown == {"sits-00001": [1, 2], "sts-00002": [2, 3], "verify-00001": [1, 2, 3]}
    assert sign_in("dan", clock, THRESHOLD).get("/api/batch").json()["batch"] is None
    assert [j["worker"] for j in store.judgments() if j["item_id"] == ITEM["sts-00002", 1]] == ["ann", "bob"]
    assert [j["worker"] for j in store.judgments() if j["item_id"] == ITEM["sts-00002", 3]] == ["ann", "bob", "cy"]  # gold

    params = tmp_path / "params.yaml"
    adaptive = {"replication": {"rule": "threshold", "rater_sd": {"STS": 0.5, "SIS": 0.5}}}
    params.write_text(yaml.safe_dump({"rounds": {"adaptive": {"tasks": {"replicas": REPLICAS}, "annotate": adaptive}}}))
    report = serve.main(["status", "--db", store.location, "--params", str(params), "--round", "adaptive"])
    out = capsys.readouterr().out
    assert "at most 3 raters (stop rule threshold) per batch" in out
    assert "  STS: 2 done / 0 assigned / 0 open of 2 batches; 14 judgments\n    2 of 3 items closed early: 2 of 9 judgments saved" in out
    assert "  SIS: 1 done / 0 assigned / 0 open of 1 batches; 4 judgments\n    1 of 1 items closed early: 1 of 3 judgments saved" in out
    assert "  SITS: 1 done / 0 assigned / 0 open of 1 batches; 6 judgments\n    0 of 1 items closed early: 0 of 3" in out
    by_type = {p["task_type"]: (p["done"], p["items"], p["closed"], p["saved"]) for p in report["progress"]}
    assert by_type == {"STS": (2, 3, 2, 2), "SIS": (1, 1, 1, 1), "SITS": (1, 1, 0, 0), "VERIFY": (1, 1, 0, 0)}
    assert report["closed"] == store.closed()


def test_an_item_closed_after_it_was_shown_is_still_stored_and_keeps_its_first_reason(store: Store, sign_in: SignIn):
    clock = Clock(NOW)
    raters = {name: sign_in(name, clock, THRESHOLD) for name in ("ann", "bob", "cy")}
    views = {name: client.get("/api/batch").json() for name, client in raters.items()}
    assert {v["batch"]["id"] for v in views.values()} == {"sis-00001"}  # a started batch goes out first
    for name in ("ann", "bob"):
        clock.now += 10
        assert post(raters[name], views[name]).status_code == 200
    first = store.closed()
    assert list(first) == [ITEM["sis-00001", 1]]
    again = raters["cy"].get("/api/batch").json()["batch"]
    assert again["id"] == "sis-00001" and [i["position"] for i in again["items"]] == [1, 2]  # as first shown
    clock.now += 10
    assert post(raters["cy"], views["cy"]).status_code == 200
    assert [j["worker"] for j in store.judgments() if j["item_id"] == ITEM["sis-00001", 1]] == ["ann", "bob", "cy"]
    assert store.closed() == first  # closing again keeps the reason of the first decision


def test_closing_is_idempotent_never_touches_gold_and_a_closed_batch_is_done(store: Store):
    gold = ITEM["sts-00001", 2]
    store.close_items({gold: "gold", "sts:demo:cap:98|demo:cap:99": "unknown"}, NOW)
    assert store.closed() == {}
    store.close_items({ITEM["sts-00001", 1]: "first", ITEM["sts-00002", 1]: "first"}, NOW)
    store.close_items({ITEM["sts-00001", 1]: "second", ITEM["sts-00002", 2]: "first"}, NOW + 1)
    assert store.closed() == {ITEM["sts-00001", 1]: "first", ITEM["sts-00002", 1]: "first", ITEM["sts-00002", 2]: "first"}
    given = []
    while held := store.assignment("ann", NOW, REPLICAS, 3600):
        given.append(held.batch_id)
        rated = held.task_type != "VERIFY"
        full = [Answer(i.position, 2.5 if rated else None, None if rated else "100% yes", 1.0) for i in held.items]
        assert store.submit("ann", held.batch_id, full, NOW, REPLICAS)
    assert given == ["sis-00001", "sits-00001", "verify-00001"]  # both STS batches are closed
    sts = next(p for p in store.progress(REPLICAS, NOW, 3600) if p.task_type == "STS")
    assert (sts.done, sts.assigned, sts.open, sts.items, sts.closed, sts.saved) == (2, 0, 0, 3, 3, 9)


@pytest.mark.parametrize("settings", [ReplicationSettings(), ReplicationSettings(rule="threshold")], ids=["fixed", "no-spread"])
def test_a_fixed_rule_or_a_rule_without_a_spread_changes_nothing(store: Store, sign_in: SignIn, settings: ReplicationSettings):
    clock = Clock(NOW)
    for name in ("ann", "bob", "cy"):
        assert rate_all(sign_in(name, clock, settings), clock) == EVERY_BATCH
    assert store.closed() == {}
    assert len(store.judgments()) == REPLICAS * tasks_table().num_rows
    assert all((p.done, p.closed, p.saved) == (p.batches, 0, 0) for p in store.progress(REPLICAS, clock.now, 3600))


def test_serve_reads_the_replication_params_with_the_round_laid_over_and_the_plans_spread(tmp_path: Path):
    params = tmp_path / "params.yaml"
    params.write_text(
        yaml.safe_dump(
            {
                "annotate": {"replication": {"rule": "ci-width", "rater_sd": {"STS": 0.4}}},
                "rounds": {"r2": {"tasks": {"replicas": 4}, "annotate": {"replication": {"rule": "threshold", "rater_sd": {"SIS": 0.9}}}}},
            }
        )
    )
    plan = tmp_path / "plan"
    plan.mkdir()
    designs = {"STS": {"items": 100, "replicas": 6}, "SIS": {"items": 80, "replicas": 3}}
    (plan / "plan.json").write_text(
        json.dumps({"types": {kind: {"pilot": {"rater_sd": sd}, "design": designs[kind]} for kind, sd in (("STS", 0.7), ("SIS", 0.2))}})
    )
    base = serve._settings(str(params), None)
    assert (base.replicas, base.replication.rule, dict(base.replication.rater_sd)) == (5, "ci-width", {"STS": 0.4})
    laid = serve._settings(str(params), "r2")
    assert (laid.replicas, laid.replication.rule, dict(laid.replication.rater_sd)) == (4, "threshold", {"SIS": 0.9})
    planned = serve._settings(str(params), "r2", str(plan))
    assert (planned.replicas, dict(planned.replication.rater_sd)) == (
        6,
        {"STS": 0.7, "SIS": 0.9},
    )  # the plan's ceiling; params win over the pilot
