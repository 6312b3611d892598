"""BISON's two task types through every step keyed by task type: items, gold, export, import
validation and the simulated panel (on the demo's real captions and embeddings)."""

from __future__ import annotations

import csv
import dataclasses
import io
import json
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pytest
import yaml

from crisscross.annotate.catalog import Catalog
from crisscross.annotate.exports import ExportError, export_tasks
from crisscross.annotate.formats import JUDGMENT_FORMATS
from crisscross.annotate.gold import GoldError
from crisscross.annotate.items import items_from_candidates
from crisscross.annotate.simulate import Panel, Reference, Simulate, SimulateParams
from crisscross.annotate.store import Answer, Refused, TaskRow, check_answers
from crisscross.annotate.tasks import TaskParams, build_tasks, make_batches
from crisscross.annotate.validate import _Refused, _value, validate
from crisscross.candidates.bison import CHOSEN_METHOD, DECOY_METHOD
from crisscross.core import io as cio
from crisscross.core.rng import generator
from crisscross.formats.schema import DEFAULT_RULES, item_id
from crisscross.tasktypes import task_type, task_types
from crisscross.tasktypes.base import cosine_to_score
from crisscross.tasktypes.names import CHOOSE, CHOOSE_NONE, TASK_TYPES, TRIPLE_ANSWERS, TRIPLE_TARGET, VERIFY_TRIPLE, decoy_first

SEED = 20260701

INSTRUCTIONS = {kind.name: kind.instructions for kind in task_types()}


@pytest.fixture(scope="module")
def demo(demo_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Catalog]:
    """The demo ingested and embedded with use-m3 only (the panel's reference; no image encoder)."""
    from crisscross.pipelines import embed, ingest

    build = tmp_path_factory.mktemp("bison-demo")
    params = build / "params.yaml"
    params.write_text(yaml.safe_dump({"embed": {"text_encoders": ["use-m3"], "image_encoders": []}}))
    ingest.main(["--in", str(demo_dir / "captions.jsonl"), "--images", str(demo_dir / "images"), "--out", str(build / "items")])
    embed.main(["--in", str(build / "items"), "--out", str(build / "embeddings"), "--params", str(params)])
    return build, Catalog.from_tables(
        cio.read_parquet(str(build / "items" / "captions.parquet")), cio.read_parquet(str(build / "items" / "images.parquet"))
    )


def pairs(catalog: Catalog, n: int) -> list[tuple[str, str]]:
    images = catalog.showable("img")
    return [(images[i], images[i + 1]) for i in range(n)]


def bison_tasks(catalog: Catalog, n: int = 12) -> pa.Table:
    rows = [{"method": DECOY_METHOD, "id1": t, "id2": d} for t, d in pairs(catalog, n)]
    rows += [{"method": CHOSEN_METHOD, "id1": catalog.captions_of(t)[0], "id2": d} for t, d in pairs(catalog, n)]
    items, rejected = items_from_candidates(pa.Table.from_pylist(rows), catalog)
    assert rejected == []
    params = TaskParams(batch_size=5, gold_per_batch={"positive": 0, "negative": 0}, replicas=2)
    return build_tasks(items, catalog, {}, params, SEED)


def test_bison_items_and_their_refusals(demo) -> None:
    _, catalog = demo
    (a, b), (c, _) = pairs(catalog, 2)
    own = catalog.captions_of(a)[0]
    rows = [
        {"method": DECOY_METHOD, "id1": a, "id2": b},
        {"method": DECOY_METHOD, "id1": a, "id2": a},
        {"method": DECOY_METHOD, "id1": "coco:img:1", "id2": b},
        {"method": CHOSEN_METHOD, "id1": own, "id2": b},
        {"method": CHOSEN_METHOD, "id1": own, "id2": a},
        {"method": CHOSEN_METHOD, "id1": c, "id2": own},  # c is b: the triple above, written the other way round
    ]
    items, rejected = items_from_candidates(pa.Table.from_pylist(rows), catalog)
    assert items.column("task_type").to_pylist() == [CHOOSE, VERIFY_TRIPLE]
    assert items.column("item_id").to_pylist() == [item_id(CHOOSE, a, b), item_id(VERIFY_TRIPLE, own, b)]
    assert [r.reason for r in rejected] == ["self-pair", "unknown-id", "same-image", "duplicate-item"]
    assert set(INSTRUCTIONS) == set(TASK_TYPES) and CHOOSE_NONE in INSTRUCTIONS[CHOOSE]
    assert all(answer in INSTRUCTIONS[VERIFY_TRIPLE] for answer in ("both", "neither"))


def test_bison_rounds_plant_no_gold(demo) -> None:
    _, catalog = demo
    items, _ = items_from_candidates(
        pa.Table.from_pylist([{"method": DECOY_METHOD, "id1": a, "id2": b} for a, b in pairs(catalog, 3)]), catalog
    )
    with pytest.raises(GoldError, match="gold_per_batch"):
        build_tasks(items, catalog, {}, TaskParams(), SEED)
    tasks = make_batches(items, pa.Table.from_pylist([], schema=items.schema), 2, {"positive": 0, "negative": 0}, SEED)
    assert tasks.column("batch_id").to_pylist() == ["choose-00001", "choose-00001", "choose-00002"]


def test_exports_list_the_options_raters_pick_from(demo) -> None:
    _, catalog = demo
    tasks = bison_tasks(catalog)
    lines = [
        json.loads(line)
        for line in dict(export_tasks(["jsonl"], tasks, catalog, 1, SEED))["export/jsonl/batches.jsonl"].decode().splitlines()
    ]
    choose = next(i for b in lines if b["task_type"] == CHOOSE for i in b["items"])
    target = choose["a"]["id"]
    assert [o["answer"] for o in choose["options"]] == list(catalog.captions_of(target))
    assert [o["text"] for o in choose["options"]] == [catalog.texts[c] for c in catalog.captions_of(target)]
    triples = [i for b in lines if b["task_type"] == VERIFY_TRIPLE for i in b["items"]]
    orders = [[o["answer"] for o in i["options"]] for i in triples]
    assert all(sorted(o) == ["decoy", "target"] for o in orders) and len({tuple(o) for o in orders}) == 2  # both orders occur
    for i, order in zip(triples, orders, strict=True):
        assert order[0] == ("decoy" if decoy_first(i["item_id"], SEED) else "target")
        assert {o["id"] for o in i["options"]} == {catalog.image(i["a"]["id"]), i["b"]["id"]}
    files = dict(export_tasks(["crowd-csv"], tasks, catalog, 1, SEED))
    header = next(csv.reader(io.StringIO(files["export/crowd-csv/choose.csv"].decode())))
    assert "item_1_option_1_text" in header and "item_1_option_1_answer" in header
    assert "item_1_option_2_image" in next(csv.reader(io.StringIO(files["export/crowd-csv/verify-triple.csv"].decode())))
    with pytest.raises(ExportError, match="label-studio"):
        dict(export_tasks(["label-studio"], tasks, catalog, 1, SEED))


def test_imported_answers_are_checked_per_type(demo) -> None:
    _, catalog = demo
    tasks = bison_tasks(catalog)
    rows = tasks.to_pylist()
    choose = next(r for r in rows if r["task_type"] == CHOOSE)
    triple = next(r for r in rows if r["task_type"] == VERIFY_TRIPLE)
    caption = catalog.captions_of(choose["id_a"])[1]
    lines = [
        {"item_id": choose["item_id"], "worker": "w1", "answer": caption},
        {"item_id": choose["item_id"], "worker": "w2", "answer": " None "},
        {"item_id": choose["item_id"], "worker": "w3", "answer": choose["id_b"]},
        {"item_id": choose["item_id"], "worker": "w4", "answer": "the second one"},
        {"item_id": choose["item_id"], "worker": "w5", "score": 3},
        {"item_id": triple["item_id"], "worker": "w1", "answer": "Target"},
        {"item_id": triple["item_id"], "worker": "w2", "answer": "100% yes"},
    ]
    data = "".join(json.dumps(line) + "\n" for line in lines).encode()
    judgments, rejected = validate(JUDGMENT_FORMATS.create("jsonl").read("j.jsonl", data), tasks)
    assert judgments.select(["worker", "answer"]).to_pylist() == [
        {"worker": "w1", "answer": caption},
        {"worker": "w2", "answer": CHOOSE_NONE},
        {"worker": "w1", "answer": TRIPLE_TARGET},
    ]
    assert sorted((r.source, r.reason) for r in rejected) == [
        ("j.jsonl:3", "bad-answer"),
        ("j.jsonl:4", "bad-answer"),
        ("j.jsonl:5", "wrong-value-kind"),
        ("j.jsonl:7", "bad-answer"),
    ]


def test_the_simulated_panel_chooses_discriminative_captions_and_verifies_them(demo) -> None:
    build, catalog = demo
    reference = Reference.read(build / "embeddings", "use-m3")
    tasks = bison_tasks(catalog, 30).to_pandas()
    params = {"raters_per_batch": 2, "panel_size": 10, "careless_share": 0.0, "noise_sd": 0.0, "bias_sd": 0.0}
    out = Simulate(reference, SEED, params, catalog)(tasks)
    assert out.unjudged.num_rows == 0
    j = out.judgments.to_pandas()
    assert len(j) == 2 * len(tasks) and j["simulated"].all() and j["score"].isna().all()
    chose = j[j["task_type"] == CHOOSE]
    for row in chose.itertuples():  # noiseless raters pick the caption with the largest margin (or none)
        options = list(catalog.captions_of(row.id_a))
        to_t, _ = reference.pair_cosines(("cap", "img"), options, [row.id_a] * len(options))
        to_d, _ = reference.pair_cosines(("cap", "img"), options, [row.id_b] * len(options))
        margin = cosine_to_score(to_t - to_d, *task_type(CHOOSE).anchors)  # clipped at 5: ties go to the first caption
        assert row.answer == (options[int(np.argmax(margin))] if margin.max() >= 2.5 else CHOOSE_NONE)
    assert (chose["answer"] != CHOOSE_NONE).mean() > 0.5
    triple = j[j["task_type"] == VERIFY_TRIPLE]
    assert set(triple["answer"]) <= set(TRIPLE_ANSWERS) and (triple["answer"] == TRIPLE_TARGET).mean() > 0.5
    again = Simulate(reference, SEED, {**params, "panel_name": "other"}, catalog)(tasks).judgments.to_pandas()
    assert again["worker"].str.startswith("other-").all() and again["answer"].tolist() == j["answer"].tolist()
    noisy = Simulate(reference, SEED, {"raters_per_batch": 2, "panel_size": 10}, catalog)(
        pd.concat([tasks, tasks.iloc[::-1]]).drop_duplicates()
    )
    assert noisy.judgments.equals(Simulate(reference, SEED, {"raters_per_batch": 2, "panel_size": 10}, catalog)(tasks).judgments)
    with pytest.raises(ValueError, match="--items"):
        Simulate(reference, SEED, params)(tasks)


def test_the_simulated_panel_weighs_only_the_captions_the_page_shows(demo) -> None:
    """A CHOOSE rater picks among the target's captions raters can read, as exports and the app
    show them (``PRESENTATIONS``): a caption without text is never chosen."""
    build, catalog = demo
    reference = Reference.read(build / "embeddings", "use-m3")
    tasks = bison_tasks(catalog, 30).to_pandas()
    tasks = tasks[tasks["task_type"] == CHOOSE]
    params = {"raters_per_batch": 2, "panel_size": 10, "careless_share": 0.0, "noise_sd": 0.0, "bias_sd": 0.0}
    full = Simulate(reference, SEED, params, catalog)(tasks).judgments.to_pandas()
    chosen = full.loc[full["answer"] != CHOOSE_NONE, "answer"].iloc[0]
    hidden = dataclasses.replace(catalog, texts={c: t for c, t in catalog.texts.items() if c != chosen})
    again = Simulate(reference, SEED, params, hidden)(tasks).judgments.to_pandas()
    assert chosen in set(full["answer"]) and chosen not in set(again["answer"])
    assert (again["answer"] != full["answer"]).sum() >= 1 and len(again) == len(full)


def test_a_named_panel_is_other_people_and_the_default_panel_keeps_its_draw() -> None:
    """BISON's verifiers (``panel_name: sim-verify``) must not be the choosers renamed: their
    biases and careless raters are drawn anew; the default panel's draw is the one builds had."""
    choosers = Panel.draw(SimulateParams.from_mapping({"careless_share": 0.25}), SEED)
    verifiers = Panel.draw(SimulateParams.from_mapping({"careless_share": 0.25, "panel_name": "sim-verify"}), SEED)
    assert choosers.workers[0] == "sim-0000" and verifiers.workers[0] == "sim-verify-0000"
    assert not np.allclose(choosers.bias, verifiers.bias)
    assert not np.array_equal(choosers.careless, verifiers.careless)
    assert choosers.careless.sum() == verifiers.careless.sum() == 10
    rng = generator(SEED, "panel")
    rng.permutation(40)
    assert np.array_equal(choosers.bias, rng.normal(0.0, 0.3, 40))


def test_one_answer_rule_serves_import_and_the_rater_store() -> None:
    """``JudgmentRules`` (over ``ANSWER_RULES``) is the one home of what a categorical answer may be: a
    CHOOSE caption id is kept as written (ids are case-sensitive), ``NONE`` is ``none``; the store
    refuses the same values."""
    assert _value({"answer": " x:cap:Ab "}, CHOOSE, DEFAULT_RULES) == (None, "x:cap:Ab")
    assert _value({"answer": "NONE"}, CHOOSE, DEFAULT_RULES) == (None, CHOOSE_NONE)
    assert _value({"answer": "Target"}, VERIFY_TRIPLE, DEFAULT_RULES) == (None, TRIPLE_TARGET)
    for kind, (a, b), wrong in ((CHOOSE, ("x:img:1", "x:img:2"), "x:img:1"), (VERIFY_TRIPLE, ("x:cap:1", "x:img:2"), "image 1")):
        with pytest.raises(_Refused, match=task_type(kind).wanted):
            _value({"answer": wrong}, kind, DEFAULT_RULES)
        row = TaskRow("b1", 1, item_id(kind, a, b), kind, a, b, "none")
        with pytest.raises(Refused, match=task_type(kind).wanted):
            check_answers([row], [Answer(1, None, wrong, 3.0)])
