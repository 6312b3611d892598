"""Load and fault test over loopback: simulated raters submit batches concurrently to a real
``crisscross serve`` process, which is killed (SIGKILL) mid-run and restarted.  Checked: nothing
acknowledged is lost, nothing is stored twice, each batch ends rated by exactly ``replicas`` raters.

Bounded in count and time.  CI runs a small round; the issue's benchmark (50 raters, 10,000
judgments) is ``CRISSCROSS_LOAD_RATERS=50 CRISSCROSS_LOAD_JUDGMENTS=10000 pytest -s
tests/serve/test_load.py``, which prints requests/s and p95 latency (a benchmark, not a timed test).
"""

from __future__ import annotations

import math
import os
import signal
import sqlite3
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
from tests.serve.round import free_port

RATERS = int(os.environ.get("CRISSCROSS_LOAD_RATERS", "12"))
JUDGMENTS = int(os.environ.get("CRISSCROSS_LOAD_JUDGMENTS", "900"))
REPLICAS, BATCH = 3, 18
DEADLINE = 300.0  # seconds: the run stops by itself


def write_round(root: Path) -> tuple[Path, Path]:
    batches = math.ceil(JUDGMENTS / (REPLICAS * BATCH))
    items, tasks = root / "items", root / "tasks"
    items.mkdir()
    tasks.mkdir()
    captions = [{"caption_id": f"load:cap:{i}", "image_id": "load:img:0", "text": f"caption {i}"} for i in range(2 * batches * BATCH)]
    pq.write_table(pa.Table.from_pylist(captions), items / "captions.parquet")
    pq.write_table(pa.Table.from_pylist([{"image_id": "load:img:0", "path": "", "pixels": "missing"}]), items / "images.parquet")
    rows = []
    for b in range(batches):
        for p in range(BATCH):
            a, c = f"load:cap:{2 * (b * BATCH + p)}", f"load:cap:{2 * (b * BATCH + p) + 1}"
            rows.append({"item_id": item_id("STS", a, c), "task_type": "STS", "id_a": min(a, c), "id_b": max(a, c),
                         "sampling_method": "c2c_isim", "gold": "", "batch_id": f"sts-{b:05d}", "position": p + 1})  # fmt: skip
    pq.write_table(pa.Table.from_pylist(rows, schema=TASKS_SCHEMA), tasks / "tasks.parquet")
    return items, tasks


def start(argv: list[str], url: str) -> subprocess.Popen:
    server = subprocess.Popen([sys.executable, "-m", "crisscross.pipelines.cli", *argv], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            httpx.get(f"{url}/signin", timeout=1)
            return server
        except httpx.TransportError:
            time.sleep(0.1)
    server.kill()
    raise RuntimeError(f"crisscross serve did not start: {server.stderr.read().decode()[-2000:]}")


def test_concurrent_raters_lose_nothing_when_the_server_is_killed(tmp_path: Path):
    items, tasks = write_round(tmp_path)
    db = tmp_path / "load.sqlite"
    params = tmp_path / "params.yaml"
    limits = {"rate_per_second": 10_000.0, "burst": 10_000.0, "ip_rate_per_second": 100_000.0, "signins_per_minute": 10_000.0}
    params.write_text(yaml.safe_dump({"tasks": {"replicas": REPLICAS}, "serve": limits}))
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    argv = ["serve", "--tasks", str(tasks), "--items", str(items), "--db", str(db), "--port", str(port), "--params", str(params)]
    store = Store(str(db))
    store.init()
    tokens = {f"rater{i:02d}": store.add_rater(f"rater{i:02d}", time.time()) for i in range(RATERS)}
    server = start(argv, url)
    acked: list[tuple[str, str]] = []
    latencies: list[float] = []
    errors: list[str] = []
    lock = threading.Lock()
    started = time.monotonic()
    kill_at = JUDGMENTS * 0.4

    def rater(name: str, token: str) -> None:
        client = httpx.Client(base_url=url, cookies={SESSION_COOKIE: token}, timeout=30)
        while time.monotonic() - started < DEADLINE:
            try:
                t0 = time.perf_counter()
                view = client.get("/api/batch").json()
                t1 = time.perf_counter()
                if view["batch"] is None:
                    return
                batch = view["batch"]
                body = {
                    "batch_id": batch["id"],
                    "answers": [{"position": i["position"], "score": 2.5, "seconds": 1.0} for i in batch["items"]],
                }
                response = client.post("/api/submit", json=body, headers={CSRF_HEADER: view["csrf"]})
                t2 = time.perf_counter()
            except (httpx.TransportError, ValueError):
                time.sleep(0.2)  # the server is down (killed): try again once it is back
                continue
            with lock:
                latencies.extend([t1 - t0, t2 - t1])
                if response.status_code == 200:
                    acked.append((name, batch["id"]))
                else:
                    errors.append(f"{response.status_code} {response.text[:200]}")

    threads = [threading.Thread(target=rater, args=item) for item in tokens.items()]
    for t in threads:
        t.start()
    while len(acked) * BATCH < kill_at and any(t.is_alive() for t in threads):
        time.sleep(0.01)
    server.send_signal(signal.SIGKILL)  # mid-run, with submits in flight
    server.wait()
    killed_after = len(acked)
    server = start(argv, url)
    for t in threads:
        t.join(timeout=DEADLINE)
    elapsed = time.monotonic() - started
    server.send_signal(signal.SIGTERM)
    server.wait(timeout=30)

    connection = sqlite3.connect(db)
    stored = set(connection.execute("SELECT DISTINCT rater, batch_id FROM judgments").fetchall())
    per_batch = dict(connection.execute("SELECT batch_id, COUNT(DISTINCT rater) FROM judgments GROUP BY batch_id").fetchall())
    total = connection.execute("SELECT COUNT(*) FROM judgments").fetchone()[0]
    unique = connection.execute("SELECT COUNT(*) FROM (SELECT DISTINCT rater, item_id FROM judgments)").fetchone()[0]
    batches = connection.execute("SELECT COUNT(*) FROM batches").fetchone()[0]
    assert not errors, errors[:3]
    assert set(acked) <= stored  # nothing acknowledged is lost
    assert total == unique == len(stored) * BATCH  # nothing duplicated, whole batches only
    assert set(per_batch.values()) == {REPLICAS} and len(per_batch) == batches  # exactly `replicas` raters per batch
    assert 0 < killed_after < len(acked)
    requests = len(latencies)
    p95 = sorted(latencies)[int(0.95 * (requests - 1))] * 1000
    print(
        f"\nload: {RATERS} raters, {total} judgments in {batches} batches × {REPLICAS}, killed after {killed_after} acked batches; "
        f"{requests} requests in {elapsed:.1f} s = {requests / elapsed:.0f} requests/s (incl. restart), p95 latency {p95:.1f} ms"
    )
