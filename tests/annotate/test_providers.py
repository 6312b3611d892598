"""Providers: replay (incl. the CxC release as a source) and the simulated rater panel."""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pytest

from crisscross.annotate.providers import NO_JUDGMENT, UNJUDGED_SCHEMA, Replay, load_cxc_release, release_worker
from crisscross.annotate.simulate import NO_VECTOR, Reference, Simulate, SimulateParams, cosine_to_score, simulate_from_embeddings
from crisscross.annotate.sources import JUDGMENT_SOURCES, SourceSettings
from crisscross.core.errors import InputError, ParamError
from crisscross.core.registry import UnknownNameError
from crisscross.embed.sets import (
    CAPTIONS,
    COCAPTION_MEAN,
    EmbeddingSet,
    cocaption_mean,
    set_dir,
)
from crisscross.formats.schema import JUDGMENTS_SCHEMA, SOURCE_REPLAY, SOURCE_SIMULATED, TASKS_SCHEMA, item_id
from crisscross.tasktypes.base import SCORE_MAX, SCORE_MIN
from crisscross.tasktypes.names import SIS, SITS, STS, VERIFY, VERIFY_ANSWERS
from tests.special_files import make_special

SEED = 20260701


def tasks_frame(rows: Iterable[tuple[str, str, str, str]], method: str = "m") -> pd.DataFrame:
    """A tasks table from (task_type, id_a, id_b, batch_id) rows."""
    records = [
        {
            "item_id": item_id(t, a, b),
            "task_type": t,
            "id_a": a,
            "id_b": b,
            "sampling_method": method,
            "gold": "",
            "batch_id": batch,
            "position": i,
        }
        for i, (t, a, b, batch) in enumerate(rows)
    ]
    return pd.DataFrame(records, columns=TASKS_SCHEMA.names)


# --------------------------------------------------------------------------- a toy reference

N_IMAGES, PER_IMAGE, DIM = 24, 5, 16


@pytest.fixture(scope="module")
def reference() -> Reference:
    """Captions near their image's direction by a random amount, so pair cosines spread widely."""
    rng = np.random.default_rng(3)
    bases = rng.normal(size=(N_IMAGES, DIM))
    caption_ids, vectors, means, image_ids = [], [], [], []
    for g in range(N_IMAGES):
        weight = rng.uniform(0.0, 1.0, (PER_IMAGE, 1))
        own = weight * bases[g] + (1 - weight) * rng.normal(size=(PER_IMAGE, DIM))
        ids = [f"coco:cap:{g * PER_IMAGE + k + 1}" for k in range(PER_IMAGE)]
        caption_ids += ids
        vectors.append(own)
        image_ids.append(f"coco:img:{g + 1}")
        means.append(cocaption_mean(ids, own.astype(np.float32)))
    image_ids.append("coco:img:999")  # an image whose vector has no direction
    means.append(np.zeros(DIM, np.float32))
    captions = EmbeddingSet(caption_ids, np.vstack(vectors).astype(np.float32))
    images = EmbeddingSet(image_ids, np.vstack(means).astype(np.float32))
    return Reference(captions, images, name="toy")


ANCHORS = {STS: (-0.2, 0.9), SIS: (-0.2, 0.9), SITS: (-0.2, 0.9), VERIFY: (-0.2, 0.9)}


def toy_tasks(batches: int, seed: int = 0) -> pd.DataFrame:
    """``batches`` batches of 12 mixed items over the toy reference (no repeats within a batch)."""
    rng = np.random.default_rng(seed)
    n_captions = N_IMAGES * PER_IMAGE
    rows = []
    for b in range(batches):
        batch = f"batch-{b:03d}"
        seen: set[str] = set()
        while len(seen) < 12:
            kind = (STS, SIS, SITS, VERIFY)[len(seen) % 4]
            cap_a, cap_b = (f"coco:cap:{c}" for c in rng.choice(n_captions, 2, replace=False) + 1)
            img_a, img_b = (f"coco:img:{i}" for i in rng.choice(N_IMAGES, 2, replace=False) + 1)
            if kind == SITS and rng.random() < 0.5:  # half of the caption-image pairs match
                img_b = f"coco:img:{(int(cap_a.split(':')[2]) - 1) // PER_IMAGE + 1}"
            pairs = {STS: (cap_a, cap_b), SIS: (img_a, img_b), SITS: (cap_a, img_b), VERIFY: (img_b, cap_a)}
            a, b_ = pairs[kind]
            if item_id(kind, a, b_) not in seen:
                seen.add(item_id(kind, a, b_))
                rows.append((kind, a, b_, batch))
    return tasks_frame(rows)


def simulate(reference: Reference, tasks: pd.DataFrame, seed: int = SEED, **params: object):
    return Simulate(reference, seed, {"anchors": ANCHORS, **params})(tasks)


# --------------------------------------------------------------------------- simulate


def test_simulate_is_deterministic_and_independent_of_row_order(reference: Reference) -> None:
    tasks = toy_tasks(6)
    first = simulate(reference, tasks)
    assert first.judgments.equals(simulate(reference, tasks).judgments)
    shuffled = tasks.sample(frac=1.0, random_state=1)
    assert first.judgments.equals(simulate(reference, shuffled).judgments)
    assert first.judgments.equals(simulate(reference, pa.Table.from_pandas(tasks, schema=TASKS_SCHEMA)).judgments)
    # Batches are keyed by id: adding another batch leaves the existing ones untouched.
    more = pd.concat([tasks, toy_tasks(7, seed=5).query("batch_id == 'batch-006'")], ignore_index=True)
    extended = simulate(reference, more).judgments.to_pandas()
    assert extended[extended["batch_id"] != "batch-006"].reset_index(drop=True).equals(first.judgments.to_pandas())
    assert not first.judgments.equals(simulate(reference, tasks, seed=SEED + 1).judgments)


def test_simulated_rows_are_marked_complete_and_in_range(reference: Reference) -> None:
    tasks = toy_tasks(8)
    out = simulate(reference, tasks, raters_per_batch=4)
    assert out.judgments.schema == JUDGMENTS_SCHEMA and out.unjudged.num_rows == 0
    j = out.judgments.to_pandas()
    assert j["simulated"].all() and (j["source"] == SOURCE_SIMULATED).all() and j["time"].isna().all()
    assert all(re.fullmatch(r"sim-\d{4}", w) for w in j["worker"])
    ratings, verify = j[j["task_type"] != VERIFY], j[j["task_type"] == VERIFY]
    assert ratings["score"].between(SCORE_MIN, SCORE_MAX).all() and ratings["answer"].isna().all()
    assert verify["score"].isna().all() and verify["answer"].isin(VERIFY_ANSWERS).all()
    assert (j["seconds"] > 0).all()
    per_batch = j.groupby("batch_id")["worker"].nunique()
    assert (per_batch == 4).all() and len(per_batch) == 8
    per_task = j.groupby(["item_id", "batch_id"]).size()
    assert (per_task == 4).all() and len(per_task) == len(tasks)
    assert not j.duplicated(["item_id", "batch_id", "worker"]).any()
    order = ["item_id", "batch_id", "worker"]
    assert j[order].equals(j.sort_values(order)[order].reset_index(drop=True))


def test_aggregated_means_follow_the_latent_similarity(reference: Reference) -> None:
    tasks = toy_tasks(20)
    sim = Simulate(reference, SEED, {"anchors": ANCHORS})
    latent = pd.Series(sim.latent(tasks), index=tasks["item_id"]).groupby(level=0).first()
    assert latent.std() > 1.0  # the toy reference spreads the items over the scale
    ratings = sim(tasks).judgments.to_pandas().query("task_type != 'VERIFY'")
    means = ratings.groupby("item_id")["score"].mean()
    assert np.corrcoef(means, latent[means.index])[0, 1] > 0.9


def test_careless_raters_are_detectable(reference: Reference) -> None:
    params = {"panel_size": 12, "careless_share": 0.25, "straightline_share": 0.34}
    sim = Simulate(reference, SEED, {"anchors": ANCHORS, **params})
    assert sim.panel.careless.sum() == 3 and sim.panel.straightline.sum() == 1
    tasks = toy_tasks(60)
    latent = pd.Series(sim.latent(tasks), index=tasks["item_id"]).groupby(level=0).first()
    j = sim(tasks).judgments.to_pandas().query("task_type != 'VERIFY'")
    j = j.assign(latent=latent[j["item_id"]].to_numpy())
    correlation = j.groupby("worker")[["score", "latent"]].apply(lambda w: w["score"].corr(w["latent"])).fillna(0.0)
    careless = {w for w, c in zip(sim.panel.workers, sim.panel.careless, strict=True) if c}
    attentive = correlation.drop(list(careless))
    assert correlation[list(careless)].max() < 0.3 and attentive.min() > 0.7
    straight = sim.panel.workers[int(np.flatnonzero(sim.panel.straightline)[0])]
    assert j.loc[j["worker"] == straight, "score"].nunique() == 1
    seconds = j.groupby(j["worker"].isin(careless))["seconds"].median()
    assert seconds[True] < seconds[False] / 3


def test_verify_answers_threshold_the_rater_score(reference: Reference) -> None:
    exact = {"bias_sd": 0.0, "noise_sd": 0.0, "careless_share": 0.0, "verify_cuts": [4.0, 2.0, 1.0]}
    tasks = toy_tasks(10).query("task_type == 'VERIFY'")
    sim = Simulate(reference, SEED, {"anchors": ANCHORS, **exact})
    expected = pd.Series(sim.latent(tasks), index=tasks["item_id"]).round(2)
    j = sim(tasks).judgments.to_pandas()
    want = np.select([expected >= 4.0, expected >= 2.0, expected >= 1.0], VERIFY_ANSWERS[:3], VERIFY_ANSWERS[3])
    assert (j["answer"].to_numpy() == pd.Series(want, index=expected.index)[j["item_id"]].to_numpy()).all()
    assert len(set(j["answer"])) >= 3


def test_items_without_reference_vectors_are_listed_and_do_not_shift_others(reference: Reference) -> None:
    tasks = toy_tasks(3)
    bad = tasks_frame([(STS, "coco:cap:1", "coco:cap:77777", "batch-001"), (SIS, "coco:img:1", "coco:img:999", "batch-002")])
    out = simulate(reference, pd.concat([tasks, bad], ignore_index=True))
    assert out.unjudged.schema == UNJUDGED_SCHEMA
    unjudged = out.unjudged.to_pandas()
    assert sorted(unjudged["item_id"]) == sorted(bad["item_id"]) and (unjudged["reason"] == NO_VECTOR).all()
    details = dict(zip(unjudged["task_type"], unjudged["detail"], strict=True))
    assert details[STS] == "coco:cap:77777 is not in toy/captions"
    assert details[SIS] == "coco:img:999 has a zero or non-finite vector in toy/cocaption_mean"
    assert out.judgments.equals(simulate(reference, tasks).judgments)
    nothing = simulate(reference, bad)
    assert nothing.judgments.num_rows == 0 and nothing.judgments.schema == JUDGMENTS_SCHEMA
    assert nothing.unjudged.num_rows == 2


def test_simulate_params_defaults_and_validation() -> None:
    defaults = SimulateParams.from_mapping(None)
    assert defaults.raters_per_batch == 5 and defaults.anchors[STS] == (0.1, 0.9)
    partial = SimulateParams.from_mapping({"anchors": {SIS: [0.8, 1.0]}, "verify_cuts": [4, 3, 2]})
    assert partial.anchors[SIS] == (0.8, 1.0) and partial.anchors[STS] == (0.1, 0.9)
    assert partial.verify_cuts == (4.0, 3.0, 2.0)
    assert SimulateParams.from_mapping({"panel_name": " sim-verify "}).panel_name == "sim-verify"
    cases = {
        "unknown simulate params \\['raters'\\]": {"raters": 3},
        "raters_per_batch must be at most panel_size=5, got 6": {"raters_per_batch": 6, "panel_size": 5},
        "careless_share must be >= 0.0 and <= 1.0, got 1.5": {"careless_share": 1.5},
        "anchors.STS must be \\(low, high\\) with low < high": {"anchors": {STS: (0.9, 0.1)}},
        "simulate.anchors has key 'XYZ'; its keys must be among": {"anchors": {"XYZ": (0, 1)}},
        "verify_cuts must be strictly decreasing": {"verify_cuts": [1, 2, 3]},
        "simulate.verify_cuts must be a list of 3, got \\[3, 2\\]": {"verify_cuts": [3, 2]},
        "simulate.seconds_mean.SIS must be > 0.0, got 0.0": {"seconds_mean": {SIS: 0}},
        "simulate.panel_size must be an integer, got 2.5": {"panel_size": 2.5},
        "simulate.noise_sd must be a finite number, got 'high'": {"noise_sd": "high"},
        "simulate.anchors.SITS\\[1\\] must be a finite number, got nan": {"anchors": {SITS: [0.1, float("nan")]}},
        "simulate.anchors must be a mapping": {"anchors": [0.1, 0.9]},
        "panel_name must not be blank": {"panel_name": "  "},
    }
    for message, params in cases.items():
        with pytest.raises(ParamError, match=message):
            SimulateParams.from_mapping(params)
    with pytest.raises(ValueError, match="non-negative integer"):
        Simulate(Reference(EmbeddingSet([], np.zeros((0, 2))), EmbeddingSet([], np.zeros((0, 2)))), -1)
    assert cosine_to_score(np.array([0.0, 0.5, 2.0]), 0.0, 1.0).tolist() == [0.0, 2.5, 5.0]


def test_tasks_table_is_checked(reference: Reference) -> None:
    good = toy_tasks(1)
    sim = Simulate(reference, SEED)
    with pytest.raises(ValueError, match="lacks columns \\['batch_id'\\]"):
        sim(good.drop(columns="batch_id"))
    with pytest.raises(ValueError, match="1 rows whose item_id is not"):
        sim(good.assign(item_id=["sts:x|y", *good["item_id"][1:]]))
    with pytest.raises(ValueError, match="1 items twice in one batch"):
        sim(pd.concat([good, good.iloc[:1]], ignore_index=True))
    with pytest.raises(ValueError, match="unknown task types \\['XYZ'\\]"):
        sim(good.assign(task_type=["XYZ", *good["task_type"][1:]]))


@pytest.fixture(scope="module")
def demo_embeddings(tmp_path_factory: pytest.TempPathFactory, demo_dir: Path) -> tuple[Path, dict[str, str]]:
    """The demo's captions through the real bow-glove50 encoder, written as an embed output."""
    from crisscross.embed.encoders.text import BowGlove50Encoder

    rows = [json.loads(line) for line in (demo_dir / "captions.jsonl").read_text().splitlines()]
    caption_ids = [f"coco:cap:{r['caption_id']}" for r in rows]
    image_of = {c: f"coco:img:{r['image_id']}" for c, r in zip(caption_ids, rows, strict=True)}
    vectors = BowGlove50Encoder().encode(caption_ids, [r["caption_tok"] for r in rows])
    root = tmp_path_factory.mktemp("embeddings")
    EmbeddingSet(caption_ids, vectors).write(set_dir(str(root), "text", "bow-glove50", CAPTIONS))
    images = sorted(set(image_of.values()))
    rows_of = {i: [k for k, c in enumerate(caption_ids) if image_of[c] == i] for i in images}
    means = [cocaption_mean([caption_ids[k] for k in rows_of[i]], vectors[rows_of[i]]) for i in images]
    EmbeddingSet(images, np.vstack(means)).write(set_dir(str(root), "text", "bow-glove50", COCAPTION_MEAN))
    return root, image_of


def test_simulate_on_the_demo_embeddings(demo_embeddings: tuple[Path, dict[str, str]]) -> None:
    root, image_of = demo_embeddings
    captions = sorted(image_of)
    by_image: dict[str, list[str]] = {}
    for caption in captions:
        by_image.setdefault(image_of[caption], []).append(caption)
    images = sorted(by_image)
    rows = []
    for k, image in enumerate(images):
        own, other = by_image[image], by_image[images[(k + 1) % len(images)]]
        batch = f"demo-{k % 8}"
        rows += [
            (STS, own[0], own[1], batch),  # co-captions
            (STS, own[2], other[0], batch),  # captions of different images
            (SITS, own[3], image, batch),  # a caption and its own image
            (SITS, own[3], images[(k + 1) % len(images)], batch),
            (VERIFY, image, own[4], batch),
        ]
    tasks = tasks_frame(rows)
    glove = {t: (0.8, 1.0) for t in (STS, SIS, SITS, VERIFY)}  # bow-glove50 cosines lie high
    sim = simulate_from_embeddings(str(root), "bow-glove50", SEED, {"anchors": glove})
    out = sim(tasks)
    assert out.unjudged.num_rows == 0 and out.judgments.num_rows == len(tasks) * 5
    j = out.judgments.to_pandas()
    means = j[j["task_type"] != VERIFY].groupby("item_id")["score"].mean()
    same_image = [image_of.get(a, a) == image_of.get(b, b) for a, b in zip(tasks["id_a"], tasks["id_b"], strict=True)]
    same = pd.Series(same_image, index=tasks["item_id"])[means.index]
    assert same.sum() == 2 * len(image_of) // 5 and means[same].mean() > means[~same].mean() + 0.8
    assert j.loc[j["task_type"] == VERIFY, "answer"].isin(VERIFY_ANSWERS[:2]).mean() > 0.5


# --------------------------------------------------------------------------- replay


def judgment_rows(rows: Iterable[tuple[str, str, str, str, float, str, bool]]) -> pd.DataFrame:
    """A judgments table from (task_type, id_a, id_b, worker, score, batch, simulated) rows."""
    records = [
        {
            "item_id": item_id(t, a, b),
            "task_type": t,
            "id_a": a,
            "id_b": b,
            "worker": w,
            "score": s,
            "answer": None,
            "seconds": 4.0,
            "time": "2026-07-01T10:00:00Z",
            "batch_id": batch,
            "source": "people",
            "simulated": simulated,
        }
        for t, a, b, w, s, batch, simulated in rows
    ]
    return pd.DataFrame(records, columns=JUDGMENTS_SCHEMA.names)


def test_replay_finds_symmetric_pairs_in_either_order_and_lists_the_rest() -> None:
    source = judgment_rows(
        [
            (SIS, "coco:img:2", "coco:img:1", "w1", 3.0, "old-1", False),  # written b, a
            (SIS, "coco:img:1", "coco:img:2", "w2", 4.0, "old-2", True),
            (SITS, "coco:cap:5", "coco:img:9", "w1", 1.0, "old-1", False),
        ]
    )
    tasks = tasks_frame(
        [
            (SIS, "coco:img:1", "coco:img:2", "new"),
            (SITS, "coco:cap:5", "coco:img:9", "new"),
            (STS, "coco:cap:5", "coco:cap:6", "new"),
        ]
    )
    out = Replay(source)(tasks)
    assert out.judgments.schema == JUDGMENTS_SCHEMA
    j = out.judgments.to_pandas()
    assert j["item_id"].tolist() == ["sis:coco:img:1|coco:img:2"] * 2 + ["sits:coco:cap:5|coco:img:9"]
    assert j["worker"].tolist() == ["w1", "w2", "w1"] and j["score"].tolist() == [3.0, 4.0, 1.0]
    assert (j["source"] == SOURCE_REPLAY).all() and (j["batch_id"] == "new").all()
    assert j["simulated"].tolist() == [False, True, False]  # kept as in the source
    assert j[["id_a", "id_b"]].iloc[0].tolist() == ["coco:img:1", "coco:img:2"]  # the task's order
    assert j["time"].notna().all() and (j["seconds"] == 4.0).all()
    unjudged = out.unjudged.to_pandas()
    assert unjudged["item_id"].tolist() == ["sts:coco:cap:5|coco:cap:6"] and unjudged["reason"].tolist() == [NO_JUDGMENT]
    assert "among 3 replay rows" in unjudged["detail"].iat[0]


def test_replay_of_an_item_in_several_batches_uses_each_judgment_once() -> None:
    source = judgment_rows(
        [
            (STS, "coco:cap:1", "coco:cap:2", "w1", 5.0, "b2", False),
            (STS, "coco:cap:2", "coco:cap:1", "w2", 4.0, "elsewhere", False),
        ]
    )
    tasks = tasks_frame([(STS, "coco:cap:1", "coco:cap:2", "b1"), (STS, "coco:cap:2", "coco:cap:1", "b2")])
    j = Replay(source)(tasks).judgments.to_pandas()
    assert j[["worker", "batch_id"]].values.tolist() == [["w2", "b1"], ["w1", "b2"]]
    assert j[["id_a", "id_b"]].values.tolist() == [["coco:cap:1", "coco:cap:2"], ["coco:cap:2", "coco:cap:1"]]


def test_replaying_simulated_rows_keeps_them_marked(reference: Reference) -> None:
    tasks = toy_tasks(2)
    simulated = simulate(reference, tasks).judgments
    replayed = Replay(simulated)(tasks.sample(frac=1.0, random_state=2))
    assert replayed.unjudged.num_rows == 0
    assert replayed.judgments.drop_columns(["source"]).equals(simulated.drop_columns(["source"]))
    assert set(replayed.judgments.column("source").to_pylist()) == {SOURCE_REPLAY}
    assert all(replayed.judgments.column("simulated").to_pylist())


def test_judgment_source_registry() -> None:
    assert JUDGMENT_SOURCES.names() == ["import", "replay", "simulate"]
    with pytest.raises(UnknownNameError, match="known: import, replay, simulate"):
        JUDGMENT_SOURCES.create("people", settings=SourceSettings())


# --------------------------------------------------------------------------- CxC release


def write_release(folder: Path, split: str = "test") -> None:
    (folder / f"sts_{split}.csv").write_text(
        "caption1,caption2,agg_score,sampling_method\n"
        "COCO_val2014:sentid:11,COCO_val2014:sentid:12,3.2,c2c_isim\n"
        "COCO_val2014:sentid:11,not-an-id,3.2,c2c_isim\n"
        "COCO_val2014:sentid:13,COCO_val2014:sentid:14,high,c2c_isim\n"
        "COCO_val2014:sentid:13,COCO_val2014:sentid:15,5.5,c2c_isim\n"
        "COCO_val2014:sentid:13,COCO_val2014:sentid:16,nan,c2c_isim\n"
        "COCO_val2014:sentid:13,COCO_val2014:sentid:17\n"
        "COCO_val2014:sentid:13,COCO_val2014:sentid:18,1.0,c2c_isim,extra\n"
        f"COCO_val2014:sentid:19,COCO_val2014:sentid:20,1.0,{'x' * 200_000}\n"  # over the csv module's field limit
        "COCO_val2014:sentid:21,COCO_val2014:sentid:22,2.0,c2c_isim\n"
    )
    (folder / f"sis_{split}.csv").write_text(
        "image1,image2,agg_score,sampling_method\n"
        "COCO_val2014_000000000002.jpg,COCO_val2014_000000000001.jpg,2.9,i2i_csim\n"
        "COCO_val2014_000000000003.jpg,COCO_val2014_000000000004.jpg,1.0,i2i_csim\n"
        "COCO_val2014_000000000001.jpg,COCO_val2014_000000000002.jpg,2.1,i2i_csim\n"
    )
    (folder / f"sits_{split}.csv").write_text(
        "caption,image,agg_score,sampling_method\nCOCO_val2014:sentid:11,COCO_val2014_000000000001.jpg,5,c2i_original\n"
    )


def test_cxc_release_loader_keeps_both_orders_as_one_item_and_rejects_bad_rows(tmp_path: Path) -> None:
    write_release(tmp_path)
    release = load_cxc_release(tmp_path, "test")
    items, judgments, rejected = release
    assert items.schema == TASKS_SCHEMA and judgments.schema == JUDGMENTS_SCHEMA
    reasons = [(r.reason, r.key, r.source) for r in rejected]
    assert reasons == [
        ("bad-id", "", "sts_test.csv:3"),
        ("bad-score", "sts:coco:cap:13|coco:cap:14", "sts_test.csv:4"),
        ("score-out-of-range", "sts:coco:cap:13|coco:cap:15", "sts_test.csv:5"),
        ("bad-score", "sts:coco:cap:13|coco:cap:16", "sts_test.csv:6"),
        ("malformed-row", "", "sts_test.csv:7"),
        ("malformed-row", "", "sts_test.csv:8"),
        ("malformed-row", "", "sts_test.csv:9"),
    ]
    assert rejected[-1].detail.startswith("not readable CSV: field larger than field limit")
    j = judgments.to_pandas()
    pair = j[j["item_id"] == "sis:coco:img:1|coco:img:2"]
    assert pair["worker"].tolist() == [release_worker(1), release_worker(2)] == ["cxc-release", "cxc-release#2"]
    assert pair["score"].tolist() == [2.9, 2.1] and (pair["id_a"] == "coco:img:1").all()
    assert (j["source"] == SOURCE_REPLAY).all() and not j["simulated"].any() and j["seconds"].isna().all()
    i = items.to_pandas()
    assert i[["task_type", "item_id", "sampling_method", "batch_id", "position"]].values.tolist() == [
        [SIS, "sis:coco:img:1|coco:img:2", "i2i_csim", "cxc-release:sis_test", 1],
        [SIS, "sis:coco:img:3|coco:img:4", "i2i_csim", "cxc-release:sis_test", 2],
        [SITS, "sits:coco:cap:11|coco:img:1", "c2i_original", "cxc-release:sits_test", 1],
        [STS, "sts:coco:cap:11|coco:cap:12", "c2c_isim", "cxc-release:sts_test", 1],
        [STS, "sts:coco:cap:21|coco:cap:22", "c2c_isim", "cxc-release:sts_test", 2],
    ]
    report = release.report()
    assert report["rows"] == {STS: 2, SIS: 3, SITS: 1} and report["items"] == {STS: 2, SIS: 2, SITS: 1}
    assert report["repeated_items"][SIS] == 1 and report["straddling_items"][SIS] == 1  # 2.9 ≥ 2.5 > 2.1
    assert report["rejected"] == {"row": {"bad-id": 1, "bad-score": 2, "malformed-row": 3, "score-out-of-range": 1}}
    # Replaying the release on its own items gives every published row back, and no unjudged item.
    replayed = Replay(judgments)(items)
    assert replayed.unjudged.num_rows == 0 and replayed.judgments.equals(judgments)


def test_cxc_release_loader_errors(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="split must be one of"):
        load_cxc_release(tmp_path, "train")
    write_release(tmp_path)
    (tmp_path / "sits_test.csv").write_text("caption,image,score\n")
    with pytest.raises(ValueError, match="sits_test.csv: header lacks columns \\['agg_score', 'sampling_method'\\]"):
        load_cxc_release(tmp_path, "test")


# Rows per file (CxC appendix Table 1), items, and SIS pairs published in both orders: how many,
# and how many of those have one row ≥ 2.5 and one below.
RELEASE = {
    "test": ({STS: 44045, SIS: 46719, SITS: 44833}, {STS: 44045, SIS: 43856, SITS: 44833}, 2863, 512),
    "val": ({STS: 44009, SIS: 42767, SITS: 44722}, {STS: 44009, SIS: 40514, SITS: 44722}, 2253, 377),
}


@pytest.mark.parametrize("split", sorted(RELEASE))
def test_real_cxc_release_loads_without_rejects(shared_data: Path, split: str) -> None:
    release = load_cxc_release(shared_data / "cxc", split)
    rows, items, repeated, straddling = RELEASE[split]
    report = release.report()
    assert release.rejected == [] and report["rejected"] == {}
    assert report["rows"] == rows and report["items"] == items
    assert report["repeated_items"] == {STS: 0, SIS: repeated, SITS: 0}
    assert report["straddling_items"] == {STS: 0, SIS: straddling, SITS: 0}
    assert release.items.num_rows == sum(items.values())
    workers = set(release.judgments.column("worker").to_pylist())
    assert workers == {"cxc-release", "cxc-release#2"}


@pytest.mark.timeout(30)  # a FIFO in a judgments folder used to be skipped silently, one named itself waited on
def test_import_quarantines_a_fifo_in_a_judgments_folder_and_refuses_one_named_itself(tmp_path: Path) -> None:
    tasks = pa.Table.from_pandas(tasks_frame([(STS, "coco:cap:1", "coco:cap:2", "b1")]), schema=TASKS_SCHEMA, preserve_index=False)
    folder = tmp_path / "judgments"
    folder.mkdir()
    (folder / "a.csv").write_text(f"item_id,worker,score\n{item_id(STS, 'coco:cap:1', 'coco:cap:2')},W0,3\n")
    make_special(folder / "b.csv", "fifo")
    collected = JUDGMENT_SOURCES.create("import", settings=SourceSettings(judgments=(str(folder),), format="csv"))(tasks)
    assert collected.judgments.num_rows == 1 and collected.facts["files"] == [str(folder / "a.csv")]
    assert [(r.kind, r.reason, r.source) for r in collected.rejected] == [("file", "not-a-regular-file", str(folder / "b.csv"))]
    named = JUDGMENT_SOURCES.create("import", settings=SourceSettings(judgments=(str(folder / "b.csv"),), format="csv"))
    with pytest.raises(InputError, match="b.csv is a named pipe"):
        named(tasks)
