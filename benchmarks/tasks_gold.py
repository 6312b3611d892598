"""The tasks stage's gold step (known positives and negatives, then batches) as the collection grows.

A round writes a few thousand items whatever the size of the collection, so the step should cost
in proportion to the items and gold it writes, not to the captions it may draw from.  Each run
builds the tasks of the same 2,000 STS items and their gold with ``annotate.tasks.build_tasks``
over collections of N captions (N/5 images, no pixels, so only captions are showable) and one
512-d text space written as an embedding set and memory-mapped, as the stage reads it.

**The reference is the smallest collection in the same run**: ``× smallest`` is the step's time
over its time at the smallest N; 1.0 is "proportional to what it writes".  Beside it, ``whole-pool
s`` times what the step did before it read vectors only for the pairs it draws: normalising every
pool vector of the space in float64 (the ~1.3 s of the 51 s stage the collection size added at
25k captions, and 2.5 GB at all of COCO).
"""

from __future__ import annotations

import argparse
import tempfile
import time

import numpy as np
import pyarrow as pa

from benchmarks import save_result
from crisscross.annotate.catalog import Catalog
from crisscross.annotate.gold import Space
from crisscross.annotate.items import items_from_candidates
from crisscross.annotate.tasks import TaskParams, build_tasks
from crisscross.candidates.cxc import C2C_ISIM, CANDIDATES_SCHEMA
from crisscross.core.ids import CAPTION_KIND, IMAGE_KIND, make_id
from crisscross.embed.sets import EmbeddingSet, unit_rows
from crisscross.tasktypes.names import STS

ITEMS = 2_000
DIM = 512
SIZES = (25_000, 125_000, 616_435)
QUICK_SIZES = (5_000, 25_000)
ROUNDS = 3


def collection(n_captions: int, folder: str) -> tuple[Catalog, Space, pa.Table]:
    """A catalog of ``n_captions`` captions, their vectors as a memory-mapped set, and the items."""
    captions = [make_id("coco", CAPTION_KIND, i) for i in range(n_captions)]
    images = [make_id("coco", IMAGE_KIND, i // 5) for i in range(n_captions)]
    catalog = Catalog(
        texts=dict.fromkeys(captions, "a caption"),
        image_of=dict(zip(captions, images, strict=True)),
        paths={},
        pixels=dict.fromkeys(images, "missing"),
    )
    vectors = np.random.default_rng(0).standard_normal((n_captions, DIM), dtype=np.float32)
    EmbeddingSet(captions, vectors).write(folder)
    space_set = EmbeddingSet.read(folder)
    pairs = np.random.default_rng(1).integers(0, 5_000, size=(ITEMS * 2, 2))
    rows = [
        {"method": C2C_ISIM, "id1": captions[a], "id2": captions[b], "image1": images[a], "image2": images[b]}
        for a, b in pairs
        if images[a] != images[b]
    ][:ITEMS]
    items, _ = items_from_candidates(pa.Table.from_pylist(rows, schema=CANDIDATES_SCHEMA), catalog)
    return catalog, Space("text/synthetic", space_set, space_set), items


def best_of(call, rounds: int) -> tuple[float, object]:
    times, result = [], None
    for _ in range(rounds):
        began = time.perf_counter()
        result = call()
        times.append(time.perf_counter() - began)
    return min(times), result


def measure(n_captions: int, params: TaskParams) -> dict[str, float]:
    """The gold step's best time over a collection of ``n_captions``, and the whole-pool normalisation's."""
    with tempfile.TemporaryDirectory() as folder:
        catalog, space, items = collection(n_captions, folder)
        seconds, tasks = best_of(lambda: build_tasks(items, catalog, {STS: [space]}, params, 0), ROUNDS)
        pool_seconds, _ = best_of(lambda: unit_rows(np.asarray(space.a.vectors, dtype=np.float64)), 1)
        return {
            "captions": n_captions,
            "items": items.num_rows,
            "task_rows": tasks.num_rows,
            "seconds": seconds,
            "whole_pool_seconds": pool_seconds,
        }


def run(args: argparse.Namespace) -> None:
    params = TaskParams(gold_text_encoders=("synthetic",), gold_image_encoders=())
    rows = [measure(n, params) for n in (QUICK_SIZES if args.quick else SIZES)]
    smallest = rows[0]["seconds"]
    print(f"{'captions':>9} {'items':>6} {'task rows':>9} {'step s':>7} {'× smallest':>10} {'whole-pool s':>12}")
    for row in rows:
        row["ratio_to_smallest"] = row["seconds"] / smallest
        print(
            f"{row['captions']:>9,} {row['items']:>6,} {row['task_rows']:>9,} {row['seconds']:>7.2f} "
            f"{row['ratio_to_smallest']:>10.2f} {row['whole_pool_seconds']:>12.2f}"
        )
    print(f"saved {save_result('tasks_gold', {'dim': DIM, 'rounds': ROUNDS, 'rows': rows})}")
