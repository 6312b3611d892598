"""``crisscross browse`` on the demo build's release: its API against the release's own tables,
its refusals, and the page in a real headless Chromium (filter, page, open a pair, a caption
holding markup shown as text), with a screenshot checked (``CRISSCROSS_SCREENSHOTS`` keeps them:
the README's ``docs/see-it/browse.png`` is one)."""

from __future__ import annotations

import json
import shutil
import socket
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from PIL import Image

from crisscross.release.query import MAX_PAGE, ReleaseView
from crisscross.serve.browse import THUMBNAIL, create_browser
from crisscross.serve.security import HEADERS
from tests.serve.round import MARKUP, served
from tests.serve.test_browser import CHROMIUM, browser, shots  # noqa: F401  (Chromium and the screenshots' folder, fixtures)

PROJECT = Path(__file__).resolve().parents[2]
IMAGES = PROJECT / "data" / "demo" / "images"
FIRST_ROWS_IMAGES_LOADED = (
    "() => [...document.querySelectorAll('#pairs tbody tr')].slice(0, 3)"
    ".flatMap((row) => [...row.querySelectorAll('img')]).every((img) => img.complete && img.naturalWidth > 0)"
)


@pytest.fixture(scope="module")
def release(demo_repro: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The demo build's release, copied, with the text of the first STS pair's first caption
    replaced by markup (the view reads the Karpathy file as it is; checksums are ``release
    verify``'s business)."""
    copy = tmp_path_factory.mktemp("browse") / "demo-simulated"
    shutil.copytree(demo_repro / "main" / "releases" / "demo-simulated", copy)
    karpathy = copy / "data" / "dataset_coco_cxc.json"
    document = json.loads(karpathy.read_text(encoding="utf-8"))
    sentid = int(marked_caption(copy).rsplit(":", 1)[1])
    (sentence,) = [s for image in document["images"] for s in image["sentences"] if s["sentid"] == sentid]
    sentence["raw"] = MARKUP
    karpathy.write_text(json.dumps(document), encoding="utf-8")
    return copy


def marked_caption(release: Path) -> str:
    """The caption whose text the ``release`` fixture turns into markup: the first STS pair's first."""
    pairs = pd.read_parquet(release / "data" / "pairs.parquet")
    return str(pairs[pairs["task_type"] == "STS"]["id_a"].iloc[0])


@pytest.fixture(scope="module")
def view(release: Path) -> ReleaseView:
    return ReleaseView(release)


@pytest.fixture(scope="module")
def pairs(release: Path) -> pd.DataFrame:
    return pd.read_parquet(release / "data" / "pairs.parquet")


@pytest.fixture(scope="module")
def client(view: ReleaseView) -> Iterator[Any]:
    from fastapi.testclient import TestClient

    with TestClient(create_browser(view, str(IMAGES), hosts={"testserver"})) as test_client:
        yield test_client


def expected(pairs: pd.DataFrame, **filters: Any) -> pd.DataFrame:
    """The release's pairs that ``filters`` (the API's query) keep, computed with pandas (every
    pair of the demo release is the simulated panel's)."""
    keep = pd.Series(filters.get("labelled_by") in (None, "simulated"), index=pairs.index)
    for column, name in (("task_type", "task_type"), ("split", "split"), ("sampling_method", "method")):
        if filters.get(name) is not None:
            keep &= pairs[column] == filters[name]
    if filters.get("positive") is not None:
        keep &= pairs["positive"] == (filters["positive"] == "yes")
    if filters.get("score_min") is not None:
        keep &= pairs["agg_score"] >= filters["score_min"]
    if filters.get("score_max") is not None:
        keep &= pairs["agg_score"] <= filters["score_max"]
    return pairs[keep]


def test_the_first_page_counts_and_shows_the_release_as_its_tables_hold_it(client: Any, pairs: pd.DataFrame, release: Path) -> None:
    info = client.get("/api/release").json()
    assert info["choices"]["pairs"] == len(pairs)
    assert dict(map(tuple, info["choices"]["task_type"])) == pairs.groupby("task_type").size().to_dict()
    assert dict(map(tuple, info["choices"]["labelled_by"])) == {"simulated": len(pairs)}
    assert info["plots"] == sorted(p.name for p in (release / "plots").glob("*.png")) and info["plots"]
    page = client.get("/api/pairs", params={"limit": 3}).json()
    assert page["total"] == len(pairs)
    for row, (_, want) in zip(page["rows"], pairs.head(3).iterrows(), strict=True):
        assert (row["item_id"], row["score"], row["positive"], row["n"]) == (
            want["item_id"],
            want["agg_score"],
            want["positive"],
            want["n"],
        )
    karpathy = json.loads((release / "data" / "dataset_coco_cxc.json").read_text())
    texts = {f"coco:cap:{s['sentid']}": s["raw"] for image in karpathy["images"] for s in image["sentences"]}
    sts = client.get("/api/pairs", params={"task_type": "STS", "limit": 5}).json()["rows"]
    assert all(side["text"] == texts[side["id"]] for row in sts for side in row["sides"])


SORTED_BY = {"release": None, "score": "agg_score", "spread": "std", "judgments": "n", "type": "task_type", "method": "sampling_method"}


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    task_type=st.sampled_from([None, "STS", "SIS", "SITS", "VERIFY"]),
    split=st.sampled_from([None, "test"]),
    method=st.sampled_from([None, "c2c_isim", "i2i_csim", "retrieved", "c2i_original"]),
    labelled_by=st.sampled_from([None, "simulated", "people", "machine"]),
    positive=st.sampled_from([None, "yes", "no"]),
    score_min=st.sampled_from([None, 0.0, 1.5, 3.0]),
    score_max=st.sampled_from([None, 2.5, 4.0, 5.0]),
    sort=st.sampled_from(sorted(SORTED_BY)),
    order=st.sampled_from(["asc", "desc"]),
    offset=st.sampled_from([0, 1, 49, 50, 199, 3000, 6000]),
    limit=st.sampled_from([1, 50, MAX_PAGE]),
)
def test_every_filter_sort_and_page_gives_the_rows_pandas_gives(client: Any, pairs: pd.DataFrame, **query: Any) -> None:
    asked = {k: v for k, v in query.items() if v is not None}
    page = client.get("/api/pairs", params=asked).json()
    want = expected(pairs, **query).assign(key=lambda frame: frame.index)
    assert page["total"] == len(want)
    column = SORTED_BY[query["sort"]]
    if column is not None:  # ties in the release's own order, as the page breaks them
        want = want.sort_values([column, "key"], ascending=[query["order"] == "asc", True], na_position="last", kind="stable")
    else:
        want = want.sort_values("key", ascending=query["order"] == "asc", kind="stable")
    window = want.iloc[query["offset"] : query["offset"] + query["limit"]]
    assert [r["key"] for r in page["rows"]] == window["key"].tolist()
    assert [r["item_id"] for r in page["rows"]] == window["item_id"].tolist()


def test_a_pair_opens_with_every_judgment_and_their_spread(client: Any, release: Path) -> None:
    judgments = pd.read_parquet(release / "data" / "judgments.parquet")
    row = client.get("/api/pairs", params={"task_type": "STS", "sort": "spread", "order": "desc", "limit": 1}).json()["rows"][0]
    pair = client.get(f"/api/pairs/{row['key']}").json()
    mine = judgments[(judgments["round"] == pair["round"]) & (judgments["item_id"] == pair["item_id"])]
    assert sorted(j["rater"] for j in pair["judgments"]) == sorted(mine["rater"])
    kept = mine[mine["status"] == "kept"]
    assert pair["spread"] == {"kept": len(kept), "scores": sorted(kept["score"]), "answers": {}}
    verify = client.get("/api/pairs", params={"task_type": "VERIFY", "limit": 1}).json()["rows"][0]
    answers = judgments[(judgments["item_id"] == verify["item_id"]) & (judgments["status"] == "kept")]["answer"].value_counts()
    assert client.get(f"/api/pairs/{verify['key']}").json()["spread"]["answers"] == dict(sorted(answers.items()))


def test_a_request_naming_another_host_is_refused(client: Any) -> None:
    """A page elsewhere that points a name of its own at this machine (DNS rebinding) reads nothing."""
    response = client.get("/api/release", headers={"Host": "rebound.example:8001"})
    assert response.status_code == 400 and "host rebound.example is not this page's" in response.json()["detail"]
    assert all(response.headers[name] == value for name, value in HEADERS.items())
    assert client.get("/api/release").status_code == 200


def test_the_release_s_own_file_names_cannot_lead_out_of_the_images_folder(release: Path, tmp_path: Path) -> None:
    """A Karpathy file name climbing out of the folder, and a link in the folder pointing out of it: neither is served."""
    from fastapi.testclient import TestClient

    hostile = tmp_path / "hostile"
    shutil.copytree(release, hostile)
    karpathy = hostile / "data" / "dataset_coco_cxc.json"
    document = json.loads(karpathy.read_text(encoding="utf-8"))
    climbing, linked = document["images"][0], document["images"][1]
    climbing["filename"], climbing["filepath"] = "../outside.jpg", ""
    karpathy.write_text(json.dumps(document), encoding="utf-8")
    images = tmp_path / "images"
    images.mkdir()
    shutil.copy(IMAGES / linked["filename"], tmp_path / "outside.jpg")
    (images / linked["filename"]).symlink_to(tmp_path / "outside.jpg")
    with TestClient(create_browser(ReleaseView(hostile), str(images), hosts={"testserver"})) as client:
        for image in (climbing, linked):
            response = client.get("/api/image", params={"id": f"coco:img:{image['cocoid']}", "size": "full"})
            assert response.status_code == 404 and "is not in the images folder" in response.json()["detail"]


def test_images_come_from_the_folder_as_thumbnails_and_nothing_else_does(client: Any, release: Path) -> None:
    response = client.get("/api/image", params={"id": "coco:img:102805"})
    assert response.status_code == 200 and response.headers["content-type"] == "image/jpeg"
    thumb = Image.open(__import__("io").BytesIO(response.content))
    assert max(thumb.size) == THUMBNAIL
    full = client.get("/api/image", params={"id": "coco:img:102805", "size": "full"})
    assert full.content == (IMAGES / "COCO_val2014_000000102805.jpg").read_bytes()
    refused = {
        "/api/image?id=../../etc/passwd": 422,
        "/api/image?id=coco:img:999999999": 404,  # an image the release does not pair
        "/api/image?id=coco:cap:400645": 404,
        "/plots/..%2FREADME.md": 404,
        "/plots/README.md": 404,
        "/api/pairs?task_type=NOPE": 422,
        "/api/pairs?sort=key;drop": 422,
        "/api/pairs?limit=100000": 422,
        "/api/pairs?score_min=abc": 422,
        "/api/pairs/99999999": 404,
        "/static/../browse.py": 404,
    }
    for url, status in refused.items():
        response = client.get(url)
        assert response.status_code == status, url
        assert "\n" not in response.json()["detail"], url
        assert all(response.headers[name] == value for name, value in HEADERS.items()), url
    assert client.get("/plots/score_distribution.png").content == (release / "plots" / "score_distribution.png").read_bytes()


@pytest.mark.skipif(not CHROMIUM.exists(), reason=f"{CHROMIUM} is absent: run tools/install-system-test-deps")
def test_the_page_filters_pages_and_opens_a_pair_in_chromium(
    browser: Any,  # noqa: F811
    view: ReleaseView,
    pairs: pd.DataFrame,
    release: Path,
    shots: Path,  # noqa: F811
) -> None:
    from playwright.sync_api import expect

    alerts: list[str] = []
    with served(create_browser(view, str(IMAGES))) as (url, _):
        context = browser.new_context(viewport={"width": 1400, "height": 1000})
        page = context.new_page()
        page.on("dialog", lambda dialog: (alerts.append(dialog.message), dialog.dismiss()))
        page.goto(f"{url}/")
        page.wait_for_selector("#pairs tbody tr")
        page.click("#plots summary")  # the card's plots, open on the first page, folded to show the pairs
        assert page.text_content("#count") == f"{len(pairs):,} pairs match"
        assert page.locator("#plot-list img").count() == len(list((release / "plots").glob("*.png")))
        assert page.locator("#pairs tbody tr").count() == 50
        page.click("#next")
        expect(page.locator("#where")).to_have_text(f"51–100 of {len(pairs):,}")
        assert page.url.endswith("&offset=50")  # the page is part of the link
        assert page.locator("#pairs tbody tr").first.get_attribute("data-key") == "50"

        page.select_option("#f-task_type", "SIS")
        page.select_option("#f-positive", "yes")
        page.fill("#f-score_min", "3")
        page.select_option("#f-sort", "score")
        page.select_option("#f-order", "desc")
        page.click("#filters button[type=submit]")
        want = expected(pairs, task_type="SIS", positive="yes", score_min=3.0).sort_values("agg_score", ascending=False, kind="stable")
        expect(page.locator("#count")).to_have_text(f"{len(want):,} pairs match")
        rows = page.locator("#pairs tbody tr")
        assert rows.count() == min(50, len(want)) and {rows.nth(i).locator("td").nth(1).text_content() for i in range(rows.count())} == {
            "SIS"
        }
        assert float(rows.first.locator("td.score").text_content()) == pytest.approx(want["agg_score"].iloc[0], abs=0.005)
        page.wait_for_function(FIRST_ROWS_IMAGES_LOADED)  # the rest load lazily, as they scroll into view
        assert "task_type=SIS" in page.url and "offset" not in page.url  # a new filter starts at its first page

        rows.first.locator("button.open").click()
        page.wait_for_selector("#pair:not([hidden]) #judgments")
        page.wait_for_function("() => [...document.querySelectorAll('#pair img')].every((img) => img.complete && img.naturalWidth > 0)")
        page.evaluate("() => window.scrollTo(0, 0)")
        page.screenshot(path=str(shots / "browse.png"))
        key = int(rows.first.get_attribute("data-key"))
        assert page.url.endswith(f"&pair={key}")
        opened = view.pair(key)
        assert opened is not None
        assert page.locator("#judgments tr").count() == len(opened["judgments"]) + 1  # and the header
        assert page.locator("#spread span").count() == 6
        assert sum(int(s.get_attribute("data-count")) for s in page.locator("#spread span").all()) == opened["spread"]["kept"]

        marked = pairs.index[(pairs["task_type"] == "STS") & (pairs["id_a"] == marked_caption(release))][0]
        page.goto(f"{url}/?pair={marked}")  # a pair is a link too
        page.wait_for_selector("#pair:not([hidden]) #judgments")
        assert page.locator("#pair p.caption").first.text_content() == MARKUP
        assert page.locator("#pair img[src=x], #pair script, #pair b").count() == 0 and alerts == []
        context.close()
    shot = Image.open(shots / "browse.png")
    assert shot.format == "PNG" and shot.size == (1400, 1000) and len(set(shot.convert("L").getdata())) > 50


def test_a_folder_that_is_no_release_or_no_images_folder_is_one_line_and_exit_2(
    release: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from crisscross.pipelines.cli import main as cli

    assert cli(["browse", str(tmp_path)]) == 2
    error = capsys.readouterr().err
    assert error.count("\n") == 1 and f"{tmp_path} is not a crisscross release folder" in error
    assert cli(["browse", str(release), "--images", str(tmp_path / "nowhere")]) == 2
    error = capsys.readouterr().err
    assert error.count("\n") == 1 and "--images" in error and "no such folder" in error
    with socket.create_server(("127.0.0.1", 0)) as taken:
        assert cli(["browse", str(release), "--port", str(taken.getsockname()[1])]) == 2
    error = capsys.readouterr().err
    assert error.count("\n") == 1 and "cannot listen on 127.0.0.1:" in error and "choose another --port" in error
    with pytest.raises(SystemExit) as usage:
        cli(["browse", str(release), "--port", "70000"])
    assert usage.value.code == 2 and "argument --port: invalid port_number value: '70000'" in capsys.readouterr().err
