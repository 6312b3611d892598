"""ECCV Caption machine-annotator filter (ECCV Caption §3, §3.1 / App. A.2, §3.3, App. E): the settings,
queries, ranked lists and candidates; the annotators, the VERIFY batches and the diversity report
have modules of their own beside this one.

*Machine annotators* are image–text scorers (:class:`crisscross.scoring.models.Model`): the
evaluate stage's models (``load_model``: embedding sets in one joint space, score matrices) and,
offline, a *text proxy* per text encoder (:class:`~crisscross.candidates.annotators.TextProxyModel`), which scores an image by the
mean of its unit caption vectors (its co-caption mean); a caption against its *own* image is
scored against the mean of the image's OTHER captions, ``(n·mean − own)/(n − 1)``, so a caption
never votes for itself.

Rules chosen (and why):

* **Queries** (:func:`select_queries`): every image and caption, a seeded sample of N images
  and M captions (ECCV: 1,261 / 1,333), or a file of ids (``eccv``: the query set shipped in the
  ``eccv-caption`` package, keys of its i2t / t2i JSON files, COCO ids).
* **Lists**: each annotator ranks the whole gallery of the other modality for each query, the
  query's own original pairs left out (they are gold positives, never candidates), so each
  annotator contributes exactly ``top_k`` candidates per query; the lists are kept to
  ``negative_depth`` (25) for the negative rule and the diversity report.  Ties are broken by
  gallery position (item id order).
* **Candidates** (:func:`candidate_pairs`): the union of every annotator's top-K over every
  query, deduplicated by (image, caption) pair whichever direction found it (ECCV: 64,850 →
  46,424), each with its provenance (annotator, direction, query, rank, score).
* **Batches** (:func:`~crisscross.candidates.verify_batches.plan_batches`, ECCV §3.2): 18 pairs = ``batch_candidates`` (16)
  candidates + 1 original positive + 1 random negative that is in NO annotator's top-25 for
  its query.  Candidates are ordered by the query that ranked them best, cut into near-equal
  batches; a batch's gold belongs to its main query (the one most of its candidates came from).
* **Diversity** (:func:`~crisscross.candidates.diversity.diversity_report`, App. A.2), per direction, for each annotator pair
  (a, b): Kendall τ-b, for each query, between a's and b's scores over the union of their
  top-25 lists, averaged over queries (NaN queries, where a list is constant, left out and
  counted) — the union mixes items each annotator put low, so disjoint lists drive it below 0;
  τ-b over a's own top-25 (scored by both) is reported beside it; the mean rank b gives a's top-1 (1 = b agrees on the best item); the mean overlap
  ``|top_K(a) ∩ top_K(b)| / K``.

After people verify the candidates, :mod:`crisscross.aggregate.positives` merges the positives
into an ECCV-shaped ground truth and audits the annotators' bias (§3.3, App. E).
"""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

from crisscross.annotate.items import VERIFY_METHOD
from crisscross.core import io
from crisscross.core.errors import InputError, ParamError
from crisscross.core.ids import CAPTION_KIND, IMAGE_KIND, CocoIdScheme, IdFormError, published, split_id
from crisscross.core.quarantine import Rejected, reject
from crisscross.core.rng import generator
from crisscross.core.settings import setting
from crisscross.embed import DEFAULT_TEXT_ENCODERS
from crisscross.formats.eccv import DIRECTIONS, ECCV_FILES, I2T, read_positives
from crisscross.scoring.models import MODEL_SPEC, Gallery, Model
from crisscross.scoring.paired import kendall_tau_b
from crisscross.scoring.truths import eccv_data_dir

QUERY_MODES = ("all", "sample", "file")
ECCV_QUERY_SET = "eccv"  # query_file value: the eccv-caption package's query set
PROXY_PREFIX = "text-proxy:"
METHOD = VERIFY_METHOD  # sampling_method of the VERIFY items (ECCV: model top-5 lists)
_COCO = CocoIdScheme()


# --------------------------------------------------------------------------- settings


@dataclass(frozen=True)
class FilterSettings:
    """``params.yaml`` ``filter:``; ECCV Caption's recipe by default (top-5, negatives beyond top-25, 16 + 2 gold)."""

    annotators: Mapping[str, MODEL_SPEC] = setting({})  # name → evaluate.models-style entry ({text, image} or {source: score-matrix, path})
    text_proxies: tuple[str, ...] = DEFAULT_TEXT_ENCODERS  # offline annotators: co-caption means of these text encoders
    queries: str = setting("sample", choices=QUERY_MODES)
    image_queries: int = setting(1261, low=0)  # queries: sample
    caption_queries: int = setting(1333, low=0)
    query_file: str = ECCV_QUERY_SET  # queries: file — "eccv", an ECCV-shaped folder, or a text file of canonical ids
    top_k: int = setting(5, low=1)
    negative_depth: int = setting(25, low=1)
    batch_candidates: int = setting(16, low=1)  # + 1 positive + 1 negative = 18 pairs per batch
    query_block: int = setting(256, low=1)  # queries scored at once by one worker

    def annotator_names(self) -> list[str]:
        return [*sorted(self.annotators), *(PROXY_PREFIX + spec for spec in self.text_proxies)]

    def check(self, where: str = "params") -> None:
        """Cross-field rules the per-field ranges cannot say."""
        if self.negative_depth < self.top_k:
            raise ParamError(f"{where}: filter.negative_depth ({self.negative_depth}) must be >= filter.top_k ({self.top_k})")
        if not self.annotators and not self.text_proxies:
            raise ParamError(f"{where}: filter.annotators and filter.text_proxies are both empty: name at least one machine annotator")
        for name in self.annotators:
            if str(name).startswith(PROXY_PREFIX):
                raise ParamError(f"{where}: filter.annotators.{name}: names starting {PROXY_PREFIX!r} are reserved for text_proxies")


# --------------------------------------------------------------------------- queries


@dataclass(frozen=True)
class Queries:
    images: tuple[str, ...]
    captions: tuple[str, ...]

    def of(self, direction: str) -> tuple[str, ...]:
        return self.images if direction == I2T else self.captions

    def blocks(self, size: int) -> list[tuple[str, tuple[str, ...]]]:
        """(direction, query ids) in blocks of ``size``: the unit of work one worker scores."""
        return [(d, self.of(d)[lo : lo + size]) for d in DIRECTIONS for lo in range(0, len(self.of(d)), size)]


QUERIES_SCHEMA = pa.schema([("direction", pa.string()), ("query_id", pa.string())])
ANNOTATORS_FILE = "annotators.json"  # the filter's annotators, so later stages load the same ones


def queries_table(queries: Queries) -> pa.Table:
    rows = [{"direction": d, "query_id": q} for d in DIRECTIONS for q in queries.of(d)]
    return pa.Table.from_pylist(rows, schema=QUERIES_SCHEMA)


def read_queries(table: pa.Table) -> Queries:
    """The filter stage's ``queries.parquet`` back as :class:`Queries` (order kept)."""
    rows = table.select(["direction", "query_id"]).to_pylist()
    return Queries(*(tuple(r["query_id"] for r in rows if r["direction"] == d) for d in DIRECTIONS))


def annotator_specs(settings: FilterSettings) -> dict[str, Any]:
    return {"annotators": dict(settings.annotators), "text_proxies": list(settings.text_proxies)}


def settings_of_annotators(specs: Mapping[str, Any]) -> FilterSettings:
    """The annotators a filter run used (its ``annotators.json``), as settings :func:`~crisscross.candidates.annotators.load_annotators` takes."""
    return FilterSettings(annotators=dict(specs["annotators"]), text_proxies=tuple(specs["text_proxies"]))


def select_queries(settings: FilterSettings, gallery: Gallery, seed: int, root: str | None = None) -> tuple[Queries, list[Rejected]]:
    """The image and caption queries (sorted), and a Rejected for every listed id not in the gallery;
    a relative ``query_file`` is the launching directory's (``root``)."""
    images, captions = sorted(gallery.image_ids), sorted(gallery.caption_ids)
    if settings.queries == "all":
        return Queries(tuple(images), tuple(captions)), []
    if settings.queries == "sample":
        picked = []
        for kind, pool, n in ((IMAGE_KIND, images, settings.image_queries), (CAPTION_KIND, captions, settings.caption_queries)):
            chosen = generator(seed, "filter", "queries", kind).choice(len(pool), size=min(n, len(pool)), replace=False)
            picked.append(tuple(pool[i] for i in np.sort(chosen)))
        return Queries(*picked), []
    query_file = settings.query_file if settings.query_file == ECCV_QUERY_SET else io.absolute(settings.query_file, root)
    listed, rejected = read_query_file(query_file)
    members = {IMAGE_KIND: set(images), CAPTION_KIND: set(captions)}
    kept: dict[str, set[str]] = {IMAGE_KIND: set(), CAPTION_KIND: set()}
    for query, where in listed:
        kind = split_id(query)[1]
        if query in members[kind]:
            kept[kind].add(query)
        else:
            rejected.append(reject("query", query, "unknown-query", f"{query} is not in the items' {kind} gallery", where, {"id": query}))
    return Queries(tuple(sorted(kept[IMAGE_KIND])), tuple(sorted(kept[CAPTION_KIND]))), rejected


def read_query_file(spec: str) -> tuple[list[tuple[str, str]], list[Rejected]]:
    """(canonical id, where) of every listed query.  ``eccv``: the eccv-caption package's query
    set; a folder: its ECCV-shaped ``eccv_image_to_caption.json`` / ``eccv_caption_to_image.json``
    (keys are COCO ids); a file: one canonical id per line (``#`` comments)."""
    path = eccv_data_dir() if spec == ECCV_QUERY_SET else Path(spec)
    out: list[tuple[str, str]] = []
    rejected: list[Rejected] = []
    if path.is_dir():
        for direction, name in ECCV_FILES.items():
            file = path / name
            if not file.is_file():
                raise InputError(f"query folder {path} lacks {name}")
            for key in read_positives(str(file)):
                try:
                    out.append((_COCO.parse(key, DIRECTIONS[direction][0]), f"{file}:{key}"))
                except IdFormError as error:
                    rejected.append(reject("query", key, "bad-id", str(error), str(file), {"key": key}))
        return out, rejected
    if not path.is_file():
        raise InputError(f"no query file {spec} (filter.query_file: 'eccv', an ECCV-shaped folder, or a file of canonical ids)")
    try:
        text = io.read_bytes(str(path)).decode("utf-8")
    except UnicodeDecodeError as error:
        raise InputError(f"query file {path}: not UTF-8 ({error})") from error
    for number, line in enumerate(text.splitlines(), start=1):
        text = line.split("#", 1)[0].strip()
        if not text:
            continue
        try:
            split_id(text)
            out.append((text, f"{path}:{number}"))
        except IdFormError as error:
            rejected.append(reject("query", text, "bad-id", str(error), f"{path}:{number}", {"line": line}))
    return out, rejected


# --------------------------------------------------------------------------- ranked lists


@dataclass(frozen=True)
class QueryLists:
    """What every annotator says about one query (lists leave the query's original pairs out)."""

    direction: str
    query: str
    top: Mapping[str, tuple[str, ...]]  # annotator → its top ``depth`` items, best first
    scores: Mapping[str, tuple[float, ...]]  # the scores of those items
    original_rank: Mapping[str, int]  # annotator → rank of the best original item among every item (leave-one-out)
    top1_rank: Mapping[str, int]  # "a|b" → rank b gives a's top-1 item (originals left out)
    tau: Mapping[str, float]  # "a|b" (a < b): τ-b of a's and b's scores over the union of their top lists; "a|b|own": over a's list


def pair_key(a: str, b: str) -> str:
    return f"{a}|{b}"


def original_columns(gallery: Gallery, direction: str, query_ids: Sequence[str], item_ids: Sequence[str]) -> tuple[np.ndarray, np.ndarray]:
    """(row, column) of every original pair of the queries: an image's captions, a caption's image."""
    column = {item: c for c, item in enumerate(item_ids)}
    rows, cols = [], []
    if direction == I2T:
        captions_of: dict[str, list[str]] = defaultdict(list)
        for caption, image in gallery.caption_image.items():
            captions_of[image].append(caption)
        for r, query in enumerate(query_ids):
            for caption in captions_of.get(query, ()):
                if caption in column:
                    rows.append(r)
                    cols.append(column[caption])
    else:
        for r, query in enumerate(query_ids):
            image = gallery.caption_image.get(query)
            if image in column:
                rows.append(r)
                cols.append(column[image])
    return np.asarray(rows, dtype=np.int64), np.asarray(cols, dtype=np.int64)


def top_columns(scores: np.ndarray, depth: int) -> np.ndarray:
    """Per row, the ``depth`` best columns by (score descending, column ascending)."""
    depth = min(depth, scores.shape[1])
    part = np.argpartition(-scores, depth - 1, axis=1)[:, :depth]
    values = np.take_along_axis(scores, part, axis=1)
    order = np.lexsort((part, -values), axis=1)
    return np.take_along_axis(part, order, axis=1)


def retrieve(models: Mapping[str, Model], gallery: Gallery, direction: str, query_ids: Sequence[str], depth: int) -> list[QueryLists]:
    """Every annotator's lists for one block of queries, with the diversity measures per query."""
    query_kind, item_kind = DIRECTIONS[direction]
    item_ids = gallery.ids(item_kind)
    rows, cols = original_columns(gallery, direction, query_ids, item_ids)
    n = len(query_ids)
    names = sorted(models)
    full, masked, top = {}, {}, {}
    for name in names:
        scores = np.asarray(models[name].block_scores(query_kind, query_ids, item_kind, item_ids)(0, n), dtype=np.float64)
        scores[~np.isfinite(scores)] = -np.inf
        full[name] = scores
        hidden = scores.copy()
        hidden[rows, cols] = -np.inf
        masked[name] = hidden
        top[name] = top_columns(hidden, depth)
    best_original = {}
    for name in names:
        best = np.full(n, -np.inf)
        np.maximum.at(best, rows, full[name][rows, cols])
        has = np.zeros(n, dtype=bool)
        has[rows] = True
        best_original[name] = np.where(has, 1 + (full[name] > best[:, None]).sum(axis=1), 0)
    top1_rank = {}
    for a in names:
        for b in names:
            if a != b:
                s = masked[b][np.arange(n), top[a][:, 0]]
                top1_rank[pair_key(a, b)] = 1 + (masked[b] > s[:, None]).sum(axis=1)
    out = []
    for q, query in enumerate(query_ids):
        taus = {}
        for i, a in enumerate(names):
            for b in names[i + 1 :]:
                taus[pair_key(a, b)] = _tau(masked[a][q], masked[b][q], np.union1d(top[a][q], top[b][q]))
                taus[pair_key(a, b) + "|own"] = _tau(masked[a][q], masked[b][q], top[a][q])
                taus[pair_key(b, a) + "|own"] = _tau(masked[a][q], masked[b][q], top[b][q])
        out.append(
            QueryLists(
                direction=direction,
                query=query,
                top={a: tuple(item_ids[c] for c in top[a][q] if np.isfinite(masked[a][q, c])) for a in names},
                scores={a: tuple(float(masked[a][q, c]) for c in top[a][q] if np.isfinite(masked[a][q, c])) for a in names},
                original_rank={a: int(best_original[a][q]) for a in names},
                top1_rank={k: int(v[q]) for k, v in top1_rank.items()},
                tau=taus,
            )
        )
    return out


def _tau(x: np.ndarray, y: np.ndarray, columns: np.ndarray) -> float:
    """τ-b of two annotators' scores over the finite ``columns``; NaN when fewer than two remain or
    either is constant there."""
    a, b = x[columns], y[columns]
    finite = np.isfinite(a) & np.isfinite(b)  # hidden own pairs pad short galleries with -inf
    return kendall_tau_b(a[finite], b[finite]) if finite.sum() >= 2 else float("nan")


# --------------------------------------------------------------------------- candidates


@dataclass(frozen=True, order=True)
class Finding:
    """One reason a pair is a candidate: ``annotator`` ranked it ``rank`` for ``query``."""

    rank: int
    annotator: str
    direction: str
    query: str
    score: float


Pair = tuple[str, str]  # (image, caption)


def as_pair(direction: str, query: str, item: str) -> Pair:
    return (query, item) if direction == I2T else (item, query)


def candidate_pairs(lists: Iterable[QueryLists], top_k: int) -> dict[Pair, tuple[Finding, ...]]:
    """Every annotator's top-K of every query, united by (image, caption) pair, with provenance."""
    found: dict[Pair, list[Finding]] = defaultdict(list)
    for entry in lists:
        for annotator, items in entry.top.items():
            for rank, (item, score) in enumerate(zip(items[:top_k], entry.scores[annotator][:top_k], strict=True), start=1):
                found[as_pair(entry.direction, entry.query, item)].append(Finding(rank, annotator, entry.direction, entry.query, score))
    return {pair: tuple(sorted(findings)) for pair, findings in sorted(found.items())}


CANDIDATES_SCHEMA = pa.schema(
    [
        ("image_id", pa.string()),
        ("caption_id", pa.string()),
        ("method", pa.string()),
        ("published_image", pa.string()),
        ("published_caption", pa.string()),
        ("annotators", pa.string()),  # sorted, comma-separated
        ("n_annotators", pa.int64()),
        ("best_rank", pa.int64()),
        ("query_id", pa.string()),  # the query whose list ranked it best (its batch's grouping key)
        ("direction", pa.string()),
        ("provenance", pa.string()),  # JSON list of findings
    ]
)


def candidates_table(candidates: Mapping[Pair, Sequence[Finding]]) -> pa.Table:
    """One row per candidate pair, sorted by (image, caption); ``verify_items`` reads it as is."""
    rows = []
    for (image, caption), findings in sorted(candidates.items()):
        best = findings[0]
        rows.append(
            {
                "image_id": image,
                "caption_id": caption,
                "method": METHOD,
                "published_image": published(image, IMAGE_KIND),
                "published_caption": published(caption, CAPTION_KIND),
                "annotators": ",".join(sorted({f.annotator for f in findings})),
                "n_annotators": len({f.annotator for f in findings}),
                "best_rank": best.rank,
                "query_id": best.query,
                "direction": best.direction,
                "provenance": json.dumps(
                    [
                        {"annotator": f.annotator, "direction": f.direction, "query": f.query, "rank": f.rank, "score": round(f.score, 6)}
                        for f in findings
                    ],
                    sort_keys=True,
                ),
            }
        )
    return pa.Table.from_pylist(rows, schema=CANDIDATES_SCHEMA)


def candidates_csv(table: pa.Table) -> bytes:
    """``verify_candidates.csv``: the pairs in published ids, with who found them."""
    columns = ("published_image", "published_caption", "image_id", "caption_id", "annotators", "best_rank")
    data = table.select(list(columns)).to_pylist()
    return io.csv_bytes(columns, ([row[c] for c in columns] for row in data))
