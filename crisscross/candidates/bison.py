"""COCO-BISON step 1 and the hand-over to step 3 (BISON §4.1): decoys, then the chosen captions.

* Decoys: every image with captions is a *target*; its *decoy* is its nearest other image by the
  mean of its captions' word embeddings.  The paper averaged FastText vectors over all words of all
  captions; here the space is a text encoder's co-caption means from the embed stage
  (``decoys.encoder``, default ``bow-glove50``: mean GloVe word vectors per caption, then the
  mean over the image's captions).  The search is exact and blockwise; ties go to the smaller id,
  so the result does not depend on the block size.  Refused, with a reason: an image without
  captions (``no-captions``), without a vector in that space (``no-embedding``), with an unusable
  vector (``zero-vector``, ``non-finite``, ``wrong-dim``), without any other image
  (``no-neighbour``); a nearest neighbour that is the same picture as the target (same file:
  ``same-image``) is refused and the next one taken.
* Chosen captions: a CHOOSE item whose aggregated answer is a caption becomes a VERIFY-TRIPLE
  candidate (caption, decoy), once the caption is checked to be one of the target's
  (``caption-not-of-target``); items answered ``none`` are counted, not candidates.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa

from crisscross.core.quarantine import Rejected, reject
from crisscross.core.settings import setting
from crisscross.embed.sets import EmbeddingSet, row_problem, unit_rows
from crisscross.formats.schema import numbered_rows_of
from crisscross.tasktypes.choose import CHOOSE, NONE

DECOY_METHOD = "bison_decoy"  # target–decoy pairs: CHOOSE items (CHOOSE.methods)
CHOSEN_METHOD = "bison_chosen"  # caption–decoy pairs: VERIFY-TRIPLE items
CANDIDATES_SCHEMA = pa.schema([(name, pa.string()) for name in ("method", "id1", "id2", "provenance")])
DECOYS_SCHEMA = pa.schema(
    [("target", pa.string()), ("decoy", pa.string()), ("similarity", pa.float64()), ("encoder", pa.string()), ("rank", pa.int32())]
)


@dataclass(frozen=True)
class DecoySettings:
    """``params.yaml`` ``decoys:``: the text encoder whose co-caption means are compared, and how
    many targets one search block holds (memory: block × images floats)."""

    encoder: str = "bow-glove50"
    block: int = setting(1024, low=1)


@dataclass(frozen=True)
class Decoy:
    target: str
    decoy: str
    similarity: float  # cosine of the two co-caption means
    encoder: str
    rank: int  # 1 = nearest; more when nearer neighbours were the same picture


@dataclass(frozen=True)
class Space:
    """The searchable images (sorted ids), their unit co-caption means and picture keys."""

    ids: tuple[str, ...]
    unit: np.ndarray
    picture: tuple[str, ...]  # file path, or the id when there is none: equal keys are the same picture
    encoder: str


def searchable(
    images: Sequence[Mapping[str, Any]], captions: Sequence[Mapping[str, Any]], means: EmbeddingSet, encoder: str, source: str
) -> tuple[Space, list[Rejected]]:
    """The images a decoy can be searched for and among, and a ``Rejected`` for every other."""
    described = {row["image_id"] for row in captions if row.get("text")}
    rows = means.row_of()
    kept: list[str] = []
    rejected: list[Rejected] = []
    for image in sorted(images, key=lambda r: r["image_id"]):
        key = image["image_id"]
        if key not in described:
            rejected.append(reject("image", key, "no-captions", f"image {key} has no caption to average", source, dict(image)))
        elif key not in rows:
            detail = f"image {key} has no co-caption mean under text/{encoder}"
            rejected.append(reject("image", key, "no-embedding", detail, source, dict(image)))
        elif problem := row_problem(np.asarray(means.vectors[rows[key]]), means.dim):
            rejected.append(
                reject("image", key, problem, f"image {key}: its text/{encoder} co-caption mean is unusable", source, dict(image))
            )
        else:
            kept.append(key)
    by_id = {image["image_id"]: image for image in images}
    unit = unit_rows(np.asarray(means.vectors[[rows[k] for k in kept]], dtype=np.float64)) if kept else np.zeros((0, means.dim))
    picture = tuple(str(by_id[k].get("path") or k) for k in kept)
    return Space(tuple(kept), unit, picture, encoder), rejected


def nearest(space: Space, start: int, stop: int, source: str) -> list[Decoy | Rejected]:
    """Decoys of targets ``start:stop`` (rows of ``space``): the most similar other image, ties to the
    smaller id (the first row, ids being sorted); nearer neighbours that are the same picture are
    refused as ``same-image`` and passed over."""
    out: list[Decoy | Rejected] = []
    similarity = space.unit[start:stop] @ space.unit.T
    order = np.argsort(-similarity, axis=1, kind="stable")
    for offset, row in enumerate(range(start, stop)):
        target = space.ids[row]
        rank = 0
        for column in order[offset]:
            if column == row:
                continue
            rank += 1
            candidate = space.ids[column]
            if space.picture[column] == space.picture[row]:
                detail = f"{candidate} is the same picture as {target} ({space.picture[row]}); the next neighbour is taken"
                out.append(reject("decoy", f"{target}|{candidate}", "same-image", detail, source, {"target": target, "decoy": candidate}))
                continue
            out.append(Decoy(target, candidate, round(float(similarity[offset, column]), 6), space.encoder, rank))
            break
        else:
            detail = f"no other image to be the decoy of {target}"
            out.append(reject("image", target, "no-neighbour", detail, source, {"target": target}))
    return out


def blocks(n: int, size: int) -> list[tuple[int, int]]:
    return [(start, min(start + size, n)) for start in range(0, n, size)]


def decoys_table(decoys: Iterable[Decoy]) -> pa.Table:
    rows = [vars(d) for d in sorted(decoys, key=lambda d: d.target)]
    return pa.Table.from_pylist(rows, schema=DECOYS_SCHEMA)


def candidates_table(rows: Iterable[tuple[str, str, str, str]]) -> pa.Table:
    """(method, id1, id2, provenance) rows sorted, as the tasks stage reads candidates."""
    return pa.Table.from_pylist(
        [dict(zip(CANDIDATES_SCHEMA.names, r, strict=True)) for r in sorted(rows)],
        schema=CANDIDATES_SCHEMA,
    )


def decoy_candidates(decoys: Iterable[Decoy]) -> pa.Table:
    """CHOOSE candidates: (target, decoy) with the encoder and similarity as provenance."""
    return candidates_table((DECOY_METHOD, d.target, d.decoy, f"{d.encoder} cosine {d.similarity:.6f}") for d in decoys)


@dataclass(frozen=True)
class Chosen:
    caption: str
    target: str
    decoy: str


def chosen_captions(
    rated: Sequence[Mapping[str, Any]], image_of: Mapping[str, str], source: str
) -> tuple[list[Chosen], dict[str, int], list[Rejected]]:
    """The aggregated CHOOSE rows as (caption, target, decoy), the count of pairs answered
    ``none`` (and of rows of other task types), and a ``Rejected`` for a caption not of its target."""
    chosen: list[Chosen] = []
    counts = {"chosen": 0, "none": 0, "other_task_types": 0}
    rejected: list[Rejected] = []
    rows = list(rated)
    choices = numbered_rows_of(rows, CHOOSE.name)
    counts["other_task_types"] = len(rows) - len(choices)
    for n, row in choices:
        answer, target, decoy = row["agg_label"], row["id_a"], row["id_b"]
        if answer == NONE:
            counts["none"] += 1
            continue
        if image_of.get(answer) != target:
            detail = f"chosen caption {answer} describes {image_of.get(answer, 'no image in the captions table')}, not target {target}"
            rejected.append(reject("choice", row["item_id"], "caption-not-of-target", detail, f"{source}:{n}", dict(row)))
            continue
        counts["chosen"] += 1
        chosen.append(Chosen(answer, target, decoy))
    return sorted(chosen, key=lambda c: (c.target, c.decoy)), counts, rejected


def chosen_candidates(chosen: Iterable[Chosen]) -> pa.Table:
    """VERIFY-TRIPLE candidates: (caption, decoy); the caption's image is the target."""
    return candidates_table((CHOSEN_METHOD, c.caption, c.decoy, f"chosen for target {c.target}") for c in chosen)
