"""A scratch PostgreSQL server for the test run, so the store and the rater app are tested on both of
the store's backends (the ``database`` fixture, ``tests/conftest.py``).

One server per run, shared by the pytest-xdist workers: the run's main process names a private
folder under the system's temporary folder (:func:`claim_run`); the first worker that needs the
server makes it, runs ``initdb`` there and starts ``postgres`` on a free loopback port under a file
lock, the others read where it listens.  Password authentication, a random password: the machine is shared.
Each test gets a database of its own (``CREATE DATABASE``, dropped after).  A benchmark that needs
a server with other settings starts one of its own with :func:`private`.  PostgreSQL refuses to run
as root, so as root it runs as the ``postgres`` user Debian's package creates (else ``nobody``).

Never leaked: ``postgres`` runs under a watchdog (this file run as a script) that stops it and
deletes the folder when the run's main process ends, however it ends (a pidfd), or when that
process stops it at the end of the run (:func:`release_run`); and ``postgres`` gets SIGINT (fast
shutdown) if the watchdog itself dies (``setpriv --pdeathsig``).  Stdlib only at import: the
watchdog runs this file without the project on its path.
"""

from __future__ import annotations

import contextlib
import json
import os
import pwd
import secrets
import select
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

FOLDER = "CRISSCROSS_TEST_POSTGRES_FOLDER"  # set by the run's main process: where its server lives
OWNER = "CRISSCROSS_TEST_POSTGRES_OWNER"  # that process's pid: the server lives as long as it does
ROLE = "crisscross"
RUN_AS = ("postgres", "nobody")  # who runs PostgreSQL when the tests run as root, first that exists
START_SECONDS = 30.0
# fsync off: the tests kill the app, never the database, so what they check (a commit is kept) does not
# hang on it, and each test's CREATE and DROP DATABASE take ~0.2 s less on a busy disk.
SETTINGS = {"listen_addresses": "127.0.0.1", "max_connections": "200", "shared_buffers": "32MB", "fsync": "off"}


class Unavailable(RuntimeError):
    """PostgreSQL cannot run here; the message is the line the PostgreSQL tests fail with."""


@dataclass
class Server:
    port: int
    password: str
    host: str = "127.0.0.1"
    _admin: Any = field(default=None, repr=False)

    def url(self, database: str) -> str:
        return f"postgresql://{ROLE}:{self.password}@{self.host}:{self.port}/{database}"

    def connect(self, database: str = "postgres") -> Any:
        import pg8000.native

        return pg8000.native.Connection(ROLE, host=self.host, port=self.port, password=self.password, database=database, timeout=30)

    def close(self) -> None:
        """Close the connection :meth:`database` keeps for creating and dropping databases."""
        if self._admin is not None:
            self._admin.close()
            self._admin = None

    @contextmanager
    def database(self) -> Iterator[str]:
        """The URL of a new empty database, dropped afterwards together with the sessions still on it."""
        if self._admin is None:
            self._admin = self.connect()
        name = f"test_{uuid.uuid4().hex[:16]}"
        self._admin.run(f"CREATE DATABASE {name}")
        try:
            yield self.url(name)
        finally:
            self._admin.run(f"DROP DATABASE {name} WITH (FORCE)")


def claim_run() -> None:
    """In the run's main process, before the workers start: the (not yet made) folder its server will live in."""
    os.environ[FOLDER] = str(Path(tempfile.gettempdir()) / f"crisscross-pg-{secrets.token_hex(8)}")
    os.environ[OWNER] = str(os.getpid())


def release_run() -> None:
    """In the run's main process, at the end: stop the server if one was started, delete its folder."""
    if os.environ.get(OWNER) != str(os.getpid()):
        return
    folder = Path(os.environ[FOLDER])
    state = folder / "server.json"
    if state.is_file():
        stop(json.loads(state.read_text())["watchdog"])
    shutil.rmtree(folder, ignore_errors=True)


def shared() -> Server:
    """The run's server, started by the first process to ask; :class:`Unavailable` (the same reason
    for every asker) when it cannot start."""
    from filelock import FileLock

    if FOLDER not in os.environ:
        raise Unavailable("the run's main process named no folder for it (tests/conftest.py calls claim_run)")
    folder, owner = Path(os.environ[FOLDER]), int(os.environ[OWNER])
    try:
        os.kill(owner, 0)
    except ProcessLookupError:
        raise Unavailable("the run's main process is gone") from None
    with contextlib.suppress(FileExistsError):  # made by another worker (its name is 64 random bits)
        folder.mkdir(mode=0o700)
    state, failed = folder / "server.json", folder / "failed"
    with FileLock(str(folder / "lock")):
        if failed.is_file():
            raise Unavailable(failed.read_text())
        if not state.is_file():
            try:
                state.write_text(json.dumps(start(folder, owner)))
            except Unavailable as error:
                failed.write_text(str(error))
                raise
    found = json.loads(state.read_text())
    return Server(found["port"], found["password"])


def bindir() -> Path:
    """Where ``initdb`` and ``postgres`` are: ``pg_config --bindir``, else Debian's
    ``/usr/lib/postgresql/<version>/bin`` (newest first), else ``PATH``."""
    pg_config = shutil.which("pg_config")
    said = subprocess.run([pg_config, "--bindir"], capture_output=True, text=True).stdout.strip() if pg_config else ""
    candidates = [Path(said)] if said else []
    versions = Path("/usr/lib/postgresql").glob("*/bin")
    candidates += sorted(versions, key=lambda p: tuple(int(n) for n in p.parent.name.split(".") if n.isdigit()), reverse=True)
    if initdb := shutil.which("initdb"):
        candidates.append(Path(initdb).resolve().parent)
    for folder in candidates:
        if (folder / "initdb").is_file() and (folder / "postgres").is_file():
            return folder
    raise Unavailable("no initdb and postgres in pg_config --bindir, /usr/lib/postgresql/*/bin or PATH: run tools/install-system-test-deps")


def account() -> pwd.struct_passwd | None:
    """The unprivileged user PostgreSQL runs as when the tests run as root; None otherwise (it runs as us)."""
    if os.geteuid() != 0:
        return None
    for name in RUN_AS:
        try:
            return pwd.getpwnam(name)
        except KeyError:
            continue
    raise Unavailable(f"running as root, and none of the users {', '.join(RUN_AS)} exists to run PostgreSQL as")


@contextmanager
def private(settings: Mapping[str, str]) -> Iterator[Server]:
    """A server of this process's own with ``settings`` (a benchmark's, e.g. ``fsync`` on), stopped and
    its folder deleted on leaving (or by its watchdog, if this process dies first)."""
    folder = Path(tempfile.mkdtemp(prefix="crisscross-pg-"))
    try:
        found = start(folder, os.getpid(), settings)
        server = Server(found["port"], found["password"])
        try:
            yield server
        finally:
            server.close()
            stop(found["watchdog"])
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def start(folder: Path, owner: int, settings: Mapping[str, str] = SETTINGS) -> dict[str, Any]:
    """``initdb`` in ``folder`` and ``postgres`` with ``settings`` under a watchdog tied to ``owner``; where it listens."""
    binaries, user = bindir(), account()
    setpriv = shutil.which("setpriv")
    if setpriv is None:
        raise Unavailable("setpriv (util-linux) is missing")
    prefix = [setpriv, *(["--reuid", str(user.pw_uid), "--regid", str(user.pw_gid), "--clear-groups"] if user else [])]
    prefix += ["--pdeathsig", "INT", "--"]
    password, secret = secrets.token_urlsafe(18), folder / "password"
    secret.write_text(password)
    for path in (folder, secret):
        path.chmod(0o700 if path.is_dir() else 0o600)
        if user:
            os.chown(path, user.pw_uid, user.pw_gid)
    data = folder / "data"
    options = ["-U", ROLE, "--auth=scram-sha-256", f"--pwfile={secret}", "--no-locale", "-E", "UTF8", "--no-sync", "--no-instructions"]
    made = subprocess.run([*prefix, str(binaries / "initdb"), "-D", str(data), *options], capture_output=True, text=True, check=False)
    secret.unlink()
    if made.returncode:
        raise Unavailable(f"initdb failed: {last_line(made.stderr or made.stdout)}")
    flags = [a for name, value in settings.items() for a in ("-c", f"{name}={value}")]
    log = folder / "postgres.log"
    for _attempt in range(3):  # the free port may be taken by someone else before postgres binds it
        port, before = free_port(), log.stat().st_size if log.exists() else 0
        server = Server(port, password)
        argv = [*prefix, str(binaries / "postgres"), "-D", str(data), "-p", str(port), "-k", str(folder), *flags]
        with log.open("ab") as out:
            watchdog = subprocess.Popen(
                [sys.executable, __file__, str(owner), str(folder), *argv],
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,  # the terminal's Ctrl-C stops pytest, which stops the server
            )
        try:
            refused = not_ready(server, watchdog)
        except BaseException:  # pg8000 missing, Ctrl-C: nothing else would stop this postgres
            stop(watchdog.pid)
            watchdog.wait()
            raise
        if refused is None:
            return {"port": port, "password": password, "watchdog": watchdog.pid}
        stop(watchdog.pid)
        watchdog.wait()
        said = log.read_bytes()[before:].decode(errors="replace")
        if "could not bind" not in said:
            break
    raise Unavailable(f"postgres did not start: {refused or last_line(said)}")


def not_ready(server: Server, watchdog: subprocess.Popen) -> str | None:
    """None once the server takes connections; else why not: its last refusal ("" when it exited)."""
    import pg8000.exceptions

    refused = ""
    deadline = time.monotonic() + START_SECONDS
    while time.monotonic() < deadline and watchdog.poll() is None:
        try:
            server.connect().close()
            return None
        except (OSError, pg8000.exceptions.InterfaceError, pg8000.exceptions.DatabaseError) as error:
            refused = last_line(str(error))  # until postgres listens and has started up
            time.sleep(0.05)
    return refused


def stop(watchdog: int) -> None:
    """Ask the watchdog to stop the server and wait until it has."""
    try:
        handle = os.pidfd_open(watchdog)
    except ProcessLookupError:
        return
    try:
        signal.pidfd_send_signal(handle, signal.SIGTERM)
        select.select([handle], [], [], 2 * START_SECONDS)
    except ProcessLookupError:
        pass
    finally:
        os.close(handle)


def last_line(text: str) -> str:
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return lines[-1] if lines else "no output"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def watch(owner: int, folder: Path, argv: list[str]) -> None:
    """Run ``postgres`` until ``owner`` exits or SIGTERM comes, then stop it; when ``owner`` is gone,
    nobody else will delete ``folder``: delete it."""
    stopping: list[int] = []
    signal.signal(signal.SIGTERM, lambda number, _frame: stopping.append(number))
    try:
        handle = os.pidfd_open(owner)
    except ProcessLookupError:  # the run ended before its server started
        shutil.rmtree(folder, ignore_errors=True)
        return
    postmaster = subprocess.Popen(argv)
    orphaned = False
    while not stopping and postmaster.poll() is None and not orphaned:
        orphaned = bool(select.select([handle], [], [], 0.2)[0])
    deadline = time.monotonic() + START_SECONDS
    while postmaster.poll() is None and time.monotonic() < deadline:
        postmaster.send_signal(signal.SIGINT)  # fast shutdown (again: one sent while it starts up is lost)
        with contextlib.suppress(subprocess.TimeoutExpired):
            postmaster.wait(1)
    if postmaster.poll() is None:
        postmaster.kill()
        postmaster.wait()
    if orphaned:
        shutil.rmtree(folder, ignore_errors=True)


if __name__ == "__main__":
    watch(int(sys.argv[1]), Path(sys.argv[2]), sys.argv[3:])
