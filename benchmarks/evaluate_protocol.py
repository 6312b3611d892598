"""The full 5K evaluation protocol: ``crisscross.scoring.protocol.evaluate`` against the per-query
references of :mod:`benchmarks.reference`, on one seeded synthetic test split of COCO's size.

Data (``numpy.random.default_rng(SEED)``; ``--quick``: a tenth of the images, captions, rated
pairs and triples): 5,000 images with 1–4 of 80 classes (Zipf-like popularity, so label sets
repeat as in COCO), 25,000 captions (5 per image), one joint 512-d float32 model.  An image's
scene is its classes' prototypes plus its own part; a caption's meaning is its image's scene
plus noise (scale 1–3 per caption); the model sees both through more noise, so 5K retrieval is
neither trivial nor random (i2t R@1 0.53, t2i 0.28).  Human ratings (STS, SIS, SITS, ~43k pairs
each, the first id the query; two items per query come from the 10 nearest scenes, as CxC
picked candidates by similarity, the rest are co-captions, own images or random) are means of
five 0–5 votes around 10 × the cosine of the meanings: ties on a 0.2 grid, as in CxC.  The
ground truth is shaped like ``cxc`` with captions: original pairs for i2t / t2i, co-captions plus
the STS ≥ 3 pairs for t2t, and for i2i a seeded half of the images each paired with 1–3 of its 3
nearest scenes in that half (both ways).  PMRP labels are the image classes; BISON decoys are one
of the target's 10 nearest scenes.

Each measurement runs in a fresh process (``multiprocessing`` spawn), ``ours`` and
``reference`` interleaved part by part: one retrieval task (5K, then the five 1K folds), the three
bootstrap Spearmans (1,000 samples), PMRP (four tasks, ζ = 0, 1, 2, R ≤ 50), BISON; then
``evaluate`` itself, everything in one call.  ``ours`` calls the library's functions for the part
as ``evaluate`` does.  The ``reference`` computes each task's dense score matrix once with numpy
(t2t: 25k × 25k float32, 2.5 GB) and a dense boolean positives mask, then runs the per-query loops
on it and on each fold's block; rating and BISON scores are float64 dot products pair by pair.
Its ``evaluate()`` row is the sum (seconds) and maximum (memory) of its parts.

``reference_pmrp`` loops in Python over the gallery for every query (about 40 minutes at 5K), so
for PMRP both sides also run on the same seeded subsample of ``PMRP_QUERIES`` queries per task
(the reference scores only those rows); the values are compared there, and the reference's
seconds are extrapolated linearly to every query (``*`` in the table), its memory is the
subsample's.

Peak memory: the set-up (imports, data, a BLAS warm-up) is done, garbage collected, and the
process's RSS high-water mark reset (``5`` written to ``/proc/self/clear_refs``, Linux); after the
timed work ``ru_maxrss`` (KiB) is its peak: the live data plus whatever the work allocated.  The
table shows that peak and its rise above the RSS at the start (``+timed``).

Against the GEMM: the ``ours`` worker of every part that computes score matrices also times the
plain float32 GEMMs of those matrices (same operands as the library, each into an output allocated
and touched beforehand; numpy's BLAS as the worker has it, one thread under the numeric policy):
a retrieval task's 5K one and its five folds', PMRP's four 5K ones, and for ``evaluate`` all of
them (every task's retrieval matrices, then PMRP's again: it multiplies them anew).  They are
timed before the high-water mark is reset and after the peak is read; the lower counts, and
``x GEMM`` is ours' seconds over it (goal: at most ``GEMM_GOAL``).  PMRP spreads its blocks over
the cores, so its worker also times it on one thread: the cost per core.  The compiled rank and
PMRP passes are loaded from numba's cache in the set-up, like BLAS's threads.

Agreement (untimed, after the run): R@1/5/10, median / mean rank, mAP@R and R-Precision per task
and protocol, Spearman mean and std per rating kind, PMRP (and the queries without a plausible
match) per task and ζ on the subsample, BISON accuracy.  They must agree within 1e-9 (relative or
absolute), counts and median ranks exactly; a FAIL line is printed per disagreement and the run
fails after writing the JSON.
"""

from __future__ import annotations

import argparse
import gc
import math
import multiprocessing
import os
import resource
import time
from collections.abc import Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
from threadpoolctl import threadpool_info

from benchmarks import cpu_model, save_result
from benchmarks.reference import (
    reference_bootstrap,
    reference_pmrp,
    reference_retrieval,
)
from crisscross.core.ids import CAPTION_KIND, IMAGE_KIND
from crisscross.embed.sets import EmbeddingSet
from crisscross.scoring.models import ALL, FOLDS, RATING_KINDS, TASK_KINDS, EmbeddingModel, Gallery
from crisscross.scoring.protocol import (
    Settings,
    average_folds,
    bootstrap_rng,
    evaluate,
    evaluate_bison,
    evaluate_pmrp,
    evaluate_ratings,
    evaluate_retrieval,
    label_matrix,
)
from crisscross.scoring.retrieval import Positives, pmrp, ranks_of_positives
from crisscross.scoring.truths import GroundTruth

NAME = "evaluate_protocol"
SEED = 0
TRUTH_NAME = "synthetic"
DIM = 512
IMAGES = 5_000
PER_IMAGE = 5
QUICK_DIVISOR = 10
N_CLASSES = 80
MAX_LABELS = 4
CLASS_WEIGHT = 1.0  # of the class prototypes in an image's scene, against its own part (unit variance)
MEANING_NOISE = (1.0, 3.0)  # a caption's departure from its image's scene: uniform scale per caption
MODEL_NOISE = 3.0  # what the model does not see of scenes and meanings
VOTE_SLOPE = 10.0  # a vote is about 10 × cosine of the meanings, clipped to 0–5
VOTERS = 5
# Rated queries and items per query: ~44k pairs per kind, CxC's test-split scale.
RATED = {"sts": (8_800, 5), "sis": (4_400, 10), "sits": (8_800, 5)}
STS_THRESHOLD = 3.0  # CxC §3: an STS pair this high is a t2t positive
NEIGHBOURS = 10  # "similar" rated items and BISON decoys: one of an image's 10 nearest scenes
I2I_NEIGHBOURS = (1, 3)  # nearest scenes an i2i query image of the chosen half gets (then both ways)
NEIGHBOUR_BLOCK = 1024
BISON_TRIPLES = 3_000
PMRP_QUERIES = {False: 200, True: 50}  # per task, by --quick
SETTINGS = Settings(folds=5, ks=(1, 5, 10), bootstrap_samples=1000, seed=SEED, pmrp_zetas=(0, 1, 2), pmrp_r_cap=50)
TASKS = tuple(TASK_KINDS)
PARTS = (*TASKS, "ratings", "pmrp", "bison")
TOLERANCE = 1e-9
GEMM_GOAL = 2.0  # a part (retrieval task, PMRP, evaluate()) should take at most this many times its score matrices' GEMMs


@dataclass(frozen=True)
class Protocol:
    """One synthetic test split: everything ``evaluate`` takes."""

    gallery: Gallery
    model: EmbeddingModel
    truth: GroundTruth
    labels: dict[str, tuple[int, ...]]
    bison: pa.Table


# --------------------------------------------------------------------------- data


def unit(vectors: np.ndarray) -> np.ndarray:
    """Rows scaled to unit length in float32 (what a cosine model compares)."""
    v = np.asarray(vectors, dtype=np.float32)
    return v / np.linalg.norm(v, axis=1, keepdims=True)


def votes_mean(a: np.ndarray, b: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """Mean of ``VOTERS`` integer 0–5 votes around ``VOTE_SLOPE`` × cosine of the meanings: a
    multiple of 0.2, so ratings tie as in the CxC release."""
    cosine = np.einsum("ij,ij->i", unit(a), unit(b))
    votes = np.clip(np.rint(VOTE_SLOPE * cosine[:, None] + rng.standard_normal((cosine.size, VOTERS))), 0, 5)
    return votes.mean(axis=1)


def nearest(vectors: np.ndarray, k: int) -> np.ndarray:
    """The ``k`` rows of highest cosine to each row (unordered, itself excluded), in row blocks so
    the set-up never holds an N×N matrix."""
    units = unit(vectors)
    out = np.empty((len(units), k), dtype=np.int64)
    for lo in range(0, len(units), NEIGHBOUR_BLOCK):
        cosine = units[lo : lo + NEIGHBOUR_BLOCK] @ units.T
        cosine[np.arange(len(cosine)), lo + np.arange(len(cosine))] = -np.inf
        out[lo : lo + len(cosine)] = np.argpartition(-cosine, k, axis=1)[:, :k]
    return out


def first_unique(a: np.ndarray, b: np.ndarray, symmetric: bool) -> np.ndarray:
    """Positions of the first occurrence of each pair (unordered when ``symmetric``), no self pairs:
    the loader keeps one rating per pair, and the bootstrap refuses repeats."""
    keys = np.stack([np.minimum(a, b), np.maximum(a, b)] if symmetric else [a, b], axis=1)
    keep = np.sort(np.unique(keys, axis=0, return_index=True)[1])
    return keep[a[keep] != b[keep]] if symmetric else keep


def both_ways(ids: list[str], a: np.ndarray, b: np.ndarray) -> frozenset[tuple[str, str]]:
    return frozenset(p for x, y in zip(a.tolist(), b.tolist(), strict=True) for p in ((ids[x], ids[y]), (ids[y], ids[x])))


def rated(a_ids: list[str], a: np.ndarray, b_ids: list[str], b: np.ndarray, h: np.ndarray) -> tuple[tuple[str, str, float], ...]:
    return tuple((a_ids[x], b_ids[y], float(v)) for x, y, v in zip(a.tolist(), b.tolist(), h.tolist(), strict=True))


def synthesise(quick: bool) -> Protocol:
    """The seeded split (module docstring); the same in every process."""
    rng = np.random.default_rng(SEED)
    divisor = QUICK_DIVISOR if quick else 1
    n_images = IMAGES // divisor
    n_captions = n_images * PER_IMAGE
    image_ids = [f"syn:img:{i:05d}" for i in range(n_images)]
    caption_ids = [f"syn:cap:{i:05d}-{j}" for i in range(n_images) for j in range(PER_IMAGE)]
    owner = np.repeat(np.arange(n_images), PER_IMAGE)

    popularity = 1 / np.arange(1, N_CLASSES + 1)
    classes = [
        np.sort(rng.choice(N_CLASSES, k, replace=False, p=popularity / popularity.sum())) for k in rng.integers(1, MAX_LABELS + 1, n_images)
    ]
    membership = np.zeros((n_images, N_CLASSES), dtype=np.float32)
    for image, row in enumerate(classes):
        membership[image, row] = 1
    prototypes = rng.standard_normal((N_CLASSES, DIM), dtype=np.float32)
    scene = CLASS_WEIGHT * (membership @ prototypes) / np.sqrt(membership.sum(1, keepdims=True))
    scene += rng.standard_normal((n_images, DIM), dtype=np.float32)
    meaning = scene[owner] + rng.uniform(*MEANING_NOISE, (n_captions, 1)).astype(np.float32) * rng.standard_normal(
        (n_captions, DIM), dtype=np.float32
    )
    image_vectors = scene + MODEL_NOISE * rng.standard_normal(scene.shape, dtype=np.float32)
    caption_vectors = meaning + MODEL_NOISE * rng.standard_normal(meaning.shape, dtype=np.float32)
    near = nearest(scene, NEIGHBOURS)

    def similar(images: np.ndarray) -> np.ndarray:
        """One of each image's nearest scenes: CxC picked candidate pairs by similarity."""
        return near[images, rng.integers(0, NEIGHBOURS, images.size)]

    def caption_of(images: np.ndarray) -> np.ndarray:
        return images * PER_IMAGE + rng.integers(0, PER_IMAGE, images.size)

    # STS: a co-caption, two captions of similar images, two random captions per query caption.
    n_q, per = RATED["sts"]
    q = rng.choice(n_captions, n_q // divisor, replace=False)
    co = owner[q] * PER_IMAGE + (q % PER_IMAGE + rng.integers(1, PER_IMAGE, q.size)) % PER_IMAGE
    sts_a = np.tile(q, per)
    sts_b = np.concatenate(
        [co, caption_of(similar(owner[q])), caption_of(similar(owner[q])), *rng.integers(0, n_captions, (per - 3, q.size))]
    )
    keep = first_unique(sts_a, sts_b, symmetric=True)
    sts_a, sts_b = sts_a[keep], sts_b[keep]
    sts_h = votes_mean(meaning[sts_a], meaning[sts_b], rng)
    # SIS: two similar images and eight random ones per query image.
    n_q, per = RATED["sis"]
    q = rng.choice(n_images, n_q // divisor, replace=False)
    sis_a, sis_b = np.tile(q, per), np.concatenate([similar(q), similar(q), *rng.integers(0, n_images, (per - 2, q.size))])
    keep = first_unique(sis_a, sis_b, symmetric=True)
    sis_a, sis_b = sis_a[keep], sis_b[keep]
    sis_h = votes_mean(scene[sis_a], scene[sis_b], rng)
    # SITS: the caption's own image, two similar images, two random ones per query caption.
    n_q, per = RATED["sits"]
    q = rng.choice(n_captions, n_q // divisor, replace=False)
    sits_a = np.tile(q, per)
    sits_b = np.concatenate([owner[q], similar(owner[q]), similar(owner[q]), *rng.integers(0, n_images, (per - 3, q.size))])
    keep = first_unique(sits_a, sits_b, symmetric=False)
    sits_a, sits_b = sits_a[keep], sits_b[keep]
    sits_h = votes_mean(meaning[sits_a], scene[sits_b], rng)
    # i2i: in a seeded half of the images, each with 1–3 of its nearest scenes within that half.
    half = np.sort(rng.choice(n_images, n_images // 2, replace=False))
    within = nearest(scene[half], I2I_NEIGHBOURS[1])
    take = rng.integers(I2I_NEIGHBOURS[0], I2I_NEIGHBOURS[1] + 1, half.size)
    chosen = np.arange(I2I_NEIGHBOURS[1]) < take[:, None]
    i2i_a, i2i_b = np.repeat(half, take), half[within[chosen]]

    sts_positive = sts_h >= STS_THRESHOLD
    cocaptions = frozenset(
        (caption_ids[i * PER_IMAGE + j], caption_ids[i * PER_IMAGE + k])
        for i in range(n_images)
        for j in range(PER_IMAGE)
        for k in range(PER_IMAGE)
        if j != k
    )
    truth = GroundTruth(
        name=TRUTH_NAME,
        i2t=frozenset((image_ids[owner[c]], caption_ids[c]) for c in range(n_captions)),
        t2i=frozenset((caption_ids[c], image_ids[owner[c]]) for c in range(n_captions)),
        t2t=cocaptions | both_ways(caption_ids, sts_a[sts_positive], sts_b[sts_positive]),
        i2i=both_ways(image_ids, i2i_a, i2i_b),
        sts=rated(caption_ids, sts_a, caption_ids, sts_b, sts_h),
        sis=rated(image_ids, sis_a, image_ids, sis_b, sis_h),
        sits=rated(caption_ids, sits_a, image_ids, sits_b, sits_h),
    )

    # BISON: a caption, its image, and one of the image's nearest scenes as the decoy.
    caption = rng.choice(n_captions, BISON_TRIPLES // divisor, replace=False)
    target = owner[caption]
    decoy = similar(target)
    bison = pa.table(
        {"caption": [caption_ids[c] for c in caption], "target": [image_ids[i] for i in target], "decoy": [image_ids[i] for i in decoy]}
    )
    gallery = Gallery(tuple(image_ids), tuple(caption_ids), {c: image_ids[owner[k]] for k, c in enumerate(caption_ids)})
    sets = {IMAGE_KIND: EmbeddingSet(image_ids, image_vectors), CAPTION_KIND: EmbeddingSet(caption_ids, caption_vectors)}
    labels = {image_ids[i]: tuple(int(c) for c in row) for i, row in enumerate(classes)}
    return Protocol(gallery, EmbeddingModel("synthetic-joint", sets, joint=True), truth, labels, bison)


def describe(data: Protocol) -> dict[str, Any]:
    """Sizes of the split, for the JSON and the first printed line."""
    i2i_queries = len({q for q, _ in data.truth.i2i})
    label_sets = len(set(data.labels.values()))
    return {
        "images": len(data.gallery.image_ids),
        "captions": len(data.gallery.caption_ids),
        "dim": DIM,
        "counts": data.truth.counts(),
        "i2i_queries_with_positive": i2i_queries,
        "distinct_label_sets": label_sets,
        "bison_triples": data.bison.num_rows,
    }


def pmrp_rows(n_queries: int, task: str, quick: bool) -> np.ndarray:
    """The seeded PMRP subsample of query rows of ``task``, ascending (the same on both sides)."""
    rng = np.random.default_rng([SEED, TASKS.index(task)])
    return np.sort(rng.choice(n_queries, min(PMRP_QUERIES[quick], n_queries), replace=False))


# --------------------------------------------------------------------------- ours


def ours_retrieval(data: Protocol, task: str) -> dict[str, Any]:
    """What ``evaluate`` does for one task: the 5K protocol, then the folds (split untimed)."""
    folds = data.gallery.folds(SETTINGS.folds)
    started = time.perf_counter()
    evaluate_retrieval(data.model, data.truth, data.gallery, task, SETTINGS.ks, SETTINGS.curve_k)
    average_folds([evaluate_retrieval(data.model, data.truth, fold, task, SETTINGS.ks, SETTINGS.curve_k) for fold in folds])
    return {"seconds": time.perf_counter() - started}


def ours_ratings(data: Protocol) -> dict[str, Any]:
    started = time.perf_counter()
    for kind in RATING_KINDS:
        rng = bootstrap_rng(SETTINGS.seed, TRUTH_NAME, kind)
        evaluate_ratings(data.model, data.truth, data.gallery, kind, SETTINGS.bootstrap_samples, rng)
    return {"seconds": time.perf_counter() - started}


def label_rows(data: Protocol, kind: str, ids: Sequence[str], n_classes: int) -> np.ndarray:
    """Class rows as ``evaluate_pmrp`` builds them: a caption carries its image's labels."""
    keys = ids if kind == IMAGE_KIND else [data.gallery.caption_image[c] for c in ids]
    return label_matrix(keys, data.labels, n_classes)


def timed_pmrp(data: Protocol, threads: int | None) -> float:
    """Seconds of every task's PMRP as ``evaluate`` computes it, its blocks on ``threads`` threads."""
    started = time.perf_counter()
    for task in TASKS:
        evaluate_pmrp(data.model, data.gallery, task, data.labels, SETTINGS.pmrp_zetas, SETTINGS.pmrp_r_cap, threads)
    return time.perf_counter() - started


def ours_pmrp(data: Protocol, quick: bool) -> dict[str, Any]:
    """Every task's PMRP as ``evaluate`` computes it, on every core (timed) and on one thread (timed
    apart: the cost per core); then ``retrieval.pmrp`` on the subsample's score rows, for the
    comparison with the reference (timed apart)."""
    seconds = timed_pmrp(data, None)
    one_thread = timed_pmrp(data, 1)
    n_classes = 1 + max(max(v) for v in data.labels.values())
    started = time.perf_counter()
    values: dict[str, dict[int, tuple[float, int]]] = {}
    for task in TASKS:
        query_kind, item_kind = TASK_KINDS[task]
        query_ids, item_ids = data.gallery.ids(query_kind), data.gallery.ids(item_kind)
        rows = pmrp_rows(len(query_ids), task, quick)
        queries = [query_ids[r] for r in rows]
        scores = data.model.block_scores(query_kind, queries, item_kind, item_ids)(0, len(queries))
        exclude = rows if query_kind == item_kind else None
        q_lab, g_lab = label_rows(data, query_kind, queries, n_classes), label_rows(data, item_kind, item_ids, n_classes)
        values[task] = {z: pmrp(scores, q_lab, g_lab, z, SETTINGS.pmrp_r_cap, exclude) for z in SETTINGS.pmrp_zetas}
    return {"seconds": seconds, "one_thread_seconds": one_thread, "subsample_seconds": time.perf_counter() - started, "values": values}


def ours_bison(data: Protocol) -> dict[str, Any]:
    started = time.perf_counter()
    evaluate_bison(data.model, data.bison)
    return {"seconds": time.perf_counter() - started}


def ours_evaluate(data: Protocol) -> dict[str, Any]:
    """The library's one call, every metric; its values are what the references are checked against."""
    started = time.perf_counter()
    values = evaluate(data.model, data.truth, TRUTH_NAME, data.gallery, SETTINGS, labels=data.labels, bison=data.bison)
    return {"seconds": time.perf_counter() - started, "values": values, "data": describe(data)}


# --------------------------------------------------------------------------- reference


def item_index(data: Protocol, kind: str) -> dict[str, int]:
    return {item: row for row, item in enumerate(data.gallery.ids(kind))}


def caption_owner(data: Protocol) -> np.ndarray:
    """Image row of every caption row."""
    images = item_index(data, IMAGE_KIND)
    return np.array([images[data.gallery.caption_image[c]] for c in data.gallery.caption_ids], dtype=np.int64)


def unit_of(data: Protocol, kind: str) -> np.ndarray:
    """Unit vectors in gallery order (the sets are built in that order)."""
    return unit(data.model.sets[kind].vectors)


def reference_task(data: Protocol, task: str) -> dict[str, Any]:
    """Dense scores and mask once; per-query metrics on all of it and on each fold's block."""
    query_kind, item_kind = TASK_KINDS[task]
    queries, items = unit_of(data, query_kind), unit_of(data, item_kind)
    rows, cols = item_index(data, query_kind), item_index(data, item_kind)
    owner = caption_owner(data)
    intramodal = query_kind == item_kind
    started = time.perf_counter()
    scores = queries @ items.T
    matrix_s = time.perf_counter() - started
    mask = np.zeros(scores.shape, dtype=bool)
    pairs = data.truth.pairs(task)
    mask[[rows[q] for q, _ in pairs], [cols[i] for _, i in pairs]] = True
    values = {ALL: reference_retrieval(scores, mask, np.arange(len(queries)) if intramodal else None, SETTINGS.ks)}
    per_fold = []
    for images in np.array_split(np.arange(len(data.gallery.image_ids)), SETTINGS.folds):
        fold = {IMAGE_KIND: images, CAPTION_KIND: np.flatnonzero(np.isin(owner, images))}
        block = np.ix_(fold[query_kind], fold[item_kind])
        per_fold.append(
            reference_retrieval(scores[block], mask[block], np.arange(len(fold[query_kind])) if intramodal else None, SETTINGS.ks)
        )
    values[FOLDS] = {key: float(np.mean([f[key] for f in per_fold])) for key in per_fold[0]}
    return {"seconds": time.perf_counter() - started, "matrix_seconds": matrix_s, "values": values}


def reference_ratings(data: Protocol) -> dict[str, Any]:
    """Pair by pair float64 cosines, then the one-sample-at-a-time bootstrap on the same draws."""
    units = {kind: unit_of(data, kind).astype(np.float64) for kind in (IMAGE_KIND, CAPTION_KIND)}
    index = {kind: item_index(data, kind) for kind in (IMAGE_KIND, CAPTION_KIND)}
    values = {}
    started = time.perf_counter()
    for kind, (a_kind, b_kind) in RATING_KINDS.items():
        rated = data.truth.ratings(kind)
        model = np.array([np.dot(units[a_kind][index[a_kind][a]], units[b_kind][index[b_kind][b]]) for a, b, _ in rated])
        queries, items, human = (np.array(column) for column in zip(*rated, strict=True))
        rng = bootstrap_rng(SETTINGS.seed, TRUTH_NAME, kind)
        values[kind] = reference_bootstrap(queries, items, human.astype(np.float64), model, SETTINGS.bootstrap_samples, rng)
    return {"seconds": time.perf_counter() - started, "values": values}


def reference_pmrp_part(data: Protocol, quick: bool) -> dict[str, Any]:
    """``reference_pmrp`` on the subsample's score rows; seconds extrapolated to every query."""
    owner = caption_owner(data)
    image_labels = np.zeros((len(data.gallery.image_ids), N_CLASSES), dtype=bool)
    for row, image in enumerate(data.gallery.image_ids):
        image_labels[row, list(data.labels[image])] = True
    labels = {IMAGE_KIND: image_labels, CAPTION_KIND: image_labels[owner]}
    values, seconds, extrapolated = {}, 0.0, 0.0
    for task in TASKS:
        query_kind, item_kind = TASK_KINDS[task]
        queries, items = unit_of(data, query_kind), unit_of(data, item_kind)
        rows = pmrp_rows(len(queries), task, quick)
        exclude = rows if query_kind == item_kind else None
        started = time.perf_counter()
        scores = queries[rows] @ items.T
        values[task] = {
            z: reference_pmrp(scores, labels[query_kind][rows], labels[item_kind], z, SETTINGS.pmrp_r_cap, exclude)
            for z in SETTINGS.pmrp_zetas
        }
        took = time.perf_counter() - started
        seconds += took
        extrapolated += took * len(queries) / len(rows)
    return {"seconds": extrapolated, "subsample_seconds": seconds, "values": values}


def reference_bison(data: Protocol) -> dict[str, Any]:
    units = {kind: unit_of(data, kind).astype(np.float64) for kind in (IMAGE_KIND, CAPTION_KIND)}
    captions, images = item_index(data, CAPTION_KIND), item_index(data, IMAGE_KIND)
    started = time.perf_counter()
    right = 0
    for caption, target, decoy in zip(*(data.bison.column(c).to_pylist() for c in ("caption", "target", "decoy")), strict=True):
        text = units[CAPTION_KIND][captions[caption]]
        right += np.dot(text, units[IMAGE_KIND][images[target]]) > np.dot(text, units[IMAGE_KIND][images[decoy]])
    return {"seconds": time.perf_counter() - started, "values": right / data.bison.num_rows}


# --------------------------------------------------------------------------- processes


def peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KiB on Linux


def reset_peak_rss() -> None:
    """Restart the high-water mark from the current RSS, so the next peak is the timed work's and
    not the set-up's transients (which would hide anything smaller)."""
    with open("/proc/self/clear_refs", "w") as handle:
        handle.write("5")


def timed_part(data: Protocol, implementation: str, part: str, quick: bool) -> dict[str, Any]:
    if part in TASKS:
        return ours_retrieval(data, part) if implementation == "ours" else reference_task(data, part)
    if part == "pmrp":
        return ours_pmrp(data, quick) if implementation == "ours" else reference_pmrp_part(data, quick)
    calls = {
        "ours": {"ratings": ours_ratings, "bison": ours_bison, "evaluate": ours_evaluate},
        "reference": {"ratings": reference_ratings, "bison": reference_bison},
    }
    return calls[implementation][part](data)


def product(queries: np.ndarray, items: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """A score matrix's operands as the library multiplies them: unit queries × the contiguous
    transposed gallery."""
    return queries, np.ascontiguousarray(items.T)


def task_matrices(data: Protocol, task: str) -> list[tuple[np.ndarray, np.ndarray]]:
    """The operands of every score matrix a task's retrieval needs: the 5K one and each 1K fold's."""
    query_kind, item_kind = TASK_KINDS[task]
    queries, items = unit_of(data, query_kind), unit_of(data, item_kind)
    owner = caption_owner(data)
    out = [product(queries, items)]
    for images in np.array_split(np.arange(len(data.gallery.image_ids)), SETTINGS.folds):
        fold = {IMAGE_KIND: images, CAPTION_KIND: np.flatnonzero(np.isin(owner, images))}
        out.append(product(queries[fold[query_kind]], items[fold[item_kind]]))
    return out


def pmrp_matrices(data: Protocol) -> list[tuple[np.ndarray, np.ndarray]]:
    """The operands of the score matrices PMRP needs: every task's 5K one."""
    return [product(unit_of(data, TASK_KINDS[task][0]), unit_of(data, TASK_KINDS[task][1])) for task in TASKS]


def part_matrices(data: Protocol, part: str) -> list[tuple[np.ndarray, np.ndarray]]:
    """The score matrices a timed part computes: ``evaluate`` every task's retrieval ones and PMRP's
    again (it multiplies them anew); ratings and BISON score pairs, no matrix."""
    if part in TASKS:
        return task_matrices(data, part)
    if part == "pmrp":
        return pmrp_matrices(data)
    return [matrix for task in TASKS for matrix in task_matrices(data, task)] + pmrp_matrices(data)


def gemm_seconds(matrices: Sequence[tuple[np.ndarray, np.ndarray]]) -> float:
    """Seconds of the plain float32 GEMMs (numpy's BLAS as the worker has it) of these score
    matrices, each into an output allocated and touched just before: the floor no evaluation can
    beat.  One output at a time, so ``evaluate``'s 28 matrices never hold memory together."""
    seconds = 0.0
    for queries, items_t in matrices:
        out = np.ones((len(queries), items_t.shape[1]), np.float32)
        started = time.perf_counter()
        np.matmul(queries, items_t, out=out)
        seconds += time.perf_counter() - started
    return seconds


def gemm_flops(matrices: Sequence[tuple[np.ndarray, np.ndarray]]) -> float:
    """Floating-point operations of those GEMMs (a multiply and an add per term)."""
    return float(sum(2 * queries.shape[0] * queries.shape[1] * items_t.shape[1] for queries, items_t in matrices))


def warm_up_numba() -> None:
    """Load the compiled rank and PMRP passes from numba's cache (about a second each, once per
    process), as the BLAS warm-up starts its threads: set-up, not evaluation."""
    ranks_of_positives(np.zeros((2, 3), np.float32), Positives.from_lists([[1], []]))
    labels = np.ones((3, 1), dtype=bool)
    pmrp(np.zeros((2, 3), np.float32), labels[:2], labels)


def job(implementation: str, part: str, quick: bool) -> dict[str, Any]:
    """One measurement in this fresh process: data, BLAS (and numba) warm-up, the timed part, its
    peak RSS; for ours on a part that computes score matrices (a retrieval task, PMRP, ``evaluate``)
    also the GEMMs of those matrices, timed before the high-water mark is reset and again after the
    peak is read (the lower counts)."""
    data = synthesise(quick)
    warm = unit_of(data, IMAGE_KIND)[:256]
    warm @ warm.T  # BLAS thread start-up, outside the timing
    matrices = part_matrices(data, part) if implementation == "ours" and part not in ("ratings", "bison") else []
    if implementation == "ours":
        warm_up_numba()
    gemm = [gemm_seconds(matrices)] if matrices else []
    gc.collect()
    reset_peak_rss()
    setup = peak_rss_mb()  # the RSS now, just reset
    result = timed_part(data, implementation, part, quick)
    peak = peak_rss_mb()
    if matrices:
        gemm.append(gemm_seconds(matrices))
        result["gemm_seconds"] = min(gemm)
        result["gemm_runs_s"] = gemm
        result["gemm_matrices"] = len(matrices)
        result["gemm_gflops"] = gemm_flops(matrices) / min(gemm) / 1e9
        result["blas_threads"] = threadpool_info()[0]["num_threads"]
    return {**result, "setup_rss_mb": setup, "peak_rss_mb": peak}


def measure(implementation: str, part: str, quick: bool) -> dict[str, Any]:
    """``job`` in a spawned process of its own, so its peak RSS is its own and nothing is inherited."""
    load = os.getloadavg()[0]  # other jobs' load shows in the timings; logged so a drifting run can be spotted
    with ProcessPoolExecutor(max_workers=1, mp_context=multiprocessing.get_context("spawn")) as pool:
        result = pool.submit(job, implementation, part, quick).result()
    result["load_1min"] = load
    gemm = (
        f" ({result['seconds'] / result['gemm_seconds']:.2f}x its GEMM, {result['gemm_seconds']:.2f}s)" if "gemm_seconds" in result else ""
    )
    print(
        f"  {implementation} {part}: {result['seconds']:.2f}s{gemm}{' (extrapolated)' if 'subsample_seconds' in result and implementation == 'reference' else ''},"
        f" peak RSS {result['peak_rss_mb']:.0f} MB (at start {result['setup_rss_mb']:.0f}), load before {load:.1f}",
        flush=True,
    )
    return result


# --------------------------------------------------------------------------- agreement


def check(what: str, ours: float, reference: float, exact: bool = False) -> dict[str, Any]:
    ok = ours == reference if exact else math.isclose(ours, reference, rel_tol=TOLERANCE, abs_tol=TOLERANCE)
    return {
        "what": what,
        "ours": float(ours),
        "reference": float(reference),
        "abs_diff": abs(float(ours) - float(reference)),
        "exact": exact,
        "ok": ok,
    }


def agreement(runs: dict[tuple[str, str], dict[str, Any]]) -> list[dict[str, Any]]:
    """Every compared number: ``evaluate``'s against the references, PMRP on the subsample."""
    ours = runs["ours", "evaluate"]["values"]
    checks = []
    for task in TASKS:
        for protocol in (ALL, FOLDS):
            for key, want in runs["reference", task]["values"][protocol].items():
                checks.append(check(f"{task} {protocol} {key}", ours[protocol][key][task], want, exact=key == "median_rank"))
    for kind in RATING_KINDS:
        mean, std = runs["reference", "ratings"]["values"][kind]
        checks.append(check(f"{kind} spearman", ours[ALL]["spearman"][kind], mean))
        checks.append(check(f"{kind} spearman_std", ours[ALL]["spearman_std"][kind], std))
    for task in TASKS:
        for zeta in SETTINGS.pmrp_zetas:
            got, want = runs["ours", "pmrp"]["values"][task][zeta], runs["reference", "pmrp"]["values"][task][zeta]
            checks.append(check(f"{task} PMRP@zeta={zeta} (subsample)", got[0], want[0]))
            checks.append(check(f"{task} PMRP@zeta={zeta} queries without match (subsample)", got[1], want[1], exact=True))
    checks.append(check("bison accuracy", ours[ALL]["accuracy"]["bison"], runs["reference", "bison"]["values"]))
    return checks


# --------------------------------------------------------------------------- report


def summarise(runs: dict[tuple[str, str], dict[str, Any]]) -> list[dict[str, Any]]:
    """One row per part and one for the whole protocol (the reference's: the sum of its parts)."""
    rows = []
    for part in PARTS:
        ours, ref = runs["ours", part], runs["reference", part]
        rows.append({"part": part, "ours": ours, "reference": ref, "extrapolated": part == "pmrp"})
    whole = runs["ours", "evaluate"]
    reference_total = {
        "seconds": sum(runs["reference", p]["seconds"] for p in PARTS),
        "setup_rss_mb": max(runs["reference", p]["setup_rss_mb"] for p in PARTS),
        "peak_rss_mb": max(runs["reference", p]["peak_rss_mb"] for p in PARTS),
    }
    rows.append({"part": "evaluate()", "ours": whole, "reference": reference_total, "extrapolated": True})
    return [
        {
            "part": row["part"],
            "ours_s": row["ours"]["seconds"],
            "reference_s": row["reference"]["seconds"],
            "ours_over_reference": row["ours"]["seconds"] / row["reference"]["seconds"],
            "speed_up": row["reference"]["seconds"] / row["ours"]["seconds"],
            "reference_extrapolated": row["extrapolated"],
            "gemm_s": row["ours"].get("gemm_seconds"),
            "ours_over_gemm": row["ours"]["seconds"] / row["ours"]["gemm_seconds"] if "gemm_seconds" in row["ours"] else None,
            "ours_peak_rss_mb": row["ours"]["peak_rss_mb"],
            "ours_timed_rss_mb": row["ours"]["peak_rss_mb"] - row["ours"]["setup_rss_mb"],
            "reference_peak_rss_mb": row["reference"]["peak_rss_mb"],
            "reference_timed_rss_mb": row["reference"]["peak_rss_mb"] - row["reference"]["setup_rss_mb"],
            **{f"{side}_subsample_s": row[side]["subsample_seconds"] for side in ("ours", "reference") if "subsample_seconds" in row[side]},
        }
        for row in rows
    ]


def table(rows: list[dict[str, Any]]) -> str:
    header = ("part", "ours s", "GEMM s", "x GEMM", "ref s", "ours/ref", "speed-up", "ours peak MB", "+timed", "ref peak MB", "+timed")
    lines = [
        (
            row["part"],
            f"{row['ours_s']:.2f}",
            "" if row["gemm_s"] is None else f"{row['gemm_s']:.2f}",
            "" if row["ours_over_gemm"] is None else f"{row['ours_over_gemm']:.2f}",
            f"{row['reference_s']:.2f}{'*' if row['reference_extrapolated'] else ''}",
            f"{row['ours_over_reference']:.4f}",
            f"{row['speed_up']:.1f}x",
            f"{row['ours_peak_rss_mb']:.0f}",
            f"{row['ours_timed_rss_mb']:.0f}",
            f"{row['reference_peak_rss_mb']:.0f}",
            f"{row['reference_timed_rss_mb']:.0f}",
        )
        for row in rows
    ]
    widths = [max(len(cells[i]) for cells in (header, *lines)) for i in range(len(header))]
    return "\n".join("  ".join(cell.rjust(width) for cell, width in zip(cells, widths, strict=True)) for cells in (header, *lines))


def run(args: argparse.Namespace) -> None:
    quick = bool(args.quick)
    runs: dict[tuple[str, str], dict[str, Any]] = {}
    for part in PARTS:  # ours and reference interleaved, so drifting load hits both alike
        for implementation in ("ours", "reference"):
            runs[implementation, part] = measure(implementation, part, quick)
    runs["ours", "evaluate"] = measure("ours", "evaluate", quick)
    data = runs["ours", "evaluate"]["data"]
    rows = summarise(runs)
    checks = agreement(runs)
    failures = [c for c in checks if not c["ok"]]
    pmrp_row = next(row for row in rows if row["part"] == "pmrp")
    ours_parts = sum(runs["ours", part]["seconds"] for part in PARTS)
    print(
        f"{data['images']:,} images × {data['captions']:,} captions, d = {DIM}; positives {data['counts']};"
        f" i2i queries with a positive {data['i2i_queries_with_positive']:,}; {data['distinct_label_sets']:,} label sets;"
        f" {data['bison_triples']:,} BISON triples"
    )
    print(table(rows))
    print(
        f"* pmrp: the reference ran on {PMRP_QUERIES[quick]} seeded queries per task ({pmrp_row['reference_subsample_s']:.2f}s,"
        f" ours {pmrp_row['ours_subsample_s']:.2f}s there) and its seconds are extrapolated linearly to every query;"
        " its peak RSS is the subsample's.\nevaluate(): the reference's row is the sum (seconds) and max (memory) of its parts;"
        f" ours' parts, each timed on its own, sum to {ours_parts:.2f}s."
    )
    over = {row["part"]: row["ours_over_gemm"] for row in rows if row["ours_over_gemm"] is not None}
    whole, pmrp_run = runs["ours", "evaluate"], runs["ours", "pmrp"]
    pmrp_one_thread = pmrp_run["one_thread_seconds"] / pmrp_run["gemm_seconds"]
    machine = f"{cpu_model()}, {os.cpu_count()} cores"
    print(
        f"in multiples of the GEMM time of their score matrices, timed in the same worker (goal <= {GEMM_GOAL:g}):"
        f" evaluate() {over['evaluate()']:.2f}x ({whole['seconds']:.2f}s / {whole['gemm_seconds']:.2f}s, {whole['gemm_matrices']} matrices),"
        f" PMRP {over['pmrp']:.2f}x ({pmrp_run['seconds']:.2f}s / {pmrp_run['gemm_seconds']:.2f}s; on one thread"
        f" {pmrp_run['one_thread_seconds']:.2f}s, {pmrp_one_thread:.2f}x); retrieval (5K + the 1K folds) "
        + ", ".join(f"{task} {over[task]:.2f}x" for task in TASKS)
    )
    print(
        f"GEMM: numpy float32 matmul on {whole['blas_threads']} BLAS thread(s), {whole['gemm_gflops']:.0f} GFLOP/s"
        f" in the evaluate() worker; PMRP's blocks on {os.cpu_count()} threads; {machine}, load before the evaluate() worker"
        f" {whole['load_1min']:.1f}"
    )
    worst = max(c["abs_diff"] for c in checks if not c["exact"])
    print(
        f"agreement: {len(checks) - len(failures)}/{len(checks)} values agree (within {TOLERANCE:g}, integers and median ranks exactly);"
        f" largest difference {worst:.3g}"
    )
    for failure in failures:
        print(f"FAIL {failure['what']}: ours {failure['ours']!r}, reference {failure['reference']!r} (|diff| {failure['abs_diff']:.3g})")
    path = save_result(
        NAME,
        {
            "quick": quick,
            "seed": SEED,
            "cpus": os.cpu_count(),
            "data": data,
            "settings": {
                "folds": SETTINGS.folds,
                "ks": list(SETTINGS.ks),
                "bootstrap_samples": SETTINGS.bootstrap_samples,
                "pmrp_zetas": list(SETTINGS.pmrp_zetas),
                "pmrp_r_cap": SETTINGS.pmrp_r_cap,
            },
            "pmrp_reference_queries_per_task": PMRP_QUERIES[quick],
            "pmrp_reference_extrapolated": True,
            "reference_total_is_sum_of_parts": True,
            "peak_memory": "ru_maxrss (MB) of a fresh spawned process per measurement, high-water mark reset after set-up; timed = peak - RSS at start",
            "ours_parts_sum_s": ours_parts,
            "cpu_model": cpu_model(),
            "gemm_goal": GEMM_GOAL,
            "ours_over_gemm": over,
            "pmrp_one_thread_s": pmrp_run["one_thread_seconds"],
            "pmrp_one_thread_over_gemm": pmrp_one_thread,
            "gemm_gflops": {part: result["gemm_gflops"] for (_, part), result in runs.items() if "gemm_gflops" in result},
            "blas_threads": whole["blas_threads"],
            "rows": rows,
            "load_1min": {f"{implementation} {part}": result["load_1min"] for (implementation, part), result in runs.items()},
            "reference_matrix_s": {task: runs["reference", task]["matrix_seconds"] for task in TASKS},
            "agreement": checks,
            "agreement_failures": len(failures),
        },
    )
    print(f"written to {path}")
    if failures:
        raise RuntimeError(f"{len(failures)} of {len(checks)} values disagree with the per-query references")
