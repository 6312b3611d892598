"""tasks → annotate → aggregate: the simulated demo round, people's files with bad rows, and the
real-data check (the six CxC release files replayed through import and aggregation)."""

from __future__ import annotations

import csv
import io as text_io
import json
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow.parquet as pq
import pytest

from crisscross.annotate.simulate import Panel, SimulateParams
from crisscross.core.quarantine import RejectionError
from crisscross.pipelines import aggregate, annotate, tasks
from tests.conftest import replay_cxc

SEED = 20260701
PROJECT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def demo_round(demo_chain: Path) -> Path:
    root = demo_chain
    params = root / "round-params.json"
    params.write_text(json.dumps({"base": {"seed": SEED}}))
    p = ["--params", str(params)]
    tasks.main(
        [
            "--in",
            str(root / "candidates"),
            "--items",
            str(root / "items"),
            "--embeddings",
            str(root / "embeddings"),
            "--out",
            str(root / "tasks"),
            *p,
        ]
    )
    annotate.main(["--in", str(root / "tasks"), "--embeddings", str(root / "embeddings"), "--out", str(root / "judgments"), *p])
    aggregate.main(["--in", str(root / "judgments"), "--tasks", str(root / "tasks"), "--out", str(root / "rated"), *p])
    return root


def test_tasks_cover_every_candidate_in_batches_with_gold(demo_round: Path) -> None:
    candidates = pq.read_table(demo_round / "candidates" / "candidates.parquet").to_pandas()
    table = pq.read_table(demo_round / "tasks" / "tasks.parquet").to_pandas()
    regular = table[table.gold == ""]
    assert len(regular) == len(candidates)  # one item per candidate pair
    want = {"STS": candidates.method.str.startswith("c2c").sum(), "SIS": (candidates.method == "i2i_csim").sum()}
    assert regular.task_type.value_counts().to_dict() == want
    per_batch = table.groupby("batch_id").gold.agg(lambda g: sorted(g))
    assert all(g.count("positive") == 1 and g.count("negative") == 1 for g in per_batch)
    assert table.groupby("batch_id").size().between(17, 18).all()  # sizes differ by at most one
    # what raters see carries no gold flag; the key sits outside the export folders
    exported = (demo_round / "tasks" / "export" / "jsonl" / "batches.jsonl").read_text()
    assert '"gold"' not in exported and "answer_key" not in {p.name for p in (demo_round / "tasks" / "export").rglob("*")}
    key = pd.read_csv(demo_round / "tasks" / "answer_key.csv")
    assert len(key) == 2 * len(per_batch)
    report = json.loads((demo_round / "tasks" / "report.json").read_text())
    assert report["judgments_needed"] == 5 * len(table)


def test_simulated_round_excludes_exactly_the_careless_raters(demo_round: Path) -> None:
    judgments = pq.read_table(demo_round / "judgments" / "judgments.parquet").to_pandas()
    assert judgments.simulated.all() and (judgments.source == "simulate").all()
    tasks_table = pq.read_table(demo_round / "tasks" / "tasks.parquet").to_pandas()
    assert len(judgments) == 5 * len(tasks_table)
    panel = Panel.draw(SimulateParams.from_mapping({"raters_per_batch": 5, "panel_size": 40, "careless_share": 0.1}), SEED)
    careless = {w for w, c in zip(panel.workers, panel.careless, strict=True) if c}
    raters = pd.read_csv(demo_round / "rated" / "raters.csv")
    assert set(raters[raters.excluded].worker) == careless and len(careless) == 4
    quarantine = pq.read_table(demo_round / "rated" / "quarantine.parquet").to_pandas()
    assert (quarantine.reason == "excluded-rater").all()
    assert len(quarantine) == judgments.worker.isin(careless).sum()  # every dropped judgment is kept
    rated = pq.read_table(demo_round / "rated" / "rated.parquet").to_pandas()
    regular = tasks_table[tasks_table.gold == ""]
    assert set(rated.item_id) == set(regular.item_id)  # gold items are not part of the dataset
    assert rated.simulated.all()
    kept = pq.read_table(demo_round / "rated" / "judgments_kept.parquet").to_pandas()
    means = kept.groupby("item_id").score.mean().round(6)
    assert np.allclose(rated.set_index("item_id").agg_score.loc[means.index], means)
    assert (rated.positive == (rated.agg_score >= rated.task_type.map({"STS": 3.0, "SIS": 2.5}))).all()
    report = json.loads((demo_round / "rated" / "report.json").read_text())
    assert report["simulated"] and 0.6 < report["task_types"]["STS"]["alpha"] < 1
    sts = list(csv.reader(text_io.StringIO((demo_round / "rated" / "sts.csv").read_text())))
    assert sts[0] == ["caption1", "caption2", "agg_score", "sampling_method"]
    assert sts[1][0].startswith("COCO_val2014:sentid:") and len(sts) == 1 + (rated.task_type == "STS").sum()
    for png in ("score_distribution.png", "item_std.png"):
        assert (demo_round / "rated" / png).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_people_files_with_bad_rows_are_quarantined_and_strict_fails(demo_round: Path, tmp_path: Path) -> None:
    """The crowd-platform round trip: the exported STS batch CSV, answered, read back."""
    table = pq.read_table(demo_round / "tasks" / "tasks.parquet").to_pandas()
    sts = table[table.task_type == "STS"].sort_values(["batch_id", "position"])
    batches = sorted(sts.batch_id.unique())[:3]
    rows = []
    for n, batch in enumerate(batches):
        items = sts[sts.batch_id == batch]
        for worker in ("W1", "W2"):
            answer = {"WorkerId": worker, "WorkTimeInSeconds": "180", "SubmitTime": "2026-11-20T10:00:00Z", "Input.batch_id": batch}
            for position in items.position:
                answer[f"Answer.item_{position}_score"] = "2.5"
            rows.append(answer)
        if n == 0:
            rows[-1][f"Answer.item_{items.position.iloc[0]}_score"] = "7"  # out of range
            rows[-2][f"Answer.item_{items.position.iloc[1]}_score"] = "lots"  # not a number
    rows.append(dict(rows[0]))  # W1 submits batch 0 twice: its "lots" is rejected again, the rest are duplicates
    files = tmp_path / "results"
    files.mkdir()
    header = sorted({k for r in rows for k in r})
    with (files / "batch_results.csv").open("w", newline="") as handle:
        writer = csv.DictWriter(handle, header)
        writer.writeheader()
        writer.writerows(rows)
    params = tmp_path / "params.json"
    params.write_text(json.dumps({"annotate": {"source": "import", "format": "crowd-csv"}}))
    argv = ["--in", str(demo_round / "tasks"), "--judgments", str(files), "--params", str(params)]
    report = annotate.main([*argv, "--out", str(tmp_path / "judgments")])
    assert report["rejected"] == {"bad-score": 2, "duplicate-judgment": len(sts[sts.batch_id == batches[0]]) - 1, "score-out-of-range": 1}
    judgments = pq.read_table(tmp_path / "judgments" / "judgments.parquet").to_pandas()
    assert len(judgments) == 2 * len(sts[sts.batch_id.isin(batches)]) - 2
    assert set(judgments.source) == {"people"} and not judgments.simulated.any()
    unjudged = pq.read_table(tmp_path / "judgments" / "unjudged.parquet").to_pandas()
    assert len(unjudged) == len(table) - len(sts[sts.batch_id.isin(batches)])
    with pytest.raises(RejectionError, match="--strict"):
        annotate.main([*argv, "--out", str(tmp_path / "judgments"), "--strict"])
    assert (tmp_path / "judgments" / "judgments.parquet").exists()  # the previous output stays


@pytest.mark.parametrize(
    ("split", "rows", "positive_rows", "sis_items", "both_orders"),
    [
        ("test", {"STS": 44_045, "SIS": 46_719, "SITS": 44_833}, {"STS": 16_184, "SIS": 21_816, "SITS": 35_585}, 43_856, 2_863),
        ("val", {"STS": 44_009, "SIS": 42_767, "SITS": 44_722}, None, 40_514, 2_253),
    ],
)
def test_cxc_release_replayed_through_import_and_aggregation(
    shared_data: Path, tmp_path: Path, request: pytest.FixtureRequest, split, rows, positive_rows, sis_items, both_orders
) -> None:
    """The test split's replay is the run's shared one (``cxc_test_replay``, which the release tests
    release), read back from its reports; the val split is replayed here."""
    if split == "test":
        root = request.getfixturevalue("cxc_test_replay")
        collected, rated = (json.loads((root / out / "report.json").read_text()) for out in ("judgments", "rated"))
    else:
        root = tmp_path
        collected, rated = replay_cxc(shared_data, root, split)
    assert {k: v["judgments"] for k, v in collected["by_task_type"].items()} == rows
    assert collected["unjudged"] == 0 and collected["rejected_total"] == 0
    facts = rated["task_types"]
    assert {k: v["judgments"] for k, v in facts.items()} == rows
    if positive_rows:
        assert {k: v["judgments_at_or_above_threshold"] for k, v in facts.items()} == positive_rows
        assert facts["SIS"]["positives"] == 19_990 and facts["SIS"]["pooled_items_straddling_threshold"] == 512
    assert facts["SIS"]["items"] == sis_items and facts["SIS"]["pooled_items"] == both_orders
    assert rated["excluded_raters"] == 0
    # the CxC-shaped output holds one row per pair, with the published ids and scores
    published = pd.read_csv(shared_data / "cxc" / f"sts_{split}.csv")
    ours = pd.read_csv(root / "rated" / "sts.csv")
    key = lambda f: set(
        zip(
            f[["caption1", "caption2"]].min(axis=1),
            f[["caption1", "caption2"]].max(axis=1),
            f.agg_score.round(4),
            f.sampling_method,
            strict=True,
        )
    )
    assert key(ours) == key(published)


def run_round(name: str, stage: str, source: Path, build: Path) -> dict:
    """One stage command of an annotation round, as dvc.yaml runs it: its outputs go to
    ``build/<round>/{tasks,judgments,rated}``."""
    root, extra = build / name, {"tasks": ["--items", str(build / "items"), "--embeddings", str(build / "embeddings")]}
    extra["annotate"] = ["--embeddings", str(build / "embeddings")]
    extra["aggregate"] = ["--tasks", str(root / "tasks")]
    out = {"tasks": "tasks", "annotate": "judgments", "aggregate": "rated"}[stage]
    command = {"tasks": tasks, "annotate": annotate, "aggregate": aggregate}[stage]
    args = ["--in", str(source), *extra[stage], "--out", str(root / out), "--round", name, "--params", str(PROJECT / "params.yaml")]
    return command.main(args)


def test_round_two_rates_the_derived_c2i_pairs_with_the_same_stage_commands(demo_round: Path) -> None:
    """CxC round two on the demo: derive → tasks/annotate/aggregate --round sits (the project's params)."""
    from crisscross.pipelines import derive

    root, p = demo_round / "sits", ["--params", str(PROJECT / "params.yaml")]
    facts = derive.main(["--in", str(demo_round / "rated"), "--items", str(demo_round / "items"), "--out", str(root / "derived"), *p])
    candidates = pq.read_table(root / "derived" / "candidates.parquet").to_pandas()
    intrasim, original = (candidates.method == "c2i_intrasim").sum(), (candidates.method == "c2i_original").sum()
    assert original == 485 and intrasim == facts["candidates"]["c2i_intrasim"] == facts["quota"] > 0
    run_round("sits", "tasks", root / "derived", demo_round)
    table = pq.read_table(root / "tasks" / "tasks.parquet").to_pandas()
    assert set(table.task_type) == {"SITS"} and (table.gold == "").sum() == len(candidates)
    assert set(table.gold) == {"", "negative"}  # every original pair is an item: no known positives left
    run_round("sits", "annotate", root / "tasks", demo_round)
    report = run_round("sits", "aggregate", root / "judgments", demo_round)
    assert report["task_types"]["SITS"]["items"] == len(candidates) and report["simulated"]
    rated = pq.read_table(root / "rated" / "rated.parquet").to_pandas()
    by_method = rated.groupby("sampling_method")["positive"].mean()
    assert by_method["c2i_original"] > by_method["c2i_intrasim"]  # original pairs are the surer positives
    sits_csv = (root / "rated" / "sits.csv").read_text().splitlines()
    assert sits_csv[0] == "caption,image,agg_score,sampling_method" and len(sits_csv) == 1 + len(candidates)


@pytest.fixture(scope="module")
def verify_round(demo_round: Path) -> Path:
    """ECCV Caption's round on the demo: filter → tasks/annotate/aggregate --round verify."""
    from crisscross.pipelines import filter as filter_stage

    root, p = demo_round / "verify", ["--params", str(PROJECT / "params.yaml")]
    filter_stage.main(["--in", str(demo_round / "embeddings"), "--items", str(demo_round / "items"), "--out", str(root / "filter"), *p])
    for stage, source in (("tasks", root / "filter"), ("annotate", root / "tasks"), ("aggregate", root / "judgments")):
        (root / f"{stage}.json").write_text(json.dumps(run_round("verify", stage, source, demo_round)))
    return root


def test_the_verify_round_keeps_the_filter_batches_and_their_gold(verify_round: Path) -> None:
    root = verify_round
    batches = pq.read_table(root / "filter" / "batches.parquet").to_pandas()
    table = pq.read_table(root / "tasks" / "tasks.parquet").to_pandas()
    assert len(table) == len(batches) and set(table.task_type) == {"VERIFY"}
    gold_per_batch = table[table.gold != ""].groupby("batch_id").gold.apply(lambda g: tuple(sorted(g)))
    assert len(gold_per_batch) == table.batch_id.nunique() and set(gold_per_batch) == {("negative", "positive")}
    formed = batches.set_index(["batch_id", "position"]).sort_index()
    assert (table.set_index(["batch_id", "position"]).sort_index().id_b == formed.caption_id).all()  # as formed, not reshuffled
    verify = json.loads((root / "aggregate.json").read_text())["task_types"]["VERIFY"]
    assert verify["items"] == (batches.gold == "").sum() and 0 < verify["positives"] < verify["items"]
    assert (root / "rated" / "verify.csv").read_text().startswith("image,caption,agg_label,n,sampling_method")


def test_positives_merge_the_verify_round_into_an_eccv_truth_with_its_audit(
    verify_round: Path, demo_round: Path, shared_data: Path
) -> None:
    """ECCV Caption §3.3 / App. E on the demo: verified ∪ original ∪ CxC (the real release) positives,
    read back by our loader and by the eccv-caption package; the audit's sole finds add up."""
    from eccv_caption import Metrics

    from crisscross.pipelines import positives
    from crisscross.scoring.truths import load_eccv

    root = verify_round
    argv = ["--in", str(root / "rated"), "--filter", str(root / "filter"), "--items", str(demo_round / "items")]
    argv += ["--embeddings", str(demo_round / "embeddings"), "--merge", f"cxc:{shared_data / 'cxc'}", "--out", str(root / "positives")]
    report = positives.main([*argv, "--params", str(PROJECT / "params.yaml")])
    rated = pq.read_table(root / "rated" / "rated.parquet").to_pandas()
    table = pq.read_table(root / "positives" / "positives.parquet").to_pandas()
    sources = table.sources.str.split(",")
    verified = set(zip(rated.id_a[rated.positive], rated.id_b[rated.positive], strict=True))
    assert {p for p, s in zip(zip(table.image_id, table.caption_id, strict=True), sources, strict=True) if "verified" in s} == verified
    assert sources.map(lambda s: "original" in s).sum() == 485  # every caption with its image
    assert report["counts"]["sources"]["cxc-test"] > 0  # CxC's SITS positives among the demo's images
    queries = pq.read_table(root / "filter" / "queries.parquet").to_pandas()
    truth, loaded = load_eccv(root / "positives")
    assert not loaded["rejected"] and truth.name == "eccv:positives"
    expected_i2t = {(i, c) for i, c in zip(table.image_id, table.caption_id, strict=True) if i in set(queries.query_id)}
    assert truth.i2t == expected_i2t and len(truth.t2i) == sum(c in set(queries.query_id) for c in table.caption_id)
    package = Metrics()
    package.set_eccv_gts(str(root / "positives" / "eccv_image_to_caption.json"), str(root / "positives" / "eccv_caption_to_image.json"))
    assert sum(map(len, package.eccv_gts["i2t"].values())) == len(truth.i2t)
    audit = json.loads((root / "positives" / "bias_audit.json").read_text())
    alone = sum(entry["positives_found_alone"] for entry in audit["annotators"].values())
    found_by = table[sources.map(lambda s: s == ["verified"])].annotators.str.split(",").map(len)
    assert alone == (found_by == 1).sum() > 0
    assert set(audit["models"]) == {"text-proxy:use-m3", "text-proxy:bow-glove50"}
    for name, scores in audit["scores"].items():  # App. E's bias: an annotator scores lower once its sole finds are gone
        for direction in ("i2t", "t2i"):
            assert scores[name][direction]["R-Precision"] < scores["full"][direction]["R-Precision"], (name, direction)
