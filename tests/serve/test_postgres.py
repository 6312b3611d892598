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
        for table in ("judgments", "assignments", "batches", "tasks", "raters", "meta"):
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
