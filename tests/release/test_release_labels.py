"""How a release's labels were obtained, on releases of the demo's build (``demo_repro``): the
replication each task type had, fixed or adaptive with items stopped early, and the labels a real
``crisscross triage`` gave the machine, kept apart from people's."""

from __future__ import annotations

import csv
import json
import shutil
from pathlib import Path

import pandas as pd
import pyarrow.parquet as pq
import pytest

import crisscross
from crisscross.core.errors import InputError
from crisscross.formats.manifest import verify
from crisscross.pipelines import release as command
from crisscross.pipelines.cli import main as cli
from crisscross.release.croissant import validate
from crisscross.release.query import MACHINE, MAX_PAGE, Filters, ReleaseView

PROJECT = Path(__file__).resolve().parents[2]
SALT = "labels-release-salt-0123456789"
ROUNDS = ("", "sits/", "verify/")  # the demo's rounds: build/<round>rated, build/<round>judgments


@pytest.fixture(autouse=True)
def salt(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CRISSCROSS_RELEASE_SALT", SALT)


@pytest.fixture(scope="module")
def build(demo_repro: Path) -> Path:
    return demo_repro / "main" / "build"


def release(build: Path, out: Path, first: tuple[Path, Path] | None = None, *extra: str) -> dict:
    """``crisscross release`` of the demo's three rounds (round one's folders replaced by ``first``)."""
    rated = [build / f"{r}rated" for r in ROUNDS]
    judgments = [build / f"{r}judgments" for r in ROUNDS]
    if first is not None:
        rated[0], judgments[0] = first
    return command.main(
        [
            "--rated",
            ",".join(map(str, rated)),
            "--judgments",
            ",".join(map(str, judgments)),
            "--items",
            str(build / "items"),
            "--out",
            str(out),
            "--date",
            "2026-11-23",
            "--simulated",
            "--params",
            str(PROJECT / "params.yaml"),
            *extra,
        ]
    )


def expected_line(rated: Path, judgments: Path, kind: str, design: str) -> str:
    """A type's replication line from the round's own outputs: its rated items and every judgment on them."""
    items = pq.read_table(rated / "rated.parquet").to_pandas().query("task_type == @kind")
    all_judgments = pq.read_table(judgments / "judgments.parquet").to_pandas().query("task_type == @kind")
    per_item = all_judgments["item_id"].value_counts().reindex(items["item_id"], fill_value=0)
    return (
        f"{kind}: {len(items):,} items, {per_item.sum():,} judgments ({items['n'].sum():,} kept after quality control), "
        f"{per_item.mean():.2f} per item (min {per_item.min()}, max {per_item.max()}); {design}"
    )


def record_sets(out: Path) -> dict[str, dict]:
    return {r["@id"]: r for r in json.loads((out / "croissant.json").read_text())["recordSet"]}


# --------------------------------------------------------------------------- replication per task type


def test_the_card_croissant_and_release_json_state_the_replication_each_type_had(build: Path, tmp_path: Path) -> None:
    out = tmp_path / "demo-simulated"
    report = release(build, out)
    card = (out / "README.md").read_text()
    section = card.split("## How the labels were obtained\n", 1)[1].split("\n## ", 1)[0]
    sets, croissant = record_sets(out), json.loads((out / "croissant.json").read_text())
    for r, kinds in zip(ROUNDS, (("SIS", "STS"), ("SITS",), ("VERIFY",)), strict=True):
        for kind in kinds:
            line = expected_line(build / f"{r}rated", build / f"{r}judgments", kind, "fixed design, no item stopped early")
            assert f"- {line}\n" in section, (line, section)
            assert sets[f"{kind.lower()}_test"]["description"] == line
            if f"{kind.lower()}_test_csv" in sets:  # CxC's own CSV shape, a record set of its own, told the same
                assert sets[f"{kind.lower()}_test_csv"]["description"] == line
            assert line in croissant["rai:annotationsPerItem"] and line in croissant["description"]
    sts = report["replication"]["STS"]
    rated = pq.read_table(build / "rated" / "rated.parquet").to_pandas().query("task_type == 'STS'")
    assert (
        sts["items"] == len(rated)
        and sts["kept"] == rated["n"].sum()
        and (sts["rule"], sts["stopped_early"], sts["open"]) == ("fixed", 0, 0)
    )
    assert json.loads((out / "release.json").read_text())["replication"] == report["replication"]
    assert "No label in this release was assigned by a machine." in section and "rai:machineAnnotationTools" not in croissant
    assert verify(out)["files"] > 20 and set(validate(out / "croissant.json", record_limit=1)) >= {"sts_test", "verify_test"}
    assert {"sts_test_csv", "sis_test_csv", "sits_test_csv"} <= set(sets)


def test_an_adaptive_round_states_its_rule_and_the_items_it_stopped_early(build: Path, tmp_path: Path) -> None:
    """Round one as the annotate stage leaves it under adaptive replication: ``replication.parquet``
    (STS items only: 40 stopped early, 5 still open; a stopped item the release does not hold) and
    the rule in ``report.json``."""
    judgments = tmp_path / "judgments"
    shutil.copytree(build / "judgments", judgments)
    sts = sorted(pq.read_table(build / "rated" / "rated.parquet").to_pandas().query("task_type == 'STS'")["item_id"])
    decisions = pd.DataFrame(
        {
            "item_id": [*sts, "sts:coco:cap:1|coco:cap:2"],
            "task_type": "STS",
            "used": 5,
            "stopped": [i < 40 for i in range(len(sts))] + [True],
            "open": [40 <= i < 45 for i in range(len(sts))] + [False],
            "mean": 2.0,
            "reason": "written by the test",
        }
    )
    decisions.to_parquet(judgments / "replication.parquet")
    with pytest.raises(InputError, match=r"names no replication\.rule"):
        release(build, tmp_path / "refused-simulated", (build / "rated", judgments))
    report = json.loads((judgments / "report.json").read_text())
    (judgments / "report.json").write_text(json.dumps({**report, "replication": {"rule": "threshold"}}))

    out = tmp_path / "demo-simulated"
    info = release(build, out, (build / "rated", judgments))
    card = (out / "README.md").read_text()
    adaptive = expected_line(
        build / "rated", judgments, "STS", f"adaptive replication (threshold): 40 of {len(sts):,} items stopped early, 5 still open"
    )
    assert f"- {adaptive}\n" in card
    assert f"- {expected_line(build / 'rated', judgments, 'SIS', 'fixed design, no item stopped early')}\n" in card
    assert {k: info["replication"]["STS"][k] for k in ("rule", "stopped_early", "open")} == {
        "rule": "threshold",
        "stopped_early": 40,
        "open": 5,
    }
    assert info["replication"]["SIS"]["rule"] == "fixed" and record_sets(out)["sts_test"]["description"] == adaptive
    verify(out)


# --------------------------------------------------------------------------- machine labels


@pytest.fixture(scope="module")
def triaged(build: Path, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, tuple[Path, Path]]:
    """A real ``crisscross triage`` output with machine labels, and round one as people would have
    rated it after: the audit and the band, not the items the machine labelled.  As in
    ``tests/pipelines/test_triage_stage.py``, the triage runs before the audit is rated (to draw
    it) and again with the audit rated (the demo's simulated round stands in for people)."""
    root = tmp_path_factory.mktemp("triaged")
    params = root / "params.yaml"
    params.write_text("triage: {audit_share: 0.5, max_error: 0.05}\n")
    flags = [
        "--in",
        str(build / "tasks"),
        "--embeddings",
        str(build / "embeddings"),
        "--items",
        str(build / "items"),
        "--params",
        str(params),
    ]
    assert cli(["triage", *flags, "--out", str(root / "first")]) == 0
    audit = set(pq.read_table(root / "first" / "decisions.parquet").to_pandas().query("audit")["item_id"])
    rated = pq.read_table(build / "rated" / "rated.parquet").to_pandas()
    (root / "audit").mkdir()
    rated[rated["item_id"].isin(audit)].to_parquet(root / "audit" / "rated.parquet")
    assert cli(["triage", *flags, "--rated", str(root / "audit"), "--out", str(root / "triage")]) == 0
    machine = set(pq.read_table(root / "triage" / "machine_labels.parquet").column("item_id").to_pylist())
    assert machine, "the triage labelled nothing: the test needs machine labels"
    people = (root / "people" / "rated", root / "people" / "judgments")
    for source, target in zip((build / "rated", build / "judgments"), people, strict=True):
        shutil.copytree(source, target)
        for name in ("rated.parquet", "judgments_kept.parquet", "judgments.parquet"):
            if (target / name).is_file():
                frame = pq.read_table(target / name).to_pandas()
                frame[~frame["item_id"].isin(machine)].to_parquet(target / name, index=False)
    return root / "triage", people


def test_machine_labels_are_a_part_apart_counted_on_the_card(build: Path, triaged: tuple[Path, tuple[Path, Path]], tmp_path: Path) -> None:
    triage, people = triaged
    out = tmp_path / "demo-simulated"
    report = release(build, out, people, "--machine-labels", str(triage))
    machine = pq.read_table(triage / "machine_labels.parquet").to_pandas()
    counts = machine.groupby(["task_type", "positive"]).size()
    assert report["parts"]["machine_labels"] == {
        "labels": len(machine),
        "by_type": {
            k: {("positive" if p else "negative"): int(n) for (t, p), n in counts.items() if t == k}
            for k in sorted(set(machine["task_type"]))
        },
    }

    card = (out / "README.md").read_text()
    section = card.split("## Machine labels\n", 1)[1].split("\n## ", 1)[0]
    assert "assigned by a calibrated machine with a certified error bound, never by people" in section
    assert machine["simulated_audit"].all() and "SIMULATED: the audit the machine learnt from was rated by a simulated panel" in section
    for (kind, positive, cut, audited), n in machine.groupby(["task_type", "positive", "cut", "audited"]).size().items():
        label = "positive" if positive else "negative"
        assert f"| {kind} | {label} | {n:,} | {'≥' if positive else '≤'} {cut:.3f} | {audited:,} |" in section
    by_type = ", ".join(f"{k} {n:,}" for k, n in machine.groupby("task_type").size().items())
    assert f"{len(machine):,} labels ({by_type}) were assigned by a calibrated machine, not by people" in card

    released = crisscross.load_release(out).frames["machine_labels/labels"]
    assert sorted(released["item_id"]) == sorted(machine["item_id"]) and set(released["source"]) == {"machine"}
    with (out / "data" / "machine_labels" / "labels.csv").open(newline="") as handle:
        rows = list(csv.DictReader(handle))
    assert len(rows) == len(machine) and {r["item_id"] for r in rows} == set(machine["item_id"])
    assert not any(cell.startswith(("=", "+", "@")) for row in rows for cell in row.values())

    # people's tables hold none of the machine's items, and their CSVs no more rows than people rated
    labelled = set(machine["item_id"])
    pairs = pq.read_table(out / "data" / "pairs.parquet").to_pandas()
    judgments = pq.read_table(out / "data" / "judgments.parquet").to_pandas()
    assert not labelled & set(pairs["item_id"]) and not labelled & set(judgments["item_id"])
    for kind in ("STS", "SIS"):
        people_rated = (pq.read_table(people[0] / "rated.parquet").to_pandas()["task_type"] == kind).sum()
        assert (pairs["task_type"] == kind).sum() == people_rated == report["counts"][f"data/{kind.lower()}_test.csv"]

    croissant = json.loads((out / "croissant.json").read_text())
    assert record_sets(out)["machine_labels_labels"]["description"].startswith("one label a calibrated machine assigned (never people)")
    assert croissant["rai:machineAnnotationTools"] and "calibrated machine" in croissant["rai:dataAnnotationPlatform"]
    assert validate(out / "croissant.json")["machine_labels_labels"] == len(machine)
    assert verify(out)["rows"] >= len(machine) and report["counts"]["data/machine_labels/labels.csv"] == len(machine)


def test_the_browser_view_shows_machine_labels_beside_the_panels_pairs(
    build: Path, triaged: tuple[Path, tuple[Path, Path]], tmp_path: Path
) -> None:
    """``crisscross browse``'s view of a release with machine labels: each is a pair labelled by
    the machine, with no 0–5 score and no judgments, and opens with its certified cut and signals."""
    triage, people = triaged
    out = tmp_path / "demo-simulated"
    release(build, out, people, "--machine-labels", str(triage))
    machine = pq.read_table(triage / "machine_labels.parquet").to_pandas().set_index("item_id")
    pairs = pq.read_table(out / "data" / "pairs.parquet").to_pandas()
    view = ReleaseView(out)
    assert dict(map(tuple, view.choices()["labelled_by"])) == {MACHINE: len(machine), "simulated": len(pairs)}
    total, rows = view.page(Filters(labelled_by=MACHINE, positive=False, limit=MAX_PAGE))
    assert total == int((~machine["positive"]).sum()) > 0  # the demo's triage certifies negatives only
    assert all(r["score"] is None and not r["positive"] for r in rows)
    opened = view.pair(rows[0]["key"])
    assert opened is not None and opened["judgments"] == [] and opened["spread"]["kept"] == 0
    label = machine.loc[opened["item_id"]]
    assert {k: opened["machine"][k] for k in ("cut", "bound", "audited", "reason")} == {
        "cut": label["cut"],
        "bound": label["bound"],
        "audited": label["audited"],
        "reason": label["reason"],
    }
    assert opened["machine"]["signals"] == label["signals"].split(",") and opened["machine"]["signals"]
    sides = [s["id"] for s in opened["sides"]]
    assert sides == [label["id_a"], label["id_b"]]
    # no score: last whichever way scores sort, and outside every score range
    for descending in (False, True):
        _, tail = view.page(Filters(sort="score", descending=descending, offset=len(pairs) - 2, limit=4))
        assert [r["labelled_by"] for r in tail] == ["simulated", "simulated", MACHINE, MACHINE]
    assert view.page(Filters(score_min=0.0, limit=1))[0] == int(pairs["agg_score"].notna().sum())  # VERIFY answers, it has no scores


def test_adding_machine_labels_is_a_minor_release(build: Path, triaged: tuple[Path, tuple[Path, Path]], tmp_path: Path) -> None:
    triage, people = triaged
    first = tmp_path / "v1" / "demo-simulated"
    release(build, first, people)
    second = tmp_path / "v2" / "demo-simulated"
    report = release(build, second, people, "--machine-labels", str(triage), "--previous", str(first))
    rows = pq.read_table(triage / "machine_labels.parquet").num_rows
    assert report["version"] == "1.1.0-simulated" and report["level"] == "minor" and f"{rows} data rows added" in report["reason"]
    assert f"| machine_labels/labels | 0 | {rows} | {rows} | 0 |" in (second / "CHANGELOG.md").read_text()


def test_machine_labels_of_items_people_rated_are_refused(build: Path, triaged: tuple[Path, tuple[Path, Path]], tmp_path: Path) -> None:
    """The demo's round one rated every item, the machine's too: the triage is older than the rounds."""
    triage, _ = triaged
    machine = pq.read_table(triage / "machine_labels.parquet").num_rows
    with pytest.raises(InputError, match=rf"^{machine} item\(s\) the machine labelled are rated in the rounds too, e\.g\. s[it]s:coco:"):
        release(build, tmp_path / "demo-simulated", None, "--machine-labels", str(triage))
    assert not (tmp_path / "demo-simulated").exists()


def test_a_round_released_without_its_annotate_output_says_its_replication_is_not_known(build: Path, tmp_path: Path) -> None:
    out = tmp_path / "demo-simulated"
    argv = ["--rated", ",".join(str(build / f"{r}rated") for r in ROUNDS), "--items", str(build / "items"), "--out", str(out)]
    report = command.main([*argv, "--date", "2026-11-23", "--simulated", "--params", str(PROJECT / "params.yaml")])
    card = (out / "README.md").read_text()
    kept = pq.read_table(build / "rated" / "rated.parquet").to_pandas().query("task_type == 'STS'")["n"].sum()
    assert f"STS: 700 items, {kept:,} judgments ({kept:,} kept after quality control)" in card  # only the kept ones are known
    assert "replication not known: the release was built without the round's annotate output" in card
    assert report["replication"]["STS"]["rule"] == "unknown"
