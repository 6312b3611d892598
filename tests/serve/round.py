"""A small round for the rater app's tests: a tasks table with one or two batches of every task
type and their gold, the items it names (captions, one holding markup; PNG images), and helpers
to build the store and the app over them."""

from __future__ import annotations

import socket
import ssl
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa

from crisscross.annotate.catalog import load_catalog
from crisscross.annotate.store import RATER, SessionPolicy, Store, backend_for
from crisscross.formats.schema import GOLD_NEGATIVE, GOLD_POSITIVE, NOT_GOLD, TASKS_SCHEMA, item_id
from crisscross.serve.app import AppConfig, Round, create_app

# One TLS context for the tests' HTTP clients: httpx otherwise builds one per client, loading the CA
# bundle (tens of ms of CPU each), though the servers here speak plain HTTP on loopback.
LOOPBACK_TLS = ssl.create_default_context()

MARKUP = '<script>alert("x")</script><b>bold</b> & <img src=x onerror=alert(1)>'
COLOURS = ["#c0392b", "#27ae60", "#2980b9", "#f1c40f", "#8e44ad", "#16a085", "#d35400", "#7f8c8d"]


def cap(i: int) -> str:
    return f"demo:cap:{i}"


def img(i: int) -> str:
    return f"demo:img:{i}"


# (task type, batch, [(id_a, id_b, gold)]) — gold mixed in, never at a fixed place.
BATCHES: list[tuple[str, str, list[tuple[str, str, str]]]] = [
    ("STS", "sts-00001", [(cap(1), cap(2), NOT_GOLD), (cap(3), cap(4), GOLD_POSITIVE), (cap(5), cap(9), GOLD_NEGATIVE)]),
    ("STS", "sts-00002", [(cap(6), cap(7), NOT_GOLD), (cap(8), cap(10), NOT_GOLD), (cap(11), cap(12), GOLD_POSITIVE)]),
    ("SIS", "sis-00001", [(img(1), img(2), NOT_GOLD), (img(3), img(4), GOLD_NEGATIVE)]),
    ("SITS", "sits-00001", [(cap(13), img(1), NOT_GOLD), (cap(14), img(2), GOLD_POSITIVE)]),
    ("VERIFY", "verify-00001", [(img(3), cap(15), GOLD_POSITIVE), (img(4), cap(16), NOT_GOLD), (img(5), cap(17), GOLD_NEGATIVE)]),
]


def tasks_table() -> pa.Table:
    rows = []
    for kind, batch, members in BATCHES:
        for position, (a, b, gold) in enumerate(members, start=1):
            rows.append(
                {
                    "item_id": item_id(kind, a, b),
                    "task_type": kind,
                    "id_a": min(a, b) if kind in ("STS", "SIS") else a,
                    "id_b": max(a, b) if kind in ("STS", "SIS") else b,
                    "sampling_method": "gold" if gold else "c2c_isim",
                    "gold": gold,
                    "batch_id": batch,
                    "position": position,
                }
            )
    return pa.Table.from_pylist(rows, schema=TASKS_SCHEMA)


@dataclass(frozen=True)
class RoundFiles:
    root: Path
    items: Path
    tasks: Path
    images: Path


class Clock:
    """A settable clock, so assignment timeouts are tested without waiting."""

    def __init__(self, now: float = 1_800_000_000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def make_store(location: str | Path) -> Store:
    """The store at ``location`` (a SQLite path or a PostgreSQL URL) set up with this round's tasks."""
    store = Store(str(location))
    store.init()
    store.load_tasks(tasks_table().to_pylist())
    return store


def query(location: str | Path, statement: str) -> list[tuple[Any, ...]]:
    """The rows of one SQL statement on the database itself, on its own connection: what is really kept."""
    connection = backend_for(str(location)).connect()
    try:
        cursor = connection.cursor()
        cursor.execute(statement)
        return [tuple(row) for row in cursor.fetchall()]
    finally:
        connection.close()


def make_app(store: Store, files: RoundFiles, **config: Any) -> Any:
    settings = {"replicas": 2, **config}
    return create_app(store, Round.of(tasks_table(), load_catalog(str(files.items)), str(files.images)), AppConfig(**settings))


ORIGIN = "http://testserver"  # TestClient's own address: the origin the app's pages post from


def browser(app: Any, **options: Any) -> Any:
    """A TestClient that sends what a browser on the app's pages sends with every POST: their Origin."""
    from fastapi.testclient import TestClient

    return TestClient(app, headers={"Origin": ORIGIN}, **options)


def token_holder(store: Store, token: str, role: str = RATER) -> str | None:
    """Whom a token signs in as ``role`` (a session is opened on the way, as the sign-in page does)."""
    opened = store.sign_in(token, 1_800_000_000.0, SessionPolicy(), role)
    return opened[0] if opened else None


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextmanager
def served(app: Any) -> Iterator[tuple[str, Any]]:
    """``app`` under uvicorn on a free loopback port, in a thread of this process: (its URL, the server)."""
    import uvicorn

    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=free_port(), log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 20
    while not server.started:
        if time.monotonic() > deadline:
            raise RuntimeError("uvicorn did not start within 20 s")
        time.sleep(0.05)
    try:
        yield f"http://127.0.0.1:{server.config.port}", server
    finally:
        server.should_exit = True
        thread.join(timeout=10)
