"""``crisscross browse`` on a release the size of CxC: the page's response times, p50 and p95.

The release is real data: CxC's val and test files (267,095 published rows) replayed through
``annotate`` (replay) and ``aggregate`` as two rounds and released with the Karpathy test split's
items (the val split's ids from ``val5k_partial.jsonl``), so it holds 261,979 pairs (SIS's pairs
rated in both orders are pooled) and 267,095 judgments.  ``--quick`` releases the test split alone.

The browser runs as a user starts it (``crisscross browse RELEASE --images …`` in its own process)
and is asked over HTTP, one request at a time, for:
- the first page: ``/``, ``/api/release`` and the first 50 pairs, as the page asks for them;
- a filter: 50 pairs of a task type / method / positive / score-range combination, sorted;
- a pair: one pair with its judgments and their spread, at a seeded random key;
- a thumbnail: an image of the Karpathy test photographs, first (decoded) and again (cached).

The references, in the same run, are what an evaluator writes without the page, and the page's own
work without HTTP:
- start-up: a new Python process importing pandas and reading the two tables the page serves
  (``pairs.parquet``, ``judgments.parquet``);
- the first page: pandas reading ``pairs.parquet`` and taking its first 50 rows;
- a filter: pandas reading ``pairs.parquet`` and taking the same filter's first 50 rows sorted
  (``read + filter``), and the filter alone on a frame already in memory (``filter in memory``);
- a pair: the same pairs' rows and their judgments picked from frames already in memory;
- a thumbnail: the page's own ``thumbnail`` function on the same photos in this process, uncached.
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import random
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

from benchmarks import KARPATHY_PHOTOS, SHARED_DATA, cpu_model, percentiles, save_result

NAME = "browse_pages"
SALT = "browse-benchmark-salt-0001"  # pseudonyms only: the benchmark's release is thrown away
FILTERS: tuple[dict[str, Any], ...] = (
    {"task_type": "SITS", "positive": "yes", "score_min": 3.5, "sort": "score", "order": "desc"},
    {"task_type": "STS", "method": "c2c_isim", "sort": "spread", "order": "desc"},
    {"task_type": "SIS", "positive": "no", "score_max": 1.0},
    {"method": "c2i_intrasim", "score_min": 2.0, "score_max": 3.0, "sort": "score"},
    {"positive": "yes", "sort": "judgments", "order": "desc"},
    {"split": "val", "task_type": "STS", "score_min": 4.5},
)
REQUESTS = 200  # per kind of request (``--quick``: 40)


def run(args: argparse.Namespace) -> None:
    splits = ("test",) if args.quick else ("test", "val")
    repeats = 40 if args.quick else REQUESTS
    with tempfile.TemporaryDirectory(prefix="crisscross-bench-") as tmp:
        started = time.perf_counter()
        release = build_release(Path(tmp), splits)
        built = time.perf_counter() - started
        page = measure_page(release, splits, repeats)
        reference = measure_reference(release, splits, repeats, page["pairs"])
    machine = f"{cpu_model()}, {os.cpu_count()} cores"
    print(f"release: {page['pairs']:,} pairs, {page['judgments']:,} judgments (built in {built:.0f} s); {machine}")
    print(f"  start-up (process start → first answer): {page['startup']:.2f} s")
    for kind in ("first_page", "filter", "pair", "thumbnail_cold", "thumbnail_warm"):
        print(
            f"  {kind:15s} p50 {page[kind]['p50'] * 1000:7.1f} ms   p95 {page[kind]['p95'] * 1000:7.1f} ms   ({page[kind]['n']} requests)"
        )
    for kind in ("read_tables", "read_head", "read_filter", "filter_in_memory", "pair_in_memory", "thumbnail_in_process"):
        print(f"  reference {kind:20s} p50 {reference[kind]['p50'] * 1000:7.1f} ms   p95 {reference[kind]['p95'] * 1000:7.1f} ms")
    ratios = {
        "startup_vs_pandas_read_tables": page["startup"] / reference["read_tables"]["p50"],
        "first_page_vs_pandas_read_head": page["first_page"]["p50"] / reference["read_head"]["p50"],
        "filter_vs_pandas_read_filter": page["filter"]["p50"] / reference["read_filter"]["p50"],
        "filter_vs_pandas_in_memory": page["filter"]["p50"] / reference["filter_in_memory"]["p50"],
        "pair_vs_pandas_in_memory": page["pair"]["p50"] / reference["pair_in_memory"]["p50"],
        "thumbnail_cold_vs_in_process": page["thumbnail_cold"]["p50"] / reference["thumbnail_in_process"]["p50"],
    }
    for name, ratio in ratios.items():
        print(f"  {name.replace('_vs_', ' ÷ ')}: {ratio:.2f}")
    path = save_result(
        NAME, {"quick": args.quick, "machine": machine, "built_seconds": built, **page, "reference": reference, "ratios": ratios}
    )
    print(f"written to {path}")


def build_release(root: Path, splits: tuple[str, ...]) -> Path:
    """CxC's files of ``splits`` replayed as one round each and released with their items."""
    import pandas as pd

    from crisscross.annotate.providers import load_cxc_release
    from crisscross.core import io as cio
    from crisscross.pipelines import aggregate, annotate, ingest
    from crisscross.pipelines import release as release_command
    from crisscross.release.merge import karpathy_document

    for split in splits:
        folder = root / split
        cio.write_parquet(str(folder / "tasks" / "tasks.parquet"), load_cxc_release(SHARED_DATA / "cxc", split).items)
        params = folder / "params.json"
        params.write_text(json.dumps({"annotate": {"source": "replay", "replay_split": split}}))
        flags = ["--params", str(params)]
        annotate.main(
            ["--in", str(folder / "tasks"), "--judgments", f"cxc:{SHARED_DATA / 'cxc'}", "--out", str(folder / "judgments"), *flags]
        )
        aggregate.main(["--in", str(folder / "judgments"), "--tasks", str(folder / "tasks"), "--out", str(folder / "rated"), *flags])
    params = root / "params.json"
    params.write_text(json.dumps({"ingest": {"reader": "coco-karpathy-jsonl", "reader_options": {"split": "test"}}}))
    items = root / "items"
    ingest.main(
        [
            "--in",
            str(SHARED_DATA / "coco-karpathy" / "test5k.jsonl"),
            "--images",
            str(KARPATHY_PHOTOS),
            "--out",
            str(items),
            "--params",
            str(params),
        ]
    )
    images, captions = pd.read_parquet(items / "images.parquet"), pd.read_parquet(items / "captions.parquet")
    if "val" in splits:  # val's ids, for the release's splits; its texts where the partial file has them
        images, captions = with_val_items(images, captions)
        images.to_parquet(items / "images.parquet", index=False)
        captions.to_parquet(items / "captions.parquet", index=False)
    karpathy = root / "dataset_coco.json"
    karpathy.write_text(json.dumps(karpathy_document(images, captions)))
    out = root / "cxc"
    os.environ["CRISSCROSS_RELEASE_SALT"] = SALT
    release_command.main(
        [
            "--rated",
            ",".join(str(root / s / "rated") for s in splits),
            "--judgments",
            ",".join(str(root / s / "judgments") for s in splits),
            "--items",
            str(items),
            "--karpathy",
            str(karpathy),
            "--out",
            str(out),
            "--params",
            str(params),
        ]
    )
    return out


def with_val_items(images: Any, captions: Any) -> tuple[Any, Any]:
    """The test split's items and the val split's, read from ``val5k_partial.jsonl`` (ids, files, texts where known)."""
    import pandas as pd

    val = pd.read_json(SHARED_DATA / "coco-karpathy" / "val5k_partial.jsonl", lines=True)
    first = val.drop_duplicates("image_id")
    val_images = pd.DataFrame(
        {
            "image_id": "coco:img:" + first["image_id"].astype(str),
            "file_name": first["file_name"],
            "split": "val",
            "path": "",
            "pixels": "missing",
            "width": 0,
            "height": 0,
            "n_captions": first["image_id"].map(val.groupby("image_id").size()),
            "source": "val5k_partial.jsonl",
        }
    ).astype(images.dtypes.to_dict())
    val_captions = pd.DataFrame(
        {
            "caption_id": "coco:cap:" + val["caption_id"].astype(str),
            "image_id": "coco:img:" + val["image_id"].astype(str),
            "text": val["caption_tok"].fillna(""),
            "split": "val",
            "source": "val5k_partial.jsonl",
        }
    )
    return pd.concat([images, val_images], ignore_index=True), pd.concat([captions, val_captions], ignore_index=True)


def filters_of(splits: tuple[str, ...]) -> list[dict[str, Any]]:
    """The filters a release of ``splits`` can answer (the page refuses a split it does not hold)."""
    return [f for f in FILTERS if f.get("split", splits[0]) in splits]


def cycle(items: list[dict[str, Any]], n: int) -> list[dict[str, Any]]:
    return [items[i % len(items)] for i in range(n)]


def first(connection: http.client.HTTPConnection) -> None:
    """What the page asks for when it opens."""
    for url in ("/", "/api/release", "/api/pairs?limit=50"):
        get(connection, url, raw=True)


def measure_page(release: Path, splits: tuple[str, ...], repeats: int) -> dict[str, Any]:
    """The browser in its own process, asked over HTTP one request at a time."""
    import pyarrow.parquet as pq

    port = free_port()
    command = [
        sys.executable,
        "-m",
        "crisscross.pipelines.cli",
        "browse",
        str(release),
        "--images",
        str(KARPATHY_PHOTOS),
        "--port",
        str(port),
    ]
    started = time.perf_counter()
    server = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        connection = wait_for(port, server)
        startup = time.perf_counter() - started
        total = int(get(connection, "/api/release")["choices"]["pairs"])
        first_page = [timed(first, connection) for _ in range(repeats)]
        filters = [timed(get, connection, "/api/pairs?" + urlencode({**f, "limit": 50})) for f in cycle(filters_of(splits), repeats)]
        pairs = [timed(get, connection, f"/api/pairs/{key}") for key in pair_keys(total, repeats)]
        images = ["/api/image?" + urlencode({"id": f"coco:img:{int(name.rsplit('_', 1)[1].split('.')[0])}"}) for name in photos(repeats)]
        for name in photos(repeats):  # in the OS's cache for the page's first pass, as for the reference's
            (KARPATHY_PHOTOS / name).read_bytes()
        cold = [timed(get, connection, url, True) for url in images]
        warm = [timed(get, connection, url, True) for url in images]
    finally:
        server.terminate()
        server.wait(timeout=30)
    data = release / "data"
    return {
        "pairs": total,
        "judgments": pq.read_metadata(data / "judgments.parquet").num_rows,
        "startup": startup,
        "first_page": percentiles(first_page),
        "filter": percentiles(filters),
        "pair": percentiles(pairs),
        "thumbnail_cold": percentiles(cold),
        "thumbnail_warm": percentiles(warm),
    }


def pair_keys(total: int, repeats: int) -> list[int]:
    """The pairs asked for, at seeded random keys (the page's and the reference's alike)."""
    rng = random.Random(0)
    return [rng.randrange(total) for _ in range(repeats)]


def photos(repeats: int) -> list[str]:
    """The Karpathy test photographs whose thumbnails are asked for."""
    return sorted(p.name for p in KARPATHY_PHOTOS.glob("*.jpg"))[:repeats]


def measure_reference(release: Path, splits: tuple[str, ...], repeats: int, pairs: int) -> dict[str, Any]:
    """The same answers without the page: pandas on the release's tables, and its thumbnails made in this process."""
    import pandas as pd

    from crisscross.serve.browse import thumbnail

    path, judgments_path = release / "data" / "pairs.parquet", release / "data" / "judgments.parquet"
    frame, judgments = pd.read_parquet(path), pd.read_parquet(judgments_path)
    if len(frame) != pairs:  # the page's keys are the table's rows: the same keys must name the same pairs
        raise RuntimeError(f"the page holds {pairs:,} pairs, pairs.parquet {len(frame):,}")
    read_both = [
        sys.executable,
        "-c",
        "import sys, pandas as pd; [pd.read_parquet(p) for p in sys.argv[1:]]",
        str(path),
        str(judgments_path),
    ]
    asked = cycle(filters_of(splits), repeats)
    by_item = judgments.groupby(["round", "item_id"], sort=False).indices

    def one_pair(key: int) -> Any:
        row = frame.iloc[key]
        return row, judgments.iloc[by_item[(row["round"], row["item_id"])]]

    def thumbnails(name: str) -> bytes:
        found = KARPATHY_PHOTOS / name
        return thumbnail.__wrapped__(str(found), found.stat().st_mtime_ns)  # uncached, as a first request makes it

    return {
        "read_tables": percentiles([timed(lambda: subprocess.run(read_both, check=True)) for _ in range(5)]),
        "read_head": percentiles([timed(lambda: pd.read_parquet(path).head(50)) for _ in range(repeats)]),
        "read_filter": percentiles([timed(lambda f: pandas_page(pd.read_parquet(path), f), f) for f in asked]),
        "filter_in_memory": percentiles([timed(pandas_page, frame, f) for f in asked]),
        "pair_in_memory": percentiles([timed(one_pair, key) for key in pair_keys(len(frame), repeats)]),
        "thumbnail_in_process": percentiles([timed(thumbnails, name) for name in photos(repeats)]),
    }


def pandas_page(frame: Any, query: dict[str, Any]) -> Any:
    keep = frame["task_type"].notna()
    for key, column in (("task_type", "task_type"), ("method", "sampling_method"), ("split", "split")):
        if key in query:
            keep &= frame[column] == query[key]
    if "positive" in query:
        keep &= frame["positive"] == (query["positive"] == "yes")
    if "score_min" in query:
        keep &= frame["agg_score"] >= query["score_min"]
    if "score_max" in query:
        keep &= frame["agg_score"] <= query["score_max"]
    column = {"score": "agg_score", "spread": "std", "judgments": "n"}.get(query.get("sort", ""))
    chosen = frame[keep]
    if column is not None:
        chosen = chosen.sort_values(column, ascending=query.get("order") != "desc", kind="stable")
    return len(chosen), chosen.head(50)


def get(connection: http.client.HTTPConnection, url: str, raw: bool = False) -> Any:
    connection.request("GET", url)
    response = connection.getresponse()
    body = response.read()
    if response.status != 200:
        raise RuntimeError(f"{url}: {response.status} {body[:200]!r}")
    return body if raw else json.loads(body)


def wait_for(port: int, server: subprocess.Popen, seconds: float = 120.0) -> http.client.HTTPConnection:
    deadline = time.perf_counter() + seconds
    while time.perf_counter() < deadline:
        if server.poll() is not None:
            raise RuntimeError(f"crisscross browse exited: {server.stderr.read().decode()[-2000:] if server.stderr else ''}")
        try:
            connection = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
            get(connection, "/api/release")
            return connection
        except OSError:
            time.sleep(0.05)
    raise RuntimeError(f"crisscross browse did not answer within {seconds:.0f} s")


def timed(call: Any, *args: Any) -> float:
    started = time.perf_counter()
    call(*args)
    return time.perf_counter() - started


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])
