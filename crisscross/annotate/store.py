"""The rater app's database: raters, the round's tasks, batch assignments and judgments.

One schema, two backends chosen by the location's form (:data:`BACKENDS`): a file path is SQLite
(embedded, WAL mode, the default), a ``postgresql://`` URL is PostgreSQL through pg8000 (pure
Python, already pinned by Beam's GCP extra).  SQL is written once with ``?`` placeholders.

Rules the store keeps, whatever the web layer does:

* a rater's token is kept only as its SHA-256 (tokens are 256 random bits, so no salt or stretch
  is needed) and compared in constant time;
* signing in opens a *session*: a new random id, kept only as its SHA-256, apart from the sign-in
  token, so it can be revoked (sign-out, a new token) and expires after an idle time and an
  absolute lifetime (:class:`SessionPolicy`);
* operators, who watch the campaign, are a role apart (:data:`ROLES`): their own table of names and
  token hashes and their own sessions table, so a rater's token or session never finds an operator
  and an operator's never a rater;
* each batch goes to ``replicas`` distinct raters, a rater never gets the same batch twice (nor a
  batch holding an item they already judged), and holds one batch at a time;
* an assignment not submitted within ``timeout`` seconds is released: its slot goes to the next
  rater who asks.  A late submit of a released assignment is still taken while the batch lacks
  ratings, and refused (:class:`Refused`) once ``replicas`` raters have submitted it;
* a judgment's values obey :class:`~crisscross.formats.schema.JudgmentRules`, the rule set file
  import checks too (score range, answers, the time per item);
* one transaction per submitted batch; ``UNIQUE (rater, item_id)`` means a double submit cannot
  create a second judgment (the second submit is answered "already submitted");
* under adaptive replication an item whose stop rule has decided it is *closed*, once, with its
  reason (:meth:`Store.close_items`; gold never is: it checks raters).  An assignment shows its
  batch's gold and the items still open when it is made, and records the ones it withholds, so the
  submit takes exactly what was shown (an item closed in between is still stored: a judgment people
  made is never dropped).  A batch whose rated items are all closed is done: never handed out again.
"""

from __future__ import annotations

import hashlib
import hmac
import re
import secrets
import sqlite3
import ssl
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from functools import cache
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, unquote, urlsplit

from crisscross.core.errors import InputError, UserError
from crisscross.formats.schema import DEFAULT_RULES, GOLD_NEGATIVE, GOLD_POSITIVE, NOT_GOLD, JudgmentRules
from crisscross.tasktypes import type_names

SCHEMA_VERSION = "3"
# Each upgrade only adds tables, which init() creates: schema 2 the sessions, schema 3 the operators and their sessions.
# Indexes are created by init() too (IF NOT EXISTS), on a database of any schema: adding one needs no new version.
UPGRADES = {"1": SCHEMA_VERSION, "2": SCHEMA_VERSION}
RATER_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._@-]{0,63}", re.ASCII)
_TABLES = (
    "CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)",
    "CREATE TABLE IF NOT EXISTS raters (name TEXT PRIMARY KEY, token_hash TEXT NOT NULL UNIQUE, created TEXT NOT NULL)",
    """CREATE TABLE IF NOT EXISTS tasks (
        batch_id TEXT NOT NULL, position INTEGER NOT NULL, item_id TEXT NOT NULL, task_type TEXT NOT NULL,
        id_a TEXT NOT NULL, id_b TEXT NOT NULL, gold TEXT NOT NULL, PRIMARY KEY (batch_id, position))""",
    "CREATE INDEX IF NOT EXISTS tasks_item ON tasks (item_id)",
    "CREATE TABLE IF NOT EXISTS batches (batch_id TEXT PRIMARY KEY, task_type TEXT NOT NULL, size INTEGER NOT NULL)",
    """CREATE TABLE IF NOT EXISTS assignments (
        batch_id TEXT NOT NULL, rater TEXT NOT NULL, started DOUBLE PRECISION NOT NULL,
        submitted DOUBLE PRECISION, released INTEGER NOT NULL DEFAULT 0, PRIMARY KEY (batch_id, rater))""",
    "CREATE INDEX IF NOT EXISTS assignments_rater ON assignments (rater)",
    """CREATE TABLE IF NOT EXISTS judgments (
        rater TEXT NOT NULL, batch_id TEXT NOT NULL, position INTEGER NOT NULL, item_id TEXT NOT NULL,
        task_type TEXT NOT NULL, score DOUBLE PRECISION, answer TEXT, seconds DOUBLE PRECISION, time TEXT NOT NULL,
        UNIQUE (rater, item_id), UNIQUE (rater, batch_id, position))""",
    # What the operator's figures count by (judgments per item, per type, per clock hour), each read alone without the
    # table's rows (a count per type over CxC's 1.3 million judgments: 0.25 s on the table, 0.05 s on its index); the item
    # index is also what a stop rule reads an item's judgments by.
    "CREATE INDEX IF NOT EXISTS judgments_item_kind ON judgments (item_id, task_type)",
    "CREATE INDEX IF NOT EXISTS judgments_type ON judgments (task_type)",
    "CREATE INDEX IF NOT EXISTS judgments_time ON judgments (time)",
    """CREATE TABLE IF NOT EXISTS sessions (
        id_hash TEXT PRIMARY KEY, rater TEXT NOT NULL, started DOUBLE PRECISION NOT NULL, seen DOUBLE PRECISION NOT NULL)""",
    "CREATE INDEX IF NOT EXISTS sessions_rater ON sessions (rater)",
    "CREATE TABLE IF NOT EXISTS operators (name TEXT PRIMARY KEY, token_hash TEXT NOT NULL UNIQUE, created TEXT NOT NULL)",
    """CREATE TABLE IF NOT EXISTS operator_sessions (
        id_hash TEXT PRIMARY KEY, operator TEXT NOT NULL, started DOUBLE PRECISION NOT NULL, seen DOUBLE PRECISION NOT NULL)""",
    "CREATE INDEX IF NOT EXISTS operator_sessions_operator ON operator_sessions (operator)",
    "CREATE TABLE IF NOT EXISTS closed_items (item_id TEXT PRIMARY KEY, reason TEXT NOT NULL, time TEXT NOT NULL)",
    """CREATE TABLE IF NOT EXISTS withheld (
        batch_id TEXT NOT NULL, rater TEXT NOT NULL, position INTEGER NOT NULL, PRIMARY KEY (batch_id, rater, position))""",
)
# A batch (alias ``b``) none of whose rated items is still open: at least one closed, none open.
_CLOSED_BATCH = f"""(EXISTS (SELECT 1 FROM tasks t JOIN closed_items c ON c.item_id = t.item_id WHERE t.batch_id = b.batch_id)
    AND NOT EXISTS (SELECT 1 FROM tasks t WHERE t.batch_id = b.batch_id AND t.gold = '{NOT_GOLD}'
                    AND NOT EXISTS (SELECT 1 FROM closed_items c WHERE c.item_id = t.item_id)))"""
_TASK_COLUMNS = "t.batch_id, t.position, t.item_id, t.task_type, t.id_a, t.id_b, t.gold"


@dataclass(frozen=True)
class Role:
    """Where one kind of person is kept: their names and token hashes, and their sessions."""

    name: str
    people: str  # table: name, token_hash, created
    sessions: str  # table: id_hash, <owner>, started, seen
    owner: str  # the sessions table's column naming whose session it is


RATER, OPERATOR = "rater", "operator"
ROLES = {
    RATER: Role(RATER, "raters", "sessions", "rater"),
    OPERATOR: Role(OPERATOR, "operators", "operator_sessions", "operator"),
}


class StoreError(UserError, ValueError):
    """The database cannot be used as asked (wrong location, other tasks, unknown rater)."""


class Refused(ValueError):
    """A submit the store will not take; ``status`` is the HTTP status the app answers with."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


@dataclass(frozen=True)
class Backend:
    """How to reach one kind of database: connect, start a write transaction, lock for assignment."""

    name: str
    connect: Callable[[], Any]
    begin: str  # starts a transaction that will write
    lock: str  # serialises assignment (so two raters never take the last slot of a batch)
    placeholder: str
    integrity_error: type[Exception]
    setup_lock: str = ""  # serialises setting up a new database (the write transaction does on SQLite)


SQLITE_WAIT = 30.0  # seconds a connection waits for another's lock


def _write_ahead_log(connection: sqlite3.Connection) -> None:
    """Put the file in WAL mode, waiting out another connection that is doing the same to a new
    file: SQLite may answer that with SQLITE_BUSY at once, without its busy handler (5 of 300
    rounds of six servers opening one new file did, before this wait)."""
    deadline = time.monotonic() + SQLITE_WAIT
    while True:
        try:
            connection.execute("PRAGMA journal_mode=WAL")
            return
        except sqlite3.OperationalError as error:
            if error.sqlite_errorcode != sqlite3.SQLITE_BUSY or time.monotonic() >= deadline:
                raise
            time.sleep(0.01)


def _sqlite(path: str) -> Backend:
    def connect() -> sqlite3.Connection:
        connection = sqlite3.connect(path, timeout=SQLITE_WAIT, isolation_level=None, check_same_thread=False)
        _write_ahead_log(connection)
        connection.execute("PRAGMA synchronous=FULL")  # an acknowledged submit survives a power cut
        connection.execute("PRAGMA foreign_keys=ON")
        return connection

    return Backend("sqlite", connect, "BEGIN IMMEDIATE", "", "?", sqlite3.IntegrityError)


# libpq's ``sslmode`` values (the default is libpq's too) and whether each checks the server's certificate.
SSL_MODES = {"disable": False, "prefer": False, "require": False, "verify-ca": True, "verify-full": True}
SSL_PARAMETERS = ("sslmode", "sslrootcert")


@cache
def tls_context(mode: str, root_cert: str | None) -> ssl.SSLContext | None:
    """The TLS context for an ``sslmode``, made once per process and shared by every connection:
    building one that verifies loads a CA bundle (tens of ms), which pg8000 otherwise redid for each
    connection.  As libpq: ``require`` with a root certificate verifies the CA; only ``verify-full``
    checks the host name."""
    if mode == "disable":
        return None
    if mode == "require" and root_cert:
        mode = "verify-ca"
    if not SSL_MODES[mode]:
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
        return context
    context = ssl.create_default_context(cafile=root_cert)
    context.check_hostname = mode == "verify-full"
    return context


def _ssl_settings(url: str) -> tuple[str, str | None]:
    """``sslmode`` and ``sslrootcert`` from the URL's query, as libpq reads them; any other
    parameter, or another mode (libpq's ``allow`` included), is refused rather than ignored."""
    query = parse_qs(urlsplit(url).query, keep_blank_values=True)
    unknown = sorted(set(query) - set(SSL_PARAMETERS))
    where = f"database {redact(url)}"
    if unknown:
        raise StoreError(f"{where}: unsupported URL parameter {unknown[0]!r}; this store reads {', '.join(SSL_PARAMETERS)}")
    mode = query.get("sslmode", ["prefer"])[-1]
    if mode not in SSL_MODES:
        raise StoreError(f"{where}: sslmode {mode!r} is not supported; use one of {', '.join(SSL_MODES)}")
    root_cert = query.get("sslrootcert", [""])[-1] or None
    if root_cert and not Path(root_cert).is_file():
        raise StoreError(f"{where}: sslrootcert {root_cert} is not a file")
    return mode, root_cert


def _postgres(url: str) -> Backend:
    import pg8000.dbapi  # only where a team runs PostgreSQL

    parts = urlsplit(url)
    options = {
        "user": unquote(parts.username or "postgres"),
        "password": unquote(parts.password) if parts.password else None,
        "host": parts.hostname or "localhost",
        "port": parts.port or 5432,
        "database": unquote(parts.path.lstrip("/")) or None,
    }
    mode, root_cert = _ssl_settings(url)
    context = tls_context(mode, root_cert)
    plain = mode == "disable"  # under "prefer", set once the server has said it offers no TLS

    def connect() -> Any:
        nonlocal plain
        if plain:
            return pg8000.dbapi.connect(**options, ssl_context=False)
        try:
            return pg8000.dbapi.connect(**options, ssl_context=context)
        except pg8000.dbapi.InterfaceError as error:
            if str(error) != "Server refuses SSL":  # pg8000's words when the server answers the TLS request with no
                raise
            if mode != "prefer":
                raise StoreError(f"the server offers no TLS, which sslmode={mode} requires") from error
            plain = True
            return pg8000.dbapi.connect(**options, ssl_context=False)

    # Two servers creating the tables at once collide in PostgreSQL's catalog: one waits for the other.
    setup = "SELECT pg_advisory_xact_lock(hashtext('crisscross store setup'))"
    return Backend(
        "postgresql", connect, "BEGIN", "LOCK TABLE assignments IN SHARE ROW EXCLUSIVE MODE", "%s", pg8000.dbapi.IntegrityError, setup
    )


# URL scheme → backend; anything without a scheme is a SQLite file path.
BACKENDS: dict[str, Callable[[str], Backend]] = {"postgresql": _postgres, "postgres": _postgres, "sqlite": _sqlite}


def backend_for(location: str) -> Backend:
    scheme = urlsplit(location).scheme if "://" in location else ""
    if not scheme:
        return _sqlite(location)
    if scheme not in BACKENDS:
        raise StoreError(f"database {redact(location)}: unknown scheme {scheme!r}; give a SQLite file path or a postgresql:// URL")
    return BACKENDS[scheme](location if scheme != "sqlite" else urlsplit(location).path)


def redact(location: str) -> str:
    """The location without its password, for messages and reports."""
    if "://" not in location:
        return location
    parts = urlsplit(location)
    if parts.password is None:
        return location
    return location.replace(f":{parts.password}@", ":***@", 1)


def token_hash(token: str) -> str:
    return hashlib.sha256(token.encode("utf-8", "surrogatepass")).hexdigest()


def now_iso(moment: float) -> str:
    return datetime.fromtimestamp(moment, UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


@dataclass(frozen=True)
class SessionPolicy:
    """When a signed-in session ends by itself: after ``idle`` seconds without a request, and
    ``lifetime`` seconds after sign-in whatever happens (OWASP ASVS 3.3.2, level 2: 30 minutes
    idle, 12 hours in all)."""

    idle: float = 1800.0
    lifetime: float = 43200.0
    touch_every: float = 60.0  # the last-seen time is written at most this often, so reads stay reads


@dataclass(frozen=True)
class TaskRow:
    batch_id: str
    position: int
    item_id: str
    task_type: str
    id_a: str
    id_b: str
    gold: str


@dataclass(frozen=True)
class Assignment:
    batch_id: str
    task_type: str
    started: float
    items: tuple[TaskRow, ...]  # the items shown, by position; gold stays on the server


@dataclass(frozen=True)
class Answer:
    """What a rater gave for one position of their batch."""

    position: int
    score: float | None
    answer: str | None
    seconds: float | None  # None: the page did not measure it


@dataclass(frozen=True)
class TypeProgress:
    task_type: str
    batches: int
    done: int  # rated by ``replicas`` raters, or every rated item closed early
    assigned: int  # someone holds it (or has rated it), not done
    open: int  # nobody holds it
    judgments: int
    items: int  # rated items (gold left out)
    closed: int  # items closed early
    saved: int  # judgments the closed items were not asked for: ``replicas`` less those they got


@dataclass(frozen=True)
class JudgedItems:
    """How many items of a task type have ``judgments`` judgments each (gold or rated, closed early or not)."""

    task_type: str
    gold: bool
    closed: bool
    judgments: int
    items: int


@dataclass(frozen=True)
class JudgmentTimes:
    """When judgments were made: how many there are, the first and latest times (ISO, as stored),
    how many fall in a window ending now and how many in each of some time buckets."""

    total: int
    first: str | None
    latest: str | None
    recent: int  # in (now - window, now]
    buckets: tuple[int, ...]  # in [start, start + width) for each start asked for


class Store:
    """The database behind the app; every method is one transaction on its own connection."""

    def __init__(self, location: str) -> None:
        self.location = location
        self.backend = backend_for(location)
        self._local = threading.local()

    # ------------------------------------------------------------------ plumbing

    def _connection(self) -> Any:
        connection = getattr(self._local, "connection", None)
        if connection is None:
            try:
                connection = self.backend.connect()
            except (OSError, sqlite3.Error) as error:
                raise StoreError(f"cannot open database {redact(self.location)}: {error}") from error
            except Exception as error:  # pg8000's interface errors name no common base with sqlite3's
                raise StoreError(f"cannot open database {redact(self.location)}: {str(error).splitlines()[0]}") from error
            self._local.connection = connection
        return connection

    def _sql(self, statement: str) -> str:
        return statement if self.backend.placeholder == "?" else statement.replace("?", self.backend.placeholder)

    @contextmanager
    def _transaction(self, write: bool = True, lock: bool = False) -> Iterator[Callable[..., Any]]:
        """``run(sql, params)`` inside one transaction, committed on success, rolled back otherwise."""
        connection = self._connection()
        cursor = connection.cursor()
        if self.backend.name == "sqlite":
            cursor.execute(self.backend.begin if write else "BEGIN")
        if lock and self.backend.lock:
            cursor.execute(self.backend.lock)

        def run(statement: str, params: Sequence[Any] = ()) -> Any:
            cursor.execute(self._sql(statement), tuple(params))
            return cursor

        try:
            yield run
        except BaseException:
            connection.rollback()
            raise
        connection.commit()

    # ------------------------------------------------------------------ setup

    def init(self) -> None:
        """Create the tables (idempotent) and the server secret that CSRF tokens are made from."""
        with self._transaction() as run:
            if self.backend.setup_lock:
                run(self.backend.setup_lock)
            for statement in _TABLES:
                run(statement)
            found = run("SELECT value FROM meta WHERE key = 'schema'").fetchall()
            if found and found[0][0] in UPGRADES:
                run("UPDATE meta SET value = ? WHERE key = 'schema'", (UPGRADES[found[0][0]],))
                found = [(UPGRADES[found[0][0]],)]
            if found and found[0][0] != SCHEMA_VERSION:
                raise StoreError(f"database {redact(self.location)} has schema {found[0][0]}, this version reads {SCHEMA_VERSION}")
            if not found:
                run("INSERT INTO meta (key, value) VALUES ('schema', ?)", (SCHEMA_VERSION,))
                run("INSERT INTO meta (key, value) VALUES ('secret', ?)", (secrets.token_hex(32),))

    def secret(self) -> bytes:
        with self._transaction(write=False) as run:
            rows = run("SELECT value FROM meta WHERE key = 'secret'").fetchall()
        if not rows:
            raise StoreError(f"database {redact(self.location)} is not set up: run crisscross serve first")
        return bytes.fromhex(rows[0][0])

    def load_tasks(self, rows: Sequence[Mapping[str, Any]]) -> int:
        """Put the round's task rows in (idempotent); returns how many were new.  A database that
        holds a different item at a (batch, position) belongs to another round: refused."""
        tasks = [
            TaskRow(
                str(r["batch_id"]),
                int(r["position"]),
                str(r["item_id"]),
                str(r["task_type"]),
                str(r["id_a"]),
                str(r["id_b"]),
                r["gold"] or NOT_GOLD,
            )
            for r in rows
        ]
        kinds: dict[str, set[str]] = {}
        for t in tasks:
            kinds.setdefault(t.batch_id, set()).add(t.task_type)
        mixed = sorted(b for b, k in kinds.items() if len(k) > 1)
        if mixed:
            raise StoreError(f"tasks: batch {mixed[0]} mixes task types {sorted(kinds[mixed[0]])}")
        with self._transaction() as run:
            known = {(b, p): i for b, p, i in run("SELECT batch_id, position, item_id FROM tasks").fetchall()}
            clash = next((t for t in tasks if known.get((t.batch_id, t.position), t.item_id) != t.item_id), None)
            if clash:
                raise StoreError(
                    f"database {redact(self.location)} holds another round: {clash.batch_id} position {clash.position} is "
                    f"{known[(clash.batch_id, clash.position)]} there, {clash.item_id} in these tasks; use a new --db per round"
                )
            new = [t for t in tasks if (t.batch_id, t.position) not in known]
            for t in new:
                run(
                    "INSERT INTO tasks (batch_id, position, item_id, task_type, id_a, id_b, gold) VALUES (?, ?, ?, ?, ?, ?, ?)",
                    (t.batch_id, t.position, t.item_id, t.task_type, t.id_a, t.id_b, t.gold),
                )
            run("DELETE FROM batches")
            run("INSERT INTO batches (batch_id, task_type, size) SELECT batch_id, MIN(task_type), COUNT(*) FROM tasks GROUP BY batch_id")
        return len(new)

    # ------------------------------------------------------------------ raters and operators

    def add_rater(self, name: str, created: float, replace: bool = False) -> str:
        """A new sign-in token for rater ``name`` (shown once; only its hash is kept)."""
        return self._add_person(ROLES[RATER], name, created, replace)

    def add_operator(self, name: str, created: float, replace: bool = False) -> str:
        """A new sign-in token for operator ``name``, who may watch the campaign and never rate."""
        return self._add_person(ROLES[OPERATOR], name, created, replace)

    def _add_person(self, role: Role, name: str, created: float, replace: bool) -> str:
        if not RATER_NAME.fullmatch(name):
            raise StoreError(f"{role.name} name {name!r}: use 1–64 letters, digits, '.', '_', '@' or '-', starting with a letter or digit")
        token = secrets.token_urlsafe(32)
        with self._transaction(lock=True) as run:  # serialised with sign-ins: a replaced link opens no session
            exists = run(f"SELECT 1 FROM {role.people} WHERE name = ?", (name,)).fetchall()
            if exists and not replace:
                raise StoreError(f"{role.name} {name} exists; add --new-token to replace their token (the old link stops working)")
            if exists:
                run(f"UPDATE {role.people} SET token_hash = ? WHERE name = ?", (token_hash(token), name))
                run(f"DELETE FROM {role.sessions} WHERE {role.owner} = ?", (name,))  # the old link's sessions end with it
            else:
                run(f"INSERT INTO {role.people} (name, token_hash, created) VALUES (?, ?, ?)", (name, token_hash(token), now_iso(created)))
        return token

    def remove_rater(self, name: str) -> None:
        """Rater ``name`` signs in no more: their token and sessions are gone and the batch they
        hold goes to the next rater who asks; the judgments they made stay."""
        with self._transaction(lock=True) as run:  # one step: no batch is handed to them between removal and release
            self._remove_person(run, ROLES[RATER], name)
            run("UPDATE assignments SET released = 1 WHERE rater = ? AND submitted IS NULL AND released = 0", (name,))

    def remove_operator(self, name: str) -> None:
        """Operator ``name`` signs in no more: their token and sessions are gone."""
        with self._transaction(lock=True) as run:
            self._remove_person(run, ROLES[OPERATOR], name)

    def _remove_person(self, run: Callable[..., Any], role: Role, name: str) -> None:
        """Inside a locked transaction (serialised with sign-ins): the person and their sessions deleted."""
        if not run(f"SELECT 1 FROM {role.people} WHERE name = ?", (name,)).fetchall():
            raise StoreError(f"no {role.name} {name!r} in {redact(self.location)}")
        run(f"DELETE FROM {role.sessions} WHERE {role.owner} = ?", (name,))
        run(f"DELETE FROM {role.people} WHERE name = ?", (name,))

    # ------------------------------------------------------------------ sessions

    def sign_in(self, token: str, now: float, policy: SessionPolicy, role: str = RATER) -> tuple[str, str] | None:
        """(the token's holder in ``role``, a new session id) — the id shown once, to the browser;
        only its hash is kept — or None for any other token.  The token is looked up and the session
        opened in one locked transaction, serialised with ``--new-token`` and removal, so a link
        replaced or a person removed meanwhile opens nothing.  Sessions of the role past their idle
        time or lifetime are deleted on the way."""
        kind = ROLES[role]
        wanted = token_hash(token)
        session = secrets.token_urlsafe(32)
        with self._transaction(lock=True) as run:
            rows = run(f"SELECT name, token_hash FROM {kind.people} WHERE token_hash = ?", (wanted,)).fetchall()
            if not rows or not hmac.compare_digest(rows[0][1], wanted):
                return None
            run(f"DELETE FROM {kind.sessions} WHERE seen < ? OR started < ?", (now - policy.idle, now - policy.lifetime))
            run(
                f"INSERT INTO {kind.sessions} (id_hash, {kind.owner}, started, seen) VALUES (?, ?, ?, ?)",
                (token_hash(session), rows[0][0], now, now),
            )
        return rows[0][0], session

    def session_rater(self, session: str, now: float, policy: SessionPolicy) -> str | None:
        """The rater a live session belongs to, its last-seen time moved to ``now``; None for an
        unknown, revoked or expired session (an expired one is deleted), or an operator's."""
        return self._session_holder(ROLES[RATER], session, now, policy)

    def session_operator(self, session: str, now: float, policy: SessionPolicy) -> str | None:
        """The operator a live session belongs to, as :meth:`session_rater`; None for a rater's."""
        return self._session_holder(ROLES[OPERATOR], session, now, policy)

    def _session_holder(self, role: Role, session: str, now: float, policy: SessionPolicy) -> str | None:
        key = token_hash(session)
        with self._transaction(write=False) as run:
            rows = run(f"SELECT id_hash, {role.owner}, started, seen FROM {role.sessions} WHERE id_hash = ?", (key,)).fetchall()
        if not rows or not hmac.compare_digest(rows[0][0], key):
            return None
        _, holder, started, seen = rows[0]
        expired = now - seen > policy.idle or now - started > policy.lifetime
        if expired or now - seen >= policy.touch_every:
            with self._transaction() as run:
                if expired:
                    run(f"DELETE FROM {role.sessions} WHERE id_hash = ?", (key,))
                else:
                    run(f"UPDATE {role.sessions} SET seen = ? WHERE id_hash = ? AND seen < ?", (now, key, now))
        return None if expired else holder

    def end_session(self, session: str) -> None:
        """Revoke a session (sign-out), whoever's it is: its id signs nobody in any more."""
        with self._transaction() as run:
            for role in ROLES.values():
                run(f"DELETE FROM {role.sessions} WHERE id_hash = ?", (token_hash(session),))

    # ------------------------------------------------------------------ assignment

    def _release_expired(self, run: Callable[..., Any], now: float, timeout: float) -> None:
        run("UPDATE assignments SET released = 1 WHERE submitted IS NULL AND released = 0 AND started < ?", (now - timeout,))

    def _shown(self, run: Callable[..., Any], batch_id: str, rater: str) -> list[TaskRow]:
        """The items of the rater's assignment of ``batch_id``: the batch less what it withheld."""
        rows = run(
            f"""SELECT {_TASK_COLUMNS} FROM tasks t WHERE t.batch_id = ?
            AND NOT EXISTS (SELECT 1 FROM withheld w WHERE w.batch_id = t.batch_id AND w.rater = ? AND w.position = t.position)
            ORDER BY t.position""",
            (batch_id, rater),
        ).fetchall()
        return [TaskRow(*row) for row in rows]

    def assignment(self, rater: str, now: float, replicas: int, timeout: float) -> Assignment | None:
        """The rater's batch: the one they hold, else the next batch with a free slot and an open
        item (batches others already started first, so batches finish and the judgments still
        needed go out first; then by id), else None.  A new assignment withholds closed items."""
        with self._transaction(lock=True) as run:
            self._release_expired(run, now, timeout)
            held = run(
                "SELECT batch_id, started FROM assignments WHERE rater = ? AND submitted IS NULL AND released = 0 ORDER BY batch_id",
                (rater,),
            ).fetchall()
            if held:
                batch_id, started = held[0]
            else:
                taken = "(SELECT COUNT(*) FROM assignments a WHERE a.batch_id = b.batch_id AND (a.submitted IS NOT NULL OR a.released = 0))"
                found = run(
                    f"""SELECT b.batch_id FROM batches b
                    WHERE {taken} < ?
                      AND NOT EXISTS (SELECT 1 FROM assignments a WHERE a.batch_id = b.batch_id AND a.rater = ?)
                      AND NOT EXISTS (SELECT 1 FROM tasks t JOIN judgments j ON j.item_id = t.item_id AND j.rater = ?
                                      WHERE t.batch_id = b.batch_id)
                      AND NOT {_CLOSED_BATCH}
                    ORDER BY {taken} DESC, b.batch_id LIMIT 1""",
                    (replicas, rater, rater),
                ).fetchall()
                if not found:
                    return None
                batch_id, started = found[0][0], now
                run("INSERT INTO assignments (batch_id, rater, started) VALUES (?, ?, ?)", (batch_id, rater, now))
                run(
                    f"""INSERT INTO withheld (batch_id, rater, position) SELECT t.batch_id, ?, t.position
                    FROM tasks t JOIN closed_items c ON c.item_id = t.item_id WHERE t.batch_id = ? AND t.gold = '{NOT_GOLD}'""",
                    (rater, batch_id),
                )
            rows = tuple(self._shown(run, batch_id, rater))
        return Assignment(batch_id, rows[0].task_type, float(started), rows)

    def shows(self, rater: str, batch_id: str, position: int, now: float, timeout: float) -> bool:
        """Whether the rater holds ``batch_id`` now (assigned, not submitted, not past the time
        limit) and was shown its ``position``."""
        with self._transaction(write=False) as run:
            rows = run(
                """SELECT 1 FROM assignments a WHERE a.rater = ? AND a.batch_id = ? AND a.submitted IS NULL AND a.released = 0
                AND a.started >= ?
                AND NOT EXISTS (SELECT 1 FROM withheld w WHERE w.batch_id = a.batch_id AND w.rater = a.rater AND w.position = ?)""",
                (rater, batch_id, now - timeout, position),
            ).fetchall()
        return bool(rows)

    def close_items(self, reasons: Mapping[str, str], now: float) -> None:
        """Close items (item_id → why) so no one is asked for more of them; an item closed already
        keeps its first reason, and gold or unknown ids are left alone.  It takes the assignment
        lock, so an assignment sees an item either open or closed, never both (PostgreSQL too)."""
        moment = now_iso(now)
        with self._transaction(lock=True) as run:
            for item, reason in sorted(reasons.items()):
                run(
                    "INSERT INTO closed_items (item_id, reason, time) SELECT ?, ?, ? "
                    "WHERE EXISTS (SELECT 1 FROM tasks WHERE item_id = ? AND gold = ?) ON CONFLICT (item_id) DO NOTHING",
                    (item, reason, moment, item, NOT_GOLD),
                )

    def submit(
        self, rater: str, batch_id: str, answers: Sequence[Answer], now: float, replicas: int, rules: JudgmentRules = DEFAULT_RULES
    ) -> bool:
        """Store a whole batch in one transaction; False when it was already stored (a double
        submit), :class:`Refused` when it cannot be taken (a value against ``rules`` among them)."""
        with self._transaction(lock=True) as run:
            rows = run("SELECT submitted, released FROM assignments WHERE batch_id = ? AND rater = ?", (batch_id, rater)).fetchall()
            if not rows:
                raise Refused(403, f"batch {batch_id} is not assigned to you")
            submitted, released = rows[0]
            if submitted is not None:
                return False
            if released:
                done = run("SELECT COUNT(*) FROM assignments WHERE batch_id = ? AND submitted IS NOT NULL", (batch_id,)).fetchone()[0]
                if done >= replicas:
                    raise Refused(409, f"batch {batch_id} was released after the time limit and has since been rated by {done} others")
            checked = check_answers(self._shown(run, batch_id, rater), answers, rules)
            claimed = run(
                "UPDATE assignments SET submitted = ?, released = 0 WHERE batch_id = ? AND rater = ? AND submitted IS NULL",
                (now, batch_id, rater),
            )
            if claimed.rowcount != 1:
                return False
            moment = now_iso(now)
            try:
                for item, answer in checked:
                    run(
                        "INSERT INTO judgments (rater, batch_id, position, item_id, task_type, score, answer, seconds, time) "
                        "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                        (rater, batch_id, item.position, item.item_id, item.task_type, answer.score, answer.answer, answer.seconds, moment),
                    )
            except self.backend.integrity_error as error:
                raise Refused(409, f"batch {batch_id} holds an item you have already judged") from error
        return True

    # ------------------------------------------------------------------ reading

    def judgments(self, batch_id: str | None = None) -> list[dict[str, Any]]:
        """Every stored judgment with its batch and position, in a stable order; with ``batch_id``,
        those of the rated items that batch holds, whichever batch they came with (what a stop rule
        decides those items on)."""
        where, params = (
            ("", ())
            if batch_id is None
            else (" WHERE item_id IN (SELECT item_id FROM tasks WHERE batch_id = ? AND gold = ?)", (batch_id, NOT_GOLD))
        )
        with self._transaction(write=False) as run:
            rows = run(
                f"SELECT rater, batch_id, position, item_id, task_type, score, answer, seconds, time FROM judgments{where} "
                "ORDER BY batch_id, position, rater",
                params,
            ).fetchall()
        columns = ("worker", "batch_id", "position", "item_id", "task_type", "score", "answer", "seconds", "time")
        return [dict(zip(columns, row, strict=True)) for row in rows]

    def gold(self) -> dict[str, str]:
        """item_id → "positive" / "negative", for the operator's gold accuracy."""
        with self._transaction(write=False) as run:
            rows = run("SELECT DISTINCT item_id, gold FROM tasks WHERE gold IN (?, ?)", (GOLD_POSITIVE, GOLD_NEGATIVE)).fetchall()
        return dict(rows)

    def closed(self) -> dict[str, str]:
        """item_id → the reason it was closed early."""
        with self._transaction(write=False) as run:
            return dict(run("SELECT item_id, reason FROM closed_items ORDER BY item_id").fetchall())

    def closures(self, limit: int | None = None) -> list[dict[str, str]]:
        """Every item closed early (the latest ``limit`` of them) with its task type, reason and time, the latest first."""
        with self._transaction(write=False) as run:
            rows = run(
                "SELECT c.item_id, MIN(t.task_type), c.reason, c.time FROM closed_items c JOIN tasks t ON t.item_id = c.item_id "
                "GROUP BY c.item_id, c.reason, c.time ORDER BY c.time DESC, c.item_id" + ("" if limit is None else " LIMIT ?"),
                () if limit is None else (limit,),
            ).fetchall()
        return [dict(zip(("item_id", "task_type", "reason", "time"), row, strict=True)) for row in rows]

    def judged_items(self) -> list[JudgedItems]:
        """The items judged or closed early, counted by task type, gold or not, closed or not and the
        number of judgments each has, in that order: what progress and spending are counted from
        without reading the judgments themselves (one pass over the judgments' item index).  An
        item is gold when any batch holds it as gold, as :meth:`gold` says; an item neither judged
        nor closed is left out (it counts towards nothing done or spent)."""
        shut = "CASE WHEN c.item_id IS NULL THEN 0 ELSE 1 END"
        with self._transaction(write=False) as run:
            rows = run(
                f"""SELECT j.task_type, CASE WHEN g.item_id IS NULL THEN 0 ELSE 1 END, {shut}, j.n, COUNT(*)
                FROM (SELECT item_id, MIN(task_type) AS task_type, COUNT(*) AS n FROM judgments GROUP BY item_id) j
                LEFT JOIN (SELECT DISTINCT item_id FROM tasks WHERE gold IN (?, ?)) g ON g.item_id = j.item_id
                LEFT JOIN closed_items c ON c.item_id = j.item_id
                GROUP BY j.task_type, CASE WHEN g.item_id IS NULL THEN 0 ELSE 1 END, {shut}, j.n
                UNION ALL
                SELECT i.task_type, 0, 1, 0, COUNT(*)
                FROM (SELECT c.item_id, MIN(t.task_type) AS task_type FROM closed_items c JOIN tasks t ON t.item_id = c.item_id
                      WHERE NOT EXISTS (SELECT 1 FROM judgments j WHERE j.item_id = c.item_id) GROUP BY c.item_id) i
                GROUP BY i.task_type
                ORDER BY 1, 2, 3, 4""",
                (GOLD_POSITIVE, GOLD_NEGATIVE),
            ).fetchall()
        return [JudgedItems(str(kind), bool(gold), bool(closed), int(n), int(items)) for kind, gold, closed, n, items in rows]

    def judgment_times(self, now: float, window: float, starts: Sequence[float], width: float) -> JudgmentTimes:
        """When judgments were made (:class:`JudgmentTimes`), counted on the time index: stored
        times are ISO 8601 of one form (:func:`now_iso`, milliseconds, UTC), so they compare as
        text as they do as times, and a bound cut to milliseconds keeps every comparison's answer."""
        with self._transaction(write=False) as run:
            total = run("SELECT COUNT(*) FROM judgments").fetchone()[0]  # apart: MIN and MAX alone each read one index entry
            first = run("SELECT MIN(time) FROM judgments").fetchone()[0]
            latest = run("SELECT MAX(time) FROM judgments").fetchone()[0]
            recent = run("SELECT COUNT(*) FROM judgments WHERE time > ? AND time <= ?", (now_iso(now - window), now_iso(now))).fetchone()[0]
            buckets = tuple(
                int(run("SELECT COUNT(*) FROM judgments WHERE time >= ? AND time < ?", (now_iso(s), now_iso(s + width))).fetchone()[0])
                for s in starts
            )
        return JudgmentTimes(int(total), first, latest, int(recent), buckets)

    def progress(self, replicas: int, now: float, timeout: float) -> list[TypeProgress]:
        """Per task type: batches done (rated ``replicas`` times or closed), assigned (held or partly
        rated), open; rated items, those closed early and the judgments that saved."""
        with self._transaction(write=False) as run:
            batches = run(
                f"""SELECT b.task_type, b.batch_id,
                  (SELECT COUNT(*) FROM assignments a WHERE a.batch_id = b.batch_id AND a.submitted IS NOT NULL),
                  (SELECT COUNT(*) FROM assignments a WHERE a.batch_id = b.batch_id AND a.submitted IS NULL AND a.released = 0
                     AND a.started >= ?),
                  CASE WHEN {_CLOSED_BATCH} THEN 1 ELSE 0 END
                FROM batches b ORDER BY b.batch_id""",
                (now - timeout,),
            ).fetchall()
            judged = dict(run("SELECT task_type, COUNT(*) FROM judgments GROUP BY task_type").fetchall())
            rated = "(SELECT DISTINCT item_id, task_type FROM tasks WHERE gold = ?)"
            items = dict(run(f"SELECT r.task_type, COUNT(*) FROM {rated} r GROUP BY r.task_type", (NOT_GOLD,)).fetchall())
            closed = {
                kind: (int(count), int(got))
                for kind, count, got in run(
                    f"""SELECT r.task_type, COUNT(*), SUM((SELECT COUNT(*) FROM judgments j WHERE j.item_id = c.item_id))
                    FROM closed_items c JOIN {rated} r ON r.item_id = c.item_id GROUP BY r.task_type""",
                    (NOT_GOLD,),
                ).fetchall()
            }
        out = []
        for kind in type_names():
            of_kind = [(done, held, shut) for k, _, done, held, shut in batches if k == kind]
            if not of_kind:
                continue
            done = sum(1 for d, _, shut in of_kind if d >= replicas or shut)
            assigned = sum(1 for d, h, shut in of_kind if d < replicas and not shut and (d or h))
            count, got = closed.get(kind, (0, 0))
            out.append(
                TypeProgress(
                    kind,
                    len(of_kind),
                    done,
                    assigned,
                    len(of_kind) - done - assigned,
                    int(judged.get(kind, 0)),
                    items=int(items.get(kind, 0)),
                    closed=count,
                    saved=count * replicas - got,
                )
            )
        return out


def check_answers(
    items: Sequence[TaskRow], answers: Sequence[Answer], rules: JudgmentRules = DEFAULT_RULES
) -> list[tuple[TaskRow, Answer]]:
    """Each item of the batch paired with its answer; :class:`Refused` (422) naming the first
    problem when an item is unanswered, answered twice, or its value or time breaks ``rules``."""
    by_position: dict[int, Answer] = {}
    for answer in answers:
        if answer.position in by_position:
            raise Refused(422, f"item {answer.position} is answered twice")
        by_position[answer.position] = answer
    stray = sorted(set(by_position) - {item.position for item in items})
    if stray:
        raise Refused(422, f"this batch has no item {stray[0]}")
    out = []
    for item in items:
        answer = by_position.get(item.position)
        if answer is None:
            raise Refused(422, f"item {item.position} has no answer: rate every item")
        problem = rules.value_problem(item.task_type, answer.score, answer.answer) or rules.seconds_problem(answer.seconds)
        if problem is not None:
            raise Refused(422, f"item {item.position}: {problem[1]}")
        out.append((item, answer))
    return out


def open_store(location: str) -> Store:
    """The store at ``location``, which must already be set up (by ``crisscross serve``)."""
    if "://" not in location and not Path(location).is_file():
        raise InputError(f"no rater database {location}: start crisscross serve with --db {location} first")
    store = Store(location)
    store.secret()
    return store
