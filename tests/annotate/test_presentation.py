"""One presentation per task type: the exports, the rater app and the tasks stage's check agree."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pytest

from crisscross.annotate.catalog import Catalog
from crisscross.annotate.exports import batches
from crisscross.annotate.store import TaskRow
from crisscross.formats.schema import NOT_GOLD, item_id
from crisscross.serve.app import Round
from crisscross.tasktypes import task_types
from crisscross.tasktypes.base import AnswerError, Option
from crisscross.tasktypes.names import CHOOSE, CHOOSE_NONE, TASK_TYPES, TRIPLE_DECOY, TRIPLE_TARGET, VERIFY_TRIPLE

PRESENTATIONS = {kind.name: kind for kind in task_types()}  # each type presents its own items


def cap(i: int) -> str:
    return f"demo:cap:{i}"


def img(i: int) -> str:
    return f"demo:img:{i}"


@pytest.fixture(scope="module")
def catalog() -> Catalog:
    """Six images with three captions each; image 6 has no pixels."""
    captions = pa.Table.from_pylist(
        [{"caption_id": cap(3 * i + j), "image_id": img(i), "text": f"caption {i}.{j}"} for i in range(1, 7) for j in range(3)]
    )
    images = pa.Table.from_pylist(
        [{"image_id": img(i), "path": f"/images/{i}.jpg", "pixels": "ok" if i < 6 else "missing"} for i in range(1, 7)]
    )
    return Catalog.from_tables(captions, images)


def triples(n: int) -> pa.Table:
    """VERIFY-TRIPLE items: a caption of image i against decoy image i + 1."""
    rows = []
    for position in range(1, n + 1):
        i = (position - 1) % 4 + 1
        a, b = cap(3 * i + position % 3), img(i + 1)
        rows.append(
            {
                "batch_id": "b1",
                "position": position,
                "item_id": item_id(VERIFY_TRIPLE, a, b),
                "task_type": VERIFY_TRIPLE,
                "id_a": a,
                "id_b": b,
                "gold": NOT_GOLD,
            }
        )
    return pa.Table.from_pylist(rows)


def test_every_task_type_has_one_presentation() -> None:
    assert set(PRESENTATIONS) == set(TASK_TYPES)


@pytest.mark.parametrize("seed", [0, 20260701])
def test_the_app_numbers_a_triples_images_as_the_export_does(catalog: Catalog, seed: int, tmp_path: Path) -> None:
    tasks = triples(24)
    exported = {i.item_id: [(o.id, o.answer) for o in i.options] for batch in batches(tasks, catalog, seed) for i in batch.items}
    app = Round.of(tasks, catalog, str(tmp_path), seed)
    for row in tasks.to_pylist():
        task = TaskRow(row["batch_id"], row["position"], row["item_id"], row["task_type"], row["id_a"], row["id_b"], row["gold"])
        assert [(o.shows, o.answer) for o in app.options(task)] == exported[row["item_id"]]
        first = app.canonical_answer(task, "1")
        assert first == exported[row["item_id"]][0][1]
    orders = [tuple(answer for _, answer in options) for options in exported.values()]
    assert {(TRIPLE_TARGET, TRIPLE_DECOY), (TRIPLE_DECOY, TRIPLE_TARGET)} == set(orders)  # the seed shuffles, both orders occur


def test_choose_lists_the_targets_captions_and_maps_numbers_to_caption_ids(catalog: Catalog) -> None:
    choose = PRESENTATIONS[CHOOSE]
    options = choose.options("item", img(2), img(3), catalog, seed=0)
    assert options == tuple(Option(c, c) for c in (cap(6), cap(7), cap(8)))
    assert choose.canonical("2", options) == cap(7) and choose.canonical(CHOOSE_NONE, options) == CHOOSE_NONE
    with pytest.raises(AnswerError, match="needs one of its 3 captions or none"):
        choose.canonical("4", options)


def test_a_triple_accepts_either_image_or_a_word_and_nothing_else(catalog: Catalog) -> None:
    triple = PRESENTATIONS[VERIFY_TRIPLE]
    options = triple.options("item", cap(3), img(2), catalog, seed=0)
    assert {o.shows for o in options} == {img(1), img(2)}
    assert triple.canonical("both", options) == "both" and triple.canonical("neither", options) == "neither"
    assert {triple.canonical("1", options), triple.canonical("2", options)} == {TRIPLE_TARGET, TRIPLE_DECOY}
    with pytest.raises(AnswerError, match="needs image 1, image 2, both or neither"):
        triple.canonical(TRIPLE_TARGET, options)  # the page never says which image is the target


def test_what_cannot_be_shown_is_said_per_type(catalog: Catalog) -> None:
    assert PRESENTATIONS[VERIFY_TRIPLE].unshowable(cap(3), img(1), catalog) == (
        "same-image",
        f"decoy {img(1)} is the image of caption {cap(3)}",
    )
    assert PRESENTATIONS[VERIFY_TRIPLE].unshowable(cap(18), img(1), catalog)[0] == "no-pixels"  # the target image has none
    assert PRESENTATIONS[CHOOSE].unshowable(img(9), img(1), catalog) == ("no-captions", f"target {img(9)} has no caption raters can read")
    assert PRESENTATIONS["STS"].unshowable(cap(3), cap(4), catalog) is None
    assert PRESENTATIONS[VERIFY_TRIPLE].shown(cap(3), img(2), catalog) == (cap(3), img(2), img(1))
