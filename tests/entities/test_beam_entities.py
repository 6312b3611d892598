"""The four Entities composites with TestPipeline: the same results as the library in memory,
rejects routed with their reasons."""

from __future__ import annotations

from pathlib import Path

import apache_beam as beam
import pyarrow as pa
import pyarrow.parquet as pq
from apache_beam.testing.test_pipeline import TestPipeline
from apache_beam.testing.util import assert_that, equal_to

from crisscross.beam.boxes import AnnotateBoxes
from crisscross.beam.coref import ResolveCoreference
from crisscross.beam.localize import LocalizePhrases
from crisscross.beam.mentions import ExtractMentions
from crisscross.entities.boxes import BoxSettings
from crisscross.entities.coref import CorefSettings, chains_table, resolve
from crisscross.entities.localize import LocalizeSettings
from crisscross.entities.mentions import Caption, captions_table, chunked_mentions, mentions_table
from crisscross.entities.oracle import Oracle, OracleSettings

CAPTIONS = {
    "coco:cap:1": ("coco:img:1", "A man in a red hat rides a horse ."),
    "coco:cap:2": ("coco:img:1", "A guy with a hat on a horse in a field ."),
    "coco:cap:3": ("coco:img:2", "Two dogs play with a ball on the grass ."),
    "coco:cap:4": ("coco:img:2", None),
}
IMAGES = [
    {"image_id": "coco:img:1", "file_name": "one.jpg", "width": 320, "height": 240},
    {"image_id": "coco:img:2", "file_name": "two.jpg", "width": 200, "height": 300},
]


def _items(tmp_path: Path) -> Path:
    items = tmp_path / "items"
    items.mkdir()
    pq.write_table(
        pa.Table.from_pylist([{"caption_id": c, "image_id": i, "text": t} for c, (i, t) in CAPTIONS.items()]), items / "captions.parquet"
    )
    pq.write_table(pa.Table.from_pylist(IMAGES), items / "images.parquet")
    return items


def _library_captions() -> list[Caption]:
    return [
        Caption("coco:img:1", 0, "coco:cap:1", "one.jpg", CAPTIONS["coco:cap:1"][1]),
        Caption("coco:img:1", 1, "coco:cap:2", "one.jpg", CAPTIONS["coco:cap:2"][1]),
        Caption("coco:img:2", 0, "coco:cap:3", "two.jpg", CAPTIONS["coco:cap:3"][1]),
    ]


def _library_mentions() -> list:
    return [m for c in _library_captions() for m in chunked_mentions(c, "captions.parquet")[0]]


def test_extract_mentions_matches_the_library_and_rejects_a_caption_without_text(tmp_path: Path):
    items = _items(tmp_path)
    with TestPipeline() as pipeline:
        out = pipeline | ExtractMentions(items=str(items))
        assert_that(out.mentions, equal_to(_library_mentions()), label="Mentions")
        assert_that(out.captions, equal_to(_library_captions()), label="Captions")
        assert_that(out.rejected | beam.Map(lambda r: (r.key, r.reason)), equal_to([("coco:cap:4", "null-text")]), label="Rejected")
        assert_that(out.skipped, equal_to([{}]), label="Skipped")


def _mentions_dir(tmp_path: Path) -> Path:
    folder = tmp_path / "mentions"
    folder.mkdir()
    pq.write_table(mentions_table(_library_mentions()), folder / "mentions.parquet")
    pq.write_table(captions_table(_library_captions()), folder / "captions.parquet")
    return folder


def test_resolve_coreference_matches_the_library_per_image(tmp_path: Path):
    folder = _mentions_dir(tmp_path)
    settings = CorefSettings(link_error=0.2, wrong_answer=0.2)
    oracle = Oracle(OracleSettings(link_error=0.2, wrong_answer=0.2), 5)
    mentions = _library_mentions()
    results = [resolve(image, [m for m in mentions if m.image_id == image], oracle) for image in ("coco:img:1", "coco:img:2")]
    counts = {"links_asked": sum(r.links_asked for r in results), "naive_links": sum(r.naive_links for r in results)}
    counts |= {"verified": sum(r.verified for r in results), "split": sum(r.rejected for r in results)}
    assert counts == {"links_asked": 3, "naive_links": 24, "verified": 2, "split": 0}  # naive: 7·6/2 + 3·2/2 pairs
    with TestPipeline() as pipeline:
        out = pipeline | ResolveCoreference(str(folder / "mentions.parquet"), settings, 5)
        assert_that(out.chains, equal_to([c for r in results for c in r.chains]), label="Chains")
        assert_that(out.counts, equal_to([counts]), label="Counts")


def _boxes_inputs(tmp_path: Path) -> tuple[Path, Path, Path]:
    folder, items = _mentions_dir(tmp_path), _items(tmp_path)
    mentions = _library_mentions()
    oracle = Oracle(OracleSettings(), 5)
    chains = [
        c for image in ("coco:img:1", "coco:img:2") for c in resolve(image, [m for m in mentions if m.image_id == image], oracle).chains
    ]
    coref = tmp_path / "coref"
    coref.mkdir()
    pq.write_table(chains_table(chains), coref / "chains.parquet")
    return coref, folder, items


def _annotate(pipeline: beam.Pipeline, tmp_path: Path, imported: beam.PCollection | None) -> tuple[beam.PCollection, beam.PCollection]:
    """AnnotateBoxes over the files :func:`_boxes_inputs` wrote under ``tmp_path``."""
    paths = [tmp_path / "coref" / "chains.parquet", tmp_path / "mentions" / "mentions.parquet", tmp_path / "mentions" / "captions.parquet"]
    return pipeline | AnnotateBoxes(*map(str, paths), str(tmp_path / "items" / "images.parquet"), BoxSettings(), 5, imported)


def test_annotate_boxes_runs_every_image_and_rejects_chains_of_unknown_images(tmp_path: Path):
    _, _, items = _boxes_inputs(tmp_path)
    pq.write_table(pa.Table.from_pylist(IMAGES[:1]), items / "images.parquet")  # image 2 has no row
    with TestPipeline() as pipeline:
        results, rejected = _annotate(pipeline, tmp_path, None)
        summary = results | beam.Map(lambda r: (r.image_id, r.stem, [(c.chain.chain, c.outcome, len(c.boxes)) for c in r.merged.chains]))
        assert_that(
            summary,
            equal_to([("coco:img:1", "one", [("1", "boxes", 1), ("2", "boxes", 1), ("3", "boxes", 1), ("4", "scene", 0)])]),
            label="Images",
        )
        reasons = rejected | beam.Map(lambda r: (r.key, r.reason))
        assert_that(reasons, equal_to([(f"coco:img:2#{n}", "unknown-image") for n in ("1", "2", "3")]), label="Rejected")


def test_imported_boxes_of_unknown_chains_and_chains_of_unknown_mentions_are_rejected(tmp_path: Path):
    coref, _, _ = _boxes_inputs(tmp_path)
    chains = pq.read_table(coref / "chains.parquet").to_pylist()
    chains.append({**chains[0], "chain": "77", "index": 42, "representative": True})  # a mention the mentions table lacks
    pq.write_table(pa.Table.from_pylist(chains), coref / "chains.parquet")
    with TestPipeline() as pipeline:
        imported = pipeline | beam.Create([{"coco:img:1#1": (None, ((0, 0, 9, 9),)), "coco:img:1#99": (None, ((0, 0, 9, 9),))}])
        results, rejected = _annotate(pipeline, tmp_path, imported)
        reasons = rejected | beam.Map(lambda r: (r.key, r.reason))
        assert_that(reasons, equal_to([("coco:img:1#99", "unknown-chain"), ("coco:img:1#77", "unknown-mention")]), label="Rejected")
        first = results | beam.Filter(lambda r: r.image_id == "coco:img:1") | beam.Map(lambda r: r.merged.chains[0].boxes)
        assert_that(first, equal_to([((0, 0, 9, 9),)]), label="Imported")


def test_localize_phrases_gives_one_metrics_dict_and_rejects_phrases_of_unknown_images(tmp_path: Path):
    boxes_dir = tmp_path / "boxes"
    boxes_dir.mkdir()
    chains = [
        {"image_id": "coco:img:1", "chain": "1", "caption_id": "coco:cap:1", "index": 0, "kind": "people", "outcome": "boxes"},
        {"image_id": "coco:img:9", "chain": "1", "caption_id": "coco:cap:9", "index": 0, "kind": "people", "outcome": "boxes"},
    ]
    boxes = [{"image_id": "coco:img:1", "box": 0, "xmin": 10, "ymin": 10, "xmax": 99, "ymax": 99, "chains": "1"}]
    pq.write_table(pa.Table.from_pylist(chains), boxes_dir / "chains.parquet")
    pq.write_table(pa.Table.from_pylist(boxes), boxes_dir / "boxes.parquet")
    folder, items = _mentions_dir(tmp_path), _items(tmp_path)
    paths = {
        "chains": str(boxes_dir / "chains.parquet"),
        "boxes": str(boxes_dir / "boxes.parquet"),
        "mentions": str(folder / "mentions.parquet"),
        "images": str(items / "images.parquet"),
    }
    with TestPipeline() as pipeline:
        given = pipeline | beam.Create([{("coco:cap:1", 0): [(12, 10, 99, 99, 0.9), (0, 0, 5, 5, 0.95)]}])
        metrics, rejected = pipeline | LocalizePhrases(paths, LocalizeSettings(k=2, proposals="file"), 5, given)
        assert_that(rejected | beam.Map(lambda r: (r.key, r.reason)), equal_to([("coco:cap:9#m0", "unknown-image")]), label="Rejected")
        assert_that(
            metrics,
            equal_to(
                [
                    {
                        "people": {"instances": 1, "r_at_1": 0.0, "r_at_2": 100.0, "ap": 50.0},
                        "overall": {"instances": 1, "r_at_1": 0.0, "r_at_2": 100.0, "mean_ap": 50.0},
                    }
                ]
            ),
        )
