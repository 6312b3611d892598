"""CxC intermodal candidates derived from rated intramodal pairs (Crisscrossed Captions §2, "Intermodality").

* ``c2i_intrasim`` — for each rated I2I pair (i_j, i_k) the caption–image pairs (c_k, i_j) and
  (c_j, i_k), c_k one caption of i_k drawn with a generator keyed by the direction (i_j, i_k), so
  any runner and any row order draw the same caption; for each rated C2C pair of captions of
  different images (c_j of i_j, c_k of i_k) the pairs (c_k, i_j) and (c_j, i_k).  Co-caption pairs
  (same image) give original pairs, not new candidates.  Selection runs by decreasing rating: a
  ``c2c_share`` (the paper: half) of the quota from C2C ranks, the rest from I2I ranks, skipping
  pairs already selected (the I2I half also fills what the C2C ranks could not).
* ``c2i_original`` — every caption with its own image (the paper's "all MS-COCO pairs").

Ranks (``ranks``):

* ``global`` — one ranking of a task type's rated pairs by score (ties by ids), both directions
  of a pair at the pair's rank.
* ``per-query`` — the *query* of a candidate is the rated item whose image receives the new caption
  (i_j for (c_k, i_j) from I2I, c_j from C2C); each query's top-``depth`` candidates come first,
  in global order, then all others in global order.

**Default: ``per-query`` at depth 1.**  Replaying the CxC test release (STS + SIS, CxC's quota of
19,833, Karpathy test captions), it recovers more of CxC's own ``c2i_intrasim`` pairs than the
global ranking, in both direction modes (of CxC's 19,833 pairs, at image-pair level 48.9% against
44.4% with ``both``, 71.3% against 70.7% with ``first``; at caption level 10.7% vs 9.7% and 15.4% vs
15.1%; tests/candidates/test_c2i.py measures and asserts these): a query's best rated pair is what
CxC's selection most often kept.

Directions (``directions``): ``both`` (default; what a ``rated.parquet`` allows, since its
symmetric pairs are stored in id order and the sampling query is lost) or ``first`` — only the
direction whose query is ``id_a``, the paper's literal (c_k, i_j) for (i_j, i_k).  On the CxC
files, whose rows keep the sampling query first, ``first`` reproduces CxC far better (image-pair
level 71% against 49%, while about 71% of CxC's pairs trace back to a released pair at all; the
caption of an I2I pair is a fresh draw, so caption level stays near 15%).

Each candidate keeps its provenance: the rated pair (ids, task type, score), its rank, the query
and its rank within the query.  Constraints (no original pair among ``c2i_intrasim``, no pair
twice, no pair in both methods) are checked on the final list; what breaks one is a ``Rejected``.
"""

from __future__ import annotations

import json
import math
from collections import Counter, defaultdict
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa

from crisscross.candidates.cxc import CANDIDATES_SCHEMA
from crisscross.core.ids import CAPTION_KIND, IMAGE_KIND, IdFormError, published, split_id
from crisscross.core.quarantine import Rejected, reject
from crisscross.core.rng import generator
from crisscross.core.settings import setting
from crisscross.formats.cxc import CXC_SPLITS, cxc_csv, read_cxc_file
from crisscross.ingest.records import captions_by_image
from crisscross.tasktypes.base import SCORE_MAX, SCORE_MIN
from crisscross.tasktypes.sis import SIS
from crisscross.tasktypes.sits import SITS
from crisscross.tasktypes.sts import STS

C2I_INTRASIM = "c2i_intrasim"
C2I_ORIGINAL = "c2i_original"
METHODS = (C2I_INTRASIM, C2I_ORIGINAL)
GLOBAL = "global"
PER_QUERY = "per-query"
RANK_MODES = (GLOBAL, PER_QUERY)
BOTH = "both"
FIRST = "first"
DIRECTIONS = (BOTH, FIRST)
SOURCES = (STS.name, SIS.name)  # the rated intramodal task types, in selection order (C2C ranks first)
KINDS = {STS.name: STS.kinds[0], SIS.name: SIS.kinds[0]}  # the id kind of both sides
# CxC test: 19,833 c2i_intrasim for 90,764 rated STS + SIS pairs (val: 19,722 for 86,776).
CXC_QUOTA_RATIO = 0.22


@dataclass(frozen=True)
class DeriveSettings:
    """``params.yaml`` ``derive:``; defaults follow CxC (≈0.22 c2i_intrasim per rated pair, half from C2C ranks)."""

    quota: int | None = setting(None, low=0)  # c2i_intrasim pairs to select; null: quota_ratio × rated STS + SIS pairs
    quota_ratio: float = setting(CXC_QUOTA_RATIO, low=0.0)
    c2c_share: float = setting(0.5, low=0.0, high=1.0)  # share of the quota taken from C2C ranks first
    ranks: str = setting(PER_QUERY, choices=RANK_MODES)
    depth: int = setting(1, low=1)  # per-query: each query's top-depth candidates come first
    directions: str = setting(BOTH, choices=DIRECTIONS)  # both directions of a rated pair, or only id_a as query
    replay_split: str = setting("test", choices=CXC_SPLITS)  # --in cxc:<folder>: which release files


def quota_for(settings: DeriveSettings, n_rated: int) -> int:
    """The ``c2i_intrasim`` quota: fixed, or the ratio of the rated intramodal pairs."""
    return int(settings.quota) if settings.quota is not None else int(round(n_rated * settings.quota_ratio))


# ---------------------------------------------------------------------------- captions


@dataclass(frozen=True)
class CaptionIndex:
    """Each caption's image and each image's captions (sorted), from the ingest captions table."""

    image_of: Mapping[str, str]
    by_image: Mapping[str, tuple[str, ...]]

    @classmethod
    def from_rows(cls, rows: Iterable[Mapping[str, Any]]) -> CaptionIndex:
        image_of = {str(r["caption_id"]): str(r["image_id"]) for r in rows}
        return cls(image_of, captions_by_image(image_of))

    def originals(self) -> Iterator[tuple[str, str]]:
        """Every (caption, its image), by image then caption."""
        for image in sorted(self.by_image):
            for caption in self.by_image[image]:
                yield caption, image


# ---------------------------------------------------------------------------- rated pairs


@dataclass(frozen=True, order=True)
class RatedPair:
    task_type: str  # STS or SIS
    id_a: str
    id_b: str
    score: float
    sampling_method: str
    source: str


def is_intramodal(row: Mapping[str, Any]) -> bool:
    """Rated rows this stage derives from (STS, SIS); SITS and VERIFY rows are not its input."""
    return str(row.get("task_type")) in SOURCES


def rated_pair(row: Mapping[str, Any], index: CaptionIndex, source: str) -> RatedPair | Rejected:
    """A checked STS / SIS row (``task_type``, ``id_a``, ``id_b``, ``agg_score`` or ``score``,
    ``sampling_method``) or why it cannot be used: ``missing-field``, ``bad-id`` (not a canonical
    id of the task's kind), ``unknown-caption`` / ``unknown-image`` (not in the captions table),
    ``self-pair``, ``bad-score`` (missing or not finite), ``score-out-of-range`` (outside 0–5)."""
    kind = str(row.get("task_type"))
    a, b = row.get("id_a"), row.get("id_b")
    score = row.get("agg_score", row.get("score"))
    where = str(row.get("source") or source)
    key = row.get("item_id") or f"{a}|{b}"
    record = {k: v for k, v in row.items() if k != "source"}
    missing = [name for name, value in (("id_a", a), ("id_b", b)) if not value]
    if missing:
        return reject("rated", key, "missing-field", f"no {', '.join(missing)}", where, record)
    a, b = str(a), str(b)
    for value in (a, b):
        try:
            found = split_id(value)[1]
        except IdFormError as error:
            return reject("rated", key, "bad-id", str(error), where, record)
        if found != KINDS[kind]:
            return reject("rated", key, "bad-id", f"{kind} pairs {KINDS[kind]} ids, got {value}", where, record)
        if found == CAPTION_KIND and value not in index.image_of:
            return reject("rated", key, "unknown-caption", f"caption {value} is not in the captions table", where, record)
        if found == IMAGE_KIND and value not in index.by_image:
            return reject("rated", key, "unknown-image", f"image {value} has no captions in the captions table", where, record)
    if a == b:
        return reject("rated", key, "self-pair", f"{kind} pairs {a} with itself", where, record)
    try:
        number = float(score)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        number = math.nan
    if not math.isfinite(number):
        return reject("rated", key, "bad-score", f"score {score!r} is not a finite number", where, record)
    if not SCORE_MIN <= number <= SCORE_MAX:
        return reject("rated", key, "score-out-of-range", f"score {number} outside [{SCORE_MIN}, {SCORE_MAX}]", where, record)
    return RatedPair(kind, a, b, number, str(row.get("sampling_method") or ""), where)


def cxc_rows(path: str, task: str) -> Iterator[dict[str, Any] | Rejected]:
    """A CxC release file replayed as rated rows (file orientation), and its unreadable rows."""
    frame, rejected = read_cxc_file(path, task)
    yield from rejected
    for a, b, score, method, where in frame.itertuples(index=False):
        yield {"task_type": task, "id_a": a, "id_b": b, "score": float(score), "sampling_method": method, "source": where}


def pair_kind(pair: RatedPair, index: CaptionIndex) -> str:
    """``C2C``, ``C2C-cocaption`` (captions of one image: no new candidate) or ``I2I``."""
    if KINDS[pair.task_type] == IMAGE_KIND:
        return "I2I"
    return "C2C-cocaption" if index.image_of[pair.id_a] == index.image_of[pair.id_b] else "C2C"


# ---------------------------------------------------------------------------- derivation


@dataclass(frozen=True, order=True)
class Derived:
    """One direction of a rated pair: a caption of ``other`` for the image of ``query``.

    For C2C the caption is ``other`` itself; for I2I it is drawn when selection reaches it
    (:func:`caption_for`), so only the pairs ranked high enough cost a draw."""

    task_type: str
    id_a: str
    id_b: str
    score: float
    query: str  # the rated item whose image receives the caption
    other: str  # the rated item the caption comes from
    image: str  # the query's image


def derive(pair: RatedPair, index: CaptionIndex, directions: str = BOTH) -> list[Derived]:
    """Both directions of a rated pair (none for a co-caption pair); ``first``: only the direction
    whose query is ``id_a`` (the paper's (c_k, i_j) for (i_j, i_k), the CxC files' query first)."""
    if pair_kind(pair, index) == "C2C-cocaption":
        return []  # captions of one image: both directions are original pairs
    ways = ((pair.id_a, pair.id_b), (pair.id_b, pair.id_a))
    return [
        Derived(
            pair.task_type,
            pair.id_a,
            pair.id_b,
            pair.score,
            query,
            other,
            index.image_of[query] if KINDS[pair.task_type] == CAPTION_KIND else query,
        )
        for query, other in (ways if directions == BOTH else ways[:1])
    ]


def caption_for(d: Derived, index: CaptionIndex, seed: int) -> str:
    """The caption of a derived pair: C2C's other caption, or one caption of I2I's other image
    drawn with a generator keyed by the direction (query, other)."""
    if KINDS[d.task_type] == CAPTION_KIND:
        return d.other
    options = index.by_image[d.other]
    return options[int(generator(seed, C2I_INTRASIM, d.query, d.other).integers(len(options)))]


def _global_key(d: Derived) -> tuple[float, str, str, str]:
    return (-d.score, d.id_a, d.id_b, d.query)


def ranked(derived: Iterable[Derived], ranks: str = GLOBAL, depth: int = 1) -> list[tuple[Derived, int, int]]:
    """One task type's candidates in selection order, each with its rated pair's global rank
    (1-based, by score then ids) and its rank within its query."""
    ordered = sorted(derived, key=_global_key)
    pair_rank: dict[tuple[str, str], int] = {}
    for d in ordered:
        pair_rank.setdefault((d.id_a, d.id_b), len(pair_rank) + 1)
    by_query: dict[str, list[Derived]] = defaultdict(list)
    for d in ordered:
        by_query[d.query].append(d)
    query_rank = {d: n for items in by_query.values() for n, d in enumerate(items, start=1)}
    if ranks == PER_QUERY:
        ordered = sorted(ordered, key=lambda d: (query_rank[d] > depth, *_global_key(d)))
    elif ranks != GLOBAL:
        raise ValueError(f"ranks must be one of {RANK_MODES}, got {ranks!r}")
    return [(d, pair_rank[(d.id_a, d.id_b)], query_rank[d]) for d in ordered]


@dataclass(frozen=True, order=True)
class C2ICandidate:
    method: str
    caption: str  # id1
    image: str  # id2
    caption_image: str  # the caption's own image (image1)
    provenance: tuple[tuple[str, Any], ...] = ()  # sorted (key, value) items

    def provenance_json(self) -> str:
        return json.dumps(dict(self.provenance), sort_keys=True)


def _intrasim(d: Derived, caption: str, caption_image: str, rank: int, query_rank: int) -> C2ICandidate:
    facts = {
        "task_type": d.task_type,
        "pair": [d.id_a, d.id_b],
        "score": round(d.score, 6),
        "rank": rank,
        "query": d.query,
        "query_rank": query_rank,
    }
    return C2ICandidate(C2I_INTRASIM, caption, d.image, caption_image, tuple((k, facts[k]) for k in sorted(facts)))


@dataclass
class Selection:
    candidates: list[C2ICandidate]
    facts: dict[str, Any] = field(default_factory=dict)


def select(
    derived: Iterable[Derived], index: CaptionIndex, seed: int, quota: int, c2c_share: float = 0.5, ranks: str = GLOBAL, depth: int = 1
) -> Selection:
    """``c2i_intrasim`` by decreasing rating: ``round(quota × c2c_share)`` from C2C ranks, then I2I
    ranks up to the quota, skipping pairs already selected (and, as a guard, original pairs)."""
    by_type: dict[str, list[Derived]] = defaultdict(list)
    for d in derived:
        by_type[d.task_type].append(d)
    chosen: dict[tuple[str, str], C2ICandidate] = {}
    skipped: Counter[str] = Counter()
    per_source: dict[str, dict[str, int]] = {}
    targets = {STS.name: int(round(quota * c2c_share))}
    for kind in SOURCES:
        target = targets.get(kind, quota - len(chosen))
        taken = 0
        for d, rank, query_rank in ranked(by_type.get(kind, ()), ranks, depth):
            if taken >= target:
                break
            caption = caption_for(d, index, seed)
            caption_image = index.image_of[caption]
            if caption_image == d.image:
                skipped["original-pair"] += 1
            elif (caption, d.image) in chosen:
                skipped["already-selected"] += 1
            else:
                chosen[(caption, d.image)] = _intrasim(d, caption, caption_image, rank, query_rank)
                taken += 1
        per_source[kind] = {"target": target, "selected": taken, "derived": len(by_type.get(kind, ()))}
    facts = {
        "quota": quota,
        "selected": len(chosen),
        "shortfall": max(0, quota - len(chosen)),
        "sources": per_source,
        "skipped": dict(sorted(skipped.items())),
        "ranks": ranks,
        "depth": depth,
    }
    return Selection(list(chosen.values()), facts)


def originals(index: CaptionIndex) -> list[C2ICandidate]:
    """Every caption with its own image, as ``c2i_original``."""
    return [C2ICandidate(C2I_ORIGINAL, caption, image, image) for caption, image in index.originals()]


def enforce_constraints(candidates: Sequence[C2ICandidate]) -> tuple[list[C2ICandidate], list[Rejected]]:
    """Keep what breaks no rule: originals first, then ``c2i_intrasim`` that is not an original
    pair (``original-pair``), not also a ``c2i_original`` (``cross-method``) and not a pair seen
    before in its method (``duplicate-pair``)."""
    kept: list[C2ICandidate] = []
    rejected: list[Rejected] = []
    seen: dict[tuple[str, str], str] = {}
    order = {C2I_ORIGINAL: 0, C2I_INTRASIM: 1}
    for c in sorted(candidates, key=lambda c: (order.get(c.method, 2), c.caption, c.image, c.provenance_json())):
        key, record = f"{c.caption}|{c.image}", {"method": c.method, "id1": c.caption, "id2": c.image, "provenance": c.provenance_json()}
        if c.method == C2I_INTRASIM and c.caption_image == c.image:
            rejected.append(reject("pair", key, "original-pair", f"{c.caption} is a caption of {c.image}", c.method, record))
        elif (c.caption, c.image) in seen and seen[(c.caption, c.image)] == c.method:
            rejected.append(reject("pair", key, "duplicate-pair", f"{c.method} holds {key} twice", c.method, record))
        elif (c.caption, c.image) in seen:
            rejected.append(
                reject("pair", key, "cross-method", f"{key} is in {seen[(c.caption, c.image)]} and {c.method}", c.method, record)
            )
        else:
            seen[(c.caption, c.image)] = c.method
            kept.append(c)
    return kept, rejected


def derive_all(
    pairs: Iterable[RatedPair], index: CaptionIndex, settings: DeriveSettings, seed: int
) -> tuple[list[C2ICandidate], list[Rejected], dict[str, Any]]:
    """The whole stage on checked pairs, in memory: derive, select, add originals, check."""
    pairs = list(pairs)
    kinds = Counter(pair_kind(p, index) for p in pairs)
    derived = [d for p in pairs for d in derive(p, index, settings.directions)]
    selection = select(derived, index, seed, quota_for(settings, len(pairs)), settings.c2c_share, settings.ranks, settings.depth)
    kept, rejected = enforce_constraints([*selection.candidates, *originals(index)])
    return kept, rejected, {**selection.facts, "rated": dict(sorted(kinds.items()))}


# ---------------------------------------------------------------------------- outputs


def _sorted(candidates: Iterable[C2ICandidate]) -> list[C2ICandidate]:
    return sorted(candidates, key=lambda c: (c.method, c.caption, c.image))


def candidates_table(candidates: Iterable[C2ICandidate]) -> pa.Table:
    """The sample stage's candidates shape: id1 = caption, id2 = image (what the tasks stage reads
    as a SITS item), image1 = the caption's own image, image2 = the image; sorted by (method, id1, id2)."""
    rows = [
        {
            "method": c.method,
            "id1": c.caption,
            "id2": c.image,
            "image1": c.caption_image,
            "image2": c.image,
            "published1": published(c.caption, CAPTION_KIND),
            "published2": published(c.image, IMAGE_KIND),
            "provenance": c.provenance_json(),
        }
        for c in _sorted(candidates)
    ]
    return pa.Table.from_pylist(rows, schema=CANDIDATES_SCHEMA)


def sits_csv(candidates: Iterable[C2ICandidate]) -> bytes:
    """``sits_candidates.csv``: the CxC ``sits_*.csv`` shape without scores."""
    return cxc_csv(SITS.name, ((c.caption, c.image, None, c.method) for c in _sorted(candidates)), scored=False)
