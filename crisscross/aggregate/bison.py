"""COCO-BISON after its two rounds (BISON §4.1 steps 2–3): accepted triples, their JSON and yields.

What each round's item counts as (a CHOOSE caption chosen; a VERIFY-TRIPLE accepted by every one
of at least two verifiers) is its task type's rule (:mod:`crisscross.tasktypes.choose`,
:mod:`crisscross.tasktypes.verify_triple`); the paper had one chooser per pair, and with more the
round's answer aggregator decides.  Here:

* The verifiers must be *different* annotators from the one who chose the caption: a triple one
  of whose verifiers also chose its caption is refused (``verifier-was-chooser``).

:func:`bison_json` writes the accepted triples in the shape of COCO-BISON's released
``bison_annotations.cocoval2014.json`` (as its evaluation script reads it): ``{"info": {"source",
"split", …}, "data": [{"bison_id", "caption_id", "true_image_id", "image_candidates":
[{"image_id", "image_filename"}, {…}]}]}`` with native ids (integers where the ids are numbers, as
COCO's), the two candidates in a seeded order so the target's place tells nothing.

:func:`caption_baseline` is BISON §5.1's baseline (choose the image whose *other* reference
captions are closer to the caption), as a score matrix ``crisscross evaluate`` reads as a model.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from io import BytesIO
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa

from crisscross.core.ids import IMAGE_KIND, published, split_id
from crisscross.core.quarantine import Rejected, reject
from crisscross.core.rng import generator
from crisscross.embed.sets import EmbeddingSet, unit_rows
from crisscross.formats.schema import numbered_rows_of
from crisscross.tasktypes.choose import NONE
from crisscross.tasktypes.verify_triple import VERIFIERS, VERIFY_TRIPLE

TRIPLES_SCHEMA = pa.schema(
    [
        ("bison_id", pa.int64()),
        ("caption", pa.string()),
        ("target", pa.string()),
        ("decoy", pa.string()),
        ("caption_text", pa.string()),
        ("similarity", pa.float64()),  # cosine of target and decoy under the decoys encoder
        ("encoder", pa.string()),
        ("chooser", pa.string()),
        ("verifiers", pa.string()),  # ";"-joined
    ]
)


# --------------------------------------------------------------------------- triples


@dataclass(frozen=True)
class Triple:
    caption: str
    target: str
    decoy: str
    chooser: str
    verifiers: tuple[str, ...]


def accepted_triples(
    triples_rated: Sequence[Mapping[str, Any]],
    choose_judgments: pd.DataFrame,
    triple_judgments: pd.DataFrame,
    image_of: Mapping[str, str],
    source: str,
) -> tuple[list[Triple], dict[str, int], list[Rejected]]:
    """The VERIFY-TRIPLE round's accepted items as triples, counts of what was not accepted, and
    a ``Rejected`` for every triple refused (not accepted by the verifiers; verified by its chooser)."""
    choosers = _workers(choose_judgments[choose_judgments["answer"] != NONE], ["id_a", "id_b", "answer"])
    verifiers = _workers(triple_judgments, ["id_b", "id_a"])
    kept: list[Triple] = []
    counts = {"verified": 0, "accepted": 0, "not_accepted": 0, "verifier_was_chooser": 0}
    rejected: list[Rejected] = []
    for n, row in numbered_rows_of(triples_rated, VERIFY_TRIPLE.name):
        counts["verified"] += 1
        caption, decoy = row["id_a"], row["id_b"]
        target = image_of.get(caption, "")
        where = f"{source}:{n}"
        if not row["positive"]:
            counts["not_accepted"] += 1
            detail = f"{row['n']} verifier(s), answer {row['agg_label']!r}: not every one of at least {VERIFIERS} said target"
            rejected.append(reject("triple", row["item_id"], "not-accepted", detail, where, dict(row)))
            continue
        chose = choosers.get((target, decoy, caption), ())
        checked = verifiers.get((decoy, caption), ())
        both = sorted(set(chose) & set(checked))
        if both:
            counts["verifier_was_chooser"] += 1
            detail = f"{', '.join(both)} chose the caption and verified it too; BISON asks for different annotators"
            rejected.append(reject("triple", row["item_id"], "verifier-was-chooser", detail, where, dict(row)))
            continue
        counts["accepted"] += 1
        kept.append(Triple(caption, target, decoy, ";".join(chose), tuple(checked)))
    return sorted(kept, key=lambda t: (t.target, t.decoy, t.caption)), counts, rejected


def _workers(judgments: pd.DataFrame, keys: list[str]) -> dict[tuple[str, ...], tuple[str, ...]]:
    grouped = judgments.groupby(keys, sort=True)["worker"].agg(lambda w: tuple(sorted(w)))
    return {tuple(k): v for k, v in grouped.items()}


def triples_table(triples: Sequence[Triple], texts: Mapping[str, str], decoys: Mapping[tuple[str, str], tuple[float, str]]) -> pa.Table:
    """One row per accepted triple, ``bison_id`` 0… in (target, decoy, caption) order."""
    rows = [
        {
            "bison_id": i,
            "caption": t.caption,
            "target": t.target,
            "decoy": t.decoy,
            "caption_text": texts.get(t.caption),
            "similarity": decoys.get((t.target, t.decoy), (None, None))[0],
            "encoder": decoys.get((t.target, t.decoy), (None, None))[1],
            "chooser": t.chooser,
            "verifiers": ";".join(t.verifiers),
        }
        for i, t in enumerate(triples)
    ]
    return pa.Table.from_pylist(rows, schema=TRIPLES_SCHEMA)


def _native(canonical: str) -> int | str:
    """The dataset's own id (COCO: the integer), as the released JSON writes it."""
    native = split_id(canonical)[2]
    return int(native) if native.isdigit() else native


def bison_json(table: pa.Table, splits: Mapping[str, str], seed: int, simulated: bool) -> dict[str, Any]:
    """The released COCO-BISON JSON shape (module docstring) of a triples table; ``splits`` maps
    image ids to their split (``info.split``), the namespace of the ids gives ``info.source``."""
    data = []
    namespaces, used_splits = set(), set()
    for row in table.to_pylist():
        target, decoy = row["target"], row["decoy"]
        namespaces.add(split_id(target)[0])
        used_splits.add(splits.get(target, ""))
        candidates = [target, decoy]
        if generator(seed, "bison-candidates", row["caption"], decoy).random() < 0.5:
            candidates.reverse()
        data.append(
            {
                "bison_id": row["bison_id"],
                "caption_id": _native(row["caption"]),
                "caption": row["caption_text"],
                "true_image_id": _native(target),
                "image_candidates": [{"image_id": _native(i), "image_filename": published(i, IMAGE_KIND)} for i in candidates],
            }
        )
    return {
        "info": {
            "source": "+".join(sorted(namespaces)),
            "split": "+".join(sorted(s for s in used_splits if s)),
            "description": "Binary image selection triples (COCO-BISON procedure, Hu et al. 2019 §4.1) built by crisscross",
            "simulated": simulated,
        },
        "data": data,
    }


def yields(images: int, with_decoy: int, chose: Mapping[str, int], targets_of_triples: Iterable[str]) -> dict[str, Any]:
    """The funnel: images → images with a decoy → pairs with a chosen caption → accepted triples,
    and the share of images that end as the target of an accepted triple (the paper: 38,680 of
    40,504, 95.5%)."""
    accepted = list(targets_of_triples)
    targets = len(set(accepted))
    return {
        "images": images,
        "with_decoy": with_decoy,
        "choose_kept": chose.get("chosen", 0),
        "choose_none": chose.get("none", 0),
        "triples_accepted": len(accepted),
        "target_images": targets,
        "image_yield": round(targets / images, 6) if images else 0.0,
        "paper_image_yield": round(38_680 / 40_504, 6),
    }


# --------------------------------------------------------------------------- the §5.1 baseline


@dataclass(frozen=True)
class CaptionBaseline:
    """BISON §5.1's reference-caption baseline as an image × caption score matrix: a caption
    scores an image by its cosine with the mean of the image's *other* captions (its own caption
    left out, as the paper removes the target caption from the references), under one text encoder."""

    encoder: str
    scores: np.ndarray  # images × captions, float32
    image_ids: tuple[str, ...]
    caption_ids: tuple[str, ...]

    def accuracy(self, table: pa.Table) -> float:
        """BISON accuracy of the baseline over a triples table (a tie is wrong, as in evaluate)."""
        image_row = {v: i for i, v in enumerate(self.image_ids)}
        caption_col = {v: i for i, v in enumerate(self.caption_ids)}
        rows = table.select(["caption", "target", "decoy"]).to_pylist()
        columns = [caption_col[r["caption"]] for r in rows]
        target = self.scores[[image_row[r["target"]] for r in rows], columns]
        decoy = self.scores[[image_row[r["decoy"]] for r in rows], columns]
        return float(np.mean(target > decoy)) if rows else float("nan")

    def npz(self) -> bytes:
        """The score-matrix model file ``crisscross evaluate`` reads (``source: score-matrix``)."""
        buffer = BytesIO()
        np.savez(buffer, scores=self.scores, image_ids=np.asarray(self.image_ids), caption_ids=np.asarray(self.caption_ids))
        return buffer.getvalue()


def caption_baseline(encoder: str, captions: EmbeddingSet, images: Iterable[str], image_of: Mapping[str, str]) -> CaptionBaseline:
    """The baseline over ``images`` (sorted) and all their captions with a vector; an image whose
    only caption is the one scored gets NaN → -1 (it has no other reference)."""
    wanted = sorted(set(images))
    rows = captions.row_of()
    members = sorted(c for c in rows if image_of.get(c) in set(wanted))
    unit = unit_rows(np.asarray(captions.vectors[[rows[c] for c in members]], dtype=np.float64))
    index = {image: i for i, image in enumerate(wanted)}
    owner = np.asarray([index[image_of[c]] for c in members], dtype=np.int64)
    sums = np.zeros((len(wanted), captions.dim))
    np.add.at(sums, owner, unit)
    counts = np.bincount(owner, minlength=len(wanted)).astype(np.float64)
    dots = sums @ unit.T  # image × caption: sum over the image's captions of cosines
    own = np.zeros_like(dots, dtype=bool)
    own[owner, np.arange(len(members))] = True
    left = np.where(own, dots - 1.0, dots)  # the caption's own unit vector left out
    n = counts[:, None] - own
    sq = (sums * sums).sum(axis=1)[:, None]
    norm_sq = np.where(own, sq - 2 * dots + 1.0, sq)  # |sum - u|² = |sum|² - 2 sum·u + 1
    with np.errstate(invalid="ignore", divide="ignore"):
        scores = np.where(n > 0, left / np.sqrt(np.maximum(norm_sq, 0.0)), np.nan)
    scores = np.nan_to_num(scores, nan=-1.0).astype(np.float32)
    return CaptionBaseline(encoder, scores, tuple(wanted), tuple(members))
