"""The operator page's poll (``/api/operator/campaign``) on a store the size of CxC's campaign.

A synthetic SQLite store holds CxC's 1,335,475 judgments (267,095 pairs × 5 raters; ``--quick``:
a tenth): 100 raters, batches of 10 items with one gold item, 5 judgments an item, spread over 30
hours, 5% of the items of every other batch closed by a stop rule.  The figures are timed as the
app computes them, :func:`crisscross.campaign.monitor.campaign_report` with its QC report cache:
the first poll (the raters' QC report built), then 20 polls with nothing new (the report kept), a
poll after one more batch of judgments within the report's refresh (the counts move, the report
waits) and one an hour later (the report built anew).

**The reference is reading every judgment once** (``store.judgments()`` into a DataFrame, what a
poll cost before the counts moved into SQL and the report into its cache), in the same run.
"""

from __future__ import annotations

import argparse
import os
import sqlite3
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from benchmarks import cpu_model, percentiles, save_result

NAME = "operator_poll"
JUDGMENTS = 267_095 * 5  # CxC's pairs, five raters each
RATERS, REPLICAS, SIZE = 100, 5, 10
NOW = 1_800_000_000.0
SPAN = 30 * 3600.0  # the campaign's hours so far
POLLS = 20


def run(args: argparse.Namespace) -> None:
    import pandas as pd

    from crisscross.annotate.store import Store
    from crisscross.campaign import monitor
    from crisscross.campaign.replication import ReplicationSettings

    judgments = JUDGMENTS // 10 if args.quick else JUDGMENTS
    with tempfile.TemporaryDirectory(prefix="crisscross-bench-") as tmp:
        db = str(Path(tmp) / "campaign.sqlite")
        started = time.perf_counter()
        batches = build(db, judgments)
        built = time.perf_counter() - started
        store = Store(db)
        store.init()
        reference = [timed(lambda: pd.DataFrame(store.judgments())) for _ in range(3)]
        cache = monitor.RaterReportCache()

        def poll(now: float) -> dict[str, Any]:
            return monitor.campaign_report(store, now, REPLICAS, 3600.0, ReplicationSettings(), monitor.CampaignInputs(), cache=cache)

        first = timed(lambda: poll(NOW))
        kept = [timed(lambda n=n: poll(NOW + 0.5 * (n + 1))) for n in range(POLLS)]  # within the report's refresh
        add_batch(db, batches)
        moved = timed(lambda: poll(NOW + monitor.QC_REFRESH / 2))  # the counts move, the report waits
        rebuilt = timed(lambda: poll(NOW + 3600.0))  # past its refresh and its share of the time: built anew
        counted = poll(NOW + 3600.0)["pace"]["judgments"]
    read_all = statistics.median(reference)
    cached = statistics.median(kept)
    p95 = percentiles(kept)["p95"]
    machine = f"{cpu_model()}, {os.cpu_count()} cores"
    print(f"store: {counted:,} judgments, {batches:,} batches (built in {built:.0f} s); {machine}")
    print(f"  reading every judgment once (the reference): {read_all:.2f} s")
    print(f"  first poll (the raters' QC report built): {first:.2f} s = {first / read_all:.2f}× the reference")
    print(f"  polls with the report kept: p50 {cached:.3f} s, p95 {p95:.3f} s = {cached / read_all:.3f}× the reference")
    print(f"  a poll after a new batch, within the report's refresh (counts moved, report kept): {moved:.3f} s")
    print(f"  a poll an hour later (past the report's refresh, {monitor.QC_REFRESH:.0f} s, and its share of the time): {rebuilt:.2f} s")
    path = save_result(
        NAME,
        {
            "quick": args.quick,
            "machine": machine,
            "judgments": counted,
            "reference_read_all_s": read_all,
            "first_poll_s": first,
            "cached_poll_p50_s": cached,
            "cached_poll_p95_s": p95,
            "after_new_batch_s": moved,
            "rebuilt_s": rebuilt,
            "cached_over_reference": cached / read_all,
        },
    )
    print(f"written to {path}")


def build(db: str, judgments: int) -> int:
    """The store's tasks through its own API; assignments, judgments and closures written in bulk (SQLite)."""
    from crisscross.annotate.store import Store

    batches = judgments // (REPLICAS * SIZE)
    store = Store(db)
    store.init()
    store.load_tasks([task(b, p) for b in range(batches) for p in range(SIZE)])
    with sqlite3.connect(db) as connection:
        for b in range(batches):
            connection.executemany(ASSIGNMENT, assignments(b, batches))
            connection.executemany(JUDGMENT, batch_judgments(b, batches))
            if b % 20 == 0:
                connection.execute(CLOSURE, (item(b, 1), "threshold after 2: decided", iso(NOW - SPAN + b * SPAN / batches)))
    return batches


def add_batch(db: str, batches: int) -> None:
    """One more submitted batch of every replica, a minute after the last."""
    from crisscross.annotate.store import Store

    Store(db).load_tasks([task(batches, p) for p in range(SIZE)])
    with sqlite3.connect(db) as connection:
        connection.executemany(ASSIGNMENT, assignments(batches, batches, late=60.0))
        connection.executemany(JUDGMENT, batch_judgments(batches, batches, late=60.0))


ASSIGNMENT = "INSERT INTO assignments (batch_id, rater, started, submitted, released) VALUES (?, ?, ?, ?, 0)"
JUDGMENT = "INSERT INTO judgments (rater, batch_id, position, item_id, task_type, score, answer, seconds, time) VALUES (?, ?, ?, ?, ?, ?, NULL, ?, ?)"
CLOSURE = "INSERT INTO closed_items (item_id, reason, time) VALUES (?, ?, ?)"


def kind(b: int) -> str:
    return "STS" if b % 2 else "SIS"


def item(b: int, p: int) -> str:
    return f"gold-{b}" if p == 0 else f"{kind(b).lower()}-{b}-{p}"


def task(b: int, p: int) -> dict[str, Any]:
    from crisscross.formats.schema import GOLD_NEGATIVE, GOLD_POSITIVE, NOT_GOLD

    gold = (GOLD_POSITIVE if b % 3 else GOLD_NEGATIVE) if p == 0 else NOT_GOLD
    return {"batch_id": f"b{b:07d}", "position": p, "item_id": item(b, p), "task_type": kind(b), "id_a": "x", "id_b": "y", "gold": gold}


def submitted(b: int, k: int, batches: int, late: float = 0.0) -> float:
    return NOW - SPAN + b * SPAN / batches + k * 11.0 + late


def rater(b: int, k: int) -> str:
    return f"r{(b * 7 + k * 13) % RATERS:03d}"


def assignments(b: int, batches: int, late: float = 0.0) -> list[tuple[Any, ...]]:
    return [(f"b{b:07d}", rater(b, k), submitted(b, k, batches, late) - 100, submitted(b, k, batches, late)) for k in range(REPLICAS)]


def batch_judgments(b: int, batches: int, late: float = 0.0) -> list[tuple[Any, ...]]:
    return [
        (rater(b, k), f"b{b:07d}", p, item(b, p), kind(b), float((b + p + k) % 6), 3.0 + (p + k) % 7, iso(submitted(b, k, batches, late)))
        for k in range(REPLICAS)
        for p in range(SIZE)
    ]


def iso(seconds: float) -> str:
    from crisscross.annotate.store import now_iso

    return now_iso(seconds)


def timed(call: Any) -> float:
    started = time.perf_counter()
    call()
    return time.perf_counter() - started
