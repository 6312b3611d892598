"""Load and fault tests over loopback: simulated raters submit batches concurrently to a real
``crisscross serve`` process.  Checked: nothing acknowledged is lost, nothing is stored twice, each
batch ends rated by exactly ``replicas`` raters.  The kill test kills the server (SIGKILL) mid-run
and restarts it, on each backend; the load test has 100 raters on PostgreSQL.  On PostgreSQL the
server runs two worker processes (``serve --workers 2``), and the kill takes them all.  Requests/s and
p50/p95 latency are reported (in the run's "figures" section), never asserted; the p50 also as a
multiple of one rater's alone on the same server and database, just before the crowd comes.

Bounded in count and time.  CI runs small rounds; the issue's benchmark (50 raters, 10,000
judgments, with the kill) is ``CRISSCROSS_LOAD_RATERS=50 CRISSCROSS_LOAD_JUDGMENTS=10000 pytest
tests/serve/test_load.py -k killed``.  The server's command line is :func:`serve_argv`'s.
"""

from __future__ import annotations

import math
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx
import pyarrow as pa
import pyarrow.parquet as pq
import yaml

from crisscross.annotate.store import Store
from crisscross.formats.schema import TASKS_SCHEMA, item_id
from crisscross.serve.app import CSRF_HEADER, SESSION_COOKIE
from tests.serve.round import LOOPBACK_TLS, free_port, query

RATERS = int(os.environ.get("CRISSCROSS_LOAD_RATERS", "12"))
JUDGMENTS = int(os.environ.get("CRISSCROSS_LOAD_JUDGMENTS", "900"))
REPLICAS, BATCH = 3, 18
CROWD, CROWD_BATCH = 100, 6  # the PostgreSQL load test: 100 raters, each rating about 3 batches
ALONE = 12  # batches one rater rates alone before the crowd comes (after one more as a warm-up): the unloaded latency
DEADLINE = 300.0  # seconds: a run stops by itself


def write_round(root: Path, batches: int, size: int) -> tuple[Path, Path]:
    items, tasks = root / "items", root / "tasks"
    items.mkdir()
    tasks.mkdir()
    captions = [{"caption_id": f"load:cap:{i}", "image_id": "load:img:0", "text": f"caption {i}"} for i in range(2 * batches * size)]
    pq.write_table(pa.Table.from_pylist(captions), items / "captions.parquet")
    pq.write_table(pa.Table.from_pylist([{"image_id": "load:img:0", "path": "", "pixels": "missing"}]), items / "images.parquet")
    rows = []
    for b in range(batches):
        for p in range(size):
            a, c = f"load:cap:{2 * (b * size + p)}", f"load:cap:{2 * (b * size + p) + 1}"
            rows.append({"item_id": item_id("STS", a, c), "task_type": "STS", "id_a": min(a, c), "id_b": max(a, c),
                         "sampling_method": "c2c_isim", "gold": "", "batch_id": f"sts-{b:05d}", "position": p + 1})  # fmt: skip
    pq.write_table(pa.Table.from_pylist(rows, schema=TASKS_SCHEMA), tasks / "tasks.parquet")
    return items, tasks


def serve_argv(root: Path, db: str, port: int, batches: int, size: int) -> list[str]:
    """``crisscross serve`` over a round of ``batches`` × ``size`` items, as the load tests run it."""
    items, tasks = write_round(root, batches, size)
    params = root / "params.yaml"
    limits = {"rate_per_second": 10_000.0, "burst": 10_000.0, "ip_rate_per_second": 100_000.0, "signins_per_minute": 10_000.0}
    params.write_text(yaml.safe_dump({"tasks": {"replicas": REPLICAS}, "serve": limits}))
    workers = ["--workers", "2"] if db.startswith("postgresql") else []  # several server processes over one PostgreSQL
    return ["serve", "--tasks", str(tasks), "--items", str(items), "--db", db, "--port", str(port), "--params", str(params), *workers]


def start(argv: list[str], url: str) -> subprocess.Popen:
    """The server in a process group of its own, so a kill reaches every process it runs."""
    command = [sys.executable, "-m", "crisscross.pipelines.cli", *argv]
    server = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, start_new_session=True)
    deadline = time.monotonic() + 60
    with httpx.Client(verify=LOOPBACK_TLS, timeout=1) as probe:
        while time.monotonic() < deadline:
            try:
                probe.get(f"{url}/signin")
                return server
            except httpx.TransportError:
                time.sleep(0.1)
    os.killpg(server.pid, signal.SIGKILL)
    raise RuntimeError(f"crisscross serve did not start: {server.stderr.read().decode()[-2000:]}")


def percentile(values: list[float], q: float) -> float:
    return sorted(values)[int(q * (len(values) - 1))]


def rate_batch(client: httpx.Client) -> tuple[list[float], str, httpx.Response] | None:
    """The signed-in rater's next batch rated, as the page does: the latencies of its two requests,
    the batch's id and the submit's response; None when no batch is left for them."""
    t0 = time.perf_counter()
    view = client.get("/api/batch").json()
    t1 = time.perf_counter()
    if view["batch"] is None:
        return None
    batch = view["batch"]
    body = {"batch_id": batch["id"], "answers": [{"position": i["position"], "score": 2.5, "seconds": 1.0} for i in batch["items"]]}
    response = client.post("/api/submit", json=body, headers={CSRF_HEADER: view["csrf"]})
    return [t1 - t0, time.perf_counter() - t1], batch["id"], response


def run_round(root: Path, db: str, raters: int, batches: int, size: int, kill: bool) -> str:
    """``raters`` raters rate every batch through a real server (killed once mid-run with ``kill``);
    checks what the database kept against what was acknowledged and returns the figures."""
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    argv = serve_argv(root, db, port, batches, size)
    store = Store(db)
    store.init()
    tokens = {f"rater{i:03d}": store.add_rater(f"rater{i:03d}", time.time()) for i in range(raters)}
    server = start(argv, url)
    acked: list[tuple[str, str]] = []
    latencies: list[float] = []
    unloaded: list[float] = []  # one rater's alone, before the crowd comes
    errors: list[str] = []
    retries = [0]
    lock = threading.Lock()

    def record(name: str, rated: tuple[list[float], str, httpx.Response], timed: list[float]) -> None:
        times, batch_id, response = rated
        timed.extend(times)
        if response.status_code == 200:
            acked.append((name, batch_id))
        else:
            errors.append(f"{response.status_code} {response.text[:200]}")

    warmup: list[float] = []
    with httpx.Client(base_url=url, headers={"Origin": url}, timeout=30, verify=LOOPBACK_TLS) as alone:
        alone.post("/signin", data={"token": store.add_rater("alone", time.time())})
        for n in range(min(ALONE, batches // 2) + 1):  # half the batches at most, so the crowd has work
            if rated := rate_batch(alone):
                record("alone", rated, unloaded if n else warmup)
    alone_acked = len(acked)  # the kill and its figure count the crowd's acknowledgements only
    started = time.monotonic()

    def rater(name: str, token: str) -> None:
        client = httpx.Client(base_url=url, headers={"Origin": url}, timeout=30, verify=LOOPBACK_TLS)  # as the app's pages post
        while time.monotonic() - started < DEADLINE:
            try:
                if SESSION_COOKIE not in client.cookies:
                    client.post("/signin", data={"token": token})  # the session outlives a server restart: once is enough
                rated = rate_batch(client)
            except (httpx.TransportError, ValueError):
                with lock:
                    retries[0] += 1
                time.sleep(0.2)  # the server is down (killed): try again once it is back
                continue
            if rated is None:
                return
            with lock:
                record(name, rated, latencies)

    threads = [threading.Thread(target=rater, args=item) for item in tokens.items()]
    for t in threads:
        t.start()
    killed_after = None
    if kill:
        while len(acked) - alone_acked < 0.4 * (batches * REPLICAS - alone_acked) and any(t.is_alive() for t in threads):
            time.sleep(0.01)
        os.killpg(server.pid, signal.SIGKILL)  # mid-run, with submits in flight
        server.wait()
        killed_after = len(acked) - alone_acked
        server = start(argv, url)
    for t in threads:
        t.join(timeout=DEADLINE)
    elapsed = time.monotonic() - started
    os.killpg(server.pid, signal.SIGTERM)
    server.wait(timeout=30)

    stored = set(query(db, "SELECT DISTINCT rater, batch_id FROM judgments"))
    per_batch = dict(query(db, "SELECT batch_id, COUNT(DISTINCT rater) FROM judgments GROUP BY batch_id"))
    [(total,)] = query(db, "SELECT COUNT(*) FROM judgments")
    [(unique,)] = query(db, "SELECT COUNT(*) FROM (SELECT DISTINCT rater, item_id FROM judgments) AS d")
    assert not errors, errors[:3]
    assert set(acked) <= stored  # nothing acknowledged is lost
    assert total == unique == len(stored) * size  # nothing duplicated, whole batches only
    assert set(per_batch.values()) == {REPLICAS} and len(per_batch) == batches  # exactly `replicas` raters per batch
    if kill:
        assert 0 < killed_after < len(acked)
    else:
        assert retries[0] == 0  # a server nobody killed answers every request
    requests = len(latencies)
    p50, p95 = (percentile(latencies, q) * 1000 for q in (0.5, 0.95))
    alone_p50 = percentile(unloaded, 0.5) * 1000 if unloaded else math.nan  # none on a round of one batch
    restart = f"killed after {killed_after} acked batches, restarted; " if kill else ""
    return (
        f"{Store(db).backend.name}: {raters} raters, {total} judgments in {batches} batches × {REPLICAS}; {restart}"
        f"0 acknowledged lost, 0 duplicates; {requests} requests in {elapsed:.1f} s = {requests / elapsed:.0f} requests/s, "
        f"p50 {p50:.1f} ms = {p50 / alone_p50:.1f}× one rater alone (p50 {alone_p50:.1f} ms over {len(unloaded)} requests), p95 {p95:.1f} ms"
    )


def test_concurrent_raters_lose_nothing_when_the_server_is_killed(database: str, tmp_path: Path, record_property):
    figure = run_round(tmp_path, database, RATERS, math.ceil(JUDGMENTS / (REPLICAS * BATCH)), BATCH, kill=True)
    record_property("figure", figure)
    print(f"\nload: {figure}")


def test_a_hundred_raters_on_postgresql_lose_nothing_and_duplicate_nothing(postgres_database: str, tmp_path: Path, record_property):
    figure = run_round(tmp_path, postgres_database, CROWD, CROWD, CROWD_BATCH, kill=False)
    record_property("figure", figure)
    print(f"\nload: {figure}")
