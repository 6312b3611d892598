"""Score a model against a ground truth: retrieval, graded-similarity correlation, PMRP, BISON.

Models and galleries are :mod:`crisscross.scoring.models`'s.

Protocols: ``all`` ranks each query against the whole gallery (the COCO 5K protocol on the
Karpathy test split); ``folds`` splits the images, in source order, into ``n`` consecutive folds
with their captions, scores each fold on its own and averages the fold values (COCO 1K: five
folds of 1,000 images; fold sizes differ by at most one image when ``n`` does not divide them).

Guards (the mistakes published evaluation code makes): a model that cannot score every query and
gallery item of a task is refused with :class:`~crisscross.scoring.models.CoverageError`, never *silently* scored on a
shrunken gallery; a score matrix is checked against its id lists, so a transposed matrix is an
error; queries without a positive are counted and left out; positives pointing outside the
gallery are counted (``missing_positives``); rated pairs outside the gallery are counted
(``pairs_outside_gallery``).

Gallery rule (per model, ``evaluate.models.<name>.gallery``, :data:`GALLERY_RULES`): ``full``
refuses a model that lacks a vector for any gallery item a runnable task needs; ``covered``
evaluates it on the sub-gallery it covers — the images it has vectors for and their captions
(i2i: those images only) — and names that sub-gallery beside its figures ("covered: 370 of
5,000 images"); its captions must still all be covered.  ``auto`` (the default) is ``covered``
for a model with image vectors only (an image encoder has no vector for an image without pixels,
and its only tasks, i2i and SIS, stay meaningful on the images it saw) and ``full`` for every
model with caption vectors: a text or image–text model missing part of the gallery is refused,
because its figures would be read beside full-gallery ones.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa

from crisscross.core.ids import CAPTION_KIND, IMAGE_KIND
from crisscross.core.rng import generator
from crisscross.core.settings import setting
from crisscross.formats.eccv import DIRECTIONS
from crisscross.scoring.models import (
    ALL,
    AUTO,
    COVERED,
    EVERY_ENCODER,
    FOLDS,
    FULL,
    GALLERY_RULES,
    MODEL_SPEC,
    RATING_KINDS,
    SCORE_BLOCK_ELEMENTS,
    TASK_KINDS,
    Gallery,
    Model,
    NoCoverageError,
    map_score_blocks,
)
from crisscross.scoring.paired import bison_accuracy, bootstrap_spearman, kendall_tau_b, precision_recall
from crisscross.scoring.retrieval import (
    BLOCK_ELEMENTS,
    NO_POSITIVE,
    LabelMatches,
    PositiveRanks,
    mean_pmrp,
    metrics_from_ranks,
    pmrp_hits,
    ranks_of_positives,
)
from crisscross.scoring.truths import GroundTruth

# --------------------------------------------------------------------------- retrieval


def retrieval_ranks(model: Model, truth: GroundTruth, gallery: Gallery, task: str) -> tuple[PositiveRanks, int]:
    """Ranks of every positive of every query of ``task`` over the whole gallery (queries in
    blocks of rows, so memory stays bounded), and the positives outside the gallery.  Under the
    truth's ``compat`` R rule the ranks carry every positive's count as ``totals`` (R of mAP@R)."""
    query_kind, item_kind = TASK_KINDS[task]
    query_ids, item_ids = gallery.ids(query_kind), gallery.ids(item_kind)
    model.require(query_kind, query_ids, f"{task} queries")
    model.require(item_kind, item_ids, f"{task} gallery items")
    mapped = truth.positives(task, query_ids, item_ids)
    intramodal = query_kind == item_kind
    step = max(1, SCORE_BLOCK_ELEMENTS // max(len(item_ids), 1))
    parts = []
    for lo, hi, scores in model.score_blocks(query_kind, query_ids, item_kind, item_ids, step):
        exclude = np.arange(lo, hi, dtype=np.int64) if intramodal else None
        parts.append(ranks_of_positives(scores, mapped.positives.rows_slice(lo, hi), exclude))
    return PositiveRanks.concatenate(parts).with_totals(truth.r_totals(task, query_ids)), mapped.missing


def recall_curve(first_positive_rank: np.ndarray, max_k: int) -> list[float]:
    """R@K for K = 1 … max_k (for the recall@K plot)."""
    ranks = first_positive_rank[first_positive_rank != NO_POSITIVE]
    if not ranks.size:
        return [float("nan")] * max_k
    hits = np.bincount(np.minimum(ranks, max_k + 1), minlength=max_k + 2)[1 : max_k + 1]
    return (np.cumsum(hits) / ranks.size).tolist()


def evaluate_retrieval(model: Model, truth: GroundTruth, gallery: Gallery, task: str, ks: Sequence[int], curve_k: int) -> dict[str, Any]:
    ranked, missing = retrieval_ranks(model, truth, gallery, task)
    values: dict[str, Any] = metrics_from_ranks(ranked, ks)
    values["missing_positives"] = float(missing)
    values["recall_curve"] = recall_curve(ranked.first, curve_k)
    return values


def average_folds(per_fold: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """Fold means of every value; counts (queries, missing positives) are summed instead."""
    summed = ("queries", "queries_without_positive", "missing_positives")
    out: dict[str, Any] = {}
    for key in per_fold[0]:
        column = [f[key] for f in per_fold]
        if key == "recall_curve":
            out[key] = np.mean(np.asarray(column, dtype=np.float64), axis=0).tolist()
        else:
            out[key] = float(np.sum(column)) if key in summed else float(np.mean(column))
    out["folds"] = float(len(per_fold))
    return out


# --------------------------------------------------------------------------- other metrics


def evaluate_ratings(
    model: Model, truth: GroundTruth, gallery: Gallery, kind: str, n_samples: int, rng: np.random.Generator
) -> dict[str, float]:
    """CxC §4 bootstrap Spearman between human ratings and model scores for rated pairs whose
    both ids are in the gallery; the first id of each pair is its query."""
    a_kind, b_kind = RATING_KINDS[kind]
    a_members, b_members = set(gallery.ids(a_kind)), set(gallery.ids(b_kind))
    inside = [r for r in truth.ratings(kind) if r[0] in a_members and r[1] in b_members]
    outside = len(truth.ratings(kind)) - len(inside)
    if not inside:
        return {"pairs": 0.0, "pairs_outside_gallery": float(outside)}
    a_ids, b_ids = [r[0] for r in inside], [r[1] for r in inside]
    model.require(a_kind, sorted(set(a_ids)), f"{kind} rated items")
    model.require(b_kind, sorted(set(b_ids)), f"{kind} rated items")
    scores = model.pair_scores(a_kind, a_ids, b_kind, b_ids)
    mean, std = bootstrap_spearman(a_ids, b_ids, [r[2] for r in inside], scores, n_samples, rng)
    return {"spearman": mean, "spearman_std": std, "pairs": float(len(inside)), "pairs_outside_gallery": float(outside)}


def label_matrix(ids: Sequence[str], labels: Mapping[str, Sequence[int]], n_classes: int) -> np.ndarray:
    """Boolean (items, classes) matrix; a caption with no labels of its own is looked up by the
    caller under its image's id."""
    matrix = np.zeros((len(ids), n_classes), dtype=bool)
    for row, item in enumerate(ids):
        matrix[row, list(labels.get(item, ()))] = True
    return matrix


def evaluate_pmrp(
    model: Model,
    gallery: Gallery,
    task: str,
    labels: Mapping[str, Sequence[int]],
    zetas: Sequence[int],
    r_cap: int,
    threads: int | None = None,
) -> dict[str, float]:
    """PMRP (ECCV Caption §4.1) for each ζ; captions carry their image's class labels.

    Blocks of ``BLOCK_ELEMENTS`` scores run on ``threads`` threads (None: one per core), each
    multiplied once and counted for every ζ at once.  The value is, as it has always been, the
    mean of the blocks' PMRPs weighted by their queries with a match, summed in block order: the
    same bytes for any thread count."""
    query_kind, item_kind = TASK_KINDS[task]
    query_ids, item_ids = gallery.ids(query_kind), gallery.ids(item_kind)
    n_classes = 1 + max((max(v) for v in labels.values() if len(v)), default=0)

    def of(kind: str, ids: Sequence[str]) -> np.ndarray:
        keys = ids if kind == IMAGE_KIND else [gallery.caption_image[c] for c in ids]
        return label_matrix(keys, labels, n_classes)

    matches = LabelMatches.of(of(query_kind, query_ids), of(item_kind, item_ids), zetas)
    intramodal = query_kind == item_kind

    def block_pmrp(lo: int, hi: int, scores: np.ndarray) -> list[tuple[float, int]]:
        """Per ζ: this block's PMRP and its queries with a match."""
        exclude = np.arange(lo, hi, dtype=np.int64) if intramodal else None
        hits, r = pmrp_hits(scores, matches.rows(lo, hi), r_cap, exclude)
        means = [mean_pmrp(h, n) for h, n in zip(hits, r, strict=True)]
        return [(value, (hi - lo) - without) for value, without in means]

    step = max(1, BLOCK_ELEMENTS // max(len(item_ids), 1))  # the blocks of every release: a score's bytes depend on them
    total = dict.fromkeys(zetas, 0.0)
    counted = dict.fromkeys(zetas, 0)
    for block in map_score_blocks(model, query_kind, query_ids, item_kind, item_ids, step, block_pmrp, threads):
        for zeta, (value, with_match) in zip(zetas, block, strict=True):
            if with_match:
                total[zeta] += value * with_match
                counted[zeta] += with_match
    return {f"PMRP@zeta={z}": total[z] / counted[z] if counted[z] else float("nan") for z in zetas}


def evaluate_bison(model: Model, triples: pa.Table, within: Gallery | None = None) -> dict[str, float]:
    """BISON accuracy over (caption, target, decoy) rows; with ``within`` (a model's covered
    sub-gallery) only over the rows whose three items it holds, the others counted."""
    captions = triples.column("caption").to_pylist()
    targets = triples.column("target").to_pylist()
    decoys = triples.column("decoy").to_pylist()
    outside = 0
    if within is not None:
        images, texts = set(within.image_ids), set(within.caption_ids)
        keep = [c in texts and t in images and d in images for c, t, d in zip(captions, targets, decoys, strict=True)]
        outside = len(keep) - sum(keep)
        captions, targets, decoys = ([x for x, k in zip(column, keep, strict=True) if k] for column in (captions, targets, decoys))
        if not captions:
            return {"triples": 0.0, "triples_outside_gallery": float(outside)}
    model.require(CAPTION_KIND, sorted(set(captions)), "BISON captions")
    model.require(IMAGE_KIND, sorted(set(targets) | set(decoys)), "BISON images")
    target = model.pair_scores(CAPTION_KIND, captions, IMAGE_KIND, targets)
    decoy = model.pair_scores(CAPTION_KIND, captions, IMAGE_KIND, decoys)
    result = {"accuracy": bison_accuracy(target, decoy), "triples": float(len(captions))}
    return result if within is None else {**result, "triples_outside_gallery": float(outside)}


def bootstrap_rng(seed: int, truth: str, kind: str) -> np.random.Generator:
    """The same bootstrap samples for every model of a ground truth, so models are compared on
    the same draws, whatever order the jobs run in."""
    return generator(seed, f"{truth}/{kind}")


# --------------------------------------------------------------------------- one job


@dataclass(frozen=True)
class Settings:
    """The scoring protocol; ``seed`` (``base.seed``) draws the bootstrap samples."""

    tasks: tuple[str, ...] = setting(tuple(TASK_KINDS), choices=tuple(TASK_KINDS))
    ratings: tuple[str, ...] = setting(tuple(RATING_KINDS), choices=tuple(RATING_KINDS))
    folds: int = setting(5, low=1)
    ks: tuple[int, ...] = setting((1, 5, 10), low=1)
    curve_k: int = setting(50, low=1)
    bootstrap_samples: int = setting(1000, low=1)
    seed: int = 0
    pmrp_zetas: tuple[int, ...] = setting((0, 1, 2), low=0)
    pmrp_r_cap: int = setting(50, low=1)


@dataclass(frozen=True)
class EvaluateSettings(Settings):
    """The ``evaluate:`` section: the models to score (the embed output's ``encoders``, ``all`` or
    a list of names, and more ``models`` entries), the truth every truth's positives are checked
    against (``verified``; null: none), and the protocol."""

    encoders: str | tuple[str, ...] = EVERY_ENCODER
    models: Mapping[str, MODEL_SPEC] = setting({})  # name → a model's params entry
    verified: str | None = "eccv"


def runnable(model: Model, settings: Settings) -> tuple[list[str], list[str]]:
    """The retrieval tasks and rating kinds this model can score."""
    tasks = [t for t in settings.tasks if model.can_compare(*TASK_KINDS[t])]
    ratings = [r for r in settings.ratings if model.can_compare(*RATING_KINDS[r])]
    return tasks, ratings


def check_coverage(model: Model, gallery: Gallery, settings: Settings) -> None:
    """Raise :class:`~crisscross.scoring.models.CoverageError` before any work if a runnable task's gallery is not covered."""
    tasks, _ = runnable(model, settings)
    # images first: an image without a vector is the cause, its captions' absence the consequence
    for kind in sorted({k for t in tasks for k in TASK_KINDS[t]}, key=lambda k: (k != IMAGE_KIND, k)):
        model.require(kind, gallery.ids(kind), "gallery items", hint=_COVERED_HINT.format(name=model.name) if kind == IMAGE_KIND else "")


_COVERED_HINT = " (evaluate.models.{name}.gallery: covered scores it on the images it has vectors for)"


@dataclass(frozen=True)
class ModelGallery:
    """The gallery one model is evaluated on, and what it is a part of."""

    gallery: Gallery
    rule: str  # resolved: full | covered
    chosen_by: str  # the params value: auto | full | covered
    of_images: int
    of_captions: int

    @property
    def partial(self) -> bool:
        return len(self.gallery.image_ids) < self.of_images

    @property
    def note(self) -> str:
        """E.g. ``covered: 370 of 5,000 images, 1,850 of 25,000 captions``."""
        images, captions = len(self.gallery.image_ids), len(self.gallery.caption_ids)
        if not self.partial:
            return f"full: {images:,} images, {captions:,} captions"
        default = " (default for an image-only model)" if self.chosen_by == AUTO else ""
        return f"{self.rule}{default}: {images:,} of {self.of_images:,} images, {captions:,} of {self.of_captions:,} captions"

    def summary(self) -> dict[str, Any]:
        """For ``metrics.json``."""
        return {
            "rule": self.rule if self.partial else FULL,
            "images": len(self.gallery.image_ids),
            "of_images": self.of_images,
            "captions": len(self.gallery.caption_ids),
            "of_captions": self.of_captions,
            "note": self.note,
        }


def model_gallery(model: Model, gallery: Gallery, settings: Settings, rule: str = AUTO) -> ModelGallery:
    """The gallery ``model`` is evaluated on under ``rule`` (see the module's gallery rule);
    raises :class:`~crisscross.scoring.models.CoverageError` before any work when it cannot be scored."""
    if rule not in GALLERY_RULES:
        raise ValueError(f"gallery rule must be one of {GALLERY_RULES}, got {rule!r}")
    resolved = rule if rule != AUTO else (COVERED if model.kinds == {IMAGE_KIND} else FULL)
    chosen = gallery
    if resolved == COVERED and IMAGE_KIND in model.kinds:
        missing = set(model.missing(IMAGE_KIND, gallery.image_ids))
        if len(missing) == len(gallery.image_ids):
            example = ", ".join(gallery.image_ids[:3])
            raise NoCoverageError(
                f"model {model.name!r} has no {IMAGE_KIND} vector for any of the {len(missing)} gallery images (e.g. {example})"
            )
        if missing:
            chosen = gallery.restrict([i for i in gallery.image_ids if i not in missing])
    check_coverage(model, chosen, settings)
    return ModelGallery(chosen, resolved, rule, len(gallery.image_ids), len(gallery.caption_ids))


def evaluate(
    model: Model,
    truth: GroundTruth,
    truth_name: str,
    gallery: Gallery,
    settings: Settings,
    labels: Mapping[str, Sequence[int]] | None = None,
    bison: pa.Table | None = None,
    partial: bool = False,
    threads: int | None = None,
) -> dict[str, dict[str, dict[str, Any]]]:
    """Every metric this model and ground truth allow: ``{protocol: {metric: {direction: value}}}``.
    ``partial``: ``gallery`` is the model's covered sub-gallery (:func:`model_gallery`), so BISON
    rows outside it are counted rather than refused.  The fold protocol needs at least one image
    per fold.  ``threads``: PMRP's (None: one per core); the values do not depend on them."""
    tasks, ratings = runnable(model, settings)
    by_protocol: dict[str, dict[str, dict[str, Any]]] = {ALL: {}}
    folds = gallery.folds(settings.folds) if 1 < settings.folds <= len(gallery.image_ids) else []
    if folds:
        by_protocol[FOLDS] = {}
    for task in tasks:
        if not truth.pairs(task):
            continue
        _put(by_protocol[ALL], task, evaluate_retrieval(model, truth, gallery, task, settings.ks, settings.curve_k))
        if folds:
            per_fold = [evaluate_retrieval(model, truth, fold, task, settings.ks, settings.curve_k) for fold in folds]
            _put(by_protocol[FOLDS], task, average_folds(per_fold))
        if labels:
            _put(by_protocol[ALL], task, evaluate_pmrp(model, gallery, task, labels, settings.pmrp_zetas, settings.pmrp_r_cap, threads))
    for kind in ratings:
        if truth.ratings(kind):
            rng = bootstrap_rng(settings.seed, truth_name, kind)
            _put(by_protocol[ALL], kind, evaluate_ratings(model, truth, gallery, kind, settings.bootstrap_samples, rng))
    if bison is not None and model.can_compare(CAPTION_KIND, IMAGE_KIND):
        _put(by_protocol[ALL], "bison", evaluate_bison(model, bison, gallery if partial else None))
    return {protocol: metrics for protocol, metrics in by_protocol.items() if metrics}


def _put(table: dict[str, dict[str, Any]], direction: str, values: Mapping[str, Any]) -> None:
    for metric, value in values.items():
        table.setdefault(metric, {})[direction] = value


# --------------------------------------------------------------------------- across models


Results = Mapping[str, Mapping[str, Mapping[str, Mapping[str, Mapping[str, Any]]]]]  # model → truth → protocol → metric → direction


def model_ranking_agreement(results: Results, metrics: Sequence[str] = ("R@1", "mAP@R", "R-Precision")) -> list[dict[str, Any]]:
    """Kendall's tau-b between the orderings of the models under two (truth, metric) columns of
    the same direction (ECCV Caption Table 5); needs at least three models with both values."""
    columns: dict[tuple[str, str, str], dict[str, float]] = {}
    for model, truths in results.items():
        for truth, protocols in truths.items():
            for metric in metrics:
                for direction, value in protocols.get(ALL, {}).get(metric, {}).items():
                    columns.setdefault((direction, truth, metric), {})[model] = float(value)
    keys = sorted(columns)
    out = []
    for i, first in enumerate(keys):
        for second in keys[i + 1 :]:
            if first[0] != second[0]:
                continue
            models = sorted(set(columns[first]) & set(columns[second]))
            if len(models) < 3:
                continue
            tau = kendall_tau_b([columns[first][m] for m in models], [columns[second][m] for m in models])
            out.append(
                {"direction": first[0], "a": f"{first[1]} {first[2]}", "b": f"{second[1]} {second[2]}", "models": len(models), "tau_b": tau}
            )
    return out


def positives_agreement(truths: Mapping[str, GroundTruth], verified: str, gallery: Gallery) -> list[dict[str, Any]]:
    """Precision and recall of each ground truth's i2t / t2i positives against the ``verified``
    one's, on the verified truth's queries only (ECCV Caption Table 2), both within the gallery."""
    reference = truths[verified]
    members = set(gallery.image_ids) | set(gallery.caption_ids)
    out = []
    for name in sorted(truths):
        if name == verified:
            continue
        for task in DIRECTIONS:
            gold = {p for p in reference.pairs(task) if p[0] in members and p[1] in members}
            queries = {q for q, _ in gold}
            predicted = [p for p in truths[name].pairs(task) if p[0] in queries and p[1] in members]
            if not gold or not predicted:
                continue
            precision, recall = precision_recall(predicted, gold)
            out.append({"benchmark": name, "verified": verified, "direction": task, "precision": precision, "recall": recall})
    return out
