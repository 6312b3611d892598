"""The app through FastAPI's TestClient: sign-in, what the browser gets (and never gets), CSRF,
limits, and image confinement."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from crisscross.annotate.catalog import load_catalog
from crisscross.annotate.store import Store
from crisscross.core.io import confined
from crisscross.serve import assets
from crisscross.serve.app import CSRF_HEADER, SESSION_COOKIE, AppConfig, Round, create_app
from crisscross.serve.security import RateLimiter
from tests.serve.round import MARKUP, Clock, RoundFiles, browser, make_app, tasks_table

NOW = 1_800_000_000.0


def signed_in(store: Store, files: RoundFiles, name: str = "ann", **config) -> TestClient:
    client = browser(make_app(store, files, **config))
    token = store.add_rater(name, NOW)
    response = client.post("/signin", data={"token": token}, follow_redirects=False)
    assert response.status_code == 303 and response.headers["location"] == "/"
    assert "httponly" in response.headers["set-cookie"].lower() and "samesite=strict" in response.headers["set-cookie"].lower()
    assert client.cookies[SESSION_COOKIE] != token  # a session of its own, never the sign-in token
    return client


def answers(batch: dict, score: float | None = 3.3) -> list[dict]:
    if "scale" in batch:
        return [{"position": i["position"], "score": score, "seconds": 4.0} for i in batch["items"]]
    return [{"position": i["position"], "answer": "partially yes", "seconds": 4.0} for i in batch["items"]]


def test_no_token_no_page(store: Store, round_files: RoundFiles):
    client = browser(make_app(store, round_files))
    assert client.get("/api/batch").status_code == 401
    page = client.get("/", follow_redirects=False)
    assert page.status_code == 303 and page.headers["location"] == "/signin"
    client.cookies.set(SESSION_COOKIE, "not-a-token")
    assert client.get("/api/batch").status_code == 401
    wrong = client.post("/signin", data={"token": "guess"}, follow_redirects=False)
    assert wrong.status_code == 401 and SESSION_COOKIE not in wrong.headers.get("set-cookie", "")


def test_the_page_and_its_assets_load_nothing_from_elsewhere(store: Store, round_files: RoundFiles):
    client = signed_in(store, round_files)
    page = client.get("/")
    assert page.status_code == 200 and "/static/rater.js" in page.text
    for name in assets.STATIC:
        body = client.get(f"/static/{name}").text
        assert not re.search(r"https?://|//[a-z]", body.replace("https://", "")), name
    assert "default-src 'none'" in page.headers["content-security-policy"]
    assert page.headers["x-content-type-options"] == "nosniff"
    assert client.get("/static/../app.py").status_code == 404


def test_served_json_and_html_never_carry_gold_ids_or_sampling(store: Store, round_files: RoundFiles):
    gold_items = {r["item_id"] for r in tasks_table().to_pylist() if r["gold"]}
    seen_types = set()
    for n in range(6):
        client = signed_in(store, round_files, f"rater{n}")
        while (view := client.get("/api/batch").json())["batch"]:
            batch = view["batch"]
            seen_types.add(batch["task_type"])
            served = json.dumps(view) + client.get("/").text
            for secret in ("gold", "positive", "negative", "sampling", "item_id", "c2c_isim", *gold_items):
                assert secret not in served, secret
            for item in batch["items"]:
                assert set(item) == {"position", "a", "b"}
                assert all(set(side) in ({"text"}, {"image"}) for side in (item["a"], item["b"]))
            response = client.post(
                "/api/submit", json={"batch_id": batch["id"], "answers": answers(batch)}, headers={CSRF_HEADER: view["csrf"]}
            )
            assert response.status_code == 200 and response.json()["stored"] is True
    assert seen_types == {"STS", "SIS", "SITS", "VERIFY"}


def test_captions_reach_the_page_as_text_never_markup(store: Store, round_files: RoundFiles):
    client = signed_in(store, round_files)
    texts: list[str] = []
    while (view := client.get("/api/batch").json())["batch"]:
        batch = view["batch"]
        texts += [side["text"] for item in batch["items"] for side in (item["a"], item["b"]) if "text" in side]
        client.post("/api/submit", json={"batch_id": batch["id"], "answers": answers(batch)}, headers={CSRF_HEADER: view["csrf"]})
    assert MARKUP in texts  # the JSON carries the caption as written, and the page sets it as text:
    assert "innerHTML" not in assets.RATER_JS and "insertAdjacentHTML" not in assets.RATER_JS and "outerHTML" not in assets.RATER_JS


def test_instructions_examples_and_scale_are_served(store: Store, round_files: RoundFiles):
    client = signed_in(store, round_files)
    batch = client.get("/api/batch").json()["batch"]
    assert batch["summary"] and batch["instructions"] and len(batch["examples"]) == 2
    assert [p["score"] for p in batch["scale"]["points"]] == [0, 1, 2, 3, 4, 5]
    for example in batch["examples"]:
        for side in (example["a"], example["b"]):
            if "image" in side:
                assert client.get(side["image"]).headers["content-type"] == "image/png"


def test_submits_need_the_csrf_token(store: Store, round_files: RoundFiles):
    client = signed_in(store, round_files)
    view = client.get("/api/batch").json()
    body = {"batch_id": view["batch"]["id"], "answers": answers(view["batch"])}
    assert client.post("/api/submit", json=body).status_code == 403
    assert client.post("/api/submit", json=body, headers={CSRF_HEADER: "0" * 64}).status_code == 403
    other = signed_in(store, round_files, "bob")
    bob_csrf = other.get("/api/batch").json()["csrf"]
    assert client.post("/api/submit", json=body, headers={CSRF_HEADER: bob_csrf}).status_code == 403
    assert client.post("/api/submit", json=body, headers={CSRF_HEADER: view["csrf"]}).status_code == 200


def test_a_submit_without_a_score_is_refused_and_nothing_is_stored(store: Store, round_files: RoundFiles):
    client = signed_in(store, round_files)
    view = client.get("/api/batch").json()
    partial = answers(view["batch"])
    partial[-1].pop("score")
    response = client.post("/api/submit", json={"batch_id": view["batch"]["id"], "answers": partial}, headers={CSRF_HEADER: view["csrf"]})
    assert response.status_code == 422 and "needs a score from 0 to 5" in response.json()["detail"]
    assert store.judgments() == []


def test_a_rater_sees_only_their_own_batch(store: Store, round_files: RoundFiles):
    ann, bob = signed_in(store, round_files, "ann", replicas=1), signed_in(store, round_files, "bob", replicas=1)
    ann_view, bob_view = ann.get("/api/batch").json(), bob.get("/api/batch").json()
    assert (ann_view["batch"]["id"], bob_view["batch"]["id"]) == ("sis-00001", "sits-00001")
    assert bob.get("/api/image/1/b?batch=sits-00001").headers["content-type"] == "image/png"
    assert bob.get("/api/image/1/a?batch=sis-00001").status_code == 404  # ann's batch
    assert bob.get("/api/image/1/a?batch=sits-00001").status_code == 404  # a caption side has no image
    assert bob.get("/api/image/9/b?batch=sits-00001").status_code == 404
    body = {"batch_id": "sis-00001", "answers": answers(ann_view["batch"])}
    assert bob.post("/api/submit", json=body, headers={CSRF_HEADER: bob_view["csrf"]}).status_code == 403


def test_images_are_served_only_from_the_image_folder(store: Store, round_files: RoundFiles, tmp_path: Path):
    folder = tmp_path / "images"
    folder.mkdir()
    (folder / "photo.png").write_bytes((round_files.images / "photo1.png").read_bytes())
    outside = tmp_path / "secret.png"
    outside.write_bytes(b"secret")
    os.symlink(outside, folder / "link.png")
    assert confined(str(folder / "photo.png"), str(folder)) == (folder / "photo.png").resolve()
    assert confined(str(folder / ".." / "secret.png"), str(folder)) is None
    assert confined(str(folder / "link.png"), str(folder)) is None  # a symlink pointing out counts as out
    assert confined(str(folder / "absent.png"), str(folder)) is None
    assert confined("gs://bucket/x.png", str(folder)) is None
    assert confined(str(folder / "photo.png\0"), str(folder)) is None
    # An app whose image folder holds none of the items' files serves none of them.
    app = create_app(store, Round.of(tasks_table(), load_catalog(str(round_files.items)), str(folder)), AppConfig(replicas=2))
    client = browser(app)
    client.post("/signin", data={"token": store.add_rater("ann", NOW)})
    batch = client.get("/api/batch").json()["batch"]
    assert batch["id"] == "sis-00001"
    assert client.get("/api/image/1/a?batch=sis-00001").status_code == 404


def test_request_bodies_over_the_limit_are_refused(store: Store, round_files: RoundFiles):
    client = signed_in(store, round_files, max_request_bytes=2048)
    view = client.get("/api/batch").json()
    big = {"batch_id": view["batch"]["id"], "answers": answers(view["batch"]) * 40}
    assert client.post("/api/submit", json=big, headers={CSRF_HEADER: view["csrf"]}).status_code == 413

    def chunks():
        yield b'{"batch_id": "x", "answers": ['
        for _ in range(200):
            yield b'{"position": 1, "score": 1.0, "seconds": 1.0},'
        yield b"{}]}"

    streamed = client.post("/api/submit", content=chunks(), headers={CSRF_HEADER: view["csrf"], "content-type": "application/json"})
    assert streamed.status_code == 413


def test_requests_over_the_rate_are_refused(store: Store, round_files: RoundFiles):
    client = signed_in(store, round_files, rate_per_second=0.001, burst=3, clock=Clock())
    codes = [client.get("/api/batch").status_code for _ in range(5)]
    assert codes[:3] == [200, 200, 200] and codes[3:] == [429, 429]
    limiter = RateLimiter(rate=1.0, burst=2, max_keys=2)
    assert [limiter.allow("a", 0.0) for _ in range(3)] == [True, True, False]
    assert limiter.allow("a", 1.0)  # a second later, one more
    limiter.allow("b", 1.0), limiter.allow("c", 1.0)
    assert len(limiter._buckets) == 2  # bounded memory


def test_sign_ins_are_rate_limited_per_address(store: Store, round_files: RoundFiles):
    client = browser(make_app(store, round_files, signins_per_minute=3, clock=Clock()))
    codes = [client.post("/signin", data={"token": f"guess{i}"}, follow_redirects=False).status_code for i in range(5)]
    assert codes == [401, 401, 401, 429, 429]
    token = store.add_rater("ann", NOW)
    assert client.post("/signin", data={"token": token}, follow_redirects=False).status_code == 429  # checked before the token


def test_an_abandoned_batch_goes_to_the_next_rater_after_the_timeout(store: Store, round_files: RoundFiles):
    clock = Clock()
    ann = signed_in(store, round_files, "ann", replicas=1, timeout=60.0, clock=clock)
    first = ann.get("/api/batch").json()["batch"]["id"]
    bob = signed_in(store, round_files, "bob", replicas=1, timeout=60.0, clock=clock)
    assert bob.get("/api/batch").json()["batch"]["id"] != first
    clock.now += 61
    cy = signed_in(store, round_files, "cy", replicas=1, timeout=60.0, clock=clock)
    assert cy.get("/api/batch").json()["batch"]["id"] == first


@pytest.mark.parametrize("path", ["/docs", "/openapi.json", "/redoc"])
def test_no_generated_docs_pages(store: Store, round_files: RoundFiles, path: str):
    assert TestClient(make_app(store, round_files)).get(path).status_code in (401, 404)
