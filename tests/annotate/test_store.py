"""The store: tokens, assignment (replicas, never twice, one at a time, timeouts), submits; each
test on both backends (the ``database`` and ``store`` fixtures, ``tests/conftest.py``)."""

from __future__ import annotations

import sqlite3
import threading
from pathlib import Path

import pytest

from crisscross.annotate.store import (
    BACKENDS,
    Answer,
    Refused,
    Store,
    StoreError,
    backend_for,
    check_answers,
    open_store,
    redact,
    token_hash,
)
from crisscross.formats.schema import JudgmentRules
from tests.conftest import DATABASES
from tests.serve.round import BATCHES, make_store, query, tasks_table, token_holder

NOW = 1_800_000_000.0
HOUR = 3600.0


def answers_for(store: Store, rater: str, now: float = NOW, replicas: int = 2) -> tuple[str, list[Answer]]:
    held = store.assignment(rater, now, replicas, HOUR)
    assert held is not None
    rated = held.task_type != "VERIFY"
    return held.batch_id, [Answer(i.position, 2.5 if rated else None, None if rated else "100% yes", 3.0) for i in held.items]


def test_every_backend_of_the_store_is_tested():
    assert {make(":memory:").name for make in BACKENDS.values()} == set(DATABASES)


def test_tokens_are_stored_only_as_hashes_and_sign_in_only_their_rater(store: Store):
    token = store.add_rater("ann", NOW)
    other = store.add_rater("bob", NOW)
    assert token_holder(store, token) == "ann" and token_holder(store, other) == "bob"
    assert token_holder(store, token + "x") is None and token_holder(store, "") is None
    rows = query(store.location, "SELECT name, token_hash FROM raters ORDER BY name")
    assert rows == [("ann", token_hash(token)), ("bob", token_hash(other))]
    assert all(token not in str(row) for row in rows)


def test_rater_names_are_checked_and_an_existing_rater_needs_new_token(store: Store):
    store.add_rater("ann", NOW)
    with pytest.raises(StoreError, match="exists; add --new-token"):
        store.add_rater("ann", NOW)
    new = store.add_rater("ann", NOW, replace=True)
    assert token_holder(store, new) == "ann"
    for bad in ("", "a b", "<script>", "-lead", "x" * 65):
        with pytest.raises(StoreError, match="rater name"):
            store.add_rater(bad, NOW)


def test_the_schema_and_the_tasks_load_idempotently(database: str):
    store = make_store(database)
    secret = store.secret()
    assert store.load_tasks(tasks_table().to_pylist()) == 0  # loading the same tasks again adds nothing
    assert make_store(database).secret() == secret
    assert query(database, "SELECT COUNT(*) FROM tasks") == [(tasks_table().num_rows,)]


def test_servers_starting_together_on_a_new_database_set_it_up_once(database: str):
    secrets: list[bytes] = []
    errors: list[Exception] = []

    def set_up() -> None:
        try:
            store = Store(database)
            store.init()
            secrets.append(store.secret())
        except Exception as error:
            errors.append(error)

    threads = [threading.Thread(target=set_up) for _ in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors and len(secrets) == 6 and len(set(secrets)) == 1


def test_a_sqlite_database_is_in_wal_mode(tmp_path: Path):
    path = tmp_path / "db.sqlite"
    make_store(path)
    assert sqlite3.connect(path).execute("PRAGMA journal_mode").fetchone()[0] == "wal"


def test_a_database_of_another_round_is_refused(store: Store):
    rows = tasks_table().to_pylist()
    rows[0]["item_id"] = "sts:demo:cap:98|demo:cap:99"
    with pytest.raises(StoreError, match="holds another round"):
        store.load_tasks(rows)


def test_each_batch_goes_to_replicas_distinct_raters_and_never_twice_to_one(store: Store):
    replicas = 2
    got: dict[str, list[str]] = {}
    for rater in [f"r{i}" for i in range(6)]:
        while (held := store.assignment(rater, NOW, replicas, HOUR)) is not None:
            got.setdefault(held.batch_id, []).append(rater)
            batch_id, answers = answers_for(store, rater)
            assert batch_id == held.batch_id  # one batch at a time: asking again gives the same one
            assert store.submit(rater, batch_id, answers, NOW, replicas)
    assert sorted(got) == sorted(b for _, b, _ in BATCHES)
    assert all(len(raters) == replicas == len(set(raters)) for raters in got.values())
    assert [p.done for p in store.progress(replicas, NOW, HOUR)] == [2, 1, 1, 1]  # STS, SIS, SITS, VERIFY
    assert all(p.open == p.assigned == 0 for p in store.progress(replicas, NOW, HOUR))


def test_an_abandoned_assignment_is_released_after_the_timeout(store: Store):
    first = store.assignment("ann", NOW, 1, HOUR)
    assert first is not None
    assert store.assignment("bob", NOW + 10, 1, HOUR).batch_id != first.batch_id
    later = store.assignment("cy", NOW + HOUR + 1, 1, HOUR)
    assert later is not None and later.batch_id == first.batch_id  # ann's slot went to cy
    assert store.assignment("ann", NOW + HOUR + 2, 1, HOUR).batch_id != first.batch_id  # never the same batch twice
    _, answers = answers_for(store, "cy", NOW + HOUR + 1, 1)
    assert store.submit("cy", first.batch_id, answers, NOW + HOUR + 5, 1)
    with pytest.raises(Refused, match="released after the time limit") as refused:
        store.submit("ann", first.batch_id, answers, NOW + HOUR + 6, 1)
    assert refused.value.status == 409


def test_a_late_submit_is_taken_while_the_batch_still_lacks_ratings(store: Store):
    held = store.assignment("ann", NOW, 2, HOUR)
    _, answers = answers_for(store, "ann")
    assert store.assignment("bob", NOW + HOUR + 1, 2, HOUR) is not None  # releases ann's assignment
    assert store.submit("ann", held.batch_id, answers, NOW + HOUR + 2, 2)
    assert len(store.judgments()) == len(held.items)


def test_a_double_submit_stores_one_judgment_per_item(store: Store):
    batch_id, answers = answers_for(store, "ann")
    assert store.submit("ann", batch_id, answers, NOW, 2) is True
    assert store.submit("ann", batch_id, answers, NOW + 1, 2) is False
    assert len(store.judgments()) == len(answers)


def test_concurrent_double_submits_store_once(database: str):
    make_store(database)
    stores = [Store(database) for _ in range(8)]
    batch_id, answers = answers_for(stores[0], "ann")
    results: list[bool] = []
    threads = [threading.Thread(target=lambda s=s: results.append(s.submit("ann", batch_id, answers, NOW, 2))) for s in stores]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(results) == [False] * 7 + [True]
    assert len(stores[0].judgments()) == len(answers)


def test_concurrent_raters_never_overfill_a_batch(store: Store):
    got: list[tuple[str, str]] = []

    def take(rater: str) -> None:
        held = Store(store.location).assignment(rater, NOW, 1, HOUR)
        if held:
            got.append((rater, held.batch_id))

    threads = [threading.Thread(target=take, args=(f"r{i}",)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(got) == 5 and len({b for _, b in got}) == 5  # five batches, one rater each, three raters left without


def test_a_submit_of_someone_elses_batch_is_refused(store: Store):
    batch_id, answers = answers_for(store, "ann")
    with pytest.raises(Refused, match="not assigned to you") as refused:
        store.submit("bob", batch_id, answers, NOW, 2)
    assert refused.value.status == 403


def test_every_item_needs_its_kind_of_value():
    items = [row for row in _rows() if row.batch_id == "sts-00001"]
    good = [Answer(i.position, 1.5, None, 2.0) for i in items]
    assert len(check_answers(items, good)) == len(items)
    cases = {
        "has no answer: rate every item": good[:-1],
        "needs a score from 0 to 5": [*good[:-1], Answer(items[-1].position, None, None, 1.0)],
        "score 5.5 is outside 0–5": [*good[:-1], Answer(items[-1].position, 5.5, None, 1.0)],
        "takes a score, not an answer": [*good[:-1], Answer(items[-1].position, 1.0, "100% yes", 1.0)],
        "answered twice": [*good, good[0]],
        "has no item 9": [*good, Answer(9, 1.0, None, 1.0)],
        "seconds nan is not a finite number": [*good[:-1], Answer(items[-1].position, 1.0, None, float("nan"))],
        "over the limit of 3600": [*good[:-1], Answer(items[-1].position, 1.0, None, 1e9)],
    }
    for message, answers in cases.items():
        with pytest.raises(Refused, match=message):
            check_answers(items, answers)
    assert check_answers(items, [*good[:-1], Answer(items[-1].position, 1.0, None, None)])  # a time not measured is no time
    with pytest.raises(Refused, match="over the limit of 60"):
        check_answers(items, [*good[:-1], Answer(items[-1].position, 1.0, None, 61.0)], JudgmentRules(max_seconds=60.0))
    verify = [row for row in _rows() if row.batch_id == "verify-00001"]
    with pytest.raises(Refused, match="one of the four answers"):
        check_answers(verify, [Answer(i.position, None, "maybe", 1.0) for i in verify])


def _rows():
    from crisscross.annotate.store import TaskRow

    return [
        TaskRow(r["batch_id"], r["position"], r["item_id"], r["task_type"], r["id_a"], r["id_b"], r["gold"])
        for r in tasks_table().to_pylist()
    ]


def test_locations_choose_the_backend_and_passwords_never_show():
    assert backend_for("/tmp/x.sqlite").name == "sqlite"
    assert backend_for("postgresql://u:secret@db.example:5432/round").name == "postgresql"
    assert redact("postgresql://u:secret@db.example/round") == "postgresql://u:***@db.example/round"
    with pytest.raises(StoreError, match="unknown scheme 'mysql'"):
        backend_for("mysql://u:p@h/d")


def test_open_store_needs_an_existing_database(tmp_path: Path):
    with pytest.raises(Exception, match="no rater database"):
        open_store(str(tmp_path / "absent.sqlite"))


def _rate_all(store: Store, raters: list[str], start: float, step: float, limit: int = 99) -> float:
    """Each rater rates the batches they are given (at most ``limit``), one every ``step`` seconds from ``start``."""
    now = start
    for rater in raters:
        for _ in range(limit):
            if store.assignment(rater, now, 2, HOUR) is None:
                break
            batch_id, answers = answers_for(store, rater, now)
            assert store.submit(rater, batch_id, answers, now, 2)
            now += step
    return now


def test_the_counts_by_item_are_what_the_judgments_hold(store: Store):
    _rate_all(store, ["ann", "bob"], NOW, 61.0, limit=3)
    judgments, gold = store.judgments(), store.gold()
    first_sts = next(j["item_id"] for j in judgments if j["task_type"] == "STS" and j["item_id"] not in gold)
    unjudged = next(
        r["item_id"]
        for r in tasks_table().to_pylist()
        if r["item_id"] not in gold and r["item_id"] not in {j["item_id"] for j in judgments}
    )
    closed = {first_sts, unjudged}
    store.close_items(dict.fromkeys(closed, "threshold after 2: decided"), NOW)
    counts = store.judged_items()
    per_item: dict[str, int] = {}
    for j in judgments:
        per_item[j["item_id"]] = per_item.get(j["item_id"], 0) + 1
    kinds = {r["item_id"]: r["task_type"] for r in tasks_table().to_pylist()}
    expected: dict[tuple[str, bool, bool, int], int] = {}
    for item, kind in kinds.items():
        if item in per_item or item in closed:  # an item neither judged nor closed counts towards nothing
            key = (kind, item in gold, item in closed, per_item.get(item, 0))
            expected[key] = expected.get(key, 0) + 1
    assert {(c.task_type, c.gold, c.closed, c.judgments): c.items for c in counts} == expected
    assert sum(c.judgments * c.items for c in counts) == len(judgments)
    assert any(c.closed and c.judgments for c in counts) and any(c.closed and not c.judgments for c in counts)
    assert any(c.gold for c in counts) and len(per_item) < len(kinds)


def test_the_times_are_counted_as_the_judgments_hold_them(store: Store):
    from datetime import datetime

    end = _rate_all(store, ["ann", "bob", "cy"], NOW - 2 * HOUR, 600.0)
    stamps = [datetime.fromisoformat(j["time"]).timestamp() for j in store.judgments()]
    starts = [NOW - 3 * HOUR, NOW - 2 * HOUR, NOW - HOUR, NOW]
    for now in (end, end - 0.0005, NOW - 1234.5678):
        times = store.judgment_times(now, HOUR, starts, HOUR)
        assert times.total == len(stamps) and times.first == min(j["time"] for j in store.judgments())
        assert times.latest == max(j["time"] for j in store.judgments())
        assert times.recent == sum(1 for s in stamps if now - HOUR < s <= now)
        assert times.buckets == tuple(sum(1 for s in stamps if b <= s < b + HOUR) for b in starts)
    assert sum(store.judgment_times(end, HOUR, starts, HOUR).buckets) == len(stamps) > 0


def test_removing_a_person_ends_their_sign_in_and_keeps_their_judgments(store: Store):
    from crisscross.annotate.store import OPERATOR, SessionPolicy

    policy = SessionPolicy()
    token, boss = store.add_rater("ann", NOW), store.add_operator("boss", NOW)
    batch_id, answers = answers_for(store, "ann")
    assert store.submit("ann", batch_id, answers, NOW, 2)
    held = store.assignment("ann", NOW, 2, HOUR)
    session, boss_session = store.sign_in(token, NOW, policy)[1], store.sign_in(boss, NOW, policy, OPERATOR)[1]
    store.remove_rater("ann")
    assert token_holder(store, token) is None and store.session_rater(session, NOW, policy) is None
    assert len(store.judgments()) == len(answers) and token_holder(store, boss, OPERATOR) == "boss"
    assert store.assignment("bob", NOW, 1, HOUR).batch_id == held.batch_id  # the batch ann held goes on to others
    store.remove_operator("boss")
    assert token_holder(store, boss, OPERATOR) is None and store.session_operator(boss_session, NOW, policy) is None
    for remove, name in ((store.remove_rater, "ann"), (store.remove_operator, "boss"), (store.remove_rater, "boss")):
        with pytest.raises(StoreError, match=f"no (rater|operator) '{name}'"):
            remove(name)
    assert store.add_rater("ann", NOW) != token  # the name can be given a new link
