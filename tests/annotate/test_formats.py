"""Export → platform fills in answers → import → validate, for every format; and on the demo data."""

from __future__ import annotations

import csv
import io
import json
import zlib
from collections import Counter
from pathlib import Path
from xml.etree import ElementTree

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest
from hypothesis import given
from hypothesis import strategies as st

from crisscross.annotate.catalog import Catalog
from crisscross.annotate.exports import (
    TASK_FORMATS,
    Batch,
    BatchItem,
    ExportError,
    Side,
    answer_key,
    export_tasks,
    label_studio_config,
    studio_json,
)
from crisscross.annotate.formats import JUDGMENT_FORMATS, JudgmentFileError
from crisscross.annotate.gold import Space
from crisscross.annotate.items import items_from_candidates, verify_items
from crisscross.annotate.tasks import TaskParams, build_tasks
from crisscross.annotate.validate import validate
from crisscross.candidates.cxc import C2C_COCAPTION, cocaption_pairs
from crisscross.embed.sets import EmbeddingSet, cocaption_mean
from crisscross.formats.schema import GOLD_NEGATIVE, GOLD_POSITIVE, item_id
from crisscross.tasktypes import task_type
from crisscross.tasktypes.names import SIS, SITS, STS, VERIFY, VERIFY_ANSWERS
from tests.fuzzing import fuzz

REPLICAS = 3
WORKERS = [f"W{r}" for r in range(REPLICAS)]


def image(i: int) -> str:
    return f"t:img:{i:02d}"


def caption(i: int, k: int) -> str:
    return f"t:cap:{i:02d}-{k}"


def hashed_bow(texts: list[str], dim: int = 64) -> np.ndarray:
    """Bag of words hashed into ``dim`` buckets: a cheap, deterministic text space for tests."""
    out = np.zeros((len(texts), dim), dtype=np.float32)
    for row, text in enumerate(texts):
        for token in text.lower().split():
            out[row, zlib.crc32(token.encode()) % dim] += 1.0
    return out


def text_spaces(captions: pa.Table) -> dict[str, list[Space]]:
    """Per task type, the hashed-BoW space of captions and of co-caption means."""
    rows = sorted(captions.to_pylist(), key=lambda r: r["caption_id"])
    vectors = hashed_bow([r["text"] for r in rows])
    caption_set = EmbeddingSet([r["caption_id"] for r in rows], vectors)
    by_image: dict[str, list[int]] = {}
    for n, r in enumerate(rows):
        by_image.setdefault(r["image_id"], []).append(n)
    images = sorted(by_image)
    means = EmbeddingSet(
        images, np.stack([cocaption_mean([rows[n]["caption_id"] for n in by_image[i]], vectors[by_image[i]]) for i in images])
    )
    return {
        STS: [Space("bow", caption_set, caption_set)],
        SIS: [Space("bow", means, means)],
        SITS: [Space("bow", caption_set, means)],
        VERIFY: [Space("bow", means, caption_set)],
    }


WORDS = ["dog", "cat", "man", "woman", "bike", "car", "tree", "beach", "kite", "snow", "pizza", "train", "horse", "boat", "clock", "bus"]


def small_tables(n_images: int = 30) -> tuple[pa.Table, pa.Table]:
    images = pa.table(
        {
            "image_id": [image(i) for i in range(n_images)],
            "path": [f"gs://bucket/imgs/{i:02d}.jpg" for i in range(n_images)],
            "pixels": ["ok"] * n_images,
        }
    )
    texts = [
        f'a {WORDS[i % 16]} and a {WORDS[(3 * i + k) % 16]} near the {WORDS[(5 * i) % 16]}, "quoted"'
        for i in range(n_images)
        for k in range(2)
    ]
    captions = pa.table(
        {
            "caption_id": [caption(i, k) for i in range(n_images) for k in range(2)],
            "image_id": [image(i) for i in range(n_images) for _ in range(2)],
            "text": texts,
        }
    )
    return captions, images


def small_round(seed: int = 5) -> tuple[pa.Table, Catalog]:
    captions, images = small_tables()
    catalog = Catalog.from_tables(captions, images)
    rows = [("c2c_isim", caption(i, 0), caption(i + 1, 1)) for i in range(12)]
    rows += [("i2i_csim", image(i), image(i + 3)) for i in range(11)]
    rows += [("c2i_intrasim", caption(i, 1), image(i + 2)) for i in range(9)]
    candidates = pa.table({"method": [r[0] for r in rows], "id1": [r[1] for r in rows], "id2": [r[2] for r in rows]})
    items, _ = items_from_candidates(candidates, catalog)
    verify, _ = verify_items(
        pa.table({"image_id": [image(i) for i in range(7)], "caption_id": [caption(i + 4, 0) for i in range(7)]}), catalog
    )
    params = TaskParams(batch_size=8, negative_quantile=0.5)
    tasks = build_tasks(pa.concat_tables([items, verify]), catalog, text_spaces(captions), params, seed)
    return tasks, catalog


@pytest.fixture(scope="module")
def round_() -> tuple[pa.Table, Catalog]:
    return small_round()


def expected_value(item: str, worker: str) -> float | str:
    """The answer a simulated worker gives: a fixed function of item and worker."""
    h = zlib.crc32(f"{item}/{worker}".encode())
    return VERIFY_ANSWERS[h % 4] if item.startswith("verify:") else (h % 51) / 10


def expected(tasks: pa.Table) -> set[tuple[str, str, object]]:
    return {(item, w, expected_value(item, w)) for item in tasks.column("item_id").to_pylist() for w in WORKERS}


def kept(judgments: pa.Table) -> set[tuple[str, str, object]]:
    return {(r["item_id"], r["worker"], r["answer"] if r["task_type"] == VERIFY else r["score"]) for r in judgments.to_pylist()}


def value_key(kind: str) -> str:
    return "score" if task_type(kind).rated else "answer"


# ---------------------------------------------------------------------------- export layout


def test_formats_are_chosen_by_name():
    assert TASK_FORMATS.names() == ["crowd-csv", "jsonl", "label-studio"]
    assert JUDGMENT_FORMATS.names() == ["crowd-csv", "csv", "jsonl", "label-studio", "store"]


def exported(spec: str, tasks: pa.Table, catalog: Catalog, replicas: int) -> dict[str, bytes]:
    """One format's files, by path inside its folder."""
    return {path.removeprefix(f"export/{spec}/"): data for path, data in export_tasks([spec], tasks, catalog, replicas)}


def test_every_format_keeps_gold_out_of_rater_files_and_in_the_answer_key(round_):
    tasks, catalog = round_
    gold = {(r["batch_id"], r["position"], r["item_id"], r["gold"]) for r in tasks.to_pylist() if r["gold"]}
    assert {g[3] for g in gold} == {GOLD_POSITIVE, GOLD_NEGATIVE}
    for path, data in export_tasks(TASK_FORMATS.names(), tasks, catalog, REPLICAS):
        text = data.decode().lower()
        assert "gold" not in text and "sampling_method" not in text and "negative" not in text, path
    key = list(csv.DictReader(io.StringIO(answer_key(tasks).decode())))
    assert {(r["batch_id"], int(r["position"]), r["item_id"], r["gold"]) for r in key} == gold


def test_export_layouts(round_):
    tasks, catalog = round_
    types = ("sis", "sits", "sts", "verify")
    assert {path for path, _ in export_tasks(["jsonl", "crowd-csv", "label-studio"], tasks, catalog, REPLICAS)} == (
        {"export/jsonl/batches.jsonl"}
        | {f"export/crowd-csv/{t}.{f}" for t in types for f in ("csv", "instructions.txt")}
        | {f"export/label-studio/{t}/{f}" for t in types for f in ("tasks.json", "config.xml")}
    )


def test_jsonl_batches_are_self_contained(round_):
    tasks, catalog = round_
    lines = exported("jsonl", tasks, catalog, REPLICAS)["batches.jsonl"].decode().splitlines()
    batches = [json.loads(line) for line in lines]
    assert [b["batch_id"] for b in batches] == sorted(set(tasks.column("batch_id").to_pylist()))
    for b in batches:
        assert b["replicas"] == REPLICAS and b["instructions"]
        assert [i["position"] for i in b["items"]] == list(range(1, len(b["items"]) + 1))
        for i in b["items"]:
            for side, kind in zip(("a", "b"), task_type(b["task_type"]).kinds, strict=True):
                field = "text" if kind == "cap" else "image"
                assert set(i[side]) == {"id", field}
                assert i[side][field] == (catalog.texts[i[side]["id"]] if field == "text" else catalog.paths[i[side]["id"]])


def test_crowd_csv_columns_are_template_variables(round_):
    tasks, catalog = round_
    files = exported("crowd-csv", tasks, catalog, REPLICAS)
    for kind, (a, b) in {STS: ("text", "text"), SIS: ("image", "image"), SITS: ("text", "image"), VERIFY: ("image", "text")}.items():
        rows = list(csv.DictReader(io.StringIO(files[f"{kind.lower()}.csv"].decode())))
        assert list(rows[0])[:7] == ["batch_id", "task_type", "replicas", "n_items", "item_1_id", f"item_1_a_{a}", f"item_1_b_{b}"]
        assert {r["replicas"] for r in rows} == {str(REPLICAS)}
        for r in rows:  # positions beyond a short batch are empty
            n = int(r["n_items"])
            assert all(r[f"item_{i}_id"] for i in range(1, n + 1)) and not any(r.get(f"item_{i}_id") for i in range(n + 1, 20))


def test_crowd_csv_escapes_html_and_label_studio_keeps_text_as_text():
    # Crowd platforms paste ${item_<i>_a_text} into the page raw; Label Studio's <Text> shows text.
    texts = ["<script>alert(1)</script>", 'a "quoted" dog\'s <b>bone</b> & a cat', '=HYPERLINK("http://x","y")']
    items = tuple(
        BatchItem(f"sts:t:cap:{i}|t:cap:{i + 10}", i + 1, Side(f"t:cap:{i}", "text", text), Side(f"t:cap:{i + 10}", "text", "plain"))
        for i, text in enumerate(texts)
    )
    image = BatchItem("sis:t:img:1|t:img:2", 1, Side("t:img:1", "image", 'x.jpg" onerror="alert(1)'), Side("t:img:2", "image", "a?b=1&c=2"))
    batches = [Batch("b1", STS, items), Batch("b2", SIS, (image,))]
    files = TASK_FORMATS.create("crowd-csv").write(batches, REPLICAS)
    sts = next(csv.DictReader(io.StringIO(files["sts.csv"].decode())))
    assert [sts[f"item_{i}_a_text"] for i in (1, 2, 3)] == [
        "&lt;script&gt;alert(1)&lt;/script&gt;",
        "a &quot;quoted&quot; dog&#x27;s &lt;b&gt;bone&lt;/b&gt; &amp; a cat",
        "'=HYPERLINK(&quot;http://x&quot;,&quot;y&quot;)",  # escaped, then guarded against formulas
    ]
    assert "<script>" not in files["sts.csv"].decode()
    assert sts["item_1_id"] == "sts:t:cap:0|t:cap:10"  # ids are not escaped: results files echo them back
    sis = next(csv.DictReader(io.StringIO(files["sis.csv"].decode())))
    assert (sis["item_1_a_image"], sis["item_1_b_image"]) == ("x.jpg&quot; onerror=&quot;alert(1)", "a?b=1&amp;c=2")
    studio = json.loads(TASK_FORMATS.create("label-studio").write(batches, REPLICAS)["sts/tasks.json"])
    assert [t["data"]["text_a"] for t in studio] == texts  # raw: <Text> renders it as text, never as HTML
    assert {e.tag for e in ElementTree.fromstring(label_studio_config(STS)) if "value" in e.attrib and e.get("value").startswith("$")} == {
        "Text"
    }


# Adversarial text: quotes, backslashes, control characters, line and paragraph separators, lone surrogates.
NASTY = st.text(st.one_of(st.sampled_from('"\\/\n\r\t\x00\x1f\x7f\u2028\u2029\ud800\udfff\ufeff{}[],: '), st.characters()), max_size=12)


@fuzz(300)
@given(
    st.lists(
        st.dictionaries(
            st.one_of(NASTY, st.sampled_from(["text_a", "image_b", "position"])), st.one_of(NASTY, st.integers()), min_size=1, max_size=8
        ),
        max_size=5,
    )
)
def test_label_studio_json_is_json_dumps_indented(data):
    assert studio_json(data) == json.dumps([{"data": d} for d in data], sort_keys=True, ensure_ascii=False, indent=1)


def test_label_studio_configs_use_the_rating_controls():
    for kind in (STS, SIS, SITS):
        root = ElementTree.fromstring(label_studio_config(kind))
        number = root.find("Number")
        assert number is not None
        assert (number.get("name"), number.get("min"), number.get("max"), number.get("step")) == ("score", "0", "5", "0.1")
        assert number.get("toName") in {e.get("name") for e in root if e.tag in ("Text", "Image")}
        assert "(5) " in root.find("View/Header").get("value")  # the scale, newlines kept
    root = ElementTree.fromstring(label_studio_config(VERIFY))
    assert [c.get("value") for c in root.find("Choices")] == list(VERIFY_ANSWERS)
    assert [e.tag for e in root if e.tag in ("Image", "Text")] == ["Image", "Text"]


def test_export_is_deterministic_and_refuses_unshowable_ids(round_):
    tasks, catalog = round_
    again, _ = small_round()
    for spec in TASK_FORMATS.names():
        assert exported(spec, tasks, catalog, REPLICAS) == exported(spec, again, catalog, REPLICAS)
    other, _ = small_round(seed=6)
    assert exported("jsonl", other, catalog, REPLICAS) != exported("jsonl", tasks, catalog, REPLICAS)
    captions, images = small_tables()
    blind = Catalog.from_tables(captions, images.set_column(2, "pixels", pa.array(["missing"] * images.num_rows)))
    with pytest.raises(ExportError, match=r"\d+ ids in the tasks table cannot be shown"):
        exported("jsonl", tasks, blind, REPLICAS)


# ---------------------------------------------------------------------------- round trips


def fill_jsonl(files: dict[str, bytes]) -> bytes:
    """A custom tool's canonical output; symmetric pairs are written in the reversed order."""
    out = []
    for line in files["batches.jsonl"].decode().splitlines():
        batch = json.loads(line)
        for w, worker in enumerate(WORKERS):
            for i in batch["items"]:
                record = {"worker": worker, "seconds": 3.5, "time": f"2026-01-02T10:{w:02d}:{i['position']:02d}+01:00"}
                if batch["task_type"] in (STS, SIS):
                    record |= {"task_type": batch["task_type"], "id_a": i["b"]["id"], "id_b": i["a"]["id"]}
                else:
                    record["item_id"] = i["item_id"]
                record[value_key(batch["task_type"])] = expected_value(i["item_id"], worker)
                out.append(json.dumps(record))
    return ("\n".join(out) + "\n").encode()


def fill_csv(tasks: pa.Table) -> bytes:
    buffer = io.StringIO()
    writer = csv.writer(buffer)
    writer.writerow(["item_id", "worker", "score", "answer", "seconds", "time"])
    for r in tasks.to_pylist():
        for worker in WORKERS:
            value = expected_value(r["item_id"], worker)
            writer.writerow(
                [r["item_id"], worker, "" if isinstance(value, str) else value, value if isinstance(value, str) else "", "", ""]
            )
    return buffer.getvalue().encode()


def fill_crowd_csv(files: dict[str, bytes]) -> dict[str, bytes]:
    """MTurk's batch results: HIT/assignment columns, Input.* copied from the input CSV, Answer.*."""
    out = {}
    for name, data in files.items():
        if not name.endswith(".csv"):
            continue
        inputs = list(csv.DictReader(io.StringIO(data.decode())))
        width = max(int(r["n_items"]) for r in inputs)
        kind = inputs[0]["task_type"]
        answer_columns = [f"Answer.item_{i}_{value_key(kind)}" for i in range(1, width + 1)]
        header = ["HITId", "AssignmentId", "WorkerId", "AssignmentStatus", "AcceptTime", "SubmitTime", "WorkTimeInSeconds"]
        header += [f"Input.{c}" for c in inputs[0]] + answer_columns + ["Approve", "Reject"]
        buffer = io.StringIO()
        writer = csv.DictWriter(buffer, header)  # MTurk writes CRLF line ends
        writer.writeheader()
        for h, row in enumerate(inputs):
            for w, worker in enumerate(WORKERS):
                result = {"HITId": f"HIT{h}", "AssignmentId": f"A{h}{w}", "WorkerId": worker, "AssignmentStatus": "Submitted"}
                result |= {
                    "AcceptTime": "Tue Jan 20 10:00:00 PST 2026",
                    "SubmitTime": f"Tue Jan 20 10:{w + 10}:00 PST 2026",
                    "WorkTimeInSeconds": "600",
                }
                result |= {f"Input.{c}": v for c, v in row.items()}
                for i in range(1, int(row["n_items"]) + 1):
                    result[answer_columns[i - 1]] = expected_value(row[f"item_{i}_id"], worker)
                writer.writerow(result)
        out[f"results-{name}"] = buffer.getvalue().encode()
    return out


def fill_label_studio(files: dict[str, bytes]) -> dict[str, bytes]:
    """Label Studio's JSON export: the imported tasks with ids and annotations."""
    out = {}
    for name, data in files.items():
        if not name.endswith("tasks.json"):
            continue
        tasks = json.loads(data)
        for t, task in enumerate(tasks):
            task |= {"id": 1000 + t, "project": 7, "created_at": "2026-01-01T00:00:00Z"}
            control = "score" if task["data"]["task_type"] != VERIFY else "answer"
            target = "text_a" if "text_a" in task["data"] else "image_a"
            task["annotations"] = []
            for w, worker in enumerate(WORKERS):
                value = expected_value(task["data"]["item_id"], worker)
                result = {"number": value} if control == "score" else {"choices": [value]}
                completed_by = {"id": w + 1, "email": worker} if w else worker  # both export styles
                task["annotations"].append(
                    {
                        "id": 50 * t + w,
                        "completed_by": completed_by,
                        "result": [
                            {
                                "id": f"r{t}{w}",
                                "from_name": control,
                                "to_name": target,
                                "type": "number" if control == "score" else "choices",
                                "value": result,
                                "origin": "manual",
                            }
                        ],
                        "was_cancelled": False,
                        "ground_truth": False,
                        "created_at": f"2026-01-03T08:00:{w:02d}.250000Z",
                        "lead_time": 6.25,
                        "task": 1000 + t,
                    }
                )
        out[f"export-{name.replace('/', '-')}"] = json.dumps(tasks, indent=2).encode()
    return out


def read_all(spec: str, files: dict[str, bytes]) -> list:
    reader = JUDGMENT_FORMATS.create(spec)
    return [record for name, data in sorted(files.items()) for record in reader.read(name, data)]


@pytest.mark.parametrize("spec", ["jsonl", "csv", "crowd-csv", "label-studio"])
def test_round_trip(round_, spec: str):
    tasks, catalog = round_
    fill = {
        "jsonl": lambda: {"judgments.jsonl": fill_jsonl(exported("jsonl", tasks, catalog, REPLICAS))},
        "csv": lambda: {"judgments.csv": fill_csv(tasks)},
        "crowd-csv": lambda: fill_crowd_csv(exported("crowd-csv", tasks, catalog, REPLICAS)),
        "label-studio": lambda: fill_label_studio(exported("label-studio", tasks, catalog, REPLICAS)),
    }[spec]
    judgments, rejected = validate(read_all(spec, fill()), tasks)
    assert rejected == []
    assert kept(judgments) == expected(tasks)
    assert judgments.num_rows == tasks.num_rows * REPLICAS
    assert set(judgments.column("batch_id").to_pylist()) == set(tasks.column("batch_id").to_pylist())


def test_round_trip_keeps_seconds_and_times_as_the_platform_gives_them(round_):
    tasks, catalog = round_
    sizes = Counter(tasks.column("batch_id").to_pylist())
    crowd, _ = validate(read_all("crowd-csv", fill_crowd_csv(exported("crowd-csv", tasks, catalog, REPLICAS))), tasks)
    for r in crowd.to_pylist():
        assert r["seconds"] == pytest.approx(600 / sizes[r["batch_id"]])  # WorkTimeInSeconds split evenly
        assert r["time"] == f"2026-01-20T18:{10 + WORKERS.index(r['worker'])}:00Z"  # PST → UTC
    first = sorted(set(tasks.column("batch_id").to_pylist()))[0]  # a top-up batch: some of its rows, as topup exports them
    shown = tasks.filter(pc.equal(tasks.column("batch_id"), first)).slice(0, 3)
    topped, _ = validate(read_all("crowd-csv", fill_crowd_csv(exported("crowd-csv", shown, catalog, 1))), tasks)
    assert topped.num_rows == 3 * len(WORKERS) and set(topped.column("seconds").to_pylist()) == {200.0}  # over what was shown
    studio, _ = validate(read_all("label-studio", fill_label_studio(exported("label-studio", tasks, catalog, REPLICAS))), tasks)
    assert set(studio.column("seconds").to_pylist()) == {6.25}
    assert studio.to_pylist()[0]["time"].endswith(".250000Z")
    canonical, _ = validate(read_all("jsonl", {"j.jsonl": fill_jsonl(exported("jsonl", tasks, catalog, REPLICAS))}), tasks)
    assert canonical.to_pylist()[0]["time"].startswith("2026-01-02T09:")  # +01:00 → UTC


def test_label_studio_reader_reports_unusable_files():
    reader = JUDGMENT_FORMATS.create("label-studio")
    with pytest.raises(JudgmentFileError, match="export.json: not a JSON document"):
        reader.read("export.json", b"{nope")
    with pytest.raises(JudgmentFileError, match="is a list of tasks"):
        reader.read("export.json", b"{}")
    with pytest.raises(JudgmentFileError, match="bad.csv: not UTF-8"):
        JUDGMENT_FORMATS.create("csv").read("bad.csv", b"item_id\n\xff\n")


# ---------------------------------------------------------------------------- demo data


@pytest.fixture(scope="module")
def demo_items(demo_chain: Path) -> Path:
    """The ingest stage's output on the embedded demo dataset (97 real COCO photos, 485 captions)."""
    return demo_chain / "items"


def test_demo_round_trip_on_real_tables(demo_items: Path):
    captions, images = pq.read_table(demo_items / "captions.parquet"), pq.read_table(demo_items / "images.parquet")
    catalog = Catalog.from_tables(captions, images)
    by_image: dict[str, list[str]] = {}
    for r in captions.to_pylist():
        by_image.setdefault(r["image_id"], []).append(r["caption_id"])
    image_ids = sorted(by_image)
    pairs = [(C2C_COCAPTION, c.id1, c.id2) for c in cocaption_pairs(by_image, 40, seed=1)]
    pairs += [("i2i_csim", image_ids[i], image_ids[i + 1]) for i in range(0, 60, 2)]
    pairs += [("c2i_original", by_image[i][0], i) for i in image_ids[:20]]
    candidates = pa.table({"method": [p[0] for p in pairs], "id1": [p[1] for p in pairs], "id2": [p[2] for p in pairs]})
    items, rejected = items_from_candidates(candidates, catalog)
    assert rejected == [] and items.num_rows == 90
    tasks = build_tasks(items, catalog, text_spaces(captions), TaskParams(), seed=20260701)
    assert Counter(r["gold"] for r in tasks.to_pylist()) == {"": 90, GOLD_POSITIVE: 7, GOLD_NEGATIVE: 7}  # 3 STS, 2 SIS, 2 SITS batches
    files = exported("crowd-csv", tasks, catalog, replicas=5)
    first_sis = next(csv.DictReader(io.StringIO(files["sis.csv"].decode())))
    assert Path(first_sis["item_1_a_image"]).is_file()  # the path the images table gives
    first_sts = next(csv.DictReader(io.StringIO(files["sts.csv"].decode())))
    assert first_sts["item_1_a_text"] == catalog.texts[tasks.filter(pc.equal(tasks["item_id"], first_sts["item_1_id"]))["id_a"][0].as_py()]
    judgments, rejected = validate(read_all("crowd-csv", fill_crowd_csv(files)), tasks)
    assert rejected == [] and kept(judgments) == expected(tasks)
    original = item_id(SITS, by_image[image_ids[0]][0], image_ids[0])
    assert original in set(judgments.column("item_id").to_pylist())
