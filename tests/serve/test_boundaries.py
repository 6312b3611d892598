"""What the app lets in: bodies parsed strictly, every number in a path bounded, the time per item
under the judgment rules' limit, and the security headers on every response, refusals and server
errors included."""

from __future__ import annotations

import pytest

from crisscross.annotate.store import Store
from crisscross.formats.schema import JudgmentRules
from crisscross.serve.app import CSRF_HEADER
from crisscross.serve.security import HEADERS
from tests.serve.round import RoundFiles, browser, make_app
from tests.serve.test_app import NOW, answers, signed_in


def _first_batch(client) -> tuple[dict, str]:
    view = client.get("/api/batch").json()
    return view["batch"], view["csrf"]


def _submit(client, batch: dict, csrf: str, given: list[dict]):
    return client.post("/api/submit", json={"batch_id": batch["id"], "answers": given}, headers={CSRF_HEADER: csrf})


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("score", True),  # pydantic's lax mode stored this as 1.0
        ("score", "3"),
        ("score", [3]),
        ("seconds", True),
        ("seconds", "4"),
        ("position", True),
        ("position", 1.5),
        ("position", "1"),
    ],
)
def test_bodies_are_parsed_strictly_and_nothing_is_stored(store: Store, round_files: RoundFiles, field: str, value: object):
    client = signed_in(store, round_files)
    batch, csrf = _first_batch(client)
    given = answers(batch)
    given[0][field] = value
    response = _submit(client, batch, csrf, given)
    assert response.status_code == 422 and response.json()["detail"].startswith(f"body.answers.0.{field}: ")
    assert store.judgments() == []
    assert _submit(client, batch, csrf, answers(batch)).status_code == 200  # the same batch, sent as the page sends it


def test_unknown_keys_and_ids_past_their_length_are_refused(store: Store, round_files: RoundFiles):
    client = signed_in(store, round_files)
    batch, csrf = _first_batch(client)
    extra = [{**a, "gold": "positive"} for a in answers(batch)]
    assert _submit(client, batch, csrf, extra).status_code == 422
    long = client.post("/api/submit", json={"batch_id": "b" * 300, "answers": []}, headers={CSRF_HEADER: csrf})
    assert long.status_code == 422 and "batch_id" in long.json()["detail"]
    nul = client.post("/api/submit", json={"batch_id": "\x00", "answers": []}, headers={CSRF_HEADER: csrf})  # a 500 on PostgreSQL
    assert nul.status_code == 422 and client.get("/api/image/1/a?batch=%00").status_code == 422
    assert store.judgments() == []


@pytest.mark.parametrize("seconds", [1e300, 1e9, 3600.5])
def test_a_time_per_item_over_the_limit_is_refused(store: Store, round_files: RoundFiles, seconds: float):
    client = signed_in(store, round_files)
    batch, csrf = _first_batch(client)
    given = answers(batch)
    given[-1]["seconds"] = seconds
    response = _submit(client, batch, csrf, given)
    assert response.status_code == 422 and "over the limit of 3600" in response.json()["detail"]
    assert store.judgments() == []


def test_the_limit_is_the_params_and_a_time_not_measured_is_stored_as_none(store: Store, round_files: RoundFiles):
    client = signed_in(store, round_files, rules=JudgmentRules(max_seconds=30.0))
    batch, csrf = _first_batch(client)
    assert batch["max_seconds"] == 30.0  # the page sends no time over it
    given = answers(batch)
    given[0]["seconds"] = 31.0
    assert _submit(client, batch, csrf, given).status_code == 422
    given[0]["seconds"] = None
    assert _submit(client, batch, csrf, given).json()["stored"] is True
    assert [j["seconds"] for j in store.judgments()] == [None] + [4.0] * (len(given) - 1)


@pytest.mark.parametrize(
    "path",
    [
        "/api/image/9223372036854775808/a?batch=sts-00001",  # reached SQLite as an integer it cannot bind: a 500
        "/api/image/2147483648/a?batch=sts-00001",  # past int32, PostgreSQL's INTEGER
        "/api/image/-1/a?batch=sts-00001",
        "/api/image/1/a?batch=" + "b" * 300,
        "/api/image/1/" + "a" * 20 + "?batch=sts-00001",
        "/api/example/STS/99999999999999999999999/a",
    ],
)
def test_numbers_and_ids_in_paths_are_bounded(store: Store, round_files: RoundFiles, path: str):
    client = signed_in(store, round_files)
    response = client.get(path)
    assert response.status_code == 422 and isinstance(response.json()["detail"], str)
    assert all(response.headers[name] == value for name, value in HEADERS.items())


def test_every_response_carries_the_security_headers(store: Store, round_files: RoundFiles, monkeypatch: pytest.MonkeyPatch):
    client = signed_in(store, round_files, max_request_bytes=1024, rate_per_second=0.0, burst=6)
    batch, csrf = _first_batch(client)
    responses = {
        "ok": client.get("/api/batch"),
        "404": client.get("/static/absent.js"),
        "413": _submit(client, batch, csrf, answers(batch) * 40),
        "422": _submit(client, batch, csrf, [{"position": "x"}]),
        "403": client.post("/api/submit", json={"batch_id": batch["id"], "answers": []}),
    }
    while (limited := client.get("/api/batch")).status_code != 429:
        pass
    responses["429"] = limited

    def broken(*args: object) -> bool:
        raise RuntimeError("a bug in the store")

    monkeypatch.setattr(store, "shows", broken)
    fresh = browser(make_app(store, round_files), raise_server_exceptions=False)
    fresh.post("/signin", data={"token": store.add_rater("bob", NOW)})
    assert fresh.get("/api/batch").json()["batch"]["id"] == "sis-00001"
    responses["500"] = fresh.get("/api/image/1/a?batch=sis-00001")
    assert {k: r.status_code for k, r in responses.items()} == {k: int(k) if k != "ok" else 200 for k in responses}
    for kind, response in responses.items():
        missing = {name for name, value in HEADERS.items() if response.headers.get(name) != value}
        assert not missing, (kind, missing)


def test_refusals_are_one_line_json(store: Store, round_files: RoundFiles):
    client = signed_in(store, round_files)
    batch, csrf = _first_batch(client)
    broken_key = _submit(client, batch, csrf, [{**answers(batch)[0], "a\nb": 1}])  # the key the client sent is in the detail
    for response in (browser(make_app(store, round_files)).get("/api/batch"), client.get("/api/image/x/a?batch=b"), broken_key):
        detail = response.json()["detail"]
        assert response.status_code in (401, 422) and isinstance(detail, str) and "\n" not in detail, detail
