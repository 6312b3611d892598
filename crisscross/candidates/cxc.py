"""CxC intramodal candidate sampling (Crisscrossed Captions §2, "Intramodality").

* ``i2i_csim`` — image pairs from *caption* similarity S^C: each image's top neighbours under
  each configured text encoder's co-caption means, united over encoders; a pair found from
  both ends or by several encoders is one candidate whose provenance lists every finding.
* ``c2c_isim`` — caption pairs from *image* similarity S^V: each image's top neighbours under
  the image encoder; for each image pair, one caption drawn from each image's co-captions.
* ``c2c_cocaption`` — caption pairs drawn within co-caption groups (captions of one image), as
  many as ``ratio`` × the ``c2c_isim`` pairs, uniformly over all within-image pairs.

Randomness is explicit and order-free: each draw uses a generator seeded by the base seed and
a stable hash of what is drawn for, so any runner, in any order, draws the same captions.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from json.encoder import encode_basestring_ascii
from typing import Any, NamedTuple

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from crisscross.core.ids import CAPTION_KIND, IMAGE_KIND, published
from crisscross.core.quarantine import Rejected, reject
from crisscross.core.rng import generator
from crisscross.core.settings import setting
from crisscross.embed import DEFAULT_IMAGE_ENCODERS, DEFAULT_TEXT_ENCODERS
from crisscross.formats.cxc import candidates_csv
from crisscross.tasktypes.sis import SIS
from crisscross.tasktypes.sts import STS

I2I_CSIM = "i2i_csim"
C2C_ISIM = "c2c_isim"
C2C_COCAPTION = "c2c_cocaption"
METHODS = (I2I_CSIM, C2C_ISIM, C2C_COCAPTION)


@dataclass(frozen=True)
class SampleSettings:
    """``params.yaml`` ``sample:``; the paper's top 5 under each space, as many co-caption pairs as c2c_isim."""

    i2i_text_encoders: tuple[str, ...] = DEFAULT_TEXT_ENCODERS  # S^C spaces for i2i_csim
    i2i_top: int = setting(5, low=1)
    c2c_image_encoders: tuple[str, ...] = DEFAULT_IMAGE_ENCODERS  # S^V spaces for c2c_isim
    c2c_top: int = setting(5, low=1)
    cocaption_ratio: float = setting(1.0, low=0.0)  # c2c_cocaption pairs per c2c_isim pair
    allow_cross_method: bool = False


class Evidence(NamedTuple):
    """One reason a pair was picked: ``query``'s list in ``space`` had the other item at ``rank``.
    A named tuple, not a dataclass: ``c2c_isim`` makes one per finding, and a tuple is made and
    sorted faster (ordered by its fields, as a dataclass with ``order`` would be; as
    :data:`EVIDENCE_SCHEMA` rows sort)."""

    space: str
    query: str
    rank: int
    similarity: float


@dataclass(frozen=True)
class Candidate:
    method: str
    id1: str  # id1 < id2: a pair is unordered
    id2: str
    image1: str  # the images behind the pair (the items themselves for i2i)
    image2: str
    provenance: tuple[Evidence, ...]

    def provenance_json(self) -> str:
        """The findings as ``json.dumps([{"space", "query", "rank", "similarity"}, ...], sort_keys=True)``
        writes them, similarity rounded to 6 places, byte for byte: each finding filled into one
        template with json's own string escaper and float form, since building dicts for json's
        encoder took a sixth of all of COCO's ``sample`` stage."""
        return "[" + ", ".join([_finding_json(*e) for e in self.provenance]) + "]"


# json writes a float as ``float.__repr__`` does, but the three non-finite ones as JavaScript names.
_JSON_NON_FINITE = {"nan": "NaN", "inf": "Infinity", "-inf": "-Infinity"}


def _finding_json(space: str, query: str, rank: int, similarity: float) -> str:
    number = float.__repr__(round(similarity, 6))
    similarity_json = _JSON_NON_FINITE.get(number, number)
    return f'{{"query": {encode_basestring_ascii(query)}, "rank": {rank}, "similarity": {similarity_json}, "space": {encode_basestring_ascii(space)}}}'


def unordered(a: str, b: str) -> tuple[str, str]:
    return (a, b) if a <= b else (b, a)


# A pair's findings as rows: the pair (``id1 <= id2``), then the finding's fields in
# :class:`Evidence` order, so sorting by every column sorts by pair and, within one, as findings sort.
EVIDENCE_SCHEMA = pa.schema(
    [
        ("id1", pa.string()),
        ("id2", pa.string()),
        ("space", pa.string()),
        ("query", pa.string()),
        ("rank", pa.int16()),
        ("similarity", pa.float32()),
    ]
)
_EVIDENCE_ORDER = [(name, "ascending") for name in EVIDENCE_SCHEMA.names]


def neighbour_evidence(table: pa.Table, space: str, top: int) -> pa.Table:
    """:data:`EVIDENCE_SCHEMA` rows for every neighbour ranked within ``top`` (self-pairs skipped)
    of a neighbours table, made in Arrow: the pair is unordered (Arrow compares UTF-8 bytes, which
    order as Python orders code points).  All of COCO's 1.2 million findings made one by one as
    Python objects took a seventh of the ``sample`` stage."""
    within = table.filter(pc.and_(pc.less_equal(table["rank"], top), pc.not_equal(table["query_id"], table["neighbour_id"])))
    query, neighbour = within["query_id"], within["neighbour_id"]
    first = pc.less_equal(query, neighbour)
    pair = [pc.if_else(first, query, neighbour), pc.if_else(first, neighbour, query)]
    columns = [*pair, _repeated(space, len(within)), query, within["rank"], within["similarity"]]
    return pa.table(columns, names=EVIDENCE_SCHEMA.names).cast(EVIDENCE_SCHEMA)


def _repeated(text: str, n: int) -> pa.Array:
    return pa.nulls(n, pa.string()).fill_null(text)


def _pair_runs(evidence: pa.Table) -> tuple[pa.Table, list[int]]:
    """``evidence`` sorted (by pair, then as findings sort) and where each pair's run of rows
    starts, with the row count last."""
    ordered = pa.concat_tables([EVIDENCE_SCHEMA.empty_table(), evidence.cast(EVIDENCE_SCHEMA)]).sort_by(_EVIDENCE_ORDER).combine_chunks()
    if not ordered.num_rows:
        return ordered, [0]
    id1, id2 = ordered["id1"], ordered["id2"]
    changed = pc.or_(pc.not_equal(id1[1:], id1[:-1]), pc.not_equal(id2[1:], id2[:-1])).to_numpy(zero_copy_only=False)
    return ordered, [0, *(np.flatnonzero(changed) + 1).tolist(), ordered.num_rows]


def _findings(ordered: pa.Table) -> Iterator[tuple[str, str, int, float]]:
    """The finding of each :data:`EVIDENCE_SCHEMA` row, as :class:`Evidence` fields."""
    return zip(*(ordered[name].to_pylist() for name in EVIDENCE_SCHEMA.names[2:]), strict=True)


def evidence_by_pair(evidence: pa.Table) -> list[tuple[tuple[str, str], list[Evidence]]]:
    """Each pair of :data:`EVIDENCE_SCHEMA` rows with all its findings, in the pairs' order."""
    ordered, runs = _pair_runs(evidence)
    id1, id2 = ordered["id1"].to_pylist(), ordered["id2"].to_pylist()
    findings = list(itertools.starmap(Evidence, _findings(ordered)))
    return [((id1[start], id2[start]), findings[start:end]) for start, end in itertools.pairwise(runs)]


def image_pairs_table(evidence: pa.Table) -> pa.Table:
    """The ``i2i_csim`` candidates of :data:`EVIDENCE_SCHEMA` rows, as :func:`candidates_table`
    makes them from :class:`Candidate` objects: one per pair, its provenance every finding of it.
    Built column by column (each finding's JSON by :func:`_finding_json`, joined per pair in
    Arrow), since one object per pair and finding took a third of all of COCO's ``sample`` stage."""
    ordered, runs = _pair_runs(evidence)
    findings = pa.array(list(itertools.starmap(_finding_json, _findings(ordered))), pa.string())
    per_pair = pa.ListArray.from_arrays(pa.array(runs, pa.int32()), findings)
    firsts = pa.array(runs[:-1], pa.int64())
    id1, id2 = ordered["id1"].take(firsts), ordered["id2"].take(firsts)
    columns = {
        "method": _repeated(I2I_CSIM, len(firsts)),
        "id1": id1,
        "id2": id2,
        "image1": id1,
        "image2": id2,
        "published1": _published_column(id1, IMAGE_KIND),
        "published2": _published_column(id2, IMAGE_KIND),
        "provenance": pc.binary_join_element_wise("[", pc.binary_join(per_pair, ", "), "]", ""),
    }
    return _ordered_candidates(columns)


def _published_column(ids: pa.Array | pa.ChunkedArray, kind: str) -> pa.Array:
    """:func:`published` of each id, called once per distinct id."""
    encoded = pc.dictionary_encode(ids.combine_chunks() if isinstance(ids, pa.ChunkedArray) else ids)
    names = pa.array([published(i, kind) for i in encoded.dictionary.to_pylist()], pa.string())
    return names.take(encoded.indices)


def caption_pair_for_images(
    pair: tuple[str, str], evidence: Iterable[Evidence], captions_by_image: Mapping[str, Sequence[str]], seed: int
) -> Candidate | Rejected:
    """``c2c_isim``: one caption of each image, drawn with a generator keyed by the image pair."""
    image1, image2 = pair
    options1, options2 = sorted(captions_by_image.get(image1, ())), sorted(captions_by_image.get(image2, ()))
    if not options1 or not options2:
        missing = image1 if not options1 else image2
        return reject(
            "pair", f"{image1}|{image2}", "no-captions", f"image {missing} has no captions to draw from", C2C_ISIM, {"images": pair}
        )
    rng = generator(seed, C2C_ISIM, image1, image2)
    caption1, caption2 = options1[rng.integers(len(options1))], options2[rng.integers(len(options2))]
    first, second = unordered(caption1, caption2)
    images = (image1, image2) if first == caption1 else (image2, image1)
    return Candidate(C2C_ISIM, first, second, images[0], images[1], tuple(sorted(evidence)))


def cocaption_pairs(captions_by_image: Mapping[str, Sequence[str]], n: int, seed: int) -> list[Candidate]:
    """``n`` distinct within-image caption pairs, uniformly over all of them (all if fewer)."""
    pool = [(image, *pair) for image in sorted(captions_by_image) for pair in itertools.combinations(sorted(captions_by_image[image]), 2)]
    chosen = generator(seed, C2C_COCAPTION).choice(len(pool), size=min(n, len(pool)), replace=False)
    return [Candidate(C2C_COCAPTION, a, b, image, image, ()) for image, a, b in (pool[i] for i in np.sort(chosen))]


CANDIDATES_SCHEMA = pa.schema(
    [(name, pa.string()) for name in ("method", "id1", "id2", "image1", "image2", "published1", "published2", "provenance")]
)
# CxC-shaped candidate files (no scores yet): the release file of each task type and its methods.
CANDIDATE_FILES = {"sts_candidates.csv": (STS.name, (C2C_ISIM, C2C_COCAPTION)), "sis_candidates.csv": (SIS.name, (I2I_CSIM,))}
# The candidates' order: every column in turn, so (method, id1, id2) first, as the files list them.
_ORDER = [(name, "ascending") for name in CANDIDATES_SCHEMA.names]


def candidates_table(candidates: Iterable[Candidate]) -> pa.Table:
    """Candidates as rows, their ids also in published form and their provenance as JSON, in the
    candidates' order (by every column: Arrow orders UTF-8 bytes as Python orders code points).
    Made where the candidates are drawn, so what crosses to the constraint check is columns."""
    rows = list(candidates)
    kinds = [IMAGE_KIND if c.method == I2I_CSIM else CAPTION_KIND for c in rows]
    columns = {
        "method": [c.method for c in rows],
        "id1": [c.id1 for c in rows],
        "id2": [c.id2 for c in rows],
        "image1": [c.image1 for c in rows],
        "image2": [c.image2 for c in rows],
        "published1": [published(c.id1, kind) for c, kind in zip(rows, kinds, strict=True)],
        "published2": [published(c.id2, kind) for c, kind in zip(rows, kinds, strict=True)],
        "provenance": [c.provenance_json() for c in rows],
    }
    return _ordered_candidates(columns)


def _ordered_candidates(columns: Mapping[str, Any]) -> pa.Table:
    """Candidate columns as :data:`CANDIDATES_SCHEMA` rows, in the candidates' order."""
    return pa.table(dict(columns), schema=CANDIDATES_SCHEMA).sort_by(_ORDER)


def enforce_constraints(tables: Iterable[pa.Table], allow_cross_method: bool) -> tuple[pa.Table, list[Rejected]]:
    """The candidates (:func:`candidates_table` parts) that break no rule, as one table in the
    candidates' order; rejected: self pairs, pairs repeated (in either order) within a method, and
    pairs already in another method (unless allowed).  Of repeats the first in that order is kept;
    two candidates equal in every column are the same row, whichever is kept."""
    ordered = pa.concat_tables([CANDIDATES_SCHEMA.empty_table(), *tables]).sort_by(_ORDER)
    methods, firsts, seconds = (ordered.column(name).to_pylist() for name in ("method", "id1", "id2"))
    keep = np.zeros(ordered.num_rows, dtype=bool)
    rejected: list[Rejected] = []
    # The method that kept each pair last.  Rows come method by method (the order's first column), so
    # a pair repeated within a method finds its own method here, even where an earlier method kept it
    # too (cross-method pairs allowed); otherwise only one method ever keeps a pair.
    seen: dict[tuple[str, str], str] = {}
    for row, (method, id1, id2) in enumerate(zip(methods, firsts, seconds, strict=True)):
        key = unordered(id1, id2)
        if id1 == id2:
            rejected.append(_pair_rejected(key, method, id1, id2, "self-pair", f"{method} pairs {id1} with itself"))
        elif seen.get(key) == method:
            rejected.append(_pair_rejected(key, method, id1, id2, "duplicate-pair", f"{method} holds {key[0]}|{key[1]} twice"))
        elif key in seen and not allow_cross_method:
            rejected.append(_pair_rejected(key, method, id1, id2, "cross-method", f"{key[0]}|{key[1]} is in {seen[key]} and {method}"))
        else:
            seen[key] = method
            keep[row] = True
    return ordered.filter(pa.array(keep)).combine_chunks(), rejected


def _pair_rejected(key: tuple[str, str], method: str, id1: str, id2: str, reason: str, detail: str) -> Rejected:
    """A row :func:`enforce_constraints` refuses (its record made only then: most rows are kept)."""
    return reject("pair", f"{key[0]}|{key[1]}", reason, detail, method, {"method": method, "id1": id1, "id2": id2})


def candidate_csvs(table: pa.Table) -> dict[str, bytes]:
    """``sts_candidates.csv`` and ``sis_candidates.csv`` in the CxC release shape, without scores,
    from a :func:`candidates_table` (sorted as the files are), whose ids are already published."""
    files = {}
    for name, (task, methods) in CANDIDATE_FILES.items():
        rows = table.filter(pc.is_in(table.column("method"), pa.array(methods, pa.string())))
        files[name] = candidates_csv(task, rows.column("published1"), rows.column("published2"), rows.column("method"))
    return files
