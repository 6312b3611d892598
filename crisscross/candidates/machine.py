"""ECCV Caption machine-annotator filter (ECCV Caption §3, §3.1 / App. A.2, §3.3, App. E).

*Machine annotators* are image–text scorers (:class:`crisscross.scoring.protocol.Model`): the
evaluate stage's models (``load_model``: embedding sets in one joint space, score matrices) and,
offline, a *text proxy* per text encoder (:class:`TextProxyModel`), which scores an image by the
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
* **Batches** (:func:`plan_batches`, ECCV §3.2): 18 pairs = ``batch_candidates`` (16)
  candidates + 1 original positive + 1 random negative that is in NO annotator's top-25 for
  its query.  Candidates are ordered by the query that ranked them best, cut into near-equal
  batches; a batch's gold belongs to its main query (the one most of its candidates came from).
* **Diversity** (:func:`diversity_report`, App. A.2), per direction, for each annotator pair
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
import math
from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

from crisscross.annotate.tasks import VERIFY_METHOD
from crisscross.core import io
from crisscross.core.errors import InputError, ParamError
from crisscross.core.ids import CAPTION_KIND, IMAGE_KIND, CocoIdScheme, IdFormError, published, split_id
from crisscross.core.quarantine import Rejected, reject
from crisscross.core.rng import generator
from crisscross.core.settings import setting
from crisscross.embed import DEFAULT_TEXT_ENCODERS
from crisscross.embed.sets import CAPTIONS, COCAPTION_MEAN, EmbeddingSet, set_dir, unit_rows
from crisscross.formats.eccv import DIRECTIONS, ECCV_FILES, I2T
from crisscross.formats.schema import GOLD_NEGATIVE, GOLD_POSITIVE, NOT_GOLD
from crisscross.scoring.metrics import kendall_tau_b
from crisscross.scoring.protocol import Block, CoverageError, Gallery, Model, load_model
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

    annotators: Mapping[str, Any] = setting({})  # name → evaluate.models-style entry ({text, image} or {source: score-matrix, path})
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
        for name, spec in self.annotators.items():
            if not isinstance(spec, Mapping):
                raise ParamError(f"{where}: filter.annotators.{name} must be a mapping like evaluate.models entries, got {spec!r}")
            if str(name).startswith(PROXY_PREFIX):
                raise ParamError(f"{where}: filter.annotators.{name}: names starting {PROXY_PREFIX!r} are reserved for text_proxies")


# --------------------------------------------------------------------------- text proxy


class TextProxyModel(Model):
    """An image scored by its co-caption mean under a text encoder (cosine), leave-one-out for
    a caption against its own image; an image with a single caption cannot score that caption
    (-inf: it has no other caption to vote)."""

    def __init__(self, name: str, captions: EmbeddingSet, means: EmbeddingSet, caption_image: Mapping[str, str]) -> None:
        self.name = name
        self._caption_rows = captions.row_of()
        self._image_rows = means.row_of()
        self.units = unit_rows(np.asarray(captions.vectors, dtype=np.float32))
        self.means = np.asarray(means.vectors, dtype=np.float64)
        self._mean_norms = np.linalg.norm(self.means, axis=1)
        self._mean_units = (self.means / self._mean_norms[:, None]).astype(np.float32)
        image_of = np.full(len(captions.ids), -1, dtype=np.int64)
        for caption, row in self._caption_rows.items():
            image_of[row] = self._image_rows.get(caption_image.get(caption, ""), -1)
        self._image_of = image_of  # caption row → its image's mean row (-1: none)
        self.counts = np.bincount(image_of[image_of >= 0], minlength=len(means.ids))
        sums = np.zeros_like(self.means)
        np.add.at(sums, image_of[image_of >= 0], self.units[image_of >= 0])
        drift = np.abs(sums - self.counts[:, None] * self.means).max(initial=0.0)
        if not np.isfinite(drift) or drift > 1e-3:
            raise InputError(
                f"annotator {name!r}: the co-caption means are not the means of the unit caption vectors "
                f"(max |n·mean − Σ captions| = {drift:.3g}); re-run the embed stage"
            )

    def can_compare(self, query_kind: str, item_kind: str) -> bool:
        return {query_kind, item_kind} == {IMAGE_KIND, CAPTION_KIND}

    def missing(self, kind: str, ids: Sequence[str]) -> list[str]:
        rows = self._image_rows if kind == IMAGE_KIND else self._caption_rows
        return [i for i in ids if i not in rows]

    def leave_one_out(self, caption_rows: np.ndarray, image_rows: np.ndarray) -> np.ndarray:
        """cos(u_c, (n·m − u_c)/(n − 1)) = (n·d − 1) / sqrt(n²|m|² − 2n·d + 1), d = u_c·m."""
        u, m = self.units[caption_rows].astype(np.float64), self.means[image_rows]
        n = self.counts[image_rows].astype(np.float64)
        d = np.einsum("ij,ij->i", u, m)
        with np.errstate(invalid="ignore", divide="ignore"):
            out = (n * d - 1.0) / np.sqrt(np.maximum(n * n * self._mean_norms[image_rows] ** 2 - 2.0 * n * d + 1.0, 0.0))
        return np.where(n > 1, out, -np.inf)

    def _rows(self, kind: str, ids: Sequence[str]) -> np.ndarray:
        self.require(kind, ids, "ids")
        rows = self._image_rows if kind == IMAGE_KIND else self._caption_rows
        return np.fromiter((rows[i] for i in ids), dtype=np.int64, count=len(ids))

    def block_scores(self, query_kind: str, query_ids: Sequence[str], item_kind: str, item_ids: Sequence[str]) -> Block:
        q, it = self._rows(query_kind, query_ids), self._rows(item_kind, item_ids)
        if query_kind == IMAGE_KIND:  # rows images, columns captions; own captions of query rows lo:hi fixed
            queries, items_t = self._mean_units[q], np.ascontiguousarray(self.units[it].T)
            position = {row: p for p, row in enumerate(q.tolist())}
            owner = np.fromiter((position.get(int(r), -1) for r in self._image_of[it]), dtype=np.int64, count=len(it))

            def block(lo: int, hi: int) -> np.ndarray:
                scores = queries[lo:hi] @ items_t
                cols = np.nonzero((owner >= lo) & (owner < hi))[0]
                scores[owner[cols] - lo, cols] = self.leave_one_out(it[cols], q[owner[cols]])
                return scores

            return block
        queries, items_t = self.units[q], np.ascontiguousarray(self._mean_units[it].T)
        column = {row: p for p, row in enumerate(it.tolist())}
        own_col = np.fromiter((column.get(int(r), -1) for r in self._image_of[q]), dtype=np.int64, count=len(q))

        def block_t(lo: int, hi: int) -> np.ndarray:
            scores = queries[lo:hi] @ items_t
            rows = np.nonzero(own_col[lo:hi] >= 0)[0]
            scores[rows, own_col[lo + rows]] = self.leave_one_out(q[lo + rows], it[own_col[lo + rows]])
            return scores

        return block_t

    def pair_scores(self, a_kind: str, a_ids: Sequence[str], b_kind: str, b_ids: Sequence[str]) -> np.ndarray:
        caps, imgs = (a_ids, b_ids) if a_kind == CAPTION_KIND else (b_ids, a_ids)
        c, i = self._rows(CAPTION_KIND, caps), self._rows(IMAGE_KIND, imgs)
        scores = np.einsum("ij,ij->i", self.units[c].astype(np.float64), self._mean_units[i].astype(np.float64))
        own = self._image_of[c] == i
        scores[own] = self.leave_one_out(c[own], i[own])
        return scores


def text_proxy_model(encoder: str, embeddings: str, caption_image: Mapping[str, str]) -> TextProxyModel:
    """The text proxy of ``encoder`` from the embed output's ``captions`` and ``cocaption_mean`` sets."""
    sets = []
    for kind in (CAPTIONS, COCAPTION_MEAN):
        directory = set_dir(embeddings, "text", encoder, kind)
        if not io.exists(io.join(directory, "vectors.npy")):
            raise FileNotFoundError(f"no embedding set {directory}: run the embed stage with text encoder {encoder!r}")
        sets.append(EmbeddingSet.read(directory))
    return TextProxyModel(PROXY_PREFIX + encoder, sets[0], sets[1], caption_image)


def load_annotators(settings: FilterSettings, embeddings: str, gallery: Gallery, root: str | None = None) -> dict[str, Model]:
    """Every machine annotator by name, each checked to score images against captions over the
    whole gallery (a shrunken gallery would hide candidates: :class:`CoverageError`)."""
    models: dict[str, Model] = {name: load_model(name, spec, embeddings, root) for name, spec in sorted(settings.annotators.items())}
    for encoder in settings.text_proxies:
        models[PROXY_PREFIX + encoder] = text_proxy_model(encoder, embeddings, gallery.caption_image)
    for name, model in models.items():
        if not model.can_compare(IMAGE_KIND, CAPTION_KIND):
            raise CoverageError(f"annotator {name!r} cannot score images against captions (give it one joint space: text == image)")
        model.require(IMAGE_KIND, gallery.image_ids, "gallery images")
        model.require(CAPTION_KIND, gallery.caption_ids, "gallery captions")
    return models


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
    """The annotators a filter run used (its ``annotators.json``), as settings :func:`load_annotators` takes."""
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
            for key in json.loads(file.read_text(encoding="utf-8")):
                try:
                    out.append((_COCO.parse(key, DIRECTIONS[direction][0]), f"{file}:{key}"))
                except IdFormError as error:
                    rejected.append(reject("query", key, "bad-id", str(error), str(file), {"key": key}))
        return out, rejected
    if not path.is_file():
        raise InputError(f"no query file {spec} (filter.query_file: 'eccv', an ECCV-shaped folder, or a file of canonical ids)")
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
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


# --------------------------------------------------------------------------- batches and gold


BATCHES_SCHEMA = pa.schema(
    [
        ("batch_id", pa.string()),
        ("position", pa.int64()),
        ("image_id", pa.string()),
        ("caption_id", pa.string()),
        ("method", pa.string()),
        ("gold", pa.string()),  # "" | positive | negative
        ("query_id", pa.string()),  # candidates: the query that ranked it best; gold: the batch's main query
        ("direction", pa.string()),
        ("in_top_lists", pa.int64()),  # annotators with this pair in their top-``negative_depth`` for query_id (0 for negatives)
    ]
)


@dataclass
class BatchPlan:
    batches: pa.Table
    facts: dict[str, Any] = field(default_factory=dict)


def plan_batches(
    candidates: Mapping[Pair, Sequence[Finding]],
    lists: Iterable[QueryLists],
    gallery: Gallery,
    per_batch: int,
    seed: int,
) -> BatchPlan:
    """ECCV §3.2 batches: ``per_batch`` candidates + 1 original positive + 1 negative outside
    every annotator's top lists (``negative_depth``) for the batch's main query.

    Candidates in (best query, pair) order are cut into batches whose sizes differ by at most
    one; a batch's main query is its most frequent best query (ties: first).  Its positive is an
    original pair of that query not used before (else of the batch's other queries, else any
    query); its negative pairs the query with a gallery item drawn uniformly (generator keyed
    by the batch) among those in no annotator's list for it, not original, not yet used.  The
    rule is checked again on the result and counted (``negative_rule_violations``).
    """
    by_query = {(e.direction, e.query): e for e in lists}
    in_lists = {key: Counter(i for items in e.top.values() for i in set(items)) for key, e in by_query.items()}
    originals = _original_pairs(gallery, by_query)
    ordered = sorted(candidates.items(), key=lambda kv: (kv[1][0].direction, kv[1][0].query, kv[0]))
    n = len(ordered)
    n_batches = math.ceil(n / per_batch) if n else 0
    digits = max(5, len(str(n_batches)))
    used: set[Pair] = set(candidates)
    rows: list[dict[str, Any]] = []
    facts: Counter[str] = Counter()
    start = 0
    for k in range(n_batches):
        size = n // n_batches + (k < n % n_batches)
        members = ordered[start : start + size]
        start += size
        batch_id = f"verify-{k + 1:0{digits}d}"
        keys = [(f[0].direction, f[0].query) for _, f in members]
        counts = Counter(keys)
        main = max(counts, key=lambda key: (counts[key], -keys.index(key)))
        rng = generator(seed, "filter", "gold", batch_id)
        positive = _draw_positive(main, keys, originals, used, rng)
        negative = _draw_negative(main, by_query, in_lists, gallery, originals, used, rng)
        facts["fallback_positive"] += positive[1] != main
        batch = [
            {"image_id": p[0], "caption_id": p[1], "gold": NOT_GOLD, "query_id": f[0].query, "direction": f[0].direction, "in_top_lists": 0}
            for p, f in members
        ]
        for gold, (pair, key) in ((GOLD_POSITIVE, positive), (GOLD_NEGATIVE, negative)):
            if pair is None:
                facts[f"missing_{gold}"] += 1
                continue
            used.add(pair)
            batch.append(
                {"image_id": pair[0], "caption_id": pair[1], "gold": gold, "query_id": key[1], "direction": key[0], "in_top_lists": 0}
            )
        for row in batch:
            item = row["caption_id"] if row["direction"] == I2T else row["image_id"]
            row["in_top_lists"] = in_lists.get((row["direction"], row["query_id"]), Counter())[item]
        order = generator(seed, batch_id).permutation(len(batch))
        rows += [{**batch[i], "batch_id": batch_id, "position": p, "method": METHOD} for p, i in enumerate(order, start=1)]
    rows.sort(key=lambda r: (r["batch_id"], r["position"]))
    table = pa.Table.from_pylist(rows, schema=BATCHES_SCHEMA)
    negatives = [r for r in rows if r["gold"] == GOLD_NEGATIVE]
    return BatchPlan(
        table,
        {
            **facts,
            **dict(
                batches=n_batches,
                candidates=n,
                positives=sum(r["gold"] == GOLD_POSITIVE for r in rows),
                negatives=len(negatives),
                negative_rule_violations=sum(r["in_top_lists"] > 0 for r in negatives),
                batch_sizes={str(k): v for k, v in sorted(Counter(Counter(r["batch_id"] for r in rows).values()).items())},
            ),
        },
    )


def _original_pairs(gallery: Gallery, keys: Iterable[tuple[str, str]]) -> dict[tuple[str, str], list[Pair]]:
    captions_of: dict[str, list[str]] = defaultdict(list)
    for caption, image in gallery.caption_image.items():
        captions_of[image].append(caption)
    out = {}
    for direction, query in keys:
        if direction == I2T:
            out[(direction, query)] = [(query, c) for c in sorted(captions_of.get(query, ()))]
        else:
            image = gallery.caption_image.get(query)
            out[(direction, query)] = [(image, query)] if image else []
    return out


def _draw_positive(
    main: tuple[str, str], keys: Sequence[tuple[str, str]], originals: Mapping[tuple[str, str], list[Pair]], used: set[Pair], rng: Any
) -> tuple[Pair | None, tuple[str, str]]:
    for key in [main, *dict.fromkeys(keys), *sorted(originals)]:
        free = [p for p in originals.get(key, ()) if p not in used]
        if free:
            return free[int(rng.integers(len(free)))], key
    return None, main


def _draw_negative(
    main: tuple[str, str],
    by_query: Mapping[tuple[str, str], QueryLists],
    in_lists: Mapping[tuple[str, str], Counter],
    gallery: Gallery,
    originals: Mapping[tuple[str, str], list[Pair]],
    used: set[Pair],
    rng: Any,
    max_draws: int = 1000,
) -> tuple[Pair | None, tuple[str, str]]:
    direction, query = main
    items = gallery.ids(DIRECTIONS[direction][1])
    banned = set(in_lists.get(main, ())) | {p[1] if direction == I2T else p[0] for p in originals.get(main, ())}
    for _ in range(max_draws):
        item = items[int(rng.integers(len(items)))]
        pair = as_pair(direction, query, item)
        if item not in banned and pair not in used:
            return pair, main
    return None, main


# --------------------------------------------------------------------------- diversity


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


# --------------------------------------------------------------------------- against a reference


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
