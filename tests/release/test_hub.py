"""The card's Hugging Face header (``release/hub``) on small tables: which table is which config
and split, which label columns are class labels, and YAML that reads back as written."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import yaml

from crisscross.release.hub import FULL, RESERVED_SPLITS, SPLIT_NAME, config_of, front_matter, hub_metadata, label_names
from crisscross.tasktypes.verify import ANSWERS
from crisscross.tasktypes.verify_triple import ANSWERS as TRIPLE_ANSWERS


def pairs(*types: str) -> pa.Table:
    return pa.table({"task_type": list(types), "item_id": [f"i{n}" for n in range(len(types))], "agg_label": [None] * len(types)})


def test_a_per_split_table_is_its_types_config_and_any_other_a_config_of_its_own() -> None:
    assert config_of("sts_test") == ("sts", "test") and config_of("verify_val") == ("verify", "val")
    assert config_of("pairs") == ("pairs", FULL) and config_of("qc_exclusions") == ("qc_exclusions", FULL)
    assert config_of("bison/triples") == ("bison_triples", FULL) and config_of("machine_labels/labels") == ("machine_labels_labels", FULL)


def test_labels_are_class_labels_only_where_every_answered_type_has_fixed_answers() -> None:
    assert label_names(pairs("STS", "VERIFY")) == list(ANSWERS)
    assert label_names(pairs("VERIFY-TRIPLE", "VERIFY")) == [*ANSWERS, *TRIPLE_ANSWERS]  # in the types' order
    assert label_names(pairs("STS", "SITS")) is None  # rated types have no answers
    assert label_names(pairs("CHOOSE", "VERIFY-TRIPLE")) is None  # CHOOSE's answers are each item's options
    assert label_names(pa.table({"image_id": ["a"]})) is None


def test_the_header_reads_back_as_the_metadata_with_every_split_of_a_type(tmp_path: Path) -> None:
    data = tmp_path / "data"
    (data / "bison").mkdir(parents=True)
    tables = {
        "sts_test": pa.table({"id_a": ["a"], "agg_score": [1.5], "n": [3], "positive": [True], "agg_label": pa.nulls(1)}),
        "sts_val": pa.table(
            {"id_a": ["b", "c"], "agg_score": [2.0, 0.5], "n": [2, 5], "positive": [False, True], "agg_label": pa.nulls(2)}
        ),
        "pairs": pairs("VERIFY", "STS"),
        "bison/triples": pa.table({"caption_text": ["a caption"], "similarity": [0.25]}),
        "sis_x: 'y' #z\n---": pa.table({"id_a": ["a"]}),  # a split named by the source: its own config, the dumper quotes it
        "sis_all": pa.table({"id_a": ["b"]}),  # items without a split: "all" is datasets' own word
        "sis_test": pa.table({"id_a": ["c"]}),
        "qc_exclusions": pa.table({"rater": pa.array([], pa.string())}),  # no rows: no config (datasets refuses an empty split)
    }
    for key, table in tables.items():
        pq.write_table(table, data / f"{key}.parquet")
    text = front_matter(tmp_path)
    assert text.startswith("---\n") and text.endswith("\n---\n") and text.count("\n---\n") == 1
    meta = yaml.safe_load(text.removeprefix("---\n").removesuffix("---\n"))
    assert meta == hub_metadata({k: pq.read_table(data / f"{k}.parquet") for k in tables})
    configs = {c["config_name"]: c for c in meta["configs"]}
    weird = "sis_x: 'y' #z\n---"
    assert list(configs) == ["bison_triples", "pairs", "sis", "sis_all", weird, "sts"] and configs["pairs"]["default"] is True
    assert configs["sis"]["data_files"] == [{"split": "test", "path": "data/sis_test.parquet"}]
    assert configs["sis_all"]["data_files"] == [{"split": "full", "path": "data/sis_all.parquet"}]
    assert configs[weird]["data_files"] == [{"split": "full", "path": f"data/{weird}.parquet"}]
    splits = {f["split"] for c in configs.values() for f in c["data_files"]}
    assert all(SPLIT_NAME.fullmatch(s) for s in splits) and not splits & RESERVED_SPLITS  # names datasets takes
    assert configs["sts"]["data_files"] == [
        {"split": "test", "path": "data/sts_test.parquet"},
        {"split": "val", "path": "data/sts_val.parquet"},
    ]
    info = {i["config_name"]: i for i in meta["dataset_info"]}
    assert [(s["name"], s["num_examples"]) for s in info["sts"]["splits"]] == [("test", 1), ("val", 2)]
    sts = {f["name"]: f["dtype"] for f in info["sts"]["features"]}
    assert sts == {"id_a": "string", "agg_score": "float64", "n": "int64", "positive": "bool", "agg_label": "string"}
    assert {f["name"]: f["dtype"] for f in info["pairs"]["features"]}["agg_label"] == {"class_label": {"names": dict(enumerate(ANSWERS))}}
