"""Adaptive replication in the stage commands: ``annotate`` stops asking once an item is decided
(the simulated panel's dry run, people's files with their open items) and ``topup`` writes the
batches that close the open items, round after round, from the demo build."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pyarrow.parquet as pq
import pytest
import yaml

from crisscross.campaign.replication import DECISIONS_FILE
from crisscross.pipelines.cli import main as cli

REPLICATION = {"rule": "threshold", "alpha": 0.1, "rater_sd": {"STS": 0.8, "SIS": 0.8}}


def adaptive_params(project: Path, out: Path, source: str, **sections: dict) -> Path:
    """The demo's params with a stop rule, the given judgment source and more sections."""
    params = yaml.safe_load((project / "params.yaml").read_text())
    params["annotate"] |= {"source": source, "format": "csv", "replication": REPLICATION}
    out.write_text(yaml.safe_dump({**params, **sections}))
    return out


def annotate(build: Path, out: Path, params: Path, *judgments: Path, extra: tuple[str, ...] = ()) -> dict:
    argv = ["annotate", "--in", str(build / "tasks"), "--embeddings", str(build / "embeddings"), "--out", str(out), "--params", str(params)]
    for path in judgments:
        argv += ["--judgments", str(path)]
    assert cli([*argv, *extra]) == 0
    return json.loads((out / "report.json").read_text())


def topup(build: Path, judged: Path, out: Path, params: Path, *extra: str) -> dict:
    argv = ["topup", "--in", str(judged), "--tasks", str(build / "tasks"), "--items", str(build / "items"), "--out", str(out)]
    assert cli([*argv, "--params", str(params), *extra]) == 0
    return json.loads((out / "report.json").read_text())


def read(path: Path) -> pd.DataFrame:
    return pq.read_table(path).to_pandas()


@pytest.mark.xdist_group("e2e")
def test_the_simulated_panel_is_asked_only_until_each_item_is_decided(demo_repro: Path, tmp_path: Path) -> None:
    build = demo_repro / "main" / "build"
    assert not (build / "judgments" / DECISIONS_FILE).exists()  # the demo's fixed design writes no decisions
    params = adaptive_params(demo_repro / "main", tmp_path / "params.yaml", "simulate")
    report = annotate(build, tmp_path / "a", params)
    annotate(build, tmp_path / "b", params)
    for name in ("judgments.parquet", DECISIONS_FILE):
        assert (tmp_path / "a" / name).read_bytes() == (tmp_path / "b" / name).read_bytes(), name
    full, kept = read(build / "judgments" / "judgments.parquet"), read(tmp_path / "a" / "judgments.parquet")
    decisions = read(tmp_path / "a" / DECISIONS_FILE)
    tasks = read(build / "tasks" / "tasks.parquet")
    gold = set(tasks.loc[tasks["gold"] != "", "item_id"])
    per_item = kept.groupby("item_id").size()
    assert (per_item.reindex(decisions["item_id"]).to_numpy() == decisions["used"].to_numpy()).all()
    assert per_item[list(gold)].equals(full.groupby("item_id").size()[list(gold)])  # gold: every rater of a batch, always
    stopped = decisions[decisions["stopped"]]
    assert len(stopped) > 0.3 * len(decisions) and (stopped["used"] >= 2).all() and not decisions["open"].any()
    assert stopped["reason"].str.match(r"threshold after \d: mean \d\.\d\d [<≥] (3|2\.5) by").all()
    # the first judgments in the table's order are the ones kept: the same scores as the full panel's first ``used``
    first = full[~full["item_id"].isin(gold)].groupby("item_id")["score"].apply(list)
    means = decisions.set_index("item_id").apply(lambda d: sum(first[d.name][: d["used"]]) / d["used"], axis=1)
    assert means.to_numpy() == pytest.approx(decisions.set_index("item_id")["mean"].to_numpy())
    replication = report["replication"]
    assert replication["rule"] == "threshold" and replication["replicas"] == 5
    assert sum(c["judgments_used"] for c in replication["by_task_type"].values()) == decisions["used"].sum()
    assert len(kept) == len(full) - (5 * len(decisions) - decisions["used"].sum())


@pytest.mark.xdist_group("e2e")
def test_people_files_leave_items_open_and_topup_rounds_close_them(demo_repro: Path, tmp_path: Path) -> None:
    build = demo_repro / "main" / "build"
    params = adaptive_params(demo_repro / "main", tmp_path / "params.yaml", "import", topup={"step": 1, "formats": ["jsonl"]})
    panel = read(build / "judgments" / "judgments.parquet")
    tasks = read(build / "tasks" / "tasks.parquet")
    position = tasks.set_index(["batch_id", "item_id"])["position"]
    panel["position"] = [position[(b, i)] for b, i in zip(panel["batch_id"], panel["item_id"], strict=True)]
    # Stand-ins for people's files: the panel's raters of each batch in turn, each file one more rater per batch.
    panel["turn"] = panel.groupby("batch_id")["worker"].rank(method="dense").astype(int)

    def people(turn: int, batches: set[str] | None = None) -> Path:
        rows = panel[panel["turn"] == turn]
        if batches is not None:
            rows = rows[rows["batch_id"].isin(batches)]
        path = tmp_path / f"people-{turn}.csv"
        rows.assign(time=f"2026-11-0{turn}T10:00:00Z")[["batch_id", "position", "worker", "score", "time"]].to_csv(path, index=False)
        return path

    files = [people(1), people(2)]
    report = annotate(build, tmp_path / "judged-2", params, *files)
    decisions = read(tmp_path / "judged-2" / DECISIONS_FILE)
    assert (decisions["used"] == 2).all() and decisions["open"].any() and decisions["stopped"].any()
    assert report["replication"]["by_task_type"]["STS"]["open"] == int(decisions.loc[decisions["task_type"] == "STS", "open"].sum())

    first = topup(build, tmp_path / "judged-2", tmp_path / "topup-1", params)
    status = read(tmp_path / "topup-1" / "status.parquet")
    open_items = set(decisions.loc[decisions["open"], "item_id"])
    assert set(status.loc[status["open"], "item_id"]) == open_items and (status.loc[status["open"], "needed"] == 3).all()
    asked = read(tmp_path / "topup-1" / "tasks.parquet")
    assert set(asked.loc[asked["gold"] == "", "item_id"]) == open_items
    assert set(asked["batch_id"]) == set(tasks.loc[tasks["item_id"].isin(open_items), "batch_id"])
    assert (asked.loc[asked["gold"] != "", "batch_id"].value_counts() == 2).all()  # each batch keeps its gold pair
    exported = [json.loads(line) for line in (tmp_path / "topup-1" / "export" / "jsonl" / "batches.jsonl").read_text().splitlines()]
    assert {b["replicas"] for b in exported} == {1} and sum(len(b["items"]) for b in exported) == len(asked)
    assert first["raters_per_batch"] == 1 and sum(c["open"] for c in first["task_types"].values()) == len(open_items)

    # Rater QC drops the careless raters' judgments: items the rule stopped on them reopen.
    argv = ["aggregate", "--in", str(tmp_path / "judged-2"), "--tasks", str(build / "tasks"), "--out", str(tmp_path / "rated-2")]
    assert cli([*argv, "--params", str(params)]) == 0
    checked = topup(build, tmp_path / "judged-2", tmp_path / "topup-qc", params, "--rated", str(tmp_path / "rated-2"))
    reopened = read(tmp_path / "topup-qc" / "status.parquet").set_index("item_id")
    kept = read(tmp_path / "rated-2" / "judgments_kept.parquet").groupby("item_id").size()
    assert set(reopened.index[reopened["open"]]) > open_items  # every open item stays open, and QC reopens more
    short = reopened.index[(kept.reindex(reopened.index).fillna(0) < 2).to_numpy()]
    assert reopened.loc[short, "open"].all() and sum(c["open"] for c in checked["task_types"].values()) == reopened["open"].sum()

    # The third rater of each top-up batch answers only what the top-up shows; every file goes back in together.
    third = panel[(panel["turn"] == 3) & panel["item_id"].isin(set(asked["item_id"]))]
    (tmp_path / "people-3.csv").write_text(
        third.assign(time="2026-11-03T10:00:00Z")[["batch_id", "position", "worker", "score", "time"]].to_csv(index=False)
    )
    annotate(build, tmp_path / "judged-3", params, *files, tmp_path / "people-3.csv")
    after = read(tmp_path / "judged-3" / DECISIONS_FILE).set_index("item_id")
    assert set(after.index[after["used"] == 3]) == open_items  # only the open items got a third judgment
    assert after["open"].sum() < len(open_items)
    second = topup(build, tmp_path / "judged-3", tmp_path / "topup-2", params)
    assert sum(c["open"] for c in second["task_types"].values()) == after["open"].sum()


def test_a_bad_replication_param_is_one_line(tmp_path: Path, capsys) -> None:
    params = tmp_path / "params.yaml"
    params.write_text("annotate: {replication: {rule: sprt}}\n")
    argv = ["annotate", "--in", str(tmp_path), "--out", str(tmp_path / "out"), "--params", str(params)]
    (tmp_path / "tasks.parquet").write_bytes(b"")
    assert cli(argv) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "annotate.replication.rule" in err and "sprt" in err


@pytest.mark.xdist_group("e2e")
def test_tasks_follow_a_campaign_plan_and_hold_back_the_rest(demo_repro: Path, tmp_path: Path, capsys) -> None:
    project = demo_repro / "main"
    build = project / "build"
    plan = json.loads((build / "plan" / "plan.json").read_text())
    plan["types"]["STS"]["design"] |= {"items": 300, "replicas": 6}
    (tmp_path / "plan").mkdir()
    (tmp_path / "plan" / "plan.json").write_text(json.dumps(plan))
    argv = ["tasks", "--in", str(build / "candidates"), "--items", str(build / "items"), "--embeddings", str(build / "embeddings")]
    argv += ["--params", str(project / "params.yaml"), "--plan", str(tmp_path / "plan")]
    for out in ("a", "b"):
        assert cli([*argv, "--out", str(tmp_path / out)]) == 0
    assert (tmp_path / "a" / "tasks.parquet").read_bytes() == (tmp_path / "b" / "tasks.parquet").read_bytes()
    assert "the candidates fall short of the plan (SIS 506 of 2,174)" in capsys.readouterr().out
    tasks, held = read(tmp_path / "a" / "tasks.parquet"), read(tmp_path / "a" / "held_back.parquet")
    items = tasks[tasks["gold"] == ""]
    assert items["task_type"].value_counts().to_dict() == {"SIS": 506, "STS": 300}
    assert len(held) == 400 and set(held["task_type"]) == {"STS"} and not set(held["item_id"]) & set(items["item_id"])
    every = read(build / "tasks" / "tasks.parquet")
    assert set(held["item_id"]) | set(items["item_id"]) == set(every.loc[every["gold"] == "", "item_id"])
    batches = [json.loads(line) for line in (tmp_path / "a" / "export" / "jsonl" / "batches.jsonl").read_text().splitlines()]
    assert {b["replicas"] for b in batches} == {6}
    report = json.loads((tmp_path / "a" / "report.json").read_text())
    assert report["held_back"] == {"STS": 400} and report["judgments_needed"] == len(tasks) * 6

    (tmp_path / "empty").mkdir()
    (tmp_path / "empty" / "plan.json").write_text(json.dumps({"types": {}}))
    assert cli([*argv[:-1], str(tmp_path / "empty"), "--out", str(tmp_path / "c")]) == 2
    assert "the plan names no task type" in capsys.readouterr().err
