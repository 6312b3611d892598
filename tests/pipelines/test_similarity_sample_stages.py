"""similarity → sample on the full Karpathy test split (25,000 captions, 370 photos)."""

from __future__ import annotations

import csv
import dataclasses
import json
import os
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from apache_beam.transforms.environments import EmbeddedPythonEnvironment

from crisscross.core.ids import CocoIdScheme
from crisscross.embed.sets import EmbeddingSet
from crisscross.pipelines import embed, ingest, sample, similarity
from crisscross.pipelines.stage import for_the_runner, make_pipeline, parse_args, run_stage, worker_processes


@pytest.mark.xdist_group("karpathy")
def test_neighbour_lists_are_exact_and_cover_what_has_vectors(karpathy_test: Path):
    for space, rows in (
        ("text/use-m3/cocaption_mean", 5000),
        ("text/bow-glove50/cocaption_mean", 5000),
        ("image/efficientnet-lite0/images", 370),
    ):
        table = pq.read_table(karpathy_test / "similarity" / space / "neighbours.parquet").to_pandas()
        assert len(table) == rows * 25 and table.query_id.nunique() == rows
        assert (table.query_id != table.neighbour_id).all()
        assert (table.groupby("query_id").similarity.diff().dropna() <= 0).all()
        # Against a direct dense computation for a few queries.
        vectors = EmbeddingSet.read(karpathy_test / "embeddings" / space)
        unit = vectors.vectors / np.linalg.norm(vectors.vectors, axis=1, keepdims=True)
        for row in (0, rows // 2, rows - 1):
            s = unit @ unit[row]
            s[row] = -np.inf
            want = [vectors.ids[i] for i in np.argsort(-s, kind="stable")[:25]]
            got = table[table.query_id == vectors.ids[row]].sort_values("rank")
            assert got.neighbour_id.tolist()[:24] == want[:24]
            np.testing.assert_allclose(got.similarity.to_numpy(), np.sort(s)[::-1][:25], atol=1e-5)
    report = json.loads((karpathy_test / "similarity" / "report.json").read_text())
    assert report["spaces"]["text/use-m3/cocaption_mean"]["rows"] == 5000


@pytest.mark.xdist_group("karpathy")
def test_candidates_follow_the_cxc_recipe(karpathy_test: Path):
    candidates = pq.read_table(karpathy_test / "candidates" / "candidates.parquet").to_pandas()
    counts = candidates.method.value_counts().to_dict()
    # i2i: top-5 under two encoders from 5,000 images, united and deduplicated.
    neighbours = [
        pq.read_table(karpathy_test / "similarity" / s / "neighbours.parquet").to_pandas()
        for s in ("text/use-m3/cocaption_mean", "text/bow-glove50/cocaption_mean")
    ]
    expected_i2i = {tuple(sorted(p)) for t in neighbours for p in t[t["rank"] <= 5][["query_id", "neighbour_id"]].itertuples(index=False)}
    assert counts["i2i_csim"] == len(expected_i2i)
    assert set(zip(*(candidates[candidates.method == "i2i_csim"][c] for c in ("id1", "id2")), strict=True)) == expected_i2i
    image_nn = pq.read_table(karpathy_test / "similarity" / "image/efficientnet-lite0/images" / "neighbours.parquet").to_pandas()
    expected_isim = {tuple(sorted(p)) for p in image_nn[image_nn["rank"] <= 5][["query_id", "neighbour_id"]].itertuples(index=False)}
    assert counts["c2c_isim"] == len(expected_isim) == counts["c2c_cocaption"]
    isim = candidates[candidates.method == "c2c_isim"]
    assert {tuple(sorted(p)) for p in isim[["image1", "image2"]].itertuples(index=False)} == expected_isim
    captions = pq.read_table(karpathy_test / "items" / "captions.parquet").to_pandas().set_index("caption_id").image_id
    assert (captions[isim.id1].to_numpy() == isim.image1.to_numpy()).all()
    cocap = candidates[candidates.method == "c2c_cocaption"]
    assert (captions[cocap.id1].to_numpy() == captions[cocap.id2].to_numpy()).all()
    # No self pair, no pair twice in either order.
    pairs = [tuple(sorted(p)) for p in candidates[["id1", "id2"]].itertuples(index=False)]
    assert len(set(pairs)) == len(pairs) and all(a != b for a, b in pairs)
    first = json.loads(candidates[candidates.method == "i2i_csim"].provenance.iloc[0])
    assert {"space", "query", "rank", "similarity"} == set(first[0])

    scheme = CocoIdScheme()
    with open(karpathy_test / "candidates" / "sts_candidates.csv", newline="") as handle:
        sts = list(csv.DictReader(handle))
    assert list(sts[0]) == ["caption1", "caption2", "sampling_method"]
    assert len(sts) == counts["c2c_isim"] + counts["c2c_cocaption"]
    assert sts[0]["caption1"].startswith("COCO_val2014:sentid:") and scheme.parse_caption(sts[0]["caption1"]) in set(candidates.id1)
    with open(karpathy_test / "candidates" / "sis_candidates.csv", newline="") as handle:
        sis = list(csv.DictReader(handle))
    assert len(sis) == counts["i2i_csim"] and sis[0]["image1"].startswith("COCO_val2014_")
    report = json.loads((karpathy_test / "candidates" / "report.json").read_text())
    written = ["candidates.parquet", "quarantine.parquet", "report.json", "sis_candidates.csv", "sts_candidates.csv"]
    assert sorted(path.name for path in (karpathy_test / "candidates").iterdir()) == written  # the shards are gone
    assert report["coverage"]["image/efficientnet-lite0/images"] == {"images": 370, "left_out": 4630}
    assert "4630 with pixels missing" in report["summary"]["image/efficientnet-lite0/images"]


MULTI = ["--direct_num_workers=2", "--direct_running_mode=multi_processing"]


def test_similarity_ingest_and_sample_run_in_one_local_process_however_many_are_asked_for():
    """Similarity's blocks already use every core of a process, and ingest's and sample's second
    process would ship more records and tables than it takes work over: more local processes would only cost."""
    args, notes = for_the_runner(similarity.STAGE, MULTI)
    runner = make_pipeline(args).runner
    assert worker_processes(args) == 1 and isinstance(runner._default_environment, EmbeddedPythonEnvironment)  # no worker command
    assert notes == (
        f"ran in one local process on its {os.cpu_count()} cores, not the 2 processes asked for: on one machine a second process costs this stage more than it takes over",
    )
    assert for_the_runner(ingest.STAGE, MULTI) == for_the_runner(sample.STAGE, MULTI) == for_the_runner(similarity.STAGE, MULTI)
    assert for_the_runner(embed.STAGE, MULTI) == (MULTI, ())  # a stage that gains from a second process keeps it
    portable = [*MULTI, "--runner=PortableRunner", "--job_endpoint=localhost:8099"]
    assert for_the_runner(similarity.STAGE, portable) == (portable, ())  # a named runner's workers are other machines
    assert for_the_runner(similarity.STAGE, ["--direct_num_workers=2"]) == (["--direct_num_workers=2"], ())


@pytest.mark.xdist_group("karpathy")
def test_two_worker_processes_give_the_same_bytes(
    karpathy_test: Path, shared_data: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
):
    """Ingest (its source read in two parts), similarity and sample on two worker processes write the
    one-process build's bytes.  Their commands run in one process (their summaries say so), so their
    steps run on two here with that declaration off, as a runner of other machines runs them."""
    params = ["--params", str(karpathy_test / "params.json")]
    source, photos = shared_data / "coco-karpathy" / "test5k.jsonl", shared_data / "coco-images" / "karpathy-test"
    ingest_argv = ["--in", str(source), "--images", str(photos), "--out", str(tmp_path / "items"), *MULTI]  # as the build's, without params
    on_two = parse_args(dataclasses.replace(ingest.STAGE, one_local_process=False), ingest_argv, ingest.IngestSettings, ingest.add_flags)
    assert worker_processes(on_two.beam_args) == 2 and ingest.read_parts(on_two.beam_args) == 2
    run_stage(on_two, ingest.build, ingest.report)
    similarity_argv = ["--in", str(karpathy_test / "embeddings"), "--out", str(tmp_path / "similarity"), *params, *MULTI]
    similarity.main([*similarity_argv[:3], str(tmp_path / "one-process"), *similarity_argv[4:]])
    assert "note: ran in one local process" in capsys.readouterr().out
    on_two = parse_args(dataclasses.replace(similarity.STAGE, one_local_process=False), similarity_argv, similarity.SimilaritySettings)
    assert worker_processes(on_two.beam_args) == 2 and not on_two.notes
    run_stage(on_two, similarity.build, similarity.report)
    sample_argv = ["--in", str(tmp_path / "similarity"), "--items", str(karpathy_test / "items"), "--out", str(tmp_path / "candidates")]
    on_two = parse_args(
        dataclasses.replace(sample.STAGE, one_local_process=False), [*sample_argv, *params, *MULTI], sample.SampleSettings, sample.add_flags
    )
    assert worker_processes(on_two.beam_args) == 2
    run_stage(on_two, sample.build, sample.report)
    for stage, written in (("items", "items"), ("similarity", "similarity"), ("similarity", "one-process"), ("candidates", "candidates")):
        ours = sorted(p.relative_to(karpathy_test / stage) for p in (karpathy_test / stage).rglob("*") if p.is_file())
        assert ours == sorted(p.relative_to(tmp_path / written) for p in (tmp_path / written).rglob("*") if p.is_file())
        for name in ours:
            mine, theirs = karpathy_test / stage / name, tmp_path / written / name
            if name.name == "report.json":  # its summary names the output folder, which differs
                assert {**json.loads(mine.read_text()), "summary": 0} == {**json.loads(theirs.read_text()), "summary": 0}
            else:
                assert mine.read_bytes() == theirs.read_bytes(), name


def test_zero_nan_and_duplicate_rows_are_excluded_with_reasons(tmp_path: Path):
    rng = np.random.default_rng(2)
    vectors = rng.standard_normal((40, 8)).astype(np.float32)
    vectors[3] = 0.0
    vectors[5, 2] = np.nan
    ids = [f"ds:img:{i:03d}" for i in range(40)]
    ids[9] = ids[8]  # a duplicate id
    root = tmp_path / "embeddings" / "text" / "bow" / "cocaption_mean"
    root.mkdir(parents=True)
    np.save(root / "vectors.npy", vectors)
    pq.write_table(pa.table({"id": ids}), root / "ids.parquet")
    (root / "meta.json").write_text(json.dumps({"encoder": "bow", "dim": 8, "count": 40}))
    (tmp_path / "p.json").write_text(json.dumps({"similarity": {"k": 5}}))
    report = similarity.main(["--in", str(tmp_path / "embeddings"), "--out", str(tmp_path / "out"), "--params", str(tmp_path / "p.json")])
    quarantine = sorted((r["key"], r["reason"]) for r in pq.read_table(tmp_path / "out" / "quarantine.parquet").to_pylist())
    assert quarantine == [("ds:img:003", "zero-vector"), ("ds:img:005", "non-finite"), ("ds:img:008", "duplicate-id")]
    assert report["spaces"]["text/bow/cocaption_mean"]["rows"] == 37
    table = pq.read_table(tmp_path / "out" / "text/bow/cocaption_mean/neighbours.parquet").to_pandas()
    assert table.query_id.nunique() == 37 and not set(table.neighbour_id) & {"ds:img:003", "ds:img:005"}
