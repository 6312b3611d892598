"""Ground truth for evaluation: which (query, gallery) pairs are positive, and graded ratings.

A :class:`GroundTruth` holds positive pairs of canonical ids (:mod:`crisscross.core.ids`) for four
retrieval tasks, each pair written ``(query, gallery)``:

* ``i2t`` image → caption, ``t2i`` caption → image, ``t2t`` caption → caption, ``i2i`` image → image;

and the graded human ratings used for correlation (CxC §5): ``sts`` (caption, caption, score),
``sis`` (image, image, score), ``sits`` (caption, image, score); each rated pair keeps the
orientation of its first row, whose first id is the *query* the bootstrap correlation samples
(CxC §4).  :meth:`GroundTruth.positives` turns a task into :class:`crisscross.scoring.retrieval.Positives` for a concrete score matrix.

Loaders are chosen by name from :data:`GROUND_TRUTHS` and return ``(GroundTruth, report)``; the
report counts pairs per task and duplicates resolved, and lists every unparseable record as a
:class:`crisscross.core.quarantine.Rejected` under ``"rejected"`` (nothing is dropped silently).

Rules chosen (and why):

``coco`` (original MS-COCO pairs, from a captions table with ``caption_id`` and ``image_id``)
    i2t / t2i are the caption-image links.  t2t is the *co-caption* relation: every caption of the
    same image, excluding the caption itself, in both directions (5 captions per image → 20
    directed pairs per image).  This is the conventional MS-COCO caption-caption relation,
    although CxC found co-captions average only 3.0 STS (§6).  ``coco`` has no i2i.

``cxc:<folder>`` (CxC release CSVs ``{sts,sis,sits}_<split>.csv``, split ``test`` | ``val``)
    Positive thresholds as in CxC §3: STS ≥ 3, SITS ≥ 3, SIS ≥ 2.5.  i2t / t2i are SITS positives
    **merged with** the original MS-COCO pairs when a ``captions`` table is given: CxC §4 "We
    extend the existing associations with positive CxC pairs", so the "CxC" rows of Table 2 count
    original + new positives (an original pair is kept even when its SITS rating is < 3).
    t2t is the same rule for captions: STS positives merged with the co-captions (MS-COCO's
    existing text-text association, §1) when ``captions`` are given.  The paper does not spell
    this out; the figures decide it: with ``use-m3`` on the Karpathy test split, STS positives
    alone give T2T R@1 15.8 where the paper reports 31.2 for the stronger USE-large, while the
    merged set gives 28.4.  i2i = SIS positives.  t2t and i2i are symmetric (each unordered pair
    gives both directions).  Pairs rated more than once (in either order; in the release only SIS, 2,863
    pairs in test, some with scores on both sides of the threshold) are kept once per unordered
    pair with the **mean** of their scores, and the positive decision uses that mean
    (``duplicate_rule="mean"``); ``duplicate_rule="any"`` instead makes a pair positive when any
    of its rows passes, which is what counting release rows (the published 21,816 SIS
    "positives", which are rows, not pairs) implies.  Means are rounded to 6 decimals before the
    threshold so float error cannot flip a pair.

``release:<folder>`` (a crisscross aggregate output, ``rated.parquet``)
    The same rules as ``cxc`` on our own rated pairs: the aggregate stage's positives, merged
    with the original pairs and co-captions when ``captions`` are given.

``cxc-eccv:<folder>`` (the same files, eccv-caption's reading)
    As ``cxc`` but an original pair whose SITS rating (mean of its rows) is below 3 is *not*
    positive: the CxC truth shipped in ``eccv-caption`` (``cxc_*.json``) drops these 29 test
    pairs (28 caption queries lose their only positive), so its CxC R@K differ from the paper's
    reading in the second decimal.  Every original test pair is rated, so on the test split this
    is SITS >= 3 alone, exactly the package's file; an original pair nobody rated stays positive.  Use it to compare with figures computed by that package;
    t2t, i2i and ratings are those of ``cxc``.

``eccv`` (ECCV Caption, from the ``eccv-caption`` package data, Karpathy test split)
    i2t / t2i as published: 1,261 image queries and 1,332 caption queries.  They are *not*
    merged with original pairs: ECCV Caption removed 18 meaningless and 14 wrong captions (its
    §3.2), so 9 original pairs of its image queries are deliberately absent.  Only the package's
    JSON files are read; its metric code is not used.  R of mAP@R and R-Precision follows the
    package (``r_rule="compat"``): every positive of the query counts, in or out of the gallery
    (two image queries have a positive caption outside the 5K test split), so figures compare
    with published ones.  ``eccv-gallery`` is the same truth with R = positives in the gallery
    (``r_rule="gallery"``, every other truth's rule).

R rule (:data:`R_RULES`): ``gallery`` counts in R only the positives the gallery holds (a
positive outside it is counted in ``missing_positives``); ``compat`` counts every positive of the
query, so one outside the gallery lowers mAP@R and R-Precision (it can never be retrieved) —
literally, also on the 1K folds and on a model's covered sub-gallery, where ``eccv-gallery`` is
the meaningful reading.  R@K, ranks and ``missing_positives`` are the same under both.
"""

from __future__ import annotations

import importlib.util
import math
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np
import pandas as pd
import pyarrow.parquet as pq

from crisscross.core.ids import CAPTION_KIND, IMAGE_KIND, CocoIdScheme, IdFormError, split_id
from crisscross.core.quarantine import Rejected, reject
from crisscross.core.registry import OPTIONAL, Registry
from crisscross.formats.cxc import CXC_FILES, check_split, read_cxc_file
from crisscross.formats.eccv import DIRECTIONS, ECCV_FILES, I2T, T2I, read_positives
from crisscross.formats.manifest import is_release
from crisscross.formats.schema import ordered_pair, threshold_votes
from crisscross.scoring.retrieval import Positives
from crisscross.tasktypes import task_type
from crisscross.tasktypes.sis import SIS
from crisscross.tasktypes.sits import SITS
from crisscross.tasktypes.sts import STS
from crisscross.tasktypes.verify import VERIFY

TASKS = (*DIRECTIONS, "t2t", "i2i")
RATINGS = ("sts", "sis", "sits")
DUPLICATE_RULES = ("mean", "any")
GALLERY_R = "gallery"  # R = positives in the gallery
COMPAT_R = "compat"  # R = every positive of the query (eccv-caption)
R_RULES = (GALLERY_R, COMPAT_R)
KEEP_ORIGINALS = "keep"  # CxC §4: original pairs stay positive whatever their SITS rating
DROP_LOW_SITS = "drop-low-sits"  # eccv-caption's CxC: original pairs rated SITS < 3 are dropped
ORIGINAL_RULES = (KEEP_ORIGINALS, DROP_LOW_SITS)

Pair = tuple[str, str]
Rating = tuple[str, str, float]
Report = dict[str, Any]

_COCO = CocoIdScheme()


class MappedPositives(NamedTuple):
    """Positives for a score matrix, and how many positive pairs had no gallery column."""

    positives: Positives
    missing: int


@dataclass(frozen=True)
class GroundTruth:
    """Positive pairs per task (``(query, gallery)`` canonical ids) and graded ratings."""

    name: str
    i2t: frozenset[Pair] = frozenset()
    t2i: frozenset[Pair] = frozenset()
    t2t: frozenset[Pair] = frozenset()
    i2i: frozenset[Pair] = frozenset()
    sts: tuple[Rating, ...] = ()
    sis: tuple[Rating, ...] = ()
    sits: tuple[Rating, ...] = ()
    notes: Mapping[str, str] = field(default_factory=dict)
    r_rule: str = GALLERY_R

    def __post_init__(self) -> None:
        if self.r_rule not in R_RULES:
            raise ValueError(f"r_rule must be one of {R_RULES}, got {self.r_rule!r}")

    def pairs(self, task: str) -> frozenset[Pair]:
        """Positive pairs of a retrieval task (``i2t``, ``t2i``, ``t2t``, ``i2i``)."""
        if task not in TASKS:
            raise ValueError(f"unknown task {task!r}; known: {', '.join(TASKS)}")
        return getattr(self, task)

    def ratings(self, name: str) -> tuple[Rating, ...]:
        """Graded ratings (``sts``, ``sis``, ``sits``), one per rated pair."""
        if name not in RATINGS:
            raise ValueError(f"unknown ratings {name!r}; known: {', '.join(RATINGS)}")
        return getattr(self, name)

    def counts(self) -> dict[str, int]:
        """Number of positive pairs per task and of ratings per kind, for reports."""
        return {
            **{t: len(self.pairs(t)) for t in TASKS},
            **{r: len(self.ratings(r)) for r in RATINGS},
        }

    def positives(self, task: str, query_ids: Sequence[str], gallery_ids: Sequence[str]) -> MappedPositives:
        """Positives of ``task`` for a score matrix whose rows are ``query_ids`` and columns
        ``gallery_ids``.

        Pairs whose query is not a row are ignored (the matrix simply does not ask about them);
        pairs whose query is a row but whose positive is not a column are counted in ``missing``,
        because a silently shrunken gallery would inflate recall.
        """
        rows = _index_of(query_ids, "query_ids")
        cols = _index_of(gallery_ids, "gallery_ids")
        q: list[int] = []
        g: list[int] = []
        missing = 0
        for query, item in self.pairs(task):
            row = rows.get(query)
            if row is None:
                continue
            col = cols.get(item)
            if col is None:
                missing += 1
                continue
            q.append(row)
            g.append(col)
        positives = Positives.from_pairs(np.asarray(q, np.int64), np.asarray(g, np.int64), len(rows))
        return MappedPositives(positives, missing)

    def positive_counts(self, task: str, query_ids: Sequence[str]) -> np.ndarray:
        """Every positive of each query of ``task``, in or out of any gallery (R under ``compat``)."""
        rows = _index_of(query_ids, "query_ids")
        hit = [rows[q] for q, _ in self.pairs(task) if q in rows]
        return np.bincount(np.asarray(hit, dtype=np.int64), minlength=len(rows)).astype(np.int64)

    def r_totals(self, task: str, query_ids: Sequence[str]) -> np.ndarray | None:
        """R per query under this truth's R rule: ``None`` under ``gallery`` (R = ranked positives)."""
        return self.positive_counts(task, query_ids) if self.r_rule == COMPAT_R else None


def _index_of(ids: Sequence[str], what: str) -> dict[str, int]:
    """Id → position; duplicates are an error because one id cannot be two rows/columns."""
    index: dict[str, int] = {}
    for i, value in enumerate(ids):
        key = str(value)
        if key in index:
            raise ValueError(f"{what} holds {key!r} twice (positions {index[key]} and {i})")
        index[key] = i
    return index


def _symmetric(pairs: Iterable[Pair]) -> frozenset[Pair]:
    return frozenset(p for a, b in pairs for p in ((a, b), (b, a)))


def _report(truth: GroundTruth, rejected: list[Rejected], **extra: Any) -> Report:
    return {"name": truth.name, "counts": truth.counts(), **extra, "rejected": rejected}


# --------------------------------------------------------------------------- coco


def _columns(table: Any, names: Sequence[str]) -> dict[str, list[Any]]:
    """Columns of a pyarrow table or pandas frame as Python lists."""
    if hasattr(table, "column_names"):  # pyarrow.Table
        present = set(table.column_names)
        get = lambda n: table.column(n).to_pylist()
    else:  # pandas.DataFrame
        present = set(table.columns)
        get = lambda n: [None if _isnull(v) else v for v in table[n].tolist()]
    absent = [n for n in names if n not in present]
    if absent:
        raise ValueError(f"captions table lacks columns {absent}; it has {sorted(present)}")
    return {n: get(n) for n in names}


def _isnull(value: Any) -> bool:
    return value is None or (isinstance(value, float) and math.isnan(value))


def _coco_links(captions: Any, source: str, *, any_scheme: bool = False) -> tuple[dict[str, str], list[Rejected], int]:
    """Caption → image links of a captions table, with rejects and the number of repeated rows.
    Ids are COCO's in any published form, or (``any_scheme``) canonical ids of any dataset."""
    cols = _columns(captions, ("caption_id", "image_id"))
    links: dict[str, str] = {}
    rejected: list[Rejected] = []
    repeated = 0
    for line, (cap, img) in enumerate(zip(cols["caption_id"], cols["image_id"])):
        record = {"caption_id": cap, "image_id": img}
        where = f"{source}:{line}"
        try:
            if _isnull(cap) or _isnull(img):
                raise IdFormError("null caption_id or image_id")
            cap_id, img_id = (
                (_canonical(cap, CAPTION_KIND), _canonical(img, IMAGE_KIND))
                if any_scheme
                else (_COCO.parse_caption(cap), _COCO.parse_image(img))
            )
        except IdFormError as error:
            rejected.append(reject("caption", cap, "bad-id", str(error), where, record))
            continue
        known = links.get(cap_id)
        if known is None:
            links[cap_id] = img_id
        elif known == img_id:
            repeated += 1
        else:  # a COCO caption annotation belongs to exactly one image
            detail = f"{cap_id} already linked to {known}, here to {img_id}"
            rejected.append(reject("caption", cap_id, "caption-two-images", detail, where, record))
    return links, rejected, repeated


def _canonical(value: Any, kind: str) -> str:
    text = str(value)
    if split_id(text)[1] != kind:
        raise IdFormError(f"{text!r} is not a canonical {kind} id")
    return text


def load_coco(captions: Any, *, source: str = "captions") -> tuple[GroundTruth, Report]:
    """Original MS-COCO positives: caption-image links and co-captions (see module docstring)."""
    links, rejected, repeated = _coco_links(captions, source)
    truth = GroundTruth(
        name="coco",
        i2t=frozenset((img, cap) for cap, img in links.items()),
        t2i=frozenset(links.items()),
        t2t=_cocaptions(links.items()),
        notes={"t2t": "co-captions: captions of the same image, excluding the caption itself"},
    )
    return truth, _report(truth, rejected, repeated_rows=repeated, images=len({img for img in links.values()}))


def _cocaptions(links: Iterable[Pair]) -> frozenset[Pair]:
    """Directed pairs of distinct captions of the same image, from (caption, image) links."""
    by_image: dict[str, list[str]] = defaultdict(list)
    for cap, img in links:
        by_image[img].append(cap)
    return frozenset((a, b) for caps in by_image.values() for a in caps for b in caps if a != b)


# --------------------------------------------------------------------------- cxc


@dataclass(frozen=True)
class _Rated:
    """Ratings of one CxC file after merging repeats, with what the merge did."""

    ratings: tuple[Rating, ...]
    positives: frozenset[Pair]  # in file orientation (unordered pairs sorted)
    rows: int
    positive_rows: int
    repeated_pairs: int  # pairs rated more than once
    straddling_pairs: int  # repeated pairs with scores on both sides of the threshold


def _read_rated(path: Path, task: str, rule: str) -> tuple[_Rated, list[Rejected]]:
    """Read one CxC CSV (:mod:`crisscross.formats.cxc`), merge repeated pairs (mean), decide
    positives by ``rule``."""
    rows, rejected = read_cxc_file(path, task)
    threshold = task_type(task).scale.threshold
    keys = [ordered_pair(task, a, b) for a, b in zip(rows["id_a"], rows["id_b"], strict=True)]
    scores: dict[Pair, list[float]] = defaultdict(list)
    first_seen: dict[Pair, Pair] = {}  # file orientation: the first id is the rated pair's query
    for key, a, b, score in zip(keys, rows["id_a"], rows["id_b"], rows["score"], strict=True):
        scores[key].append(float(score))
        first_seen.setdefault(key, (a, b))
    ratings: list[Rating] = []
    positives: set[Pair] = set()
    for key in sorted(scores):
        values = scores[key]
        mean = round(sum(values) / len(values), 6)
        ratings.append((*first_seen[key], mean))
        if (mean >= threshold) if rule == "mean" else any(v >= threshold for v in values):
            positives.add(key)
    votes = threshold_votes(pd.Series(keys, dtype=object), rows["score"], threshold)
    rated = _Rated(
        tuple(ratings),
        frozenset(positives),
        len(rows) + len(rejected),
        int(votes["passing"].sum()),
        int((votes["size"] > 1).sum()),
        int(votes["straddles"].sum()),
    )
    return rated, rejected


def load_cxc(
    folder: str | Path,
    *,
    split: str = "test",
    captions: Any = None,
    duplicate_rule: str = "mean",
    original_rule: str = KEEP_ORIGINALS,
) -> tuple[GroundTruth, Report]:
    """CxC positives and ratings from the release CSVs; i2t/t2i merged with the original pairs
    of ``captions`` when given (CxC §4).  ``original_rule``: ``keep`` every original pair (the
    paper) or ``drop-low-sits``, dropping those rated SITS < 3 (eccv-caption's CxC files).  See
    the module docstring for every rule."""
    check_split(split)
    if duplicate_rule not in DUPLICATE_RULES:
        raise ValueError(f"duplicate_rule must be one of {DUPLICATE_RULES}, got {duplicate_rule!r}")
    if original_rule not in ORIGINAL_RULES:
        raise ValueError(f"original_rule must be one of {ORIGINAL_RULES}, got {original_rule!r}")
    root = Path(folder)
    rejected: list[Rejected] = []
    rated: dict[str, _Rated] = {}
    for task, spec in CXC_FILES.items():
        rated[task.lower()], bad = _read_rated(root / spec.name(split), task, duplicate_rule)
        rejected += bad
    sts, sis, sits = rated["sts"], rated["sis"], rated["sits"]
    t2i = set(sits.positives)
    original: frozenset[Pair] = frozenset()
    dropped: frozenset[Pair] = frozenset()
    if captions is not None:
        links, bad, _ = _coco_links(captions, "captions")
        rejected += bad
        original = frozenset(links.items())
        if original_rule == DROP_LOW_SITS:
            rated = {ordered_pair(SITS.name, a, b) for a, b, _ in sits.ratings}
            dropped = frozenset(p for p in original if p in rated and p not in sits.positives)
        t2i |= original - dropped
    if captions is None:
        reading = "SITS >= 3 only"
    elif original_rule == KEEP_ORIGINALS:
        reading = "SITS >= 3 merged with every original COCO pair (CxC §4: an original pair rated SITS < 3 stays positive)"
    else:
        reading = f"SITS >= 3 merged with the original COCO pairs, minus the {len(dropped)} rated SITS < 3 (eccv-caption's CxC truth)"
    truth = GroundTruth(
        name=f"cxc-{split}" if original_rule == KEEP_ORIGINALS else f"cxc-eccv-{split}",
        i2t=frozenset((img, cap) for cap, img in t2i),
        t2i=frozenset(t2i),
        t2t=_symmetric(sts.positives) | _cocaptions(original),
        i2i=_symmetric(sis.positives),
        sts=sts.ratings,
        sis=sis.ratings,
        sits=sits.ratings,
        notes={
            "i2t/t2i": reading,
            "t2t": "STS >= 3 merged with co-captions" if captions is not None else "STS >= 3 only",
        },
    )
    report = _report(
        truth,
        rejected,
        rows={"sts": sts.rows, "sis": sis.rows, "sits": sits.rows},
        positive_rows={
            "sts": sts.positive_rows,
            "sis": sis.positive_rows,
            "sits": sits.positive_rows,
        },
        positive_pairs={
            "sts": len(sts.positives),
            "sis": len(sis.positives),
            "sits": len(sits.positives),
        },
        repeated_pairs={
            "sts": sts.repeated_pairs,
            "sis": sis.repeated_pairs,
            "sits": sits.repeated_pairs,
        },
        straddling_pairs={
            "sts": sts.straddling_pairs,
            "sis": sis.straddling_pairs,
            "sits": sits.straddling_pairs,
        },
        duplicate_rule=duplicate_rule,
        original_rule=original_rule,
        original_pairs=len(original),
        original_dropped=len(dropped),
        original_only=len(original - sits.positives),
        cocaption_positive_overlap=len(_symmetric(sts.positives) & _cocaptions(original)),
        new_positives=len(sits.positives - original) if captions is not None else None,
    )
    return truth, report


# --------------------------------------------------------------------------- eccv


def eccv_data_dir() -> Path:
    """Folder of the JSON files shipped by ``eccv-caption``, found without importing the package
    (its import pulls in its metric code and warns about optional modules)."""
    spec = importlib.util.find_spec("eccv_caption")
    if spec is None or not spec.submodule_search_locations:
        raise ModuleNotFoundError("the 'eccv' ground truth needs: pip install eccv-caption==0.1.0")
    return Path(next(iter(spec.submodule_search_locations))) / "data"


def _read_associations(path: Path, kinds: tuple[str, str]) -> tuple[frozenset[Pair], list[Rejected]]:
    """``{query coco id: [positive coco ids]}`` JSON → canonical (query, positive) pairs; a file
    that is not such an object is one :class:`InputError`, a query whose positives are no list a
    ``malformed-row``."""
    data = read_positives(str(path))
    pairs: set[Pair] = set()
    rejected: list[Rejected] = []
    for key, values in data.items():
        where = f"{path.name}:{key}"
        if not isinstance(values, list):
            rejected.append(
                reject("row", key, "malformed-row", f"positives are a JSON {type(values).__name__}, not a list", where, {key: values})
            )
            continue
        try:
            query = _COCO.parse(key, kinds[0])
        except IdFormError as error:
            rejected.append(reject("row", key, "bad-id", str(error), where, {key: values}))
            continue
        for value in values:
            try:
                pairs.add((query, _COCO.parse(value, kinds[1])))
            except IdFormError as error:
                rejected.append(
                    reject(
                        "row",
                        f"{query}|{value}",
                        "bad-id",
                        str(error),
                        where,
                        {key: value},
                    )
                )
    return frozenset(pairs), rejected


R_RULE_NOTES = {
    COMPAT_R: (
        "R of mAP@R / R-Precision counts every positive of the query, in or out of the gallery (eccv-caption's rule, "
        "for the 5K figures it publishes); on folds and covered sub-galleries that includes positives outside them: "
        "eccv-gallery counts only those inside"
    ),
    GALLERY_R: "R of mAP@R / R-Precision counts the query's positives in the gallery only",
}


def load_eccv(data_dir: str | Path | None = None, *, captions: Any = None, r_rule: str = COMPAT_R) -> tuple[GroundTruth, Report]:
    """ECCV Caption i2t / t2i positives as published, or from ``data_dir``, a folder of files in
    the same shape (the ``positives`` stage writes one).  ``captions`` is accepted like every
    loader's but not merged: ECCV removed some original pairs on purpose (see module).
    ``r_rule``: ``compat`` (the package's R, the default) or ``gallery``."""
    del captions
    if r_rule not in R_RULES:
        raise ValueError(f"r_rule must be one of {R_RULES}, got {r_rule!r}")
    root = Path(data_dir) if data_dir else eccv_data_dir()
    for file in ECCV_FILES.values():
        if not (root / file).is_file():
            raise FileNotFoundError(f"no {root / file}: an ECCV-shaped folder holds {' and '.join(ECCV_FILES.values())}")
    i2t, bad_i = _read_associations(root / ECCV_FILES[I2T], DIRECTIONS[I2T])
    t2i, bad_t = _read_associations(root / ECCV_FILES[T2I], DIRECTIONS[T2I])
    name = ("eccv" if r_rule == COMPAT_R else "eccv-gallery") + (f":{root.name}" if data_dir else "")
    truth = GroundTruth(name=name, i2t=i2t, t2i=t2i, r_rule=r_rule, notes={"R": R_RULE_NOTES[r_rule]})
    queries = {I2T: len({q for q, _ in i2t}), T2I: len({q for q, _ in t2i})}
    return truth, _report(truth, bad_i + bad_t, queries=queries, data_dir=str(root), r_rule=r_rule)


# --------------------------------------------------------------------------- our own release

RELEASE_PAIRS = "data/pairs.parquet"  # a release folder's rated items (crisscross.release.load)


def load_release(folder: str | Path, *, captions: Any = None) -> tuple[GroundTruth, Report]:
    """Crisscross aggregate outputs (``rated.parquet``, canonical ids) under the CxC rules:
    positives as the aggregate stage decided them (its per-type thresholds), t2t / i2t / t2i
    merged with the original pairs and co-captions of ``captions`` when given, i2i = SIS
    positives, and verified VERIFY positives (ECCV Caption) added to i2t / t2i; ratings are the
    items' ``agg_score`` in item order (the query is ``id_a``).  ``folder`` may name several
    rounds' outputs joined by ``,`` (``build/rated,build/sits/rated,build/verify/rated``): their
    rows are merged into one truth.  A release folder (:mod:`crisscross.release`) counts as all of
    its rounds: its ``data/pairs.parquet`` holds their rated items with the same columns."""
    paths = [Path(f) / RELEASE_PAIRS if is_release(f) else Path(f) / "rated.parquet" for f in str(folder).split(",") if f]
    rows: list[dict[str, Any]] = []
    for path in paths:
        if not path.is_file() and path.name == Path(RELEASE_PAIRS).name:
            raise FileNotFoundError(
                f"no {path}: the release at {path.parent.parent} has no rated pairs (a COCO-BISON or Flickr30k Entities release); "
                "give its data/bison/bison_annotations.json to --bison instead"
            )
        if not path.is_file():
            raise FileNotFoundError(f"no {path}: run the aggregate stage first (or name a release folder)")
        rows += pq.read_table(path, columns=["task_type", "id_a", "id_b", "agg_score", "positive", "simulated"]).to_pylist()
    path = ",".join(map(str, paths))
    of: dict[str, list[dict[str, Any]]] = {STS.name: [], SIS.name: [], SITS.name: [], VERIFY.name: []}
    for row in rows:
        of.setdefault(row["task_type"], []).append(row)
    original: frozenset[Pair] = frozenset()
    rejected: list[Rejected] = []
    if captions is not None:
        links, rejected, _ = _coco_links(captions, "captions", any_scheme=True)
        original = frozenset(links.items())
    verified = {(r["id_b"], r["id_a"]) for r in of[VERIFY.name] if r["positive"]}  # (image, caption) → (caption, image)
    t2i = {(r["id_a"], r["id_b"]) for r in of[SITS.name] if r["positive"]} | verified | original
    truth = GroundTruth(
        name="release",
        i2t=frozenset((img, cap) for cap, img in t2i),
        t2i=frozenset(t2i),
        t2t=_symmetric((r["id_a"], r["id_b"]) for r in of[STS.name] if r["positive"]) | _cocaptions(original),
        i2i=_symmetric((r["id_a"], r["id_b"]) for r in of[SIS.name] if r["positive"]),
        sts=tuple((r["id_a"], r["id_b"], r["agg_score"]) for r in of[STS.name]),
        sis=tuple((r["id_a"], r["id_b"], r["agg_score"]) for r in of[SIS.name]),
        sits=tuple((r["id_a"], r["id_b"], r["agg_score"]) for r in of[SITS.name]),
        notes={
            "source": str(path),
            **({"simulated": "rated by SIMULATED raters, not people"} if any(r["simulated"] for r in rows) else {}),
        },
    )
    return truth, _report(
        truth, rejected, rated_items={k: len(of[k]) for k in (STS.name, SIS.name, SITS.name)}, verified_positives=len(verified)
    )


GROUND_TRUTHS: Registry[tuple[GroundTruth, Report]] = Registry("ground truth")
GROUND_TRUTHS.register("coco")(load_coco)
GROUND_TRUTHS.register("cxc", takes_argument=True)(load_cxc)
GROUND_TRUTHS.register("cxc-eccv", takes_argument=True)(partial(load_cxc, original_rule=DROP_LOW_SITS))
GROUND_TRUTHS.register("eccv", takes_argument=OPTIONAL)(load_eccv)
GROUND_TRUTHS.register("eccv-gallery", takes_argument=OPTIONAL)(partial(load_eccv, r_rule=GALLERY_R))
GROUND_TRUTHS.register("release", takes_argument=True)(load_release)
