"""``Store.submit``: one rater's batch of 10 ratings stored in one transaction, as ``/api/submit`` stores it.

The store is set up through its public API, as ``crisscross serve`` sets it up: ``init``, ``load_tasks``
with 5,000 STS items in 500 batches of 10 (one gold item each), 30 raters, 3 replicas.  Each submit
follows its rater's ``assignment`` (not timed) and stores 10 scores that pass ``check_answers``; 300
submits are timed (``--quick``: 60), after 10 untimed ones.  Only the ``submit`` call is timed.

**The reference is the database's own floor for a durable write of the same rows**, in the same run,
the same database and file system: a bare connection with the store's settings (its backend's
``connect``: on SQLite WAL and ``synchronous=FULL``), ``BEGIN IMMEDIATE``, the submit's 10 rows
inserted into a plain table of the judgments' columns (no key, no index), ``COMMIT``.  Each submit
is followed by one floor write, so drift on a shared host lands on both.

PostgreSQL is measured too when the test suite's scratch server can start here
(``tests/scratch_postgres.py``: the system's ``initdb`` and ``postgres``), in a database of its own;
its floor is the same rows through pg8000 and ``COMMIT`` on that server.  The tests run that server
with ``fsync`` off; here it runs with ``fsync`` on, so a commit waits for its WAL flush, as on a real
server.  Where it cannot start, the SQLite figures are printed alone, with the reason.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any

from benchmarks import percentiles, save_result

NAME = "store_submit"
BATCHES, SIZE, RATERS, REPLICAS = 500, 10, 30, 3
SUBMITS, WARMUP = 300, 10
NOW, TIMEOUT = 1_800_000_000.0, 3600.0
FLOOR_TABLE = "floor_judgments"
COLUMNS = ("rater", "batch_id", "position", "item_id", "task_type", "score", "answer", "seconds", "time")
FLOOR_SCHEMA = (
    "rater TEXT, batch_id TEXT, position INTEGER, item_id TEXT, task_type TEXT, "
    "score DOUBLE PRECISION, answer TEXT, seconds DOUBLE PRECISION, time TEXT"
)

Row = tuple[Any, ...]


def run(args: argparse.Namespace) -> None:
    submits = 60 if args.quick else SUBMITS
    with tempfile.TemporaryDirectory(prefix="crisscross-bench-") as tmp:
        figures: dict[str, dict[str, Any]] = {"sqlite": measure(str(Path(tmp) / "store.sqlite"), submits)}
    try:
        with postgres_database() as url:
            figures["postgresql"] = {**measure(url, submits), **connect_times(url)}
    except Unavailable as reason:
        figures["postgresql"] = {"skipped": str(reason)}
    print(
        f"store: {BATCHES * SIZE:,} STS items in {BATCHES} batches of {SIZE} (one gold each), {RATERS} raters, {REPLICAS} replicas; "
        f"{submits} submits timed after {WARMUP}"
    )
    for backend, got in figures.items():
        if "skipped" in got:
            print(f"  {backend}: not measured: {got['skipped']}")
            continue
        print(
            f"  {backend}: submit p50 {got['submit_p50_ms']:.2f} ms, p95 {got['submit_p95_ms']:.2f} ms; "
            f"bare durable insert of the same {SIZE} rows (the reference) p50 {got['floor_p50_ms']:.2f} ms, "
            f"p95 {got['floor_p95_ms']:.2f} ms; submit p50 = {got['submit_over_floor']:.2f}× the reference"
        )
        if "connect_cpu_ms" in got:
            print(
                f"  {backend}: a new store's connection {got['connect_cpu_ms']:.2f} ms CPU, {got['connect_wall_ms']:.2f} ms wall; "
                f"pg8000's default connection (the reference) {got['reference_connect_cpu_ms']:.2f} ms CPU, "
                f"{got['reference_connect_wall_ms']:.2f} ms wall; CPU {got['connect_over_reference']:.2f}× the reference"
            )
    path = save_result(
        NAME,
        {"quick": args.quick, "items": BATCHES * SIZE, "batch_size": SIZE, "submits": submits, **figures},
    )
    print(f"written to {path}")


def measure(location: str, submits: int) -> dict[str, float]:
    """Submit and floor times at ``location`` (a SQLite path or a PostgreSQL URL), p50 and p95 in ms."""
    from crisscross.annotate.store import Answer, Store, now_iso

    store = Store(location)
    store.init()
    store.load_tasks(tasks())
    for r in range(RATERS):
        store.add_rater(rater(r), NOW)
    submitted: list[float] = []
    floor: list[float] = []
    with floor_writer(location) as write:
        for n in range(WARMUP + submits):
            name, now = rater(n % RATERS), NOW + n
            assignment = store.assignment(name, now, REPLICAS, TIMEOUT)
            if assignment is None:
                raise RuntimeError(f"no batch left for {name} after {n} submits")
            answers = [Answer(item.position, float((n + item.position) % 6), None, 4.0 + item.position) for item in assignment.items]
            started = time.perf_counter()
            if not store.submit(name, assignment.batch_id, answers, now, REPLICAS):
                raise RuntimeError(f"{name}'s submit of {assignment.batch_id} was not stored")
            stored = time.perf_counter()
            shown = zip(assignment.items, answers, strict=True)
            rows = [(name, i.batch_id, i.position, i.item_id, i.task_type, a.score, a.answer, a.seconds, now_iso(now)) for i, a in shown]
            write(rows)
            if n >= WARMUP:
                submitted.append(stored - started)
                floor.append(time.perf_counter() - stored)
    submit, bare = percentiles(submitted), percentiles(floor)
    return {
        "submit_p50_ms": submit["p50"] * 1000,
        "submit_p95_ms": submit["p95"] * 1000,
        "floor_p50_ms": bare["p50"] * 1000,
        "floor_p95_ms": bare["p95"] * 1000,
        "submit_over_floor": submit["p50"] / bare["p50"],
    }


def connect_times(url: str, connections: int = 100) -> dict[str, float]:
    """Per connection, in ms: a new ``Store``'s first connection and pg8000's default one, in turn."""
    from urllib.parse import unquote, urlsplit

    import pg8000.dbapi

    from crisscross.annotate.store import Store

    parts = urlsplit(url)
    options = {"user": parts.username, "password": unquote(parts.password or ""), "host": parts.hostname, "port": parts.port}
    options["database"] = parts.path.lstrip("/")
    ways = {"store": lambda: Store(url)._connection(), "reference": lambda: pg8000.dbapi.connect(**options)}
    cpu, wall = {name: 0.0 for name in ways}, {name: 0.0 for name in ways}
    for _ in range(connections):
        for name, connect in ways.items():
            started, ticked = time.process_time(), time.perf_counter()
            connection = connect()
            cpu[name] += time.process_time() - started
            wall[name] += time.perf_counter() - ticked
            connection.close()
    per = 1000 / connections
    return {
        "connect_cpu_ms": cpu["store"] * per,
        "connect_wall_ms": wall["store"] * per,
        "reference_connect_cpu_ms": cpu["reference"] * per,
        "reference_connect_wall_ms": wall["reference"] * per,
        "connect_over_reference": cpu["store"] / cpu["reference"],
    }


@contextmanager
def floor_writer(location: str) -> Iterator[Callable[[Sequence[Row]], None]]:
    """``write(rows)``: the rows durably into a plain table beside the store's, one transaction each,
    on a connection with the store's own settings and nothing of the store's work."""
    from crisscross.annotate.store import backend_for

    backend = backend_for(location)
    connection = backend.connect()
    cursor = connection.cursor()
    cursor.execute(f"CREATE TABLE {FLOOR_TABLE} ({FLOOR_SCHEMA})")
    connection.commit()
    insert = f"INSERT INTO {FLOOR_TABLE} ({', '.join(COLUMNS)}) VALUES ({', '.join([backend.placeholder] * len(COLUMNS))})"

    def write(rows: Sequence[Row]) -> None:
        if backend.name == "sqlite":  # pg8000 opens the transaction itself, as it does for the store
            cursor.execute(backend.begin)
        cursor.executemany(insert, rows)
        connection.commit()

    try:
        yield write
    finally:
        connection.close()


def tasks() -> list[dict[str, Any]]:
    """The round's task rows: STS caption pairs, one gold item at a batch's varying position."""
    from crisscross.formats.schema import GOLD_NEGATIVE, GOLD_POSITIVE, NOT_GOLD, item_id

    rows = []
    for b in range(BATCHES):
        for p in range(1, SIZE + 1):
            a, c = f"coco:cap:{2 * (b * SIZE + p)}", f"coco:cap:{2 * (b * SIZE + p) + 1}"
            gold = NOT_GOLD if p != 1 + b % SIZE else GOLD_POSITIVE if b % 2 else GOLD_NEGATIVE
            kept = {"item_id": item_id("STS", a, c), "task_type": "STS", "id_a": min(a, c), "id_b": max(a, c), "gold": gold}
            rows.append({"batch_id": f"sts-{b:05d}", "position": p, **kept})
    return rows


def rater(r: int) -> str:
    return f"rater{r:03d}"


class Unavailable(RuntimeError):
    """PostgreSQL cannot be measured here; the message says why."""


@contextmanager
def postgres_database() -> Iterator[str]:
    """The URL of a database on a scratch PostgreSQL server of this process's own (the test suite's,
    ``tests/scratch_postgres.py``) with ``fsync`` on: the tests skip the flush, a durable commit is what is timed."""
    try:
        from tests import scratch_postgres as scratch  # stdlib only at import
    except ImportError as error:
        raise Unavailable(f"tests/scratch_postgres.py cannot be imported ({error}): run from the project root") from error
    with ExitStack() as stack:
        try:  # only starting the server is a reason to skip; what fails while measuring is raised as it is
            server = stack.enter_context(scratch.private({**scratch.SETTINGS, "fsync": "on"}))
            url = stack.enter_context(server.database())
        except (scratch.Unavailable, ImportError) as error:
            raise Unavailable(str(error)) from error
        yield url
