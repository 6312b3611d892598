"""Adaptive replication against CxC's fixed five raters per pair, with a panel calibrated to CxC.

**The panel.** One rater's spread ``sd`` comes from the real release: CxC's test SIS file lists
2,863 pairs twice, each time the mean of five raters, and two such means differ with variance
``2 sd² / 5`` (:func:`crisscross.campaign.replication.rater_sd_from_repeats`; the release has no
repeats for STS and SITS, so the same ``sd`` serves all three types).  Each pair's true mean is its
real ``agg_score`` stretched about the type's mean by ``lambda``, found by bisection so that the
panel's five-rater means (``clip(mean + sd · N(0, 1), 0, 5)`` per rater) have the spread of the
real ``agg_score`` of that type: the table shows both standard deviations.

**The reference, measured in the same run, is the fixed design**: five judgments for every pair.
``saved`` is the share of its judgments the stop rule (``replication`` defaults: the sequential
``threshold`` rule from two judgments, ``alpha`` 0.1; rows for 0.05 and 0.2 too) does not ask for;
``keep`` the share of pairs whose label (mean ≥ threshold) is the one all five give; ``rho`` the
Spearman correlation of the adaptive means with the five-rater means; ``rho 5|5`` the same between
two independent five-rater panels, the design's own test–retest; ``wrong side`` the share of the pairs
stopped early whose label is not their true mean's.  The rule bounds each pair's chance of
stopping on the wrong side by ``alpha``; this share, among stopped pairs only, is a check beside it.
``--quick``: 5,000 pairs per type.
"""

from __future__ import annotations

import argparse
import time
from typing import TYPE_CHECKING, Any

from benchmarks import save_result
from benchmarks.machine_triage import SHARED_DATA
from crisscross.annotate.providers import load_cxc_release
from crisscross.campaign.replication import THRESHOLD, ReplicationSettings, rater_sd_from_repeats, replication_decisions
from crisscross.tasktypes.base import SCORE_MAX, SCORE_MIN
from crisscross.tasktypes.names import POSITIVE_THRESHOLDS, RATING_TYPES, SIS

if TYPE_CHECKING:
    import numpy as np
    import pandas as pd

NAME = "adaptive_replication"
REPLICAS = 5
ALPHAS = (0.05, 0.1, 0.2)
SEED = 0


def run(args: argparse.Namespace) -> None:
    import numpy as np  # after crisscross: the numeric policy is set before numpy loads

    release = load_cxc_release(SHARED_DATA / "cxc", "test")
    judgments = release.judgments.to_pandas()
    sis = judgments[judgments["task_type"] == SIS]
    rater_sd = rater_sd_from_repeats(sis[["item_id", "score"]], REPLICAS)
    print(f"  one rater's sd from {int((sis.groupby('item_id').size() == 2).sum()):,} SIS pairs published twice: {rater_sd:.3f}")
    scores = judgments.groupby(["task_type", "item_id"])["score"].mean()
    rng = np.random.default_rng(SEED)
    rows, pooled = [], {alpha: [] for alpha in ALPHAS}
    for kind in RATING_TYPES:
        real = scores[kind].to_numpy(np.float64)
        if args.quick:
            real = rng.choice(real, size=5000, replace=False)
        true_mean, stretch = calibrated_means(real, rater_sd, rng)
        panel = simulate(true_mean, rater_sd, rng)
        retest = simulate(true_mean, rater_sd, rng).mean(axis=1)
        for alpha in ALPHAS:
            settings = ReplicationSettings(rule=THRESHOLD, alpha=alpha, rater_sd={kind: rater_sd})
            started = time.perf_counter()
            decisions = replication_decisions(long_frame(kind, panel), REPLICAS, settings)
            seconds = time.perf_counter() - started
            measured = measure(kind, real, true_mean, panel, retest, decisions, alpha)
            rows.append({**measured, "stretch": stretch, "decide_s": round(seconds, 2)})
            pooled[alpha].append((kind, true_mean, panel, retest, decisions))
    for alpha in ALPHAS:
        rows.append(pooled_row(pooled[alpha], alpha))
    print(table(rows))
    path = save_result(NAME, {"quick": args.quick, "rater_sd": rater_sd, "replicas": REPLICAS, "seed": SEED, "rows": rows})
    print(f"written to {path}")


def simulate(true_mean: np.ndarray, rater_sd: float, rng: np.random.Generator) -> np.ndarray:
    """Five judgments per pair, in arrival order."""
    import numpy as np

    return np.clip(true_mean[:, None] + rater_sd * rng.standard_normal((len(true_mean), REPLICAS)), SCORE_MIN, SCORE_MAX)


def calibrated_means(real: np.ndarray, rater_sd: float, rng: np.random.Generator) -> tuple[np.ndarray, float]:
    """True means whose five-rater means have the spread of ``real``: ``real`` stretched about its mean."""
    import numpy as np

    noise = rater_sd * rng.standard_normal((len(real), REPLICAS))
    low, high = 0.5, 2.0
    for _ in range(40):
        stretch = (low + high) / 2
        means = np.clip(real.mean() + stretch * (real - real.mean())[:, None] + noise, SCORE_MIN, SCORE_MAX).mean(axis=1)
        low, high = (stretch, high) if means.std() < real.std() else (low, stretch)
    return real.mean() + stretch * (real - real.mean()), stretch


def long_frame(kind: str, panel: np.ndarray) -> pd.DataFrame:
    import numpy as np
    import pandas as pd

    n = len(panel)
    return pd.DataFrame({"item_id": np.repeat([f"{kind}:{i:06d}" for i in range(n)], REPLICAS), "task_type": kind, "score": panel.ravel()})


def measure(kind: str, real, true_mean, panel, retest, decisions, alpha: float) -> dict[str, Any]:
    from scipy.stats import spearmanr

    threshold = POSITIVE_THRESHOLDS[kind]
    full = panel.mean(axis=1)
    adaptive = decisions["mean"].to_numpy()
    used = decisions["used"].to_numpy()
    stopped = decisions["stopped"].to_numpy()
    wrong = ((adaptive >= threshold) != (true_mean >= threshold)) & stopped
    return {
        "type": kind,
        "alpha": alpha,
        "pairs": len(full),
        "real_sd": float(real.std()),
        "panel_sd": float(full.std()),
        "judgments": int(used.sum()),
        "fixed": REPLICAS * len(full),
        "saved": 1 - used.sum() / (REPLICAS * len(full)),
        "keep": float(((adaptive >= threshold) == (full >= threshold)).mean()),
        "rho": float(spearmanr(adaptive, full)[0]),
        "rho_retest": float(spearmanr(full, retest)[0]),
        "wrong_side": float(wrong.sum() / max(stopped.sum(), 1)),
        "used": {str(n): int((used == n).sum()) for n in range(1, REPLICAS + 1)},
    }


def pooled_row(parts: list, alpha: float) -> dict[str, Any]:
    import numpy as np
    from scipy.stats import spearmanr

    full = np.concatenate([p[2].mean(axis=1) for p in parts])
    retest = np.concatenate([p[3] for p in parts])
    adaptive = np.concatenate([p[4]["mean"].to_numpy() for p in parts])
    used = np.concatenate([p[4]["used"].to_numpy() for p in parts])
    keep = np.concatenate(
        [(p[4]["mean"].to_numpy() >= POSITIVE_THRESHOLDS[p[0]]) == (p[2].mean(axis=1) >= POSITIVE_THRESHOLDS[p[0]]) for p in parts]
    )
    return {
        "type": "all",
        "alpha": alpha,
        "pairs": len(full),
        "judgments": int(used.sum()),
        "fixed": REPLICAS * len(full),
        "saved": 1 - used.sum() / (REPLICAS * len(full)),
        "keep": float(keep.mean()),
        "rho": float(spearmanr(adaptive, full)[0]),
        "rho_retest": float(spearmanr(full, retest)[0]),
    }


def table(rows: list[dict[str, Any]]) -> str:
    lines = [
        "| type | alpha | pairs | sd real / panel | judgments / fixed design | saved | keep | rho | rho 5\\|5 | wrong side |",
        "|" + "---|" * 10,
    ]
    for r in rows:
        sd = f"{r['real_sd']:.3f} / {r['panel_sd']:.3f}" if "real_sd" in r else "–"
        wrong = f"{r['wrong_side']:.2%}" if "wrong_side" in r else "–"
        lines.append(
            f"| {r['type']} | {r['alpha']:g} | {r['pairs']:,} | {sd} | {r['judgments']:,} / {r['fixed']:,} | {r['saved']:.1%} "
            f"| {r['keep']:.2%} | {r['rho']:.4f} | {r['rho_retest']:.4f} | {wrong} |"
        )
    return "\n".join(lines)
