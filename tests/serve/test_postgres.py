"""The store on PostgreSQL (pg8000), where a team runs one: the same rules as on SQLite.

Runs against the server ``CRISSCROSS_TEST_POSTGRES`` names (a ``postgresql://`` URL of a scratch
database whose tables it drops); skipped, with that reason, when the variable is unset.
"""

from __future__ import annotations

import os
import threading

import pytest

from crisscross.annotate.sources import JUDGMENT_SOURCES, SourceSettings
from crisscross.annotate.store import Answer, Refused, Store
from tests.serve.round import tasks_table

URL = os.environ.get("CRISSCROSS_TEST_POSTGRES", "")
pytestmark = pytest.mark.skipif(
    not URL, reason="set CRISSCROSS_TEST_POSTGRES to a scratch postgresql:// database to test the store on PostgreSQL"
)
NOW = 1_800_000_000.0


@pytest.fixture
def store() -> Store:
    fresh = Store(URL)
    with fresh._transaction() as run:
        for table in ("withheld", "closed_items", "judgments", "assignments", "batches", "tasks", "raters", "meta"):
            run(f"DROP TABLE IF EXISTS {table}")
    fresh.init()
    fresh.load_tasks(tasks_table().to_pylist())
    return fresh


def full(held) -> list[Answer]:
    rated = held.task_type != "VERIFY"
    return [Answer(i.position, 2.0 if rated else None, None if rated else "100% no", 1.0) for i in held.items]


def test_assignment_submit_and_import_work_on_postgres(store: Store):
    token = store.add_rater("ann", NOW)
    assert store.rater_of(token) == "ann" and store.rater_of("x") is None
    seen = {}
    for rater in ("ann", "bob", "cy"):
        while held := store.assignment(rater, NOW, 2, 3600):
            seen.setdefault(held.batch_id, set()).add(rater)
            assert store.submit(rater, held.batch_id, full(held), NOW, 2)
            assert not store.submit(rater, held.batch_id, full(held), NOW, 2)  # a double submit stores nothing
    assert all(len(r) == 2 for r in seen.values()) and len(seen) == 5
    with pytest.raises(Refused):
        store.submit("dan", "sts-00001", [], NOW, 2)
    collected = JUDGMENT_SOURCES.create("import", settings=SourceSettings(judgments=(URL,), format="store"))(tasks_table())
    assert collected.judgments.num_rows == 2 * tasks_table().num_rows and not collected.rejected


def test_concurrent_raters_never_overfill_a_batch_on_postgres(store: Store):
    got: list[tuple[str, str]] = []

    def take(rater: str) -> None:
        held = Store(URL).assignment(rater, NOW, 1, 3600)
        if held:
            got.append((rater, held.batch_id))

    threads = [threading.Thread(target=take, args=(f"r{i}",)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(got) == 5 and len({b for _, b in got}) == 5  # five batches, one rater each, three raters left without


def test_closing_items_and_withholding_them_work_on_postgres(store: Store):
    item = {(r["batch_id"], r["position"]): r["item_id"] for r in tasks_table().to_pylist()}
    store.close_items({item["sts-00002", 1]: "decided", item["sts-00001", 2]: "gold: never closed"}, NOW)
    store.close_items({item["sts-00002", 1]: "again", item["sis-00001", 1]: "decided"}, NOW)
    assert store.closed() == {item["sts-00002", 1]: "decided", item["sis-00001", 1]: "decided"}
    shown = {}
    while held := store.assignment("ann", NOW, 2, 3600):
        shown[held.batch_id] = [i.position for i in held.items]
        assert store.shows("ann", held.batch_id, held.items[0].position, NOW, 3600)
        assert store.submit("ann", held.batch_id, full(held), NOW, 2)
    assert shown == {"sits-00001": [1, 2], "sts-00001": [1, 2, 3], "sts-00002": [2, 3], "verify-00001": [1, 2, 3]}
    sis, sts = (next(p for p in store.progress(2, NOW, 3600) if p.task_type == kind) for kind in ("SIS", "STS"))
    assert (sis.done, sis.closed, sis.saved) == (1, 1, 2) and (sts.done, sts.items, sts.closed, sts.saved) == (0, 3, 1, 2)
