"""Ground truth loaders against the real CxC / COCO / ECCV data, and id → index mapping."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from crisscross.core.errors import InputError
from crisscross.core.registry import UnknownNameError
from crisscross.scoring.truths import GROUND_TRUTHS, GroundTruth, load_cxc, load_eccv


@pytest.fixture(scope="module")
def test5k(shared_data: Path) -> pd.DataFrame:
    return pd.read_json(shared_data / "coco-karpathy" / "test5k.jsonl", lines=True)


@pytest.fixture(scope="module")
def cxc_test(shared_data: Path, test5k: pd.DataFrame) -> tuple[GroundTruth, dict]:
    return GROUND_TRUTHS.create(f"cxc:{shared_data / 'cxc'}", captions=test5k, split="test")


def test_positives_maps_ids_to_indices_and_counts_missing() -> None:
    truth = GroundTruth(
        name="hand",
        i2t=frozenset(
            {
                ("coco:img:1", "coco:cap:10"),
                ("coco:img:1", "coco:cap:11"),
                ("coco:img:2", "coco:cap:12"),
                ("coco:img:2", "coco:cap:99"),
                ("coco:img:3", "coco:cap:10"),
            }
        ),
    )
    mapped = truth.positives(
        "i2t",
        ["coco:img:2", "coco:img:1"],
        ["coco:cap:12", "coco:cap:11", "coco:cap:10"],
    )
    positives, missing = mapped
    assert missing == 1  # coco:cap:99 is not in the gallery; coco:img:3 is not a query: ignored
    assert positives.indptr.tolist() == [0, 1, 3]
    assert positives.indices.tolist() == [
        0,
        1,
        2,
    ]  # img:2 → cap:12 (col 0); img:1 → cap:11, cap:10
    with pytest.raises(ValueError, match="twice"):
        truth.positives("i2t", ["coco:img:1", "coco:img:1"], ["coco:cap:10"])
    with pytest.raises(ValueError, match="unknown task"):
        truth.positives("x2y", [], [])


def test_registry_names_and_errors(tmp_path: Path) -> None:
    assert GROUND_TRUTHS.names() == ["coco", "cxc", "cxc-eccv", "eccv", "eccv-gallery", "release"]
    with pytest.raises(UnknownNameError):
        GROUND_TRUTHS.create("nope")
    with pytest.raises(ValueError, match="split"):
        load_cxc(tmp_path, split="train")


def test_coco_rejects_bad_ids_and_keeps_the_rest() -> None:
    table = pa.table(
        {
            "caption_id": ["10", "11", "12", None, "13", "10"],
            "image_id": [
                "1",
                "COCO_val2014_000000000001.jpg",
                "1",
                "2",
                "COCO_val2014_x.jpg",
                "1",
            ],
        }
    )
    truth, report = GROUND_TRUTHS.create("coco", captions=table)
    assert truth.i2t == {("coco:img:1", f"coco:cap:{c}") for c in (10, 11, 12)}
    assert len(truth.t2t) == 6 and ("coco:cap:10", "coco:cap:10") not in truth.t2t
    assert [(r.reason, r.source) for r in report["rejected"]] == [
        ("bad-id", "captions:3"),
        ("bad-id", "captions:4"),
    ]
    assert report["repeated_rows"] == 1


def test_coco_karpathy_test(test5k: pd.DataFrame) -> None:
    truth, report = GROUND_TRUTHS.create("coco", captions=pa.Table.from_pandas(test5k))
    assert report["rejected"] == []
    assert report["counts"] == {
        "i2t": 25_000,
        "t2i": 25_000,
        "t2t": 100_000,
        "i2i": 0,
        "sts": 0,
        "sis": 0,
        "sits": 0,
    }
    assert report["images"] == 5_000
    assert ("coco:img:391895", "coco:cap:770337") in truth.i2t


def test_cxc_test_counts_match_published(cxc_test: tuple[GroundTruth, dict]) -> None:
    truth, report = cxc_test
    assert report["rejected"] == []
    assert report["rows"] == {"sts": 44_045, "sis": 46_719, "sits": 44_833}
    # The README's positives are rows (release rows with score >= threshold), not pairs:
    assert report["positive_rows"] == {"sts": 16_184, "sis": 21_816, "sits": 35_585}
    # SIS holds 2,863 pairs in both orders; 512 of them straddle the 2.5 threshold.
    assert report["repeated_pairs"] == {"sts": 0, "sis": 2_863, "sits": 0}
    assert report["straddling_pairs"]["sis"] == 512
    # one rating per unordered pair; mean rule → 19,990 SIS positive pairs
    assert len(truth.sis) == 46_719 - 2_863 == 43_856
    assert len(truth.sts) == 44_045 and len(truth.sits) == 44_833
    assert report["positive_pairs"] == {"sts": 16_184, "sis": 19_990, "sits": 35_585}
    # t2t = STS positives ∪ co-captions (20 directed pairs per image); 15,601 of the 16,184
    # STS positive pairs are co-captions (mostly from c2c_cocaption sampling)
    assert len(truth.i2i) == 2 * 19_990
    assert report["cocaption_positive_overlap"] == 2 * 15_601
    assert len(truth.t2t) == 2 * 16_184 + 5_000 * 20 - 2 * 15_601 == 101_166
    # i2t = SITS positives ∪ 25,000 original pairs: 29 originals rated < 3 are kept
    assert report["original_pairs"] == 25_000 and report["original_only"] == 29
    assert len(truth.i2t) == len(truth.t2i) == 35_585 + 29 == 35_614
    assert report["new_positives"] == 35_614 - 25_000


def test_cxc_duplicate_rule_any_and_val_split(shared_data: Path) -> None:
    truth, report = load_cxc(shared_data / "cxc", duplicate_rule="any")
    assert report["positive_pairs"]["sis"] == 20_246  # a pair passes if either of its rows does
    assert len(truth.i2t) == 35_585  # no captions table: SITS positives only
    rows = load_cxc(shared_data / "cxc", split="val")[1]["rows"]
    assert rows == {"sts": 44_009, "sis": 42_767, "sits": 44_722}


def test_cxc_positives_match_eccv_package_cxc_file(
    cxc_test: tuple[GroundTruth, dict],
) -> None:
    from crisscross.scoring.truths import _read_associations, eccv_data_dir

    pytest.importorskip("eccv_caption")
    packaged, _ = _read_associations(eccv_data_dir() / "cxc_caption_to_image.json", ("cap", "img"))
    sits_pos = {(c, i) for c, i, s in cxc_test[0].sits if s >= 3}
    assert packaged == sits_pos  # the package's "cxc" is SITS >= 3 without the original pairs


def test_eccv_positives(test5k: pd.DataFrame) -> None:
    pytest.importorskip("eccv_caption")
    truth, report = GROUND_TRUTHS.create("eccv")
    assert report["rejected"] == []
    assert report["queries"] == {"i2t": 1_261, "t2i": 1_332}
    assert len(truth.i2t) == 22_550 and len(truth.t2i) == 11_279
    original, _ = GROUND_TRUTHS.create("coco", captions=test5k)
    image_queries = {q for q, _ in truth.i2t}
    caption_queries = {q for q, _ in truth.t2i}
    orig_i2t = {p for p in original.i2t if p[0] in image_queries}
    orig_t2i = {p for p in original.t2i if p[0] in caption_queries}
    assert len(orig_i2t) == 6_305 and len(orig_t2i) == 1_332
    # Every caption query keeps its original image; 9 original captions of image queries were
    # removed by ECCV Caption's filtering of meaningless / wrong captions.
    assert orig_t2i <= truth.t2i
    assert len(orig_i2t - truth.i2t) == 9
    positives, missing = truth.positives(
        "t2i",
        sorted(caption_queries),
        sorted({i for i in test5k.image_id.map("coco:img:{}".format)}),
    )
    assert missing == 0 and positives.n_queries == 1_332 and int(positives.counts.sum()) == 11_279
    assert np.all(positives.counts >= 1)


def test_release_uses_the_aggregate_positives_and_merges_originals(tmp_path: Path) -> None:
    rated = pa.table(
        {
            "task_type": ["STS", "STS", "SIS", "SITS"],
            "id_a": ["coco:cap:1", "coco:cap:1", "coco:img:1", "coco:cap:3"],
            "id_b": ["coco:cap:3", "coco:cap:4", "coco:img:2", "coco:img:1"],
            "agg_score": [4.2, 1.0, 3.0, 3.5],
            "positive": [True, False, True, True],
            "simulated": [True, True, True, True],
        }
    )
    pq.write_table(rated, tmp_path / "rated.parquet")
    captions = pa.table({"caption_id": ["coco:cap:1", "coco:cap:2", "coco:cap:3"], "image_id": ["coco:img:1", "coco:img:1", "coco:img:2"]})
    truth, report = GROUND_TRUTHS.create(f"release:{tmp_path}", captions=captions)
    assert truth.t2t == {
        ("coco:cap:1", "coco:cap:3"),
        ("coco:cap:3", "coco:cap:1"),
        ("coco:cap:1", "coco:cap:2"),
        ("coco:cap:2", "coco:cap:1"),
    }
    assert truth.i2i == {("coco:img:1", "coco:img:2"), ("coco:img:2", "coco:img:1")}
    assert truth.t2i == {
        ("coco:cap:3", "coco:img:1"),
        ("coco:cap:1", "coco:img:1"),
        ("coco:cap:2", "coco:img:1"),
        ("coco:cap:3", "coco:img:2"),
    }
    assert truth.sts == (("coco:cap:1", "coco:cap:3", 4.2), ("coco:cap:1", "coco:cap:4", 1.0))
    assert "SIMULATED" in truth.notes["simulated"] and report["rated_items"] == {"STS": 2, "SIS": 1, "SITS": 1}
    with pytest.raises(FileNotFoundError, match="run the aggregate stage"):
        GROUND_TRUTHS.create(f"release:{tmp_path / 'none'}")


def test_release_truth_merges_rounds_and_reads_any_dataset_ids(tmp_path: Path) -> None:
    """``release:a,b``: every round's rated pairs in one truth, originals linked whatever the id
    scheme (a Flickr30k build here), VERIFY positives joining i2t / t2i."""
    import pyarrow.parquet as pq

    from crisscross.scoring.truths import load_release

    columns = ("task_type", "id_a", "id_b", "agg_score", "positive", "simulated")
    rounds = {
        "one": [("STS", "f30k:cap:1#0", "f30k:cap:2#0", 4.0, True, True)],
        "sits": [("SITS", "f30k:cap:2#0", "f30k:img:1", 3.5, True, True)],
        "verify": [
            ("VERIFY", "f30k:img:2", "f30k:cap:1#1", float("nan"), True, True),
            ("VERIFY", "f30k:img:1", "f30k:cap:2#1", float("nan"), False, True),
        ],
    }
    for name, rows in rounds.items():
        (tmp_path / name).mkdir()
        pq.write_table(pa.Table.from_pylist([dict(zip(columns, r, strict=True)) for r in rows]), tmp_path / name / "rated.parquet")
    captions = pa.table(
        {
            "caption_id": ["f30k:cap:1#0", "f30k:cap:1#1", "f30k:cap:2#0", "f30k:cap:2#1"],
            "image_id": ["f30k:img:1", "f30k:img:1", "f30k:img:2", "f30k:img:2"],
        }
    )
    truth, report = load_release(",".join(str(tmp_path / n) for n in rounds), captions=captions)
    assert report["rejected"] == [] and report["verified_positives"] == 1
    originals = {
        ("f30k:cap:1#0", "f30k:img:1"),
        ("f30k:cap:1#1", "f30k:img:1"),
        ("f30k:cap:2#0", "f30k:img:2"),
        ("f30k:cap:2#1", "f30k:img:2"),
    }
    assert truth.t2i == originals | {("f30k:cap:2#0", "f30k:img:1"), ("f30k:cap:1#1", "f30k:img:2")}
    assert ("f30k:cap:1#0", "f30k:cap:2#0") in truth.t2t and ("f30k:cap:1#0", "f30k:cap:1#1") in truth.t2t


def test_an_eccv_folder_python_cannot_read_is_one_line_and_a_query_without_a_list_is_quarantined(tmp_path: Path) -> None:
    # json.loads's RecursionError, data.items() of a list and iterating a number all left as tracebacks
    (tmp_path / "eccv_caption_to_image.json").write_text('{"770337": [391895]}')
    for data in ("[1]", "[" * 100_000 + "]" * 100_000):
        (tmp_path / "eccv_image_to_caption.json").write_text(data)
        with pytest.raises(InputError, match="eccv_image_to_caption.json: ") as raised:
            load_eccv(tmp_path)
        assert len(str(raised.value).splitlines()) == 1
    (tmp_path / "eccv_image_to_caption.json").write_text('{"391895": 770337, "1": [2]}')
    truth, report = load_eccv(tmp_path)
    assert truth.i2t == frozenset({("coco:img:1", "coco:cap:2")})
    assert [(r.reason, r.key) for r in report["rejected"]] == [("malformed-row", "391895")]
