"""How much the machine annotators agree (ECCV Caption §3.1): overlap of their top-K lists, Kendall's
tau-b of their rankings, the ranks each gives the other's top-1; and how many of a reference's
positives the candidates cover.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np

from crisscross.candidates.machine import Pair, QueryLists, pair_key
from crisscross.core import io
from crisscross.formats.eccv import DIRECTIONS


def diversity_report(lists: Sequence[QueryLists], top_k: int) -> dict[str, Any]:
    """Per direction: for each annotator pair, mean τ-b over the union of their top lists, the
    mean rank one gives the other's top-1, the overlap of their top-K; per annotator, how it
    ranks the original pairs (leave-one-out for text proxies), R@1 / R@5 of the best original."""
    out: dict[str, Any] = {}
    for direction in DIRECTIONS:
        entries = [e for e in lists if e.direction == direction]
        if not entries:
            continue
        names = sorted(entries[0].top)
        pairs = []
        for i, a in enumerate(names):
            for b in names[i + 1 :]:
                taus = np.asarray([e.tau[pair_key(a, b)] for e in entries], dtype=np.float64)
                own_a = np.asarray([e.tau[pair_key(a, b) + "|own"] for e in entries], dtype=np.float64)
                own_b = np.asarray([e.tau[pair_key(b, a) + "|own"] for e in entries], dtype=np.float64)
                overlap = [len(set(e.top[a][:top_k]) & set(e.top[b][:top_k])) / top_k for e in entries]
                ab = np.asarray([e.top1_rank[pair_key(a, b)] for e in entries], dtype=np.float64)
                ba = np.asarray([e.top1_rank[pair_key(b, a)] for e in entries], dtype=np.float64)
                pairs.append(
                    {
                        "a": a,
                        "b": b,
                        "queries": len(entries),
                        "kendall_tau_b": _nanmean(taus),
                        "tau_undefined_queries": int((~np.isfinite(taus)).sum()),
                        "kendall_tau_b_on_a_list": _nanmean(own_a),
                        "kendall_tau_b_on_b_list": _nanmean(own_b),
                        "mean_rank_by_b_of_a_top1": float(ab.mean()),
                        "median_rank_by_b_of_a_top1": float(np.median(ab)),
                        "mean_rank_by_a_of_b_top1": float(ba.mean()),
                        "median_rank_by_a_of_b_top1": float(np.median(ba)),
                        f"top{top_k}_overlap": float(np.mean(overlap)),
                        "top1_agree": float(np.mean([e.top[a][:1] == e.top[b][:1] for e in entries])),
                    }
                )
        annotators = {}
        for a in names:
            ranks = np.asarray([e.original_rank[a] for e in entries if e.original_rank[a] > 0], dtype=np.float64)
            annotators[a] = {
                "queries": len(ranks),
                "original_R@1": float((ranks <= 1).mean()) if ranks.size else float("nan"),
                "original_R@5": float((ranks <= 5).mean()) if ranks.size else float("nan"),
                "original_median_rank": float(np.median(ranks)) if ranks.size else float("nan"),
            }
        out[direction] = {"pairs": pairs, "annotators": annotators}
    return io.strict_json(out)


def _nanmean(values: np.ndarray) -> float:
    return float(np.nanmean(values)) if np.isfinite(values).any() else float("nan")


def coverage_of(reference: Iterable[Pair], candidates: Iterable[Pair], originals: Iterable[Pair]) -> dict[str, float]:
    """Recall of ``reference``'s non-original positives among the candidates, and precision of the
    candidates (the share that are reference positives)."""
    reference, candidates, originals = set(reference), set(candidates), set(originals)
    new = reference - originals
    hit = len(new & candidates)
    return {
        "reference_new_positives": float(len(new)),
        "candidates": float(len(candidates)),
        "found": float(hit),
        "recall": hit / len(new) if new else float("nan"),
        "precision": hit / len(candidates) if candidates else float("nan"),
    }
