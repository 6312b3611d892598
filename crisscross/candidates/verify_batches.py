"""VERIFY batches (ECCV Caption §3.2): every query's candidates in batches of 16 with its original
positive and a far negative as gold, by the top-25 negative rule.
"""

from __future__ import annotations

import math
from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa

from crisscross.candidates.machine import METHOD, Finding, Pair, QueryLists, as_pair
from crisscross.core.rng import generator
from crisscross.formats.eccv import DIRECTIONS, I2T
from crisscross.formats.schema import GOLD_NEGATIVE, GOLD_POSITIVE, NOT_GOLD
from crisscross.scoring.models import Gallery

BATCHES_SCHEMA = pa.schema(
    [
        ("batch_id", pa.string()),
        ("position", pa.int64()),
        ("image_id", pa.string()),
        ("caption_id", pa.string()),
        ("method", pa.string()),
        ("gold", pa.string()),  # "" | positive | negative
        ("query_id", pa.string()),  # candidates: the query that ranked it best; gold: the batch's main query
        ("direction", pa.string()),
        ("in_top_lists", pa.int64()),  # annotators with this pair in their top-``negative_depth`` for query_id (0 for negatives)
    ]
)


@dataclass
class BatchPlan:
    batches: pa.Table
    facts: dict[str, Any] = field(default_factory=dict)


def plan_batches(
    candidates: Mapping[Pair, Sequence[Finding]],
    lists: Iterable[QueryLists],
    gallery: Gallery,
    per_batch: int,
    seed: int,
) -> BatchPlan:
    """ECCV §3.2 batches: ``per_batch`` candidates + 1 original positive + 1 negative outside
    every annotator's top lists (``negative_depth``) for the batch's main query.

    Candidates in (best query, pair) order are cut into batches whose sizes differ by at most
    one; a batch's main query is its most frequent best query (ties: first).  Its positive is an
    original pair of that query not used before (else of the batch's other queries, else any
    query); its negative pairs the query with a gallery item drawn uniformly (generator keyed
    by the batch) among those in no annotator's list for it, not original, not yet used.  The
    rule is checked again on the result and counted (``negative_rule_violations``).
    """
    by_query = {(e.direction, e.query): e for e in lists}
    in_lists = {key: Counter(i for items in e.top.values() for i in set(items)) for key, e in by_query.items()}
    originals = _original_pairs(gallery, by_query)
    ordered = sorted(candidates.items(), key=lambda kv: (kv[1][0].direction, kv[1][0].query, kv[0]))
    n = len(ordered)
    n_batches = math.ceil(n / per_batch) if n else 0
    digits = max(5, len(str(n_batches)))
    used: set[Pair] = set(candidates)
    rows: list[dict[str, Any]] = []
    facts: Counter[str] = Counter()
    start = 0
    for k in range(n_batches):
        size = n // n_batches + (k < n % n_batches)
        members = ordered[start : start + size]
        start += size
        batch_id = f"verify-{k + 1:0{digits}d}"
        keys = [(f[0].direction, f[0].query) for _, f in members]
        counts = Counter(keys)
        main = max(counts, key=lambda key: (counts[key], -keys.index(key)))
        rng = generator(seed, "filter", "gold", batch_id)
        positive = _draw_positive(main, keys, originals, used, rng)
        negative = _draw_negative(main, by_query, in_lists, gallery, originals, used, rng)
        facts["fallback_positive"] += positive[1] != main
        batch = [
            {"image_id": p[0], "caption_id": p[1], "gold": NOT_GOLD, "query_id": f[0].query, "direction": f[0].direction, "in_top_lists": 0}
            for p, f in members
        ]
        for gold, (pair, key) in ((GOLD_POSITIVE, positive), (GOLD_NEGATIVE, negative)):
            if pair is None:
                facts[f"missing_{gold}"] += 1
                continue
            used.add(pair)
            batch.append(
                {"image_id": pair[0], "caption_id": pair[1], "gold": gold, "query_id": key[1], "direction": key[0], "in_top_lists": 0}
            )
        for row in batch:
            item = row["caption_id"] if row["direction"] == I2T else row["image_id"]
            row["in_top_lists"] = in_lists.get((row["direction"], row["query_id"]), Counter())[item]
        order = generator(seed, batch_id).permutation(len(batch))
        rows += [{**batch[i], "batch_id": batch_id, "position": p, "method": METHOD} for p, i in enumerate(order, start=1)]
    rows.sort(key=lambda r: (r["batch_id"], r["position"]))
    table = pa.Table.from_pylist(rows, schema=BATCHES_SCHEMA)
    negatives = [r for r in rows if r["gold"] == GOLD_NEGATIVE]
    return BatchPlan(
        table,
        {
            **facts,
            **dict(
                batches=n_batches,
                candidates=n,
                positives=sum(r["gold"] == GOLD_POSITIVE for r in rows),
                negatives=len(negatives),
                negative_rule_violations=sum(r["in_top_lists"] > 0 for r in negatives),
                batch_sizes={str(k): v for k, v in sorted(Counter(Counter(r["batch_id"] for r in rows).values()).items())},
            ),
        },
    )


def _original_pairs(gallery: Gallery, keys: Iterable[tuple[str, str]]) -> dict[tuple[str, str], list[Pair]]:
    captions_of: dict[str, list[str]] = defaultdict(list)
    for caption, image in gallery.caption_image.items():
        captions_of[image].append(caption)
    out = {}
    for direction, query in keys:
        if direction == I2T:
            out[(direction, query)] = [(query, c) for c in sorted(captions_of.get(query, ()))]
        else:
            image = gallery.caption_image.get(query)
            out[(direction, query)] = [(image, query)] if image else []
    return out


def _draw_positive(
    main: tuple[str, str], keys: Sequence[tuple[str, str]], originals: Mapping[tuple[str, str], list[Pair]], used: set[Pair], rng: Any
) -> tuple[Pair | None, tuple[str, str]]:
    for key in [main, *dict.fromkeys(keys), *sorted(originals)]:
        free = [p for p in originals.get(key, ()) if p not in used]
        if free:
            return free[int(rng.integers(len(free)))], key
    return None, main


def _draw_negative(
    main: tuple[str, str],
    by_query: Mapping[tuple[str, str], QueryLists],
    in_lists: Mapping[tuple[str, str], Counter],
    gallery: Gallery,
    originals: Mapping[tuple[str, str], list[Pair]],
    used: set[Pair],
    rng: Any,
    max_draws: int = 1000,
) -> tuple[Pair | None, tuple[str, str]]:
    direction, query = main
    items = gallery.ids(DIRECTIONS[direction][1])
    banned = set(in_lists.get(main, ())) | {p[1] if direction == I2T else p[0] for p in originals.get(main, ())}
    for _ in range(max_draws):
        item = items[int(rng.integers(len(items)))]
        pair = as_pair(direction, query, item)
        if item not in banned and pair not in used:
            return pair, main
    return None, main
