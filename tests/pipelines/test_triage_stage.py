"""``crisscross triage`` on the demo build: who decides each item, what people still get, and its audit trail."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pyarrow.parquet as pq
import pytest

from crisscross.campaign.triage import DECIDED_BY_MACHINE, DECIDED_BY_PEOPLE, UNDECIDED
from crisscross.pipelines.cli import main as cli


def run(build: Path, out: Path, params: Path, *rated: Path) -> dict:
    argv = ["triage", "--in", str(build / "tasks"), "--embeddings", str(build / "embeddings"), "--items", str(build / "items")]
    if rated:
        argv += ["--rated", ",".join(str(r) for r in rated)]
    assert cli([*argv, "--out", str(out), "--params", str(params)]) == 0
    return json.loads((out / "report.json").read_text())


@pytest.mark.xdist_group("e2e")
def test_before_the_audit_is_rated_people_get_the_audit_and_after_it_the_band(demo_repro: Path, tmp_path: Path) -> None:
    build = demo_repro / "main" / "build"
    params = tmp_path / "params.yaml"
    params.write_text("triage: {audit_share: 0.5, max_error: 0.05}\n")
    tasks = pq.read_table(build / "tasks" / "tasks.parquet").to_pandas()
    run(build, tmp_path / "first", params)
    first = pq.read_table(tmp_path / "first" / "decisions.parquet").to_pandas()
    assert (first["decided_by"] == UNDECIDED).all() and len(first) == (tasks["gold"] == "").sum()
    still = pq.read_table(tmp_path / "first" / "tasks.parquet").to_pandas()
    audit = set(first.loc[first["audit"], "item_id"])
    assert set(still.loc[still["gold"] == "", "item_id"]) == audit  # people rate the audit first: the fit needs it
    assert audit and pq.read_table(tmp_path / "first" / "machine_labels.parquet").num_rows == 0

    # People rated the audit (the demo's simulated round stands in for them): the machine takes the clear ends.
    rated = pq.read_table(build / "rated" / "rated.parquet").to_pandas()
    audit_rated = tmp_path / "audit-rated"
    audit_rated.mkdir()
    rated[rated["item_id"].isin(audit)].to_parquet(audit_rated / "rated.parquet")
    report = run(build, tmp_path / "second", params, audit_rated)
    d = pq.read_table(tmp_path / "second" / "decisions.parquet").to_pandas()
    machine = d[d["decided_by"] == DECIDED_BY_MACHINE]
    assert len(machine) > 0 and set(d.loc[d["audit"], "decided_by"]) <= {DECIDED_BY_PEOPLE, UNDECIDED}
    labels = pq.read_table(tmp_path / "second" / "machine_labels.parquet").to_pandas()
    assert set(labels["item_id"]) == set(machine["item_id"]) and labels["reason"].str.contains("audited pairs there rated otherwise").all()
    assert (labels["bound"] <= 0.05).all() and set(labels["signals"].str.split(",").explode()) >= {"use-m3:captions", "bow-glove50:images"}
    people_say = rated.set_index("item_id")["positive"]
    agree = (labels.set_index("item_id")["positive"] == people_say.reindex(labels["item_id"]).to_numpy()).mean()
    assert agree >= 0.9  # the simulated raters, not people: a sanity check of the direction, not the certificate
    open_items = set(d.loc[d["decided_by"] == UNDECIDED, "item_id"])
    left = pq.read_table(tmp_path / "second" / "tasks.parquet").to_pandas()
    assert set(left.loc[left["gold"] == "", "item_id"]) == open_items
    assert set(left.loc[left["gold"] != "", "batch_id"]) <= set(left.loc[left["gold"] == "", "batch_id"])  # gold rides with open batches
    assert sum(f[DECIDED_BY_MACHINE] for f in report["task_types"].values()) == len(machine)

    # Everything rated: people's labels stand, and the report checks the machine against them.
    report = run(build, tmp_path / "third", params, build / "rated")
    d = pq.read_table(tmp_path / "third" / "decisions.parquet").to_pandas()
    assert (d["decided_by"] == DECIDED_BY_PEOPLE).all() and pq.read_table(tmp_path / "third" / "machine_labels.parquet").num_rows == 0
    checked = d["checked"].dropna()
    assert len(checked) > 0 and sum(f["checked"] for f in report["task_types"].values()) == len(checked)


@pytest.mark.xdist_group("e2e")
def test_a_rated_item_the_tasks_do_not_hold_is_quarantined(demo_repro: Path, tmp_path: Path) -> None:
    build = demo_repro / "main" / "build"
    params = tmp_path / "params.yaml"
    params.write_text("triage: {}\n")
    stray = tmp_path / "stray"
    stray.mkdir()
    pd.DataFrame({"item_id": ["sts:coco:cap:1|coco:cap:2"], "positive": [True]}).to_parquet(stray / "rated.parquet")
    report = run(build, tmp_path / "out", params, stray)
    assert report["rejected"] == {"rated": {"not-in-tasks": 1}}
