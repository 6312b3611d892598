"""After verification (ECCV Caption §3.3, App. E): one ground truth from the verified positives,
written in ECCV Caption's JSON shape, and the audit of the machine annotators' bias.

Rules chosen (and why):

* **Merge**: a pair is positive when people verified it ("100% yes" / "partially yes", decided by
  the aggregate stage), when it is an original (image, caption) pair, or when a merged truth
  (e.g. CxC's SITS positives) has it as an i2t / t2i positive; each pair keeps all its sources.
* **ECCV shape**: ``{"<image id>": [caption ids]}`` for the filter stage's image queries and
  ``{"<caption id>": [image ids]}`` for its caption queries, in native ids (COCO image and
  caption annotation ids, integers as in the package's own files), so ``load_eccv`` and the
  ``eccv-caption`` package read them.
* **Bias audit**: for each annotator, the truth rebuilt without the positives it found alone
  (a pair another source also vouches for stays), and Kendall τ-b between the models'
  mAP@R / R-Precision on the full and on the reduced truth, per direction, over the filter's
  queries.  The models are the annotators themselves plus any others the params name; scores are
  computed once per model and ranked against every truth variant.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import pandas as pd
import pyarrow as pa

from crisscross.core import io
from crisscross.core.ids import CAPTION_KIND, IMAGE_KIND, published, split_id
from crisscross.core.quarantine import Rejected, reject
from crisscross.core.settings import setting
from crisscross.formats.eccv import DIRECTIONS, ECCV_FILES, I2T, T2I
from crisscross.scoring.models import MODEL_SPEC, SCORE_BLOCK_ELEMENTS, Gallery, Model
from crisscross.scoring.paired import kendall_tau_b
from crisscross.scoring.retrieval import PositiveRanks, map_at_r, r_precision, ranks_of_positives
from crisscross.scoring.truths import GroundTruth
from crisscross.tasktypes.verify import VERIFY

Pair = tuple[str, str]  # (image id, caption id)
VERIFIED, ORIGINAL = "verified", "original"
FULL = "full"  # the truth variant with every positive
AUDIT_METRICS: dict[str, Callable[[PositiveRanks], tuple[float, int]]] = {"mAP@R": map_at_r, "R-Precision": r_precision}

POSITIVES_SCHEMA = pa.schema(
    [
        ("image_id", pa.string()),
        ("caption_id", pa.string()),
        ("published_image", pa.string()),
        ("published_caption", pa.string()),
        ("sources", pa.string()),  # ','-joined: verified, original, <merged truth names>
        ("annotators", pa.string()),  # ','-joined machine annotators that proposed it (verified pairs)
    ]
)

# model → truth variant → direction → metric → value
AuditScores = dict[str, dict[str, dict[str, float]]]


@dataclass(frozen=True)
class PositivesSettings:
    """``params.yaml`` ``positives:``."""

    audit_models: Mapping[str, MODEL_SPEC] = setting({})  # more models ranked in the bias audit (evaluate.models-style, image–text)
    audit_annotators: bool = True  # rank the machine annotators too (they are image–text models)


def verified_pairs(rated: pa.Table | pd.DataFrame) -> pd.DataFrame:
    """(image_id, caption_id, positive) of the aggregate stage's VERIFY rows (``id_a`` image,
    ``id_b`` caption); ``positive`` from the column, else from ``agg_label`` ∈ {100% yes, partially yes}."""
    frame = rated.to_pandas() if isinstance(rated, pa.Table) else rated
    frame = frame[frame["task_type"] == VERIFY.name]
    positive = frame["positive"] if "positive" in frame else pd.Series(pd.NA, index=frame.index)
    from_label = frame["agg_label"].isin(VERIFY.positive_answers)
    decided = positive.where(positive.notna(), from_label).astype(bool)
    out = pd.DataFrame({"image_id": frame["id_a"].astype(str), "caption_id": frame["id_b"].astype(str), "positive": decided})
    return out.sort_values(["image_id", "caption_id"], kind="stable").reset_index(drop=True)


def finders(candidates: pa.Table) -> dict[Pair, frozenset[str]]:
    """Which annotators found each candidate pair (from the filter stage's ``candidates.parquet``)."""
    data = candidates.select(["image_id", "caption_id", "annotators"]).to_pylist()
    return {(r["image_id"], r["caption_id"]): frozenset(filter(None, r["annotators"].split(","))) for r in data}


# --------------------------------------------------------------------------- merge


@dataclass(frozen=True)
class Merged:
    """Every positive pair with its sources, and the verified rows that could not be placed."""

    sources: dict[Pair, tuple[str, ...]]
    rejected: list[Rejected]
    verified: int  # VERIFY rows read
    verified_positive: int

    def pairs(self) -> frozenset[Pair]:
        return frozenset(self.sources)

    def per_source(self) -> dict[str, int]:
        """Positive pairs each source vouches for (a pair counts under each of its sources)."""
        counts: dict[str, int] = defaultdict(int)
        for sources in self.sources.values():
            for source in sources:
                counts[source] += 1
        return dict(sorted(counts.items()))


def merge_positives(verified: pd.DataFrame, gallery: Gallery, merged: Mapping[str, GroundTruth], where: str) -> Merged:
    """Verified positives ∪ the gallery's original pairs ∪ each merged truth's i2t / t2i positives.
    Verified pairs naming an image or caption the gallery lacks go to the quarantine."""
    images, captions = set(gallery.image_ids), set(gallery.caption_ids)
    sources: dict[Pair, set[str]] = defaultdict(set)
    rejected: list[Rejected] = []
    positive = 0
    for row in verified.itertuples(index=False):
        unknown = [i for i, known in ((row.image_id, row.image_id in images), (row.caption_id, row.caption_id in captions)) if not known]
        if unknown:
            rejected.append(
                reject(
                    "pair",
                    f"{row.image_id}|{row.caption_id}",
                    "unknown-id",
                    f"{', '.join(unknown)} not in the items: rate pairs of the items the filter stage read",
                    where,
                    {"image_id": row.image_id, "caption_id": row.caption_id, "positive": bool(row.positive)},
                )
            )
            continue
        if row.positive:
            positive += 1
            sources[(row.image_id, row.caption_id)].add(VERIFIED)
    for caption, image in gallery.caption_image.items():
        sources[(image, caption)].add(ORIGINAL)
    for name, truth in sorted(merged.items()):
        for pair in set(truth.pairs(I2T)) | {(image, caption) for caption, image in truth.pairs(T2I)}:
            if pair[0] in images and pair[1] in captions:  # a merged truth may span more than this gallery
                sources[pair].add(name)
    return Merged({p: tuple(sorted(s)) for p, s in sorted(sources.items())}, rejected, len(verified), positive)


def positives_table(merged: Merged, found_by: Mapping[Pair, frozenset[str]]) -> pa.Table:
    rows = [
        {
            "image_id": image,
            "caption_id": caption,
            "published_image": published(image, IMAGE_KIND),
            "published_caption": published(caption, CAPTION_KIND),
            "sources": ",".join(sources),
            "annotators": ",".join(sorted(found_by.get((image, caption), ()))),
        }
        for (image, caption), sources in merged.sources.items()
    ]
    return pa.Table.from_pylist(rows, schema=POSITIVES_SCHEMA)


def _json_id(canonical: str) -> int | str:
    """The native id (COCO: the image id / caption annotation id), as an integer where it is one,
    as in the package's files."""
    value = split_id(canonical)[2]
    return int(value) if value.isdigit() else value


def eccv_associations(
    positives: Iterable[Pair], image_queries: Iterable[str], caption_queries: Iterable[str]
) -> tuple[dict[str, list[int | str]], dict[str, list[int | str]]]:
    """ECCV-shaped i2t / t2i: ``{"<image id>": [caption ids]}`` for the image queries,
    ``{"<caption id>": [image ids]}`` for the caption queries (values sorted; queries without a
    positive left out, as in the package's files)."""
    images, captions = set(image_queries), set(caption_queries)
    i2t: dict[str, set[int | str]] = defaultdict(set)
    t2i: dict[str, set[int | str]] = defaultdict(set)
    for image, caption in positives:
        if image in images:
            i2t[str(_json_id(image))].add(_json_id(caption))
        if caption in captions:
            t2i[str(_json_id(caption))].add(_json_id(image))

    def ordered(by_query: Mapping[str, set[int | str]]) -> dict[str, list[int | str]]:
        return {k: sorted(v, key=lambda x: (isinstance(x, str), x)) for k, v in by_query.items()}

    return ordered(i2t), ordered(t2i)


def write_eccv_json(directory: str, i2t: Mapping[str, list[int | str]], t2i: Mapping[str, list[int | str]]) -> None:
    """The two files under the names the eccv-caption package (and ``load_eccv``) uses."""
    io.write_json(io.join(directory, ECCV_FILES[I2T]), dict(i2t))
    io.write_json(io.join(directory, ECCV_FILES[T2I]), dict(t2i))


# --------------------------------------------------------------------------- bias audit


def truth_variants(merged: Merged, found_by: Mapping[Pair, frozenset[str]]) -> dict[str, frozenset[Pair]]:
    """``full`` and, per annotator, the truth without the positives only it found (pairs another
    source, original or merged, vouches for stay)."""
    full = merged.pairs()
    variants = {FULL: full}
    for annotator in sorted({a for who in found_by.values() for a in who}):
        alone = {p for p, sources in merged.sources.items() if sources == (VERIFIED,) and found_by.get(p) == frozenset({annotator})}
        variants[annotator] = full - alone
    return variants


def audit_scores(
    model: Model, gallery: Gallery, queries: Mapping[str, Sequence[str]], variants: Mapping[str, frozenset[Pair]]
) -> AuditScores:
    """mAP@R and R-Precision of one model per truth variant and direction over ``queries``
    (direction → query ids): each block of scores is computed once and ranked against every variant."""
    out: AuditScores = {name: {} for name in variants}
    for direction, (_, item_kind) in DIRECTIONS.items():
        query_ids = tuple(queries.get(direction, ()))
        if not query_ids:
            continue
        mapped = variant_positives(variants, direction, query_ids, gallery.ids(item_kind))
        for name, ranked in variant_ranks(model, gallery, direction, query_ids, mapped).items():
            out[name][direction] = {metric: float(fn(ranked)[0]) for metric, fn in AUDIT_METRICS.items()}
    return out


def variant_positives(
    variants: Mapping[str, frozenset[Pair]], direction: str, query_ids: Sequence[str], item_ids: Sequence[str]
) -> dict[str, Any]:
    """Each truth variant's positives of ``query_ids`` among ``item_ids`` in one direction, as rows."""
    truths = {name: GroundTruth(name=name, i2t=pairs, t2i=frozenset((c, i) for i, c in pairs)) for name, pairs in variants.items()}
    return {name: truth.positives(direction, query_ids, item_ids).positives for name, truth in truths.items()}


def variant_ranks(
    model: Model, gallery: Gallery, direction: str, query_ids: Sequence[str], mapped: Mapping[str, Any]
) -> dict[str, PositiveRanks]:
    """The ranks of each variant's positives (``mapped``: :func:`variant_positives`) under one model:
    each block of scores is computed once and ranked against every variant."""
    query_kind, item_kind = DIRECTIONS[direction]
    item_ids = gallery.ids(item_kind)
    block = model.block_scores(query_kind, query_ids, item_kind, item_ids)
    step = max(1, SCORE_BLOCK_ELEMENTS // max(len(item_ids), 1))
    parts: dict[str, list[PositiveRanks]] = {name: [] for name in mapped}
    for lo in range(0, len(query_ids), step):
        hi = min(lo + step, len(query_ids))
        scores = block(lo, hi)
        for name in mapped:
            parts[name].append(ranks_of_positives(scores, mapped[name].rows_slice(lo, hi)))
    return {name: PositiveRanks.concatenate(parts[name]) for name in mapped}


def bias_audit(merged: Merged, found_by: Mapping[Pair, frozenset[str]], scores: Mapping[str, AuditScores]) -> dict[str, Any]:
    """ECCV App. E: per annotator, the positives it found (alone), the size of the truth without
    its sole finds, and Kendall τ-b between the models' rankings on the full and the reduced truth
    (per direction and metric; undefined — None — with fewer than two models)."""
    verified = {p for p, sources in merged.sources.items() if VERIFIED in sources}
    variants = truth_variants(merged, found_by)
    models = sorted(scores)
    per: dict[str, Any] = {}
    for annotator in sorted(v for v in variants if v != FULL):
        taus: dict[str, dict[str, float | None]] = {}
        for direction in DIRECTIONS:
            for metric in AUDIT_METRICS:
                full = [scores[m][FULL].get(direction, {}).get(metric) for m in models]
                reduced = [scores[m][annotator].get(direction, {}).get(metric) for m in models]
                usable = [(f, r) for f, r in zip(full, reduced, strict=True) if f is not None and r is not None]
                if usable:
                    tau = kendall_tau_b(*zip(*usable, strict=True)) if len(usable) >= 2 else float("nan")
                    taus.setdefault(direction, {})[metric] = io.strict_json(float(tau))
        per[annotator] = {
            "positives_found": sum(annotator in found_by.get(p, ()) for p in verified),
            "positives_found_alone": len(variants[FULL]) - len(variants[annotator]),
            "truth_pairs_without": len(variants[annotator]),
            "kendall_tau_b": taus,
        }
    return {
        "verified_positives": len(verified),
        "truth_pairs": len(variants[FULL]),
        "found_by_one_annotator": sum(len(found_by.get(p, ())) == 1 for p in verified),
        "verified_without_finder": sum(not found_by.get(p) for p in verified),
        "models": models,
        "annotators": per,
        "scores": {m: scores[m] for m in models},
    }
