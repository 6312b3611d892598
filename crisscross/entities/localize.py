"""Phrase localization (§3.2): R@1, R@K at IoU ≥ 0.5 and AP per phrase type, from scored proposals.

**Proposals file** (JSON lines, one per mention): ``{"caption_id": str, "index": int, "boxes":
[[xmin, ymin, xmax, ymax, score], …]}`` with 0-based inclusive pixel corners (the release
reader's convention); a higher score is a better box.  Mentions without a line count as
missed.  Ground truth: one box per mention, the union of its chain's boxes (the paper merges a
phrase's several regions into one box, §3.1, and scores against "the ground truth bounding box",
§3.2); a mention of a chain without boxes is not evaluated.  A proposal is correct when its IoU
with that box is ≥ 0.5.

AP per type pools the type's proposals over all phrases, by decreasing score; a proposal is a
true positive when it matches its own phrase's box not matched before (so duplicates count as
false positives, as in detection); AP is the area under the interpolated precision–recall curve
(VOC, all points), over the type's phrases.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from crisscross.core.quarantine import Rejected, reject
from crisscross.core.rng import generator
from crisscross.core.settings import setting
from crisscross.entities.files import Box
from crisscross.entities.oracle import iou

ScoredBox = tuple[int, int, int, int, float]
HIT_IOU = 0.5


@dataclass(frozen=True)
class LocalizeSettings:
    """``params.yaml`` ``localize:``; ``proposals: simulate`` stands in for a model on the demo."""

    k: int = setting(10, low=1)  # R@K
    proposals: str = setting("simulate", choices=("simulate", "file"))  # file: --proposals PATH
    simulated: int = setting(10, low=1)  # simulate: proposals per mention (one near a true box, the rest random)
    simulated_jitter: float = setting(0.1, low=0.0, high=1.0)  # simulate: sd of the near proposal's corners / box size


@dataclass(frozen=True)
class Phrase:
    caption_id: str
    index: int
    kind: str
    truth: tuple[Box, ...]  # from a release: one box, the union of the chain's (:func:`image_phrases`)


def read_proposals(data: bytes, where: str) -> Iterator[tuple[tuple[str, int], list[ScoredBox]] | Rejected]:
    for number, line in enumerate(data.decode("utf-8", errors="replace").splitlines(), start=1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
            key = (str(row["caption_id"]), int(row["index"]))
            boxes = [(int(b[0]), int(b[1]), int(b[2]), int(b[3]), float(b[4])) for b in row["boxes"]]
        except (KeyError, TypeError, ValueError, IndexError, OverflowError, RecursionError) as error:  # ValueError: JSON, numbers
            yield reject("proposal", "", "malformed-proposals", f"{type(error).__name__}: {error}", f"{where}:{number}", line)
            continue
        yield key, boxes


def simulate_proposals(phrase: Phrase, size: tuple[int, int], settings: LocalizeSettings, seed: int) -> list[ScoredBox]:
    """A stand-in model: one proposal near the true box and random
    ones (scored lower on average), all seeded by the phrase."""
    rng = generator(seed, "entities-proposals", phrase.caption_id, str(phrase.index))
    width, height = size
    out: list[ScoredBox] = []
    if phrase.truth:
        x0, y0, x1, y1 = phrase.truth[0]
        shift = rng.normal(0.0, settings.simulated_jitter, 4) * np.array([x1 - x0 + 1, y1 - y0 + 1] * 2)
        a, b, c, d = (int(round(v + s)) for v, s in zip((x0, y0, x1, y1), shift, strict=True))
        a, c = sorted((min(max(a, 0), width - 1), min(max(c, 0), width - 1)))
        b, d = sorted((min(max(b, 0), height - 1), min(max(d, 0), height - 1)))
        out.append((a, b, c, d, float(rng.uniform(0.3, 1.0))))
    while len(out) < settings.simulated:
        w, h = int(rng.integers(1, width + 1)), int(rng.integers(1, height + 1))
        x, y = int(rng.integers(0, width - w + 1)), int(rng.integers(0, height - h + 1))
        out.append((x, y, x + w - 1, y + h - 1, float(rng.uniform(0.0, 0.7))))
    return out


def _ranked(boxes: Sequence[ScoredBox]) -> list[ScoredBox]:
    return sorted(boxes, key=lambda b: (-b[4], b[:4]))


def recall_hits(phrase: Phrase, boxes: Sequence[ScoredBox], k: int) -> tuple[bool, bool]:
    """Whether the top proposal, and any of the top ``k``, hits a true box."""
    ranked = _ranked(boxes)
    hits = [any(iou(b[:4], t) >= HIT_IOU for t in phrase.truth) for b in ranked[:k]]  # type: ignore[arg-type]
    return bool(hits and hits[0]), any(hits)


def average_precision(scored: Sequence[tuple[float, bool]], positives: int) -> float:
    """VOC all-point AP of (score, true positive) detections over ``positives`` true boxes."""
    if positives == 0:
        return 0.0
    order = sorted(scored, key=lambda s: -s[0])
    tp = np.cumsum([1.0 if hit else 0.0 for _, hit in order])
    fp = np.cumsum([0.0 if hit else 1.0 for _, hit in order])
    recall = np.concatenate([[0.0], tp / positives, [1.0]]) if len(order) else np.array([0.0, 1.0])
    precision = np.concatenate([[0.0], tp / np.maximum(tp + fp, 1e-12), [0.0]]) if len(order) else np.array([0.0, 0.0])
    precision = np.maximum.accumulate(precision[::-1])[::-1]
    changes = np.nonzero(recall[1:] != recall[:-1])[0]
    return float(np.sum((recall[changes + 1] - recall[changes]) * precision[changes + 1]))


def detections(phrase: Phrase, boxes: Sequence[ScoredBox]) -> list[tuple[float, bool]]:
    """The phrase's proposals as (score, true positive), each true box matched at most once."""
    matched: set[int] = set()
    out = []
    for b in _ranked(boxes):
        best = max(range(len(phrase.truth)), key=lambda i: iou(b[:4], phrase.truth[i]), default=None)  # type: ignore[arg-type]
        hit = best is not None and best not in matched and iou(b[:4], phrase.truth[best]) >= HIT_IOU  # type: ignore[arg-type]
        if hit:
            matched.add(best)  # type: ignore[arg-type]
        out.append((b[4], hit))
    return out


def evaluate(phrases: Sequence[Phrase], proposals: Mapping[tuple[str, int], Sequence[ScoredBox]], k: int) -> dict[str, dict[str, float]]:
    """Per type and ``overall``: instances, R@1, R@K (percent) and AP (percent); mean AP over types."""
    per: dict[str, dict[str, list]] = {}
    for phrase in phrases:
        boxes = proposals.get((phrase.caption_id, phrase.index), [])
        top1, topk = recall_hits(phrase, boxes, k)
        for kind in (phrase.kind, "overall"):
            entry = per.setdefault(kind, {"r1": [], "rk": [], "det": [], "pos": []})
            entry["r1"].append(top1)
            entry["rk"].append(topk)
            if kind != "overall":
                entry["det"].extend(detections(phrase, boxes))
                entry["pos"].append(len(phrase.truth))
    out: dict[str, dict[str, float]] = {}
    for kind, entry in sorted(per.items()):
        out[kind] = {
            "instances": len(entry["r1"]),
            "r_at_1": 100.0 * float(np.mean(entry["r1"])),
            f"r_at_{k}": 100.0 * float(np.mean(entry["rk"])),
        }
        if kind != "overall":
            out[kind]["ap"] = 100.0 * average_precision(entry["det"], sum(entry["pos"]))
    aps = [v["ap"] for key, v in out.items() if key != "overall"]
    if "overall" in out:
        out["overall"]["mean_ap"] = float(np.mean(aps)) if aps else 0.0
    return out


def union(boxes: Sequence[Box]) -> Box:
    """The smallest box holding all of ``boxes``."""
    return (min(b[0] for b in boxes), min(b[1] for b in boxes), max(b[2] for b in boxes), max(b[3] for b in boxes))


def image_phrases(
    chain_rows: Sequence[Mapping[str, Any]], box_rows: Sequence[Mapping[str, Any]], types: Mapping[tuple[str, int], str]
) -> list[Phrase]:
    """An image's evaluated phrases: every mention of a chain with boxes, its own category, the union of its chain's boxes."""
    boxes_of: dict[str, list[Box]] = {}
    for row in box_rows:
        for chain in str(row["chains"]).split("/"):
            boxes_of.setdefault(chain, []).append((int(row["xmin"]), int(row["ymin"]), int(row["xmax"]), int(row["ymax"])))
    phrases = []
    for row in chain_rows:
        boxes = boxes_of.get(str(row["chain"]), [])
        if boxes:
            key = (str(row["caption_id"]), int(row["index"]))
            phrases.append(Phrase(key[0], key[1], types.get(key, str(row["kind"])).split("/")[0], (union(boxes),)))
    return sorted(phrases, key=lambda p: (p.caption_id, p.index))
