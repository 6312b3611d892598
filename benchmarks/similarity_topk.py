"""Exact top-K cosine neighbours: ``crisscross.similarity.topk.exact_topk`` against plain numpy and faiss.

Every row of N seeded unit vectors (float32, d = 512) gets its K = 25 best other rows, by:

* ``ours``: :func:`crisscross.similarity.topk.exact_topk` — upper-triangle block pairs only (the
  matrix is symmetric), diagonal pairs first, one compiled numba pass per block selecting for its
  rows and columns against thresholds carried from the blocks already merged;
* ``numpy``: row blocks of 2,048 times ``unit.T``, self set to -inf, ``argpartition`` then a sort
  of the K — the obvious implementation, never an N×N matrix;
* ``faiss``: ``IndexFlatIP`` (brute force, its own BLAS calls and heaps), K + 1 searched, self dropped.

Each (N, method) measurement runs in a fresh process, so its peak RSS is its own, and warms up
(numba's cache load, BLAS/OpenMP thread start) on a small input before the timed call.  A worker
imports only its method's library (numba or faiss).  Methods are interleaved round by round and
the best round is kept, since the machine is shared.

The reference for GFLOP/s is the machine's float32 GEMM peak through numpy's BLAS with its native
kernels on every core, measured in the same run (``ours`` runs under the numeric policy, as the
stage does; numpy and faiss as their users get them, natively); "dense" counts the 2·N²·d of the full product for every method, "actual" counts
what ``ours`` multiplies (the upper-triangle blocks, ≈ N²·d).  The goal ``ours`` is held to is
``ACTUAL_GOAL``: that share of the GEMM peak on the work it multiplies, printed after the table.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import resource
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

from benchmarks import save_result
from benchmarks.numeric_policy import mode_env

NAME = "similarity_topk"
PROJECT = Path(__file__).resolve().parents[1]
K = 25
DIM = 512
SEED = 0
SIZES = (5_000, 25_000, 123_287)  # 123,287: all COCO images
QUICK_SIZES = (5_000, 25_000)
# Best-of rounds per size; the largest size runs once (numpy and faiss take minutes there).
ROUNDS = {5_000: 5, 25_000: 2}
OURS_BLOCK = 4096
NUMPY_BLOCK = 2048
WARM_UP_ROWS = 512
METHODS = ("ours", "numpy", "faiss")
OTHERS = ("numpy", "faiss")  # the references ours is compared with
GEMM_SHAPES = ((4096, 512, 8192), (4096, 4096, 4096))  # (m, k, n): d = 512 as here, and a square one
GEMM_REPEATS = 4
AGREEMENT_FLOOR = 0.9999
ACTUAL_GOAL = 60.0  # % of the GEMM peak ours should reach on the work it multiplies


def unit_vectors(n: int) -> np.ndarray:
    """The same N unit rows in every worker (seeded), so the methods' results can be compared."""
    vectors = np.random.default_rng(SEED).standard_normal((n, DIM), dtype=np.float32)
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    return vectors


def topk_ours(unit: np.ndarray, k: int, block: int = OURS_BLOCK) -> np.ndarray:
    """The library's exact top-K (imported here: only this method's workers pay for numba)."""
    from crisscross.core import numerics
    from crisscross.similarity.topk import exact_topk

    numerics.check("similarity_topk's ours")  # the kernels the similarity stage computes with
    return exact_topk(unit, k, block)[0]


def topk_numpy(unit: np.ndarray, k: int) -> np.ndarray:
    """What one writes without the library: full row blocks, ``argpartition`` (one thread), sort the K."""
    out = np.empty((len(unit), k), np.int64)
    for start in range(0, len(unit), NUMPY_BLOCK):
        similarity = unit[start : start + NUMPY_BLOCK] @ unit.T
        rows = np.arange(len(similarity))
        similarity[rows, start + rows] = -np.inf
        best = np.argpartition(similarity, -k, axis=1)[:, -k:]
        order = np.argsort(-np.take_along_axis(similarity, best, axis=1), axis=1)
        out[start : start + len(similarity)] = np.take_along_axis(best, order, axis=1)
    return out


def topk_faiss(unit: np.ndarray, k: int) -> np.ndarray:
    """The usual library for this: exact inner-product search, its own BLAS blocks and heaps."""
    import faiss

    index = faiss.IndexFlatIP(unit.shape[1])
    index.add(unit)
    _, found = index.search(unit, k + 1)
    # Self is normally first, but a tie at 1.0 could put it anywhere: move it last, keep the order.
    self_last = np.argsort(found == np.arange(len(unit))[:, None], axis=1, kind="stable")
    return np.take_along_axis(found, self_last[:, :k], axis=1)


TOPK: dict[str, Callable[[np.ndarray, int], np.ndarray]] = {"ours": topk_ours, "numpy": topk_numpy, "faiss": topk_faiss}


def peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KiB on Linux


def measure_topk(method: str, n: int, save: Path | None) -> dict[str, float]:
    """One timed top-K in this (fresh) process; indices saved for the agreement check, untimed."""
    unit = unit_vectors(n)
    if method == "ours":
        # Two blocks, so the selection pass (diagonal and off-diagonal) and the merge are loaded before timing.
        topk_ours(unit[:WARM_UP_ROWS], K, WARM_UP_ROWS // 2)
    else:
        TOPK[method](unit[:WARM_UP_ROWS], K)
    setup_rss = peak_rss_mb()
    started = time.perf_counter()
    indices = TOPK[method](unit, K)
    seconds = time.perf_counter() - started
    peak_rss = peak_rss_mb()
    if indices.shape != (n, K):
        raise RuntimeError(f"{method}: indices of shape {indices.shape}, expected {(n, K)}")
    if save is not None:
        np.save(save, indices)
    return {"seconds": seconds, "setup_rss_mb": setup_rss, "peak_rss_mb": peak_rss}


def measure_gemm() -> dict[str, float]:
    """Best float32 GFLOP/s of each GEMM shape, numpy's BLAS on all cores."""
    rng = np.random.default_rng(SEED)
    rates = {}
    for m, inner, n in GEMM_SHAPES:
        a = rng.standard_normal((m, inner), dtype=np.float32)
        b = rng.standard_normal((inner, n), dtype=np.float32)
        a @ b  # thread start-up
        best = math.inf
        for _ in range(GEMM_REPEATS):
            started = time.perf_counter()
            a @ b
            best = min(best, time.perf_counter() - started)
        rates[f"{m}x{inner}x{n}"] = 2 * m * inner * n / best / 1e9
    return rates


def worker(argv: list[str]) -> None:
    """``--worker METHOD --n N [--save PATH]`` or ``--worker gemm``: print one JSON line."""
    parser = argparse.ArgumentParser()
    parser.add_argument("--worker", choices=(*METHODS, "gemm"), required=True)
    parser.add_argument("--n", type=int)
    parser.add_argument("--save", type=Path)
    args = parser.parse_args(argv)
    result = measure_gemm() if args.worker == "gemm" else measure_topk(args.worker, args.n, args.save)
    print(json.dumps(result), flush=True)


def spawn(worker: str, *args: str) -> dict[str, float]:
    """Run a worker in a fresh interpreter; its last stdout line is its JSON result.  ``ours`` runs
    under the numeric policy, as the similarity stage does; the GEMM peak, numpy and faiss with
    each library's own choices (native kernels, every core), as their users get them."""
    env = mode_env("policy" if worker == "ours" else "native")
    done = subprocess.run(
        [sys.executable, "-m", f"benchmarks.{NAME}", "--worker", worker, *args],
        cwd=PROJECT,
        env=env,
        check=True,
        capture_output=True,
        text=True,
    )
    return json.loads(done.stdout.splitlines()[-1])


def ours_flops(n: int) -> int:
    """What ``exact_topk`` multiplies: 2·d·|block i|·|block j| over the upper-triangle pairs."""
    from crisscross.similarity.topk import block_pairs, choose_block

    block = choose_block(n, OURS_BLOCK)

    def size(i: int) -> int:
        return min(block, n - i * block)

    return sum(2 * DIM * size(i) * size(j) for i, j in block_pairs(n, block))


def agreement(a: np.ndarray, b: np.ndarray) -> float:
    """Fraction of (row, neighbour) entries of ``a`` also in the same row of ``b`` (set agreement)."""
    rows = np.arange(len(a), dtype=np.int64)[:, None] * len(a)
    return float(np.isin(rows + a, rows + b).mean())


def run(args: argparse.Namespace) -> None:
    sizes = QUICK_SIZES if args.quick else SIZES
    gemm = [spawn("gemm")]
    print("  GEMM GFLOP/s: " + ", ".join(f"{shape} {rate:.0f}" for shape, rate in gemm[0].items()), flush=True)
    runs, agree = measure_all(sizes)
    gemm.append(spawn("gemm"))  # again at the end: the load on a shared machine drifts
    peak = max(rate for rates in gemm for rate in rates.values())
    rows = [summarise(n, method, runs[n, method], peak) for n in sizes for method in METHODS]
    best = {(row["n"], row["method"]): row["best_s"] for row in rows}
    ratios = [
        {
            "n": n,
            **{f"ours_over_{other}": best[n, "ours"] / best[n, other] for other in OTHERS},
            **{f"agreement_ours_{other}": agree[n][other] for other in OTHERS},
        }
        for n in sizes
    ]
    small, large = sizes[-2:]
    growth = {method: math.log(best[large, method] / best[small, method]) / math.log(large / small) for method in METHODS}
    print(
        f"GEMM peak (best of {GEMM_REPEATS}, start and end of run): {peak:.0f} GFLOP/s; "
        + "; ".join(", ".join(f"{s} {v:.0f}" for s, v in rates.items()) for rates in gemm)
    )
    print(table(rows, ratios))
    print(f"time ~ N^p from N={small} to N={large}: " + ", ".join(f"{method} p={p:.2f}" for method, p in growth.items()))
    ours_pct = {row["n"]: row["actual_pct_peak"] for row in rows if row["method"] == "ours"}
    print(
        f"ours on the work it multiplies, % of the GEMM peak (goal >= {ACTUAL_GOAL:g}%): "
        + ", ".join(f"N={n} {pct:.0f}%" for n, pct in ours_pct.items())
    )
    path = save_result(
        NAME,
        {
            "quick": args.quick,
            "k": K,
            "dim": DIM,
            "seed": SEED,
            "cpus": os.cpu_count(),
            "blocks": {"ours": OURS_BLOCK, "numpy": NUMPY_BLOCK},
            "gemm_gflops": gemm,
            "gemm_peak_gflops": peak,
            "rows": rows,
            "ratios": ratios,
            "growth_exponent": {"from_n": small, "to_n": large, **growth},
            "actual_goal_pct_peak": ACTUAL_GOAL,
        },
    )
    print(f"written to {path}")
    low = [(n, other) for n in sizes for other in OTHERS if agree[n][other] < AGREEMENT_FLOOR]
    if low:
        raise RuntimeError(f"neighbour sets of ours disagree beyond {1 - AGREEMENT_FLOOR:.2%} with: {low}")


def measure_all(sizes: tuple[int, ...]) -> tuple[dict[tuple[int, str], list[dict[str, float]]], dict[int, dict[str, float]]]:
    """Every (N, method) round in its own worker, methods interleaved; then the untimed agreement check."""
    runs: dict[tuple[int, str], list[dict[str, float]]] = {}
    agree: dict[int, dict[str, float]] = {}
    with tempfile.TemporaryDirectory(prefix="crisscross-topk-") as tmp:
        for n in sizes:
            rounds = ROUNDS.get(n, 1)
            for r in range(rounds):
                for method in METHODS[r % len(METHODS) :] + METHODS[: r % len(METHODS)]:
                    save = ["--save", str(Path(tmp) / f"{method}.npy")] if r == 0 else []
                    # Other jobs' load shows up in the timings; logged so a drifting run can be spotted.
                    result = {"load_1min": os.getloadavg()[0], **spawn(method, "--n", str(n), *save)}
                    runs.setdefault((n, method), []).append(result)
                    print(
                        f"  N={n} {method} round {r + 1}/{rounds}: {result['seconds']:.2f}s, peak RSS {result['peak_rss_mb']:.0f} MB,"
                        f" load before {result['load_1min']:.1f}",
                        flush=True,
                    )
            found = {method: np.load(Path(tmp) / f"{method}.npy") for method in METHODS}
            agree[n] = {other: agreement(found["ours"], found[other]) for other in OTHERS}
    return runs, agree


def summarise(n: int, method: str, results: list[dict[str, float]], peak: float) -> dict[str, object]:
    seconds = [result["seconds"] for result in results]
    best = min(seconds)
    dense = 2 * n * n * DIM / best / 1e9
    actual = (ours_flops(n) if method == "ours" else 2 * n * n * DIM) / best / 1e9
    return {
        "n": n,
        "method": method,
        "seconds": seconds,
        "load_1min": [result["load_1min"] for result in results],
        "best_s": best,
        "dense_gflops": dense,
        "dense_pct_peak": 100 * dense / peak,
        "actual_gflops": actual,
        "actual_pct_peak": 100 * actual / peak,
        "setup_rss_mb": max(result["setup_rss_mb"] for result in results),
        "peak_rss_mb": max(result["peak_rss_mb"] for result in results),
    }


def table(rows: list[dict[str, object]], ratios: list[dict[str, float]]) -> str:
    by_n = {ratio["n"]: ratio for ratio in ratios}
    header = (
        "N",
        "method",
        "runs",
        "best s",
        "dense GF/s",
        "dense %pk",
        "actual GF/s",
        "actual %pk",
        "peak RSS MB",
        "+timed MB",
        "ours/this",
        "agree",
    )
    lines = []
    for row in rows:
        n, method = row["n"], row["method"]
        ratio = by_n[n]
        lines.append(
            (
                f"{n}",
                method,
                f"{len(row['seconds'])}",
                f"{row['best_s']:.2f}",
                f"{row['dense_gflops']:.1f}",
                f"{row['dense_pct_peak']:.0f}",
                f"{row['actual_gflops']:.1f}",
                f"{row['actual_pct_peak']:.0f}",
                f"{row['peak_rss_mb']:.0f}",
                f"{row['peak_rss_mb'] - row['setup_rss_mb']:.0f}",
                "" if method == "ours" else f"{ratio[f'ours_over_{method}']:.2f}",
                "" if method == "ours" else f"{100 * ratio[f'agreement_ours_{method}']:.4f}%",
            )
        )
    widths = [max(len(cells[i]) for cells in (header, *lines)) for i in range(len(header))]
    return "\n".join("  ".join(cell.rjust(width) for cell, width in zip(cells, widths, strict=True)) for cells in (header, *lines))


if __name__ == "__main__":
    worker(sys.argv[1:])
