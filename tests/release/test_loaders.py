"""The demo release (``demo_repro``: the Quickstart's ``dvc repro``) through every loader people
use — Hugging Face ``datasets``, ``mlcroissant``, TensorFlow Datasets' Croissant builder and the
PyTorch ``PairDataset`` — each row compared (TFDS's builder: ``TFDS_ROWS`` spread over each table), value
and type, with the Parquet tables; and the README's "Use a release" lines, run as they are written."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch
import yaml
from PIL import Image, ImageOps

from crisscross.core import io
from crisscross.core.errors import InputError
from crisscross.core.ids import CAPTION_KIND, IMAGE_KIND, published, split_id
from crisscross.formats.manifest import sums_text
from crisscross.pipelines import release as command
from crisscross.release.hub import LOADERS, hub_metadata
from crisscross.release.pytorch import PairDataset
from crisscross.tasktypes.verify import ANSWERS
from tests.release.loaders import TFDS_ROWS, check_croissant, check_hugging_face, check_tfds, parquet_tables
from tests.shared_builds import DEMO_SALT

PROJECT = Path(__file__).resolve().parents[2]
IMAGES = PROJECT / "data" / "demo" / "images"


@pytest.fixture(scope="module")
def release(demo_repro: Path) -> Path:
    return demo_repro / "main" / "releases" / "demo-simulated"


def rows_of(release: Path) -> dict[str, int]:
    return {key: table.num_rows for key, table in parquet_tables(release).items()}


def test_the_card_header_declares_every_table_as_the_hub_reads_it(release: Path) -> None:
    card = (release / "README.md").read_text(encoding="utf-8")
    header, rest = re.fullmatch(r"---\n(.*?)\n---\n(.*)", card, flags=re.S).groups()
    declared = yaml.safe_load(header)
    assert declared == hub_metadata(parquet_tables(release)) and rest.startswith("# ")
    configs = {c["config_name"]: c for c in declared["configs"]}
    assert set(configs) == {"pairs", "judgments", "raters", "qc_exclusions", "positives", "sts", "sis", "sits", "verify"}
    assert configs["pairs"]["default"] and configs["sts"]["data_files"] == [{"split": "test", "path": "data/sts_test.parquet"}]
    features = {i["config_name"]: {f["name"]: f["dtype"] for f in i["features"]} for i in declared["dataset_info"]}
    assert features["pairs"]["id_a"] == "string" and features["pairs"]["agg_score"] == "float64" and features["pairs"]["n"] == "int64"
    assert features["pairs"]["agg_label"] == {"class_label": {"names": dict(enumerate(ANSWERS))}}
    assert features["judgments"]["answer"] == features["verify"]["agg_label"] == features["pairs"]["agg_label"]
    assert features["sts"]["agg_label"] == "string"  # a rated type has no answers: no class label


def test_hugging_face_loads_every_table_typed_row_for_row(release: Path, tmp_path: Path) -> None:
    pytest.importorskip("datasets")
    assert check_hugging_face(release, tmp_path / "hf") == rows_of(release)


def test_croissant_yields_exactly_the_rows_of_every_parquet_table(release: Path) -> None:
    assert check_croissant(release) == rows_of(release)


def test_tfds_croissant_builder_loads_every_table(release: Path, tmp_path: Path) -> None:
    pytest.importorskip("tensorflow_datasets")
    rows = rows_of(release)
    assert max(rows.values()) > TFDS_ROWS  # some tables are cut
    checked = check_tfds(release, tmp_path / "tfds")
    assert checked.keys() == rows.keys() and all(min(n, TFDS_ROWS) <= checked[key] <= n for key, n in rows.items()), checked


def expected_side(side: str, published_form: str, texts: dict[int, str]) -> str | np.ndarray:
    """A side read independently of the dataset: a caption's Karpathy text by sentid, an image's pixels (upright, RGB)."""
    if split_id(side)[1] == CAPTION_KIND:
        return texts[int(published_form.rsplit(":", 1)[1])]
    with Image.open(IMAGES / published_form) as image:
        return np.asarray(ImageOps.exif_transpose(image).convert("RGB")).transpose(2, 0, 1)


def test_the_pytorch_dataset_gives_every_pair_its_two_sides_and_score(release: Path) -> None:
    document = json.loads((release / "data" / "dataset_coco_cxc.json").read_text(encoding="utf-8"))
    texts = {s["sentid"]: s["raw"] for image in document["images"] for s in image["sentences"]}
    pairs = parquet_tables(release)["pairs"].to_pylist()
    dataset = PairDataset(release, IMAGES)
    assert len(dataset) == len(pairs)
    sides: dict[str, str | np.ndarray] = {}
    for i, row in enumerate(pairs):
        item = dataset[i]
        assert item["item_id"] == row["item_id"] and item["task_type"] == row["task_type"] and item["positive"] is row["positive"]
        assert item["score"] == row["agg_score"] if row["agg_score"] is not None else np.isnan(item["score"])
        for name, side, form in (("a", row["id_a"], row["published_a"]), ("b", row["id_b"], row["published_b"])):
            want = sides.setdefault(side, expected_side(side, form, texts))
            if isinstance(want, str):
                assert item[name] == want, f"row {i} {name}"
            else:
                assert item[name].dtype == torch.uint8 and np.array_equal(item[name].numpy(), want), f"row {i} {name}"
    assert {type(v) for v in sides.values()} == {str, np.ndarray}


def test_the_pytorch_dataset_applies_the_transform_and_batches(release: Path) -> None:
    dataset = PairDataset(release, IMAGES, table="sits_test", transform=lambda image: image[:, :8, :8].float() / 255)
    batch = next(iter(torch.utils.data.DataLoader(dataset, batch_size=4)))
    sits = parquet_tables(release)["sits_test"].slice(0, 4).to_pylist()
    assert batch["b"].shape == (4, 3, 8, 8) and batch["b"].dtype == torch.float32 and float(batch["b"].max()) <= 1.0
    assert batch["item_id"] == [r["item_id"] for r in sits] and batch["score"].tolist() == [r["agg_score"] for r in sits]
    assert all(isinstance(text, str) and text for text in batch["a"])


def test_the_pytorch_dataset_refuses_in_one_line_naming_what_is_wrong(release: Path, tmp_path: Path) -> None:
    with pytest.raises(InputError, match="is not a crisscross release folder"):
        PairDataset(tmp_path, IMAGES)
    with pytest.raises(InputError, match=r"is not a folder"):
        PairDataset(release, tmp_path / "absent")
    with pytest.raises(
        InputError, match=r"no table of pairs named 'raters'; its tables of pairs: pairs, sis_test, sits_test, sts_test, verify_test"
    ):
        PairDataset(release, IMAGES, table="raters")
    images = tmp_path / "images"
    shutil.copytree(IMAGES, images)
    first = parquet_tables(release)["sis_test"].to_pylist()[0]
    name = published(first["id_a"], IMAGE_KIND)
    (images / name).unlink()
    with pytest.raises(InputError, match=rf"image {first['id_a']}: {re.escape(str(images / name))} is not a file inside the images folder"):
        PairDataset(release, images, table="sis_test")
    (images / name).symlink_to(IMAGES / name)  # a link out of the folder counts as outside
    with pytest.raises(InputError, match=rf"image {first['id_a']}: .* is not a file inside"):
        PairDataset(release, images, table="sis_test")
    (images / name).unlink()
    (images / name).write_bytes(b"not a jpeg")
    dataset = PairDataset(release, images, table="sis_test")
    with pytest.raises(InputError, match=rf"image {first['id_a']}: cannot decode image file"):
        dataset[0]
    copy = shutil.copytree(release, tmp_path / "copy-simulated")
    (copy / "data" / "dataset_coco_cxc.json").unlink()
    with pytest.raises(InputError, match=r"has no data/dataset_coco_cxc.json, which names its captions' texts and images' files"):
        PairDataset(copy, IMAGES)


def test_the_readme_loader_lines_run_on_the_demo_release(release: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The python block of the README's "Use a release", run from a folder laid out as the project."""
    datasets = pytest.importorskip("datasets")
    pytest.importorskip("tensorflow_datasets")
    readme = (PROJECT / "README.md").read_text(encoding="utf-8")
    section = readme.split("\n## Use a release\n", 1)[1].split("\n## ", 1)[0]
    (code,) = re.findall(r"```python\n(.*?)```", section, flags=re.S)
    (tmp_path / "releases").mkdir()
    (tmp_path / "releases" / "demo-simulated").symlink_to(release)
    (tmp_path / "data" / "demo").mkdir(parents=True)
    (tmp_path / "data" / "demo" / "images").symlink_to(IMAGES)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(datasets.config, "HF_DATASETS_CACHE", tmp_path / "hf")
    names: dict[str, object] = {}
    exec(compile(code, "README.md", "exec"), names)
    rows = rows_of(release)
    assert names["release"].version == "1.0.0-simulated" and len(names["sts"]) == rows["sts_test"] == len(names["records"])
    assert len(names["pairs"]) == rows["sits_test"] and isinstance(names["pairs"][0]["a"], str) and names["pairs"][0]["b"].ndim == 3
    assert len(names["tf_pairs"]) == rows["pairs"]


def test_a_release_built_before_the_loaders_is_followed_by_a_patch_that_declares_them(
    release: Path, demo_repro: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Same pairs and settings, but a previous release without the loaders' declarations: the rebuild
    is a patch carrying the header and record sets, not the previous release kept byte for byte."""
    monkeypatch.setenv("CRISSCROSS_RELEASE_SALT", DEMO_SALT)
    before = shutil.copytree(release, tmp_path / "before-simulated")
    info = json.loads((before / "release.json").read_text(encoding="utf-8"))
    assert info["metadata"].pop("loaders") == LOADERS
    io.write_json(str(before / "release.json"), info)
    (before / "SHA256SUMS").write_text(sums_text(before), encoding="utf-8")
    build = demo_repro / "main" / "build"
    rounds = ("", "sits/", "verify/")
    report = command.main(
        [
            *("--rated", ",".join(str(build / f"{r}rated") for r in rounds)),
            *("--judgments", ",".join(str(build / f"{r}judgments") for r in rounds)),
            *("--items", str(build / "items"), "--previous", str(before), "--out", str(tmp_path / "after-simulated")),
            *("--date", "2026-11-24", "--simulated", "--params", str(PROJECT / "params.yaml")),
        ]
    )
    assert (report["version"], report["level"]) == ("1.0.1-simulated", "patch") and "metadata changed (loaders)" in report["reason"]
    assert (tmp_path / "after-simulated" / "README.md").read_text(encoding="utf-8").startswith("---\nconfigs:\n")
