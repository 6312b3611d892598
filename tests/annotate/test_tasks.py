"""Items, gold and batches of an annotation round, on small hand-made tables."""

from __future__ import annotations

import re
from collections import Counter
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

from crisscross.annotate import gold
from crisscross.annotate.catalog import Catalog
from crisscross.annotate.gold import GoldError, Space, negative_gold, negative_thresholds, positive_gold
from crisscross.annotate.items import (
    ITEMS_SCHEMA,
    SAMPLING_GOLD,
    batched_verify_tasks,
    checked_candidates,
    first_items,
    items_from_candidates,
    verify_items,
)
from crisscross.annotate.tasks import TaskParams, batch_count, build_tasks, make_batches
from crisscross.embed.sets import EmbeddingSet
from crisscross.formats.schema import GOLD_NEGATIVE, GOLD_POSITIVE, TASKS_SCHEMA, item_id
from crisscross.tasktypes import task_types
from crisscross.tasktypes.names import SIS, SITS, STS, TASK_TYPES, VERIFY, VERIFY_ANSWERS

N_IMAGES = 40

INSTRUCTIONS = {kind.name: kind.instructions for kind in task_types()}
RATING_CRITERIA = {kind.name: {k: text for k, (_, text) in kind.scale.points.items()} for kind in task_types() if kind.scale}


def image(i: int) -> str:
    return f"t:img:{i:02d}"


def caption(i: int, k: int) -> str:
    return f"t:cap:{i:02d}-{k}"


def make_catalog(n_images: int = N_IMAGES, without_pixels: tuple[int, ...] = ()) -> Catalog:
    images = pa.table(
        {
            "image_id": [image(i) for i in range(n_images)],
            "path": ["" if i in without_pixels else f"imgs/{i:02d}.jpg" for i in range(n_images)],
            "pixels": ["missing" if i in without_pixels else "ok" for i in range(n_images)],
        }
    )
    captions = pa.table(
        {
            "caption_id": [caption(i, k) for i in range(n_images) for k in range(2)],
            "image_id": [image(i) for i in range(n_images) for _ in range(2)],
            "text": [f"a photo number {i} take {k}" for i in range(n_images) for k in range(2)],
        }
    )
    return Catalog.from_tables(captions, images)


def embedding_spaces(seed: int, n_images: int = N_IMAGES) -> dict[str, list[Space]]:
    """Per task type, spaces from random vectors: captions near their image's vector, and
    co-caption means, so each space disagrees with the others about which pairs are close."""
    spaces: dict[str, list[Space]] = {STS: [], SIS: [], SITS: [], VERIFY: []}
    for s in range(3):
        rng = np.random.default_rng([seed, s])
        base = rng.normal(size=(n_images, 8)).astype(np.float32)
        noisy = np.repeat(base, 2, axis=0) + 0.5 * rng.normal(size=(2 * n_images, 8)).astype(np.float32)
        captions = EmbeddingSet([caption(i, k) for i in range(n_images) for k in range(2)], noisy)
        means = EmbeddingSet([image(i) for i in range(n_images)], noisy.reshape(n_images, 2, 8).mean(axis=1))
        images = EmbeddingSet([image(i) for i in range(n_images)], base)
        spaces[STS].append(Space(f"text{s}", captions, captions))
        spaces[SIS].append(Space(f"image{s}", images, images))
        spaces[SITS].append(Space(f"text{s}", captions, means))
        spaces[VERIFY].append(Space(f"text{s}", means, captions))
    return spaces


def cosine(space: Space, a: str, b: str) -> float:
    va = np.asarray(space.a.vectors[space.a.row_of()[a]], dtype=np.float64)
    vb = np.asarray(space.b.vectors[space.b.row_of()[b]], dtype=np.float64)
    return float(va @ vb / np.linalg.norm(va) / np.linalg.norm(vb))


def candidates(rows: list[tuple[str | None, str | None, str | None]]) -> pa.Table:
    return pa.table({"method": [r[0] for r in rows], "id1": [r[1] for r in rows], "id2": [r[2] for r in rows]})


# ---------------------------------------------------------------------------- instructions


def test_rating_criteria_quote_cxc_table_2(shared_data: Path):
    paper = shared_data.parent / "papers" / "crisscrossed-captions-paper.txt"
    if not paper.is_file():
        pytest.skip(f"{paper} is absent")
    text = re.sub(r"\s+,", ",", " ".join(paper.read_text().split()))  # PDF extraction puts spaces before commas
    for kind, criteria in RATING_CRITERIA.items():
        assert sorted(criteria) == [0, 1, 2, 3, 4, 5]
        for score, criterion in criteria.items():
            assert criterion in text, (kind, score)
            assert criterion in INSTRUCTIONS[kind]


def test_verify_instructions_name_the_four_eccv_answers():
    for answer in VERIFY_ANSWERS:
        assert f"{answer}: " in INSTRUCTIONS[VERIFY]
    assert set(INSTRUCTIONS) == set(TASK_TYPES)


# ---------------------------------------------------------------------------- items


def test_items_from_candidates_maps_methods_merges_orders_and_rejects_with_reasons():
    catalog = make_catalog(without_pixels=(39,))
    table = candidates(
        [
            ("c2c_isim", caption(1, 0), caption(2, 0)),
            ("c2c_cocaption", caption(2, 0), caption(1, 0)),  # same STS item, other order
            ("c2c_cocaption", caption(3, 0), caption(3, 1)),
            ("i2i_csim", image(1), image(2)),
            ("c2i_original", image(4), caption(4, 0)),  # cross-modal pair given image first
            ("c2i_intrasim", caption(5, 0), image(6)),
            ("x2y_magic", caption(1, 0), caption(7, 0)),
            ("i2i_csim", image(3), image(3)),
            ("i2i_csim", image(3), caption(3, 0)),
            ("c2c_isim", "not-an-id", caption(3, 0)),
            ("c2c_isim", caption(1, 0), "t:cap:nobody"),
            ("i2i_csim", image(1), image(39)),
            ("c2c_isim", None, caption(1, 0)),
        ]
    )
    items, rejected = items_from_candidates(table, catalog, source="cands.parquet")
    assert items.schema == ITEMS_SCHEMA
    assert items.column("item_id").to_pylist() == sorted(items.column("item_id").to_pylist())
    rows = {r["item_id"]: r for r in items.to_pylist()}
    assert rows[item_id(STS, caption(1, 0), caption(2, 0))]["sampling_method"] == "c2c_isim"  # the first row wins
    sits = rows[item_id(SITS, caption(4, 0), image(4))]
    assert (sits["id_a"], sits["id_b"], sits["task_type"]) == (caption(4, 0), image(4), SITS)
    assert Counter(r["task_type"] for r in rows.values()) == {STS: 2, SIS: 1, SITS: 2}
    assert all(r["gold"] == "" for r in rows.values())
    assert Counter(r.reason for r in rejected) == {
        "duplicate-item": 1,
        "unknown-method": 1,
        "self-pair": 1,
        "wrong-kind": 1,
        "bad-id": 1,
        "unknown-id": 1,
        "no-pixels": 1,
        "missing-field": 1,
    }
    duplicate = next(r for r in rejected if r.reason == "duplicate-item")
    assert duplicate.source == "cands.parquet:2" and "cands.parquet:1" in duplicate.detail
    assert len(items) + len(rejected) == table.num_rows  # nothing dropped silently


def test_candidates_checked_in_ranges_in_any_order_give_the_same_items_and_rejects():
    catalog = make_catalog(without_pixels=(39,))
    rows = [("c2c_isim", caption(i, 0), caption(i + 1, 0)) for i in range(1, 9)]
    rows += [("c2c_cocaption", caption(3, 0), caption(2, 0)), ("i2i_csim", image(1), image(39)), ("c2c_isim", caption(2, 0), caption(1, 0))]
    table = candidates(rows)
    whole, whole_rejected = items_from_candidates(table, catalog)
    made, rejected = [], []
    for start in (8, 0, 4):  # the duplicates' first rows sit in another range, checked later
        part = checked_candidates(table, catalog, start, min(start + 4, table.num_rows))
        made.append(part[0])
        rejected += part[1].rejected()
    items, duplicates = first_items(made, lambda: table, "candidates.parquet")
    assert items.equals(whole) and sorted(rejected + duplicates) == sorted(whole_rejected)
    assert sorted(r.source for r in duplicates) == ["candidates.parquet:11", "candidates.parquet:9"]


def test_verify_items_orient_image_first():
    catalog = make_catalog()
    pairs = pa.table({"image_id": [image(1), caption(2, 0), image(3)], "caption_id": [caption(5, 1), image(2), image(4)]})
    items, rejected = verify_items(pairs, catalog)
    assert [(r["id_a"], r["id_b"], r["task_type"], r["sampling_method"]) for r in items.to_pylist()] == [
        (image(1), caption(5, 1), VERIFY, "retrieved"),
        (image(2), caption(2, 0), VERIFY, "retrieved"),
    ]
    assert [r.reason for r in rejected] == ["wrong-kind"]


# ---------------------------------------------------------------------------- gold


def test_positive_gold_are_original_pairs_or_attention_checks():
    catalog = make_catalog(without_pixels=(0,))
    for kind in (SITS, VERIFY):
        gold = positive_gold(kind, catalog, 10, seed=3).to_pylist()
        assert len({g["item_id"] for g in gold}) == 10
        for g in gold:
            cap, img = (g["id_a"], g["id_b"]) if kind == SITS else (g["id_b"], g["id_a"])
            assert catalog.image_of[cap] == img and img != image(0)  # original pair, image with pixels
            assert (g["sampling_method"], g["gold"]) == (SAMPLING_GOLD, GOLD_POSITIVE)
    for kind in (STS, SIS):
        gold = positive_gold(kind, catalog, 5, seed=3).to_pylist()
        assert all(g["id_a"] == g["id_b"] for g in gold)


def test_positive_gold_avoids_excluded_items_and_says_when_too_few():
    catalog = make_catalog(n_images=4)
    taken = {item_id(SIS, image(i), image(i)) for i in range(3)}
    assert positive_gold(SIS, catalog, 1, seed=0, exclude=taken).column("id_a").to_pylist() == [image(3)]
    with pytest.raises(GoldError, match="SIS: 2 known positives needed but only 1"):
        positive_gold(SIS, catalog, 2, seed=0, exclude=taken)


@pytest.mark.parametrize("kind", [STS, SIS, SITS, VERIFY])
def test_negative_gold_is_below_the_quantile_under_every_space(kind: str):
    catalog = make_catalog()
    spaces = embedding_spaces(seed=5)[kind]
    exclude = {item_id(kind, *pair) for pair in [(caption(1, 0), caption(2, 0)), (image(1), image(2))] if kind in (STS, SIS)}
    gold = negative_gold(kind, catalog, spaces, 12, seed=9, exclude=exclude, quantile=0.3).to_pylist()
    thresholds = negative_thresholds(kind, catalog, spaces, 0.3, seed=9)
    assert len({g["item_id"] for g in gold}) == 12 and not exclude & {g["item_id"] for g in gold}
    for g in gold:
        assert (g["sampling_method"], g["gold"], g["task_type"]) == (SAMPLING_GOLD, GOLD_NEGATIVE, kind)
        assert catalog.image(g["id_a"]) != catalog.image(g["id_b"])  # never co-captions nor an original pair
        for space in spaces:
            assert cosine(space, g["id_a"], g["id_b"]) < thresholds[space.name]
    # The thresholds estimate the quantile of all random pairs' cosines.
    space = spaces[0]
    everything = [cosine(space, a, b) for a in space.a.ids for b in space.b.ids if a != b]
    assert abs(thresholds[space.name] - np.quantile(everything, 0.3)) < 0.05
    assert negative_gold(kind, catalog, spaces, 12, seed=9, exclude=exclude, quantile=0.3).to_pylist() == gold


def test_gold_cosines_are_the_same_bytes_whatever_block_of_pairs_is_gathered(monkeypatch: pytest.MonkeyPatch) -> None:
    """The cosines are computed a block of pairs at a time (``gold._COSINE_BLOCK``); thresholds and
    negatives come out the same, to the bit, with blocks of 7 pairs or one block of all of them,
    on vectors as wide as ``efficientnet-lite0``'s."""
    rng = np.random.default_rng(3)
    images = EmbeddingSet([image(i) for i in range(N_IMAGES)], rng.normal(size=(N_IMAGES, 1280)).astype(np.float32))
    catalog, spaces = make_catalog(), [Space("wide", images, images), embedding_spaces(seed=5)[SIS][0]]

    def drawn() -> tuple[dict[str, float], list[dict]]:
        return negative_thresholds(SIS, catalog, spaces, 0.3, seed=9), negative_gold(
            SIS, catalog, spaces, 12, seed=9, quantile=0.3
        ).to_pylist()

    blocked = drawn()
    for block in (7, 1 << 20):
        monkeypatch.setattr(gold, "_COSINE_BLOCK", block)
        assert drawn() == blocked


def test_negative_gold_fails_clearly_when_too_few_pairs_qualify():
    catalog = make_catalog(n_images=6)
    spaces = embedding_spaces(seed=1, n_images=6)[SIS]
    with pytest.raises(GoldError, match=r"SIS: found \d+ of 50 known negatives in 8192 random pairs"):
        negative_gold(SIS, catalog, spaces, 50, seed=0, quantile=0.2, max_draws=8192)
    with pytest.raises(GoldError, match="at least one embedding space"):
        negative_gold(SIS, catalog, [], 1, seed=0)


# ---------------------------------------------------------------------------- batches


def sts_items(n: int) -> pa.Table:
    rows = [
        {
            "item_id": item_id(STS, caption(i, 0), caption(i + 1, 1)),
            "task_type": STS,
            "id_a": caption(i, 0),
            "id_b": caption(i + 1, 1),
            "sampling_method": "c2c_isim",
            "gold": "",
        }
        for i in range(n)
    ]
    return pa.Table.from_pylist(rows, schema=ITEMS_SCHEMA)


def sts_gold(n: int) -> pa.Table:
    catalog = make_catalog()
    return pa.concat_tables(
        [positive_gold(STS, catalog, n, seed=1), negative_gold(STS, catalog, embedding_spaces(2)[STS], n, seed=1, quantile=0.4)]
    )


def test_batches_hold_items_with_one_positive_and_one_negative_gold_each():
    items, gold = sts_items(36), sts_gold(3)
    assert batch_count(36, 18, {GOLD_POSITIVE: 1, GOLD_NEGATIVE: 1}) == 3
    tasks = make_batches(items, gold, 18, {GOLD_POSITIVE: 1, GOLD_NEGATIVE: 1}, seed=4)
    assert tasks.schema == TASKS_SCHEMA
    rows = tasks.to_pylist()
    by_batch: dict[str, list[dict]] = {}
    for r in rows:
        by_batch.setdefault(r["batch_id"], []).append(r)
    assert sorted(by_batch) == ["sts-00001", "sts-00002", "sts-00003"]
    for members in by_batch.values():
        assert sorted(r["position"] for r in members) == list(range(1, 15))  # 12 items + 2 gold
        assert Counter(r["gold"] for r in members) == {"": 12, GOLD_POSITIVE: 1, GOLD_NEGATIVE: 1}
    assert sorted(r["item_id"] for r in rows if not r["gold"]) == items.column("item_id").to_pylist()
    # Shuffled: the gold is not always in the same place.
    assert len({(r["gold"], r["position"]) for r in rows if r["gold"]}) > 2


def test_batch_sizes_differ_by_at_most_one():
    tasks = make_batches(sts_items(35), sts_gold(3), 18, {GOLD_POSITIVE: 1, GOLD_NEGATIVE: 1}, seed=0)
    sizes = Counter(tasks.column("batch_id").to_pylist())
    assert sorted(sizes.values()) == [13, 14, 14]


def test_batches_are_deterministic_and_independent_of_input_order():
    items, gold = sts_items(40), sts_gold(3)
    policy = {GOLD_POSITIVE: 1, GOLD_NEGATIVE: 1}
    first = make_batches(items, gold, 18, policy, seed=11)
    reordered = make_batches(items.take(np.arange(40)[::-1]), gold.take(np.arange(gold.num_rows)[::-1]), 18, policy, seed=11)
    assert first.equals(reordered)
    assert not first.equals(make_batches(items, gold, 18, policy, seed=12))


def test_make_batches_refuses_missing_gold_repeated_ids_and_full_batches():
    policy = {GOLD_POSITIVE: 1, GOLD_NEGATIVE: 1}
    with pytest.raises(GoldError, match="STS: the batches need 3 negative gold items, got 2"):
        make_batches(sts_items(40), sts_gold(2), 18, policy, seed=0)
    with pytest.raises(ValueError, match="1 item ids occur more than once"):
        make_batches(pa.concat_tables([sts_items(3), sts_items(1)]), sts_gold(1), 18, policy, seed=0)
    with pytest.raises(ValueError, match="batch_size 2 leaves no room"):
        make_batches(sts_items(3), sts_gold(1), 2, policy, seed=0)


def test_build_tasks_draws_exactly_the_gold_needed_for_every_type():
    catalog = make_catalog()
    rows = [("c2c_isim", caption(i, 0), caption(i + 1, 0)) for i in range(20)]
    rows += [("i2i_csim", image(i), image(i + 2)) for i in range(20)]
    rows += [("c2i_intrasim", caption(i, 1), image(i + 3)) for i in range(20)]
    items, rejected = items_from_candidates(candidates(rows), catalog)
    verify, _ = verify_items(
        pa.table({"image_id": [image(i) for i in range(10)], "caption_id": [caption(i + 5, 0) for i in range(10)]}), catalog
    )
    items = pa.concat_tables([items, verify])
    params = TaskParams(batch_size=10, negative_quantile=0.4)
    tasks = build_tasks(items, catalog, embedding_spaces(7), params, seed=3)
    assert not rejected
    counts = Counter((r["task_type"], r["gold"]) for r in tasks.to_pylist())
    for kind, n in ((STS, 20), (SIS, 20), (SITS, 20), (VERIFY, 10)):
        batches = batch_count(n, 10, params.gold_per_batch)
        assert counts[(kind, "")] == n
        assert counts[(kind, GOLD_POSITIVE)] == counts[(kind, GOLD_NEGATIVE)] == batches
    assert tasks.equals(build_tasks(items, catalog, embedding_spaces(7), params, seed=3))


def test_batched_verify_tasks_keep_batches_as_formed_and_refuse_broken_ones() -> None:
    catalog = make_catalog(without_pixels=(7,))

    def row(batch: str, position: int, i: int, k: int, gold: str = "") -> dict[str, object]:
        return {
            "batch_id": batch,
            "position": position,
            "image_id": image(i),
            "caption_id": caption(k, 0),
            "method": "retrieved",
            "gold": gold,
        }

    rows = [
        *(row("b1", p, p, p + 1) for p in range(1, 4)),
        row("b1", 4, 4, 4, "positive"),
        row("b1", 5, 5, 9, "negative"),
        row("b2", 1, 7, 8),  # image 7 has no pixels: this row alone is refused, the rest renumbered
        row("b2", 2, 10, 11),
        row("b2", 3, 12, 12, "positive"),
        row("b2", 4, 13, 20, "negative"),
        row("b3", 1, 14, 15),
        row("b3", 2, 7, 7, "positive"),  # its positive cannot be shown: the whole batch goes
        row("b3", 3, 16, 21, "negative"),
        row("b4", 1, 17, 18),
        row("b4", 2, 19, 19, "positive"),  # formed without a negative
        row("b5", 1, 22, 23, "maybe"),
    ]
    tasks, rejected = batched_verify_tasks(pa.Table.from_pylist(rows), catalog)
    table = tasks.to_pandas()
    assert sorted(set(table.batch_id)) == ["b1", "b2"] and set(table.task_type) == {VERIFY}
    assert table[table.batch_id == "b2"].position.tolist() == [1, 2, 3]
    assert table[table.batch_id == "b1"].id_b.tolist() == [caption(2, 0), caption(3, 0), caption(4, 0), caption(4, 0), caption(9, 0)]
    assert set(table[table.gold != ""].sampling_method) == {SAMPLING_GOLD}
    reasons = Counter(r.reason for r in rejected)
    assert reasons == {"no-pixels": 2, "batch-lost-gold": 2, "batch-without-gold": 2, "bad-gold": 1}
