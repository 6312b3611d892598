"""Rater QC and aggregation at CxC's scale: ``crisscross.aggregate.quality`` and ``crisscross.aggregate.aggregators``
against plain pandas.

CxC rated 267,095 pairs five times each: 1,335,475 judgments (``--quick``: 1/20 of that).  A
seeded generator synthesises such a round: items split evenly over STS, SIS and SITS, each type
rated by its own pool of CxC's size (170, 61 and 113 raters, CxC appendix A), five distinct
raters per item; one item in nine is gold (ECCV Caption's two per HIT of 18), half positive
(true score 4.8), half negative (0.3).  Raters: 5% answer at random in about 1.5 s, 3% always
give 2.5, the rest give ``truth + own offset (sd 0.4) + noise (sd 0.6)`` clipped to 0–5 in
about 17–37 s (CxC's times).  One judgment in a hundred has no time.

Timed steps, in pipeline order and in this process, each the best of ``ROUNDS`` calls:
``rater_report``, ``split_by_exclusion``, ``split_gold``, ``long_frame`` (the three rating
types), each rating aggregator, Krippendorff's alpha (interval), and majority vote and
Dawid–Skene on the same judgments as VERIFY answers (scores cut at 1.25, 2.5 and 3.75).  Peak
memory is ``tracemalloc``'s peak during one more, untimed call of the step (numpy and pandas
buffers included), beside the process's peak RSS at the end.

**The reference is pandas in the same run**, on the same long frame:
``df.groupby("task")["label"].mean()`` for the mean aggregator, and
``.agg(["count", "mean", "std"])`` for its ``scores_`` plus ``stats_``.  The benchmark fails
(after writing the JSON) if our numbers differ from pandas' by more than 1e-9.
"""

from __future__ import annotations

import argparse
import math
import os
import resource
import time
import tracemalloc
from collections.abc import Callable
from typing import Any

import numpy as np
import pandas as pd

from benchmarks import save_result
from crisscross.aggregate.aggregators import AGGREGATORS, long_frame
from crisscross.aggregate.agreement import krippendorff_alpha
from crisscross.aggregate.quality import rater_report, split_by_exclusion, split_gold
from crisscross.tasktypes.names import RATING_TYPES, VERIFY_ANSWERS

NAME = "aggregate_judgments"
SEED = 0
PAIRS = 267_095  # CxC's rated pairs
RATERS = 5
QUICK_DIVISOR = 20
POOLS = {"STS": 170, "SIS": 61, "SITS": 113}  # CxC appendix A: raters per task
GOLD_EVERY = 18  # one positive and one negative gold per 18 items (ECCV Caption's HITs)
SPAMMERS, STRAIGHTLINERS = 0.05, 0.03
ROUNDS = 3
RATING_AGGREGATORS = ("mean", "median", "trimmed-mean", "bias-calibrated-mean")
TOLERANCE = 1e-9


def synthesise(pairs: int, rng: np.random.Generator) -> tuple[pd.DataFrame, pd.DataFrame, dict[str, Any]]:
    """Judgments (the QC columns of the judgments table), the gold table, and the synthetic truth."""
    kind_index = np.arange(pairs) % len(POOLS)
    kinds = np.array(list(POOLS))[kind_index]
    item_ids = np.array([f"{k.lower()}:c{i}|c{i + 1}" for i, k in enumerate(kinds)], dtype=object)
    gold = np.full(pairs, "", dtype=object)
    gold[::GOLD_EVERY] = "positive"
    gold[GOLD_EVERY // 2 :: GOLD_EVERY] = "negative"
    truth = np.select([gold == "positive", gold == "negative"], [4.8, 0.3], 5 * rng.beta(2, 3, pairs))

    # Five distinct raters per item from its type's pool: increasing offsets below the pool size.
    pool = np.array(list(POOLS.values()))[kind_index]
    first_worker = np.cumsum([0, *POOLS.values()])[kind_index]
    step = rng.integers(1, (pool // RATERS)[:, None], (pairs, RATERS))
    local = (rng.integers(0, pool)[:, None] + np.cumsum(step, axis=1)) % pool[:, None]
    worker = (first_worker[:, None] + local).ravel()
    n_workers = sum(POOLS.values())
    behaviour = rng.choice(3, n_workers, p=[1 - SPAMMERS - STRAIGHTLINERS, SPAMMERS, STRAIGHTLINERS])
    offset = rng.normal(0, 0.4, n_workers)

    item = np.repeat(np.arange(pairs), RATERS)
    careful = np.clip(truth[item] + offset[worker] + rng.normal(0, 0.6, item.size), 0, 5)
    kind_of = behaviour[worker]
    score = np.select([kind_of == 1, kind_of == 2], [rng.uniform(0, 5, item.size), 2.5], careful)
    seconds = np.where(kind_of == 1, rng.gamma(4, 0.4, item.size), rng.lognormal(np.log(25), 0.4, item.size))
    seconds[rng.random(item.size) < 0.01] = np.nan
    names = np.array([f"{k.lower()}-w{w:03d}" for k in POOLS for w in range(POOLS[k])], dtype=object)
    judgments = pd.DataFrame(
        {
            "item_id": item_ids[item],
            "task_type": kinds[item],
            "worker": names[worker],
            "score": np.round(score, 2),
            "answer": None,
            "seconds": seconds,
        }
    )
    judgments = judgments.iloc[rng.permutation(len(judgments))].reset_index(drop=True)  # arrival order, not item order
    gold_table = pd.DataFrame({"item_id": item_ids, "gold": gold})
    planted = {"spammers": set(names[behaviour == 1]), "straightliners": set(names[behaviour == 2])}
    return judgments, gold_table, {"truth": pd.Series(truth, index=item_ids), "planted": planted, "workers": n_workers}


def measure(step: str, call: Callable[[], Any], rows: int, log: list[dict[str, Any]]) -> Any:
    """Best of ``ROUNDS`` timed calls, then one traced for its peak allocation; returns the result."""
    seconds = []
    for _ in range(ROUNDS):
        started = time.perf_counter()
        result = call()
        seconds.append(time.perf_counter() - started)
    tracemalloc.start()
    call()
    peak = tracemalloc.get_traced_memory()[1] / 2**20
    tracemalloc.stop()
    log.append(
        {"step": step, "rows_in": rows, "seconds": seconds, "best_s": min(seconds), "peak_mb": peak, "load_1min": os.getloadavg()[0]}
    )
    print(f"  {step}: best {min(seconds):.3f}s of {ROUNDS}, tracemalloc peak {peak:.0f} MB", flush=True)
    return result


def compare(ours: pd.Series | pd.DataFrame, pandas: pd.Series | pd.DataFrame, what: str) -> str:
    """'' when equal within TOLERANCE (NaN where pandas has NaN), else what differs."""
    if not ours.index.equals(pandas.index):
        return f"{what}: task index differs from pandas'"
    a, b = np.asarray(ours, dtype=np.float64), np.asarray(pandas, dtype=np.float64)
    if not np.array_equal(np.isnan(a), np.isnan(b)):
        return f"{what}: NaN in different places ({int(np.isnan(a).sum())} vs {int(np.isnan(b).sum())})"
    worst = float(np.nanmax(np.abs(a - b))) if a.size else 0.0
    return "" if worst <= TOLERANCE else f"{what}: differs from pandas by up to {worst:.3g} > {TOLERANCE:g}"


def run(args: argparse.Namespace) -> None:
    pairs = math.ceil(PAIRS / QUICK_DIVISOR) if args.quick else PAIRS
    rng = np.random.default_rng(SEED)
    started = time.perf_counter()
    judgments, gold, truth = synthesise(pairs, rng)
    print(
        f"  {len(judgments):,} judgments of {pairs:,} items by {truth['workers']} raters"
        f" ({len(truth['planted']['spammers'])} spammers, {len(truth['planted']['straightliners'])} straight-liners planted),"
        f" synthesised in {time.perf_counter() - started:.1f}s, {judgments.memory_usage(deep=True).sum() / 2**20:.0f} MB",
        flush=True,
    )
    log: list[dict[str, Any]] = []
    n = len(judgments)
    report = measure("rater_report", lambda: rater_report(judgments, gold), n, log)
    kept, dropped = measure("split_by_exclusion", lambda: split_by_exclusion(judgments, report), n, log)
    regular, _ = measure("split_gold", lambda: split_gold(kept, gold), len(kept), log)
    long = measure(
        "long_frame", lambda: pd.concat([long_frame(regular, kind) for kind in RATING_TYPES], ignore_index=True), len(regular), log
    )
    fitted = {name: measure(name, lambda name=name: AGGREGATORS.create(name).fit(long), len(long), log) for name in RATING_AGGREGATORS}
    pandas_mean = measure("pandas groupby mean", lambda: long.groupby("task")["label"].mean(), len(long), log)
    pandas_agg = measure(
        "pandas groupby count/mean/std", lambda: long.groupby("task")["label"].agg(["count", "mean", "std"]), len(long), log
    )
    alpha = measure("alpha interval", lambda: krippendorff_alpha(long, "interval"), len(long), log)
    answers = long.assign(
        label=np.asarray(VERIFY_ANSWERS[::-1], dtype=object)[np.minimum((long["label"].to_numpy() / 1.25).astype(int), 3)]
    )
    majority = measure("majority-vote", lambda: AGGREGATORS.create("majority-vote").fit(answers), len(answers), log)
    dawid_skene = measure("dawid-skene", lambda: AGGREGATORS.create("dawid-skene").fit(answers), len(answers), log)
    peak_rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024

    best = {row["step"]: row["best_s"] for row in log}
    ratios = {
        "mean_over_pandas_mean": best["mean"] / best["pandas groupby mean"],
        "mean_over_pandas_count_mean_std": best["mean"] / best["pandas groupby count/mean/std"],
    }
    mean = fitted["mean"]
    failures = [
        compare(mean.scores_, pandas_mean, "mean scores_"),
        compare(mean.stats_["n"], pandas_agg["count"], "stats_ n"),
        compare(mean.stats_["mean"], pandas_agg["mean"], "stats_ mean"),
        compare(mean.stats_["std"], pandas_agg["std"], "stats_ std"),
    ]
    failures = [f for f in failures if f]
    excluded = set(report.loc[report["excluded"], "worker"])
    planted = truth["planted"]["spammers"] | truth["planted"]["straightliners"]
    item_truth = truth["truth"].reindex(mean.scores_.index)
    qc = {
        "rows": len(report),
        "excluded": len(excluded),
        "planted_caught": len(planted & excluded),
        "planted": len(planted),
        "careful_excluded": len(excluded - planted),
        "judgments_dropped": len(dropped),
        "gold_judgments_removed": len(kept) - len(regular),
    }
    accuracy = {name: float(np.sqrt(np.mean((agg.scores_.to_numpy() - item_truth.to_numpy()) ** 2))) for name, agg in fitted.items()}
    print(table(log, best))
    print(
        f"ours/pandas: mean {ratios['mean_over_pandas_mean']:.2f} against groupby mean, "
        f"{ratios['mean_over_pandas_count_mean_std']:.2f} against groupby count/mean/std (ours computes both)"
    )
    print(
        f"QC: {qc['excluded']} of {qc['rows']} (worker, type) rows excluded; {qc['planted_caught']}/{qc['planted']} planted bad raters caught,"
        f" {qc['careful_excluded']} careful raters excluded; {qc['judgments_dropped']:,} judgments dropped, {qc['gold_judgments_removed']:,} gold judgments removed"
    )
    print("RMSE to the synthetic truth: " + ", ".join(f"{name} {value:.3f}" for name, value in accuracy.items()))
    print(
        f"alpha (interval) {alpha.value:.3f} over {alpha.units:,} units; bias-calibrated-mean {fitted['bias-calibrated-mean'].n_iter_} iterations;"
        f" dawid-skene {dawid_skene.n_iter_} iterations, {float((dawid_skene.labels_ == majority.labels_).mean()):.1%} same label as majority vote;"
        f" peak RSS {peak_rss:.0f} MB"
    )
    path = save_result(
        NAME,
        {
            "quick": args.quick,
            "seed": SEED,
            "cpus": os.cpu_count(),
            "pairs": pairs,
            "judgments": n,
            "raters": truth["workers"],
            "rounds": ROUNDS,
            "rows": log,
            "ratios": ratios,
            "qc": qc,
            "rmse_to_truth": accuracy,
            "alpha_interval": alpha.value,
            "bias_calibrated_iterations": fitted["bias-calibrated-mean"].n_iter_,
            "dawid_skene_iterations": dawid_skene.n_iter_,
            "peak_rss_mb": peak_rss,
            "pandas_agreement_failures": failures,
        },
    )
    print(f"written to {path}")
    if failures:
        raise RuntimeError("CHECK FAILED, ours and pandas disagree: " + "; ".join(failures))
    print(f"check: mean scores_ and stats_ (n, mean, std) equal pandas' within {TOLERANCE:g}")


def table(log: list[dict[str, Any]], best: dict[str, float]) -> str:
    header = ("step", "rows in", "best s", "Mrows/s", "peak MB", "vs pandas mean")
    lines = [
        (
            row["step"],
            f"{row['rows_in']:,}",
            f"{row['best_s']:.3f}",
            f"{row['rows_in'] / row['best_s'] / 1e6:.1f}",
            f"{row['peak_mb']:.0f}",
            f"{row['best_s'] / best['pandas groupby mean']:.2f}",
        )
        for row in log
    ]
    widths = [max(len(cells[i]) for cells in (header, *lines)) for i in range(len(header))]
    return "\n".join("  ".join(cell.rjust(width) for cell, width in zip(cells, widths, strict=True)) for cells in (header, *lines))
