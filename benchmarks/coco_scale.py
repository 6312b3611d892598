"""A round-one build the size of all of MS-COCO, with one worker process and with two.

``tools/replicate_coco.py`` writes the synthetic collection (123,287 images, 616,435 captions:
the real Karpathy-test captions under new ids; ``--quick``: 12,000 images), then the build runs
``crisscross ingest → embed (use-m3, bow-glove50) → similarity → sample → tasks`` as a user
would, one command per stage, with the project's ``params.yaml`` (no image encoder: only 9,134 of
the replicas have a photograph here, so ``c2c_isim`` and image gold are off).  Ingest checks the
pixels of the replicas whose photograph is here, as with any ``--images`` folder.

Each stage is timed as a whole command (Python start-up, Beam, model loading, writing) and its
peak memory is the largest sum of the resident sets of the command and every process under it
(the worker processes with two workers), sampled every 0.1 s.  **The reference is the one-worker
build in the same run**: ``2w / 1w`` is the two-worker time over the one-worker time (0.5 would
be perfect on two cores).  Every command is given the two-worker flags; the similarity command,
whose block pool already keeps every core of one process busy, and the ingest command, whose second
process would ship every record back to the first, run in one process anyway and say so in their
summaries (``Stage.one_local_process``), so they cannot lose to a second worker.
Each command's CPU seconds (user + system, of the command and every worker under it) are
measured too: ``cores`` is the one-worker CPU over its wall time, the cores the stage kept busy, and
the one-worker CPU seconds are the core-seconds the README's "Running on a cluster" costing divides
among workers.  Both builds must write the same bytes
(every file but the timing reports), or the run fails after writing the JSON.

**The encoders alone** are the floor a build cannot go below: in a fresh interpreter, each text
encoder of the build, loaded and warmed first, encodes every caption the build kept in the embed
stage's batches, in three ways: under ``CRISSCROSS_NUMERICS=native`` (each library's fastest
kernels; see :mod:`benchmarks.numeric_policy`) in one lane whose kernels use every core, and in one
lane per core, each on one kernel thread (:class:`~crisscross.embed.lanes.Lanes`: how the embed
stage encodes natively with the project's params); and under the policy in one lane per core, as
the embed stage encodes by default.  All ways run right after the one-worker ingest, and the one
that was fastest runs again after both builds; each encoder's floor is its fastest time, and the
floors are summed.  ``build / encoders`` is the one-worker build over it (goal ≤ 1.5 at full size);
the table's ``beyond`` column says where the rest goes: each stage's time, less the encoders' for
embed.  The build over the native ways' timings alone, the encoders at native speed as the goal
words it, is printed beside it, and the build over the policy's way alone, the encoders with the
kernels the build computes with: the first ratio is the second times what the policy's kernels cost
the encoders.

**The work whose bytes the policy fixes** bounds what any faster code could reach: the encoders
under the policy (the kernels that write the build's vectors) and **similarity's products alone**
(:func:`similarity_products`: every block pair's product, under the policy, on every core, with no
selection or I/O; timed after the one-worker similarity and after both builds, each set's fastest
counts).  Their sum over the encoders at native speed is how close to the 1.5× goal a build could
come if every other step took no time; the rest of the 1.5× is printed beside it.  Likewise two
workers cannot take less than the one-worker CPU seconds over the cores (with the same work): that
bound on ``2w / 1w`` is printed too.

**pyarrow's own memory pool** is the reference for the project's (``crisscross.core.arrow_pool``:
jemalloc where pyarrow has it): after both builds, the stages whose tables churn memory most
(:data:`POOL_STAGES`) run again on the one-worker build's inputs with ``ARROW_DEFAULT_MEMORY_POOL``
set to pyarrow's default, mimalloc, and must write the same bytes.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import resource
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import psutil
import yaml

from benchmarks import KARPATHY_PHOTOS, save_result
from benchmarks.numeric_policy import mode_env
from crisscross.core import arrow_pool
from crisscross.pipelines.stage import read_params

ROOT = Path(__file__).resolve().parents[1]
QUICK_IMAGES = 12_000
WORKER_FLAGS = {1: [], 2: ["--direct_num_workers=2", "--direct_running_mode=multi_processing"]}
NOT_OUTPUT = {"report.json"}  # holds timings; everything else must match between worker counts
TEXT_ENCODERS = ["use-m3", "bow-glove50"]
ENCODERS_GOAL = 1.5  # the one-worker build over the encoders alone, at full size
POOL_STAGES = ("sample", "tasks")  # run again with pyarrow's default pool (mimalloc), the reference
PYARROW_DEFAULT_POOL = "mimalloc"


def stages(build: Path, source: Path) -> list[tuple[str, list[str]]]:
    """The round-one commands, as ``dvc.yaml`` runs them, on ``build``."""
    b = build
    return [
        ("ingest", ["ingest", "--in", str(source), "--images", str(KARPATHY_PHOTOS), "--out", f"{b}/items"]),
        ("embed", ["embed", "--in", f"{b}/items", "--out", f"{b}/embeddings"]),
        ("similarity", ["similarity", "--in", f"{b}/embeddings", "--out", f"{b}/similarity"]),
        ("sample", ["sample", "--in", f"{b}/similarity", "--items", f"{b}/items", "--out", f"{b}/candidates"]),
        ("tasks", ["tasks", "--in", f"{b}/candidates", "--items", f"{b}/items", "--embeddings", f"{b}/embeddings", "--out", f"{b}/tasks"]),
    ]


def scale_params(path: Path) -> None:
    """The project's params with text encoders only (the replicas mostly have no pixels here)."""
    params = read_params(str(ROOT / "params.yaml"))
    params["embed"].update(text_encoders=TEXT_ENCODERS, image_encoders=[])
    params["sample"].update(i2i_text_encoders=TEXT_ENCODERS, c2c_image_encoders=[])
    params["tasks"].update(gold_text_encoders=TEXT_ENCODERS, gold_image_encoders=[])
    path.write_text(yaml.safe_dump(params, sort_keys=False))


def encoders_alone(captions_path: str, batch_size: int, lanes: bool) -> dict[str, float]:
    """Seconds each of :data:`TEXT_ENCODERS` takes to encode every caption of ``captions_path``
    (an ingest output) in batches of ``batch_size``, in this process as its environment chose the
    kernels: in one lane whose kernels use every core, or (``lanes``) in one lane per core with one
    kernel thread each, as the embed stage runs them (an encoder that holds the interpreter lock on
    this thread, an inline lane); model loading and a first batch are left out."""
    import crisscross  # noqa: F401, I001  (first: the policy, unless CRISSCROSS_NUMERICS=native)
    import pyarrow.parquet as pq

    from crisscross.embed.encoders import TEXT_ENCODERS as REGISTRY
    from crisscross.embed.lanes import Lanes

    table = pq.read_table(captions_path, columns=["caption_id", "text"])
    ids, texts = table["caption_id"].to_pylist(), table["text"].to_pylist()
    cores = os.cpu_count() or 1
    seconds = {}
    for spec in TEXT_ENCODERS:
        first = REGISTRY.create(spec)
        inline = first.holds_interpreter
        encoders = [first, *(REGISTRY.create(spec) for _ in range(1, cores if lanes and not inline else 1))]
        for encoder in encoders:
            encoder.use_threads(1 if lanes else cores)
            encoder.load()
            encoder.encode(ids[:batch_size], texts[:batch_size])
        pool = Lanes(encoders, inline=inline)
        started = time.perf_counter()
        for _ in pool.map(
            lambda encoder, start: encoder.encode(ids[start : start + batch_size], texts[start : start + batch_size]),
            range(0, len(ids), batch_size),
        ):
            pass
        seconds[spec] = time.perf_counter() - started
    return seconds


# How the encoders alone run: the kernels' environment (benchmarks.numeric_policy) and whether in lanes.
ALONE_WAYS = {
    "native, one lane": ("native", False),
    "native, a lane per core": ("native", True),
    "policy, a lane per core": ("policy", True),
}
NATIVE_WAYS = tuple(way for way, (mode, _) in ALONE_WAYS.items() if mode == "native")
POLICY_WAYS = tuple(way for way in ALONE_WAYS if way not in NATIVE_WAYS)


def similarity_products(embeddings: str) -> dict[str, float]:
    """Seconds the similarity stage's products alone take on each set it reads: the exact backend's
    block pairs and blocks, a pair per thread on every core with one BLAS thread each, into a
    buffer per thread, and nothing else (no selection, merging, reading or writing).  Under the
    policy these products and the encoders are the work whose bytes the policy fixes."""
    import crisscross  # noqa: F401  (first: the policy, unless CRISSCROSS_NUMERICS=native)
    from crisscross.beam.similarity import BACKENDS
    from crisscross.core import numerics
    from crisscross.embed.sets import EmbeddingSet
    from crisscross.pipelines.similarity import spaces
    from crisscross.similarity.neighbours import prepare

    numerics.check("coco_scale's products alone")  # the kernels the similarity stage computes with
    largest = BACKENDS.create("exact").block
    return {
        space: products_seconds(prepare(EmbeddingSet.read(f"{embeddings}/{space}"), space).unit, largest) for space in spaces(embeddings)
    }


def products_seconds(unit: Any, largest: int) -> float:
    """Seconds every block pair's product of ``unit`` takes as the exact backend runs it (blocks of
    at most ``largest`` rows, :func:`crisscross.similarity.topk.choose_block`)."""
    import threading
    from concurrent.futures import ThreadPoolExecutor

    import numpy as np
    from threadpoolctl import threadpool_limits

    from crisscross.beam.common import default_threads
    from crisscross.similarity.topk import block_pairs, block_rows, choose_block, similarities

    n = len(unit)
    block, buffers = choose_block(n, largest), threading.local()

    def product(pair: tuple[int, int]) -> None:
        if not hasattr(buffers, "block"):
            buffers.block = np.empty(block * block, np.float32)
        similarities(unit, block_rows(pair[0], block, n), block_rows(pair[1], block, n), buffers.block)

    started = time.perf_counter()
    with threadpool_limits(1, user_api="blas"), ThreadPoolExecutor(default_threads(1)) as pool:
        for _ in pool.map(product, block_pairs(n, block)):
            pass
    return time.perf_counter() - started


def in_fresh_interpreter(mode: str, *args: str) -> Any:
    """This module run with ``args`` in a fresh interpreter under the kernels of ``mode``
    (:func:`benchmarks.numeric_policy.mode_env`): its last line of output, as JSON."""
    command = [sys.executable, "-m", "benchmarks.coco_scale", *args]
    done = subprocess.run(command, cwd=ROOT, env=mode_env(mode), check=True, capture_output=True, text=True)
    return json.loads(done.stdout.splitlines()[-1])


def spawn_encoders_alone(build: Path, params: Path, way: str) -> dict[str, float]:
    """:func:`encoders_alone` on ``build``'s captions one of the :data:`ALONE_WAYS`, in a fresh interpreter."""
    mode, lanes = ALONE_WAYS[way]
    batch = str(read_params(str(params))["embed"]["batch_size"])
    return in_fresh_interpreter(mode, "--encoders-alone", str(build / "items" / "captions.parquet"), batch, str(int(lanes)))


def timed_products_alone(build: Path, when: str) -> dict[str, Any]:
    """:func:`similarity_products` on ``build``'s embeddings under the policy, in a fresh interpreter, printed."""
    seconds = in_fresh_interpreter("policy", "--products-alone", str(build / "embeddings"))
    print(f"similarity's products alone, {when}: {', '.join(f'{space} {s:.1f} s' for space, s in seconds.items())}", flush=True)
    return {"when": when, "seconds": seconds}


def run_measured(command: list[str], log: Path, env: dict[str, str] | None = None) -> tuple[float, float, float]:
    """Wall seconds, peak resident MiB and CPU seconds (user + system) of ``command`` with all its
    descendants.  The CPU is the growth of this process's children's usage over the command: the
    command, and every worker process the command waited for (this process starts nothing else
    meanwhile)."""
    peak = 0
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    with log.open("w") as out:
        process = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT, cwd=ROOT, env=env)
        watched = psutil.Process(process.pid)
        done = threading.Event()

        def sample() -> None:
            nonlocal peak
            while not done.is_set():
                try:
                    tree = [watched, *watched.children(recursive=True)]
                    peak = max(peak, sum(p.memory_info().rss for p in tree if p.is_running()))
                except psutil.Error:
                    pass
                done.wait(0.1)

        sampler = threading.Thread(target=sample, daemon=True)
        sampler.start()
        code = process.wait()
        done.set()
        sampler.join()
    seconds = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    if code != 0:
        tail = "\n".join(log.read_text(errors="replace").splitlines()[-15:])
        raise SystemExit(f"{' '.join(command)} failed with exit {code}; the end of its output:\n{tail}")
    return seconds, peak / 2**20, cpu


def digests(build: Path) -> dict[str, str]:
    """sha256 of every output file but the timing reports, by path under ``build``."""
    return {
        str(p.relative_to(build)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(build.rglob("*"))
        if p.is_file() and p.name not in NOT_OUTPUT and not p.name.startswith(".")
    }


def counts(build: Path) -> dict[str, int]:
    """What the build made: images and captions kept, candidates drawn, task rows written."""
    import pyarrow.parquet as pq

    items = build / "items"
    return {
        "images": pq.read_metadata(items / "images.parquet").num_rows,
        "captions": pq.read_metadata(items / "captions.parquet").num_rows,
        "candidates": pq.read_metadata(build / "candidates" / "candidates.parquet").num_rows,
        "task_items": pq.read_metadata(build / "tasks" / "tasks.parquet").num_rows,
    }


def run(args: argparse.Namespace) -> None:
    n_images = QUICK_IMAGES if args.quick else None
    with tempfile.TemporaryDirectory(prefix="crisscross-scale-") as tmp:
        work = Path(tmp)
        source = work / "collection"
        replicate = [sys.executable, str(ROOT / "tools" / "replicate_coco.py"), "--out", str(source)]
        seconds, _, _ = run_measured(replicate + (["--images", str(n_images)] if n_images else []), work / "replicate.log")
        print(f"replicate_coco: {seconds:.0f}s", flush=True)
        params = work / "params.yaml"
        scale_params(params)
        rows: list[dict[str, Any]] = []
        sums: dict[int, dict[str, str]] = {}
        alone: list[dict[str, Any]] = []
        products: list[dict[str, Any]] = []
        for workers, flags in WORKER_FLAGS.items():
            build = work / f"build-{workers}w"
            for stage, command in stages(build, source / "captions.jsonl"):
                line = ["crisscross", *command, "--params", str(params), *flags]
                seconds, peak_mib, cpu = run_measured(line, work / f"{stage}-{workers}w.log")
                rows.append({"stage": stage, "workers": workers, "seconds": seconds, "peak_rss_mib": peak_mib, "cpu_seconds": cpu})
                print(f"{workers} worker(s) {stage:<10} {seconds:7.1f} s  cpu {cpu:7.1f} s  peak {peak_mib / 1024:5.2f} GB", flush=True)
                if (workers, stage) == (1, "ingest"):
                    alone += timed_encoders_alone(work / "build-1w", params, "before the builds' embed", list(ALONE_WAYS))
                if (workers, stage) == (1, "similarity"):
                    products.append(timed_products_alone(work / "build-1w", "after the one-worker similarity"))
            sums[workers] = digests(build)
        sizes = counts(work / "build-1w")
        pools = with_pyarrow_default_pool(work, source / "captions.jsonl", params)
        fastest = min(alone, key=lambda timing: sum(timing["seconds"].values()))["way"]
        alone += timed_encoders_alone(work / "build-1w", params, "after both builds", [fastest])
        products.append(timed_products_alone(work / "build-1w", "after both builds"))
    report(rows, sizes, sums, alone, products, pools, args.quick)


def with_pyarrow_default_pool(work: Path, source: Path, params: Path) -> dict[str, Any]:
    """:data:`POOL_STAGES` again on the one-worker build's inputs under pyarrow's default pool:
    their seconds and whether they wrote the one-worker build's bytes."""
    build, reference = work / "build-1w", work / f"build-1w-{PYARROW_DEFAULT_POOL}"
    reference.mkdir()
    env = {**os.environ, arrow_pool.CHOICE: PYARROW_DEFAULT_POOL}
    rows, outs = [], set()
    for stage, command in stages(reference, source):
        out = Path(command[command.index("--out") + 1])
        if stage not in POOL_STAGES:
            out.symlink_to(build / out.name, target_is_directory=True)
            continue
        outs.add(out.name)
        seconds, peak_mib, _ = run_measured(
            ["crisscross", *command, "--params", str(params)], work / f"{stage}-{PYARROW_DEFAULT_POOL}.log", env
        )
        rows.append({"stage": stage, "pool": PYARROW_DEFAULT_POOL, "seconds": seconds, "peak_rss_mib": peak_mib})
        print(f"1 worker, {PYARROW_DEFAULT_POOL}: {stage:<10} {seconds:7.1f} s  peak {peak_mib / 1024:5.2f} GB", flush=True)
    ours, theirs = digests(build), digests(reference)
    differing = sorted(k for k in ours.keys() | theirs.keys() if k.split("/")[0] in outs and ours.get(k) != theirs.get(k))
    return {"stages": rows, "differing_outputs": differing}


def timed_encoders_alone(build: Path, params: Path, when: str, ways: list[str]) -> list[dict[str, Any]]:
    """:func:`spawn_encoders_alone` each of ``ways``, printed.  The fastest way runs again after the
    builds, and each encoder's floor is its fastest time: a shared machine's speed drifts over half
    an hour (one run found the encoders 30% slower at its end than at its start), and the floor
    must not be a slow moment, nor a slow way: which way is fastest depends on the machine."""
    timings = []
    for way in ways:
        seconds = spawn_encoders_alone(build, params, way)
        print(f"encoders alone, {way}, {when}: {', '.join(f'{spec} {s:.1f} s' for spec, s in seconds.items())}", flush=True)
        timings.append({"way": way, "when": when, "seconds": seconds})
    return timings


def encoders_floor(alone: list[dict[str, Any]], ways: tuple[str, ...] = tuple(ALONE_WAYS)) -> float:
    """The sum over encoders of each one's fastest time among the ``alone`` timings of ``ways``."""
    timings = [timing for timing in alone if timing["way"] in ways]
    return sum(min(timing["seconds"][spec] for timing in timings) for spec in TEXT_ENCODERS)


def report(
    rows: list[dict[str, Any]],
    sizes: dict[str, int],
    sums: dict[int, dict[str, str]],
    alone: list[dict[str, Any]],
    products: list[dict[str, Any]],
    pools: dict[str, Any],
    quick: bool,
) -> None:
    one = {r["stage"]: r for r in rows if r["workers"] == 1}
    two = {r["stage"]: r for r in rows if r["workers"] == 2}
    encoding = encoders_floor(alone)
    print(
        f"\n{sizes['images']:,} images, {sizes['captions']:,} captions → {sizes['candidates']:,} candidates, {sizes['task_items']:,} task items"
    )
    print(f"{'stage':<11}{'1w s':>8}{'beyond':>8}{'1w cpu':>8}{'cores':>7}{'1w GB':>8}{'2w s':>8}{'2w GB':>8}{'2w/1w':>8}")
    for stage, r in one.items():
        t = two[stage]
        beyond = r["seconds"] - (encoding if stage == "embed" else 0)
        print(
            f"{stage:<11}{r['seconds']:8.1f}{beyond:8.1f}{r['cpu_seconds']:8.1f}{r['cpu_seconds'] / r['seconds']:7.2f}"
            f"{r['peak_rss_mib'] / 1024:8.2f}{t['seconds']:8.1f}{t['peak_rss_mib'] / 1024:8.2f}{t['seconds'] / r['seconds']:8.2f}"
        )
    total = {w: sum(r["seconds"] for r in rows if r["workers"] == w) for w in WORKER_FLAGS}
    cpu = {w: sum(r["cpu_seconds"] for r in rows if r["workers"] == w) for w in WORKER_FLAGS}
    peak = {w: max(r["peak_rss_mib"] for r in rows if r["workers"] == w) / 1024 for w in WORKER_FLAGS}
    print(
        f"{'build':<11}{total[1]:8.1f}{total[1] - encoding:8.1f}{cpu[1]:8.1f}{cpu[1] / total[1]:7.2f}"
        f"{peak[1]:8.2f}{total[2]:8.1f}{peak[2]:8.2f}{total[2] / total[1]:8.2f}"
    )
    print(
        f"one-worker build / the encoders alone ({encoding:.1f} s, each encoder's fastest of "
        f"{len(alone)} timings): {total[1] / encoding:.2f} (goal ≤ {ENCODERS_GOAL} at full size)"
    )
    native = encoders_floor(alone, NATIVE_WAYS)
    print(f"one-worker build / the encoders at native speed ({native:.1f} s, the faster native way of each): {total[1] / native:.2f}")
    policy = encoders_floor(alone, POLICY_WAYS)
    print(
        f"one-worker build / the encoders under the policy ({policy:.1f} s, the kernels the build computes with): "
        f"{total[1] / policy:.2f}; the policy's encoders / native: {policy / native:.2f}"
    )
    multiplied = sum(min(timing["seconds"][space] for timing in products) for space in products[0]["seconds"])
    fixed, budget = policy + multiplied, ENCODERS_GOAL * native
    print(
        f"the work whose bytes the policy fixes: the policy's encoders {policy:.1f} s + similarity's products {multiplied:.1f} s "
        f"(each set's fastest of {len(products)} timings) = {fixed:.1f} s, {fixed / native:.2f}× the encoders at native speed; "
        f"{ENCODERS_GOAL}× them is {budget:.1f} s, {budget - fixed:.1f} s for all the rest; one-worker build / this work: {total[1] / fixed:.2f}"
    )
    cores = os.cpu_count() or 1
    fewest = cpu[1] / (cores * total[1])
    print(
        f"two workers on {cores} cores: 2w / 1w ≥ the one-worker CPU over {cores} × its wall time = {fewest:.2f}, if their work is the same"
    )
    differing = sorted(k for k in sums[1].keys() | sums[2].keys() if sums[1].get(k) != sums[2].get(k))
    print(f"outputs of 1 and 2 workers: {len(sums[1])} files, {len(differing)} differ{': ' + ', '.join(differing) if differing else ''}")
    for r in pools["stages"]:
        ours = one[r["stage"]]["seconds"]
        print(
            f"{r['stage']} with {PYARROW_DEFAULT_POOL} (pyarrow's default pool): {r['seconds']:.1f} s; the project's pool takes {ours / r['seconds']:.2f}× that"
        )
    print(f"outputs under {PYARROW_DEFAULT_POOL}: {len(pools['differing_outputs'])} differ from the one-worker build's")
    path = save_result(
        "coco_scale",
        {
            "quick": quick,
            "cpu_count": os.cpu_count(),
            "sizes": sizes,
            "stages": rows,
            "total_seconds": total,
            "total_cpu_seconds": cpu,  # user + system of every stage command and its workers
            "peak_rss_gb": peak,
            "differing_outputs": differing,
            "encoders_alone": alone,  # each way before the builds' embed, the fastest again after both builds
            "encoders_floor_seconds": encoding,
            "build_over_encoders": total[1] / encoding,
            "encoders_native_seconds": native,  # the native ways' timings only: the encoders "at native speed"
            "build_over_native_encoders": total[1] / native,
            "encoders_policy_seconds": policy,  # the policy's way only: the kernels the build's embed uses
            "build_over_policy_encoders": total[1] / policy,
            "similarity_products_alone": products,  # after the one-worker similarity and after both builds, under the policy
            "policy_fixed_seconds": fixed,  # the policy's encoders + similarity's fastest products
            "policy_fixed_over_native_encoders": fixed / native,
            "build_over_policy_fixed": total[1] / fixed,
            "two_workers_fewest": fewest,  # 2w / 1w can go no lower on these cores with the same work
            "arrow_pool": arrow_pool.choose(),  # the backend the stages ran on (this process chose as they did)
            "pyarrow_default_pool": pools,  # POOL_STAGES again under mimalloc, after both builds
        },
    )
    print(f"→ {path}")
    if differing:
        raise SystemExit(f"the builds with 1 and 2 workers wrote different bytes: {', '.join(differing)}")
    if pools["differing_outputs"]:
        raise SystemExit(f"the stages under {PYARROW_DEFAULT_POOL} wrote different bytes: {', '.join(pools['differing_outputs'])}")


if __name__ == "__main__":
    if len(sys.argv) == 5 and sys.argv[1] == "--encoders-alone":
        print(json.dumps(encoders_alone(sys.argv[2], int(sys.argv[3]), bool(int(sys.argv[4])))), flush=True)
    elif len(sys.argv) == 3 and sys.argv[1] == "--products-alone":
        print(json.dumps(similarity_products(sys.argv[2])), flush=True)
