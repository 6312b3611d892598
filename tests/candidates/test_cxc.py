"""CxC candidate sampling rules on small known cases."""

from __future__ import annotations

import json
import math

import numpy as np
import pyarrow as pa
from hypothesis import example, given, settings
from hypothesis import strategies as st

from crisscross.candidates.cxc import (
    C2C_COCAPTION,
    C2C_ISIM,
    CANDIDATES_SCHEMA,
    EVIDENCE_SCHEMA,
    I2I_CSIM,
    Candidate,
    Evidence,
    candidate_csvs,
    candidates_table,
    caption_pair_for_images,
    cocaption_pairs,
    enforce_constraints,
    evidence_by_pair,
    image_pairs_table,
    neighbour_evidence,
)
from crisscross.core.quarantine import Rejected
from crisscross.formats.cxc import cxc_csv
from crisscross.similarity.neighbours import NEIGHBOURS_SCHEMA

CAPTIONS = {"i:a": ["c:a1", "c:a2", "c:a3"], "i:b": ["c:b1", "c:b2"], "i:c": ["c:c1"]}


def rows(query: str, neighbours: list[str]) -> pa.Table:
    return pa.Table.from_pylist(
        [{"query_id": query, "rank": r + 1, "neighbour_id": n, "similarity": 1 - r / 10} for r, n in enumerate(neighbours)],
        schema=NEIGHBOURS_SCHEMA,
    )


def test_neighbour_evidence_is_unordered_and_cut_at_top():
    found = neighbour_evidence(rows("i:b", ["i:a", "i:b", "i:c", "i:d"]), "text/use/cm", top=3).to_pylist()
    assert [(row["id1"], row["id2"]) for row in found] == [("i:a", "i:b"), ("i:b", "i:c")]
    assert found[0] == {"id1": "i:a", "id2": "i:b", "space": "text/use/cm", "query": "i:b", "rank": 1, "similarity": 1.0}
    assert found[1]["rank"] == 3
    beyond_ascii = neighbour_evidence(rows("i:é", ["i:z", "i:😀", "i:\u00ff", "i:\u0100"]), "s", top=4)
    assert list(zip(beyond_ascii["id1"].to_pylist(), beyond_ascii["id2"].to_pylist(), strict=True)) == [
        tuple(sorted(("i:é", other))) for other in ("i:z", "i:😀", "i:\u00ff", "i:\u0100")
    ]  # Python's code-point order


def evidence_table(findings: list[tuple[tuple[str, str], Evidence]]) -> pa.Table:
    return pa.Table.from_pylist([{"id1": a, "id2": b, **e._asdict()} for (a, b), e in findings], schema=EVIDENCE_SCHEMA)


def test_image_pairs_unite_evidence_from_both_ends_and_encoders():
    evidence = [
        Evidence("text/use", "demo:img:b", 2, 0.75),
        Evidence("text/bow", "demo:img:a", 1, 0.5),
        Evidence("text/use", "demo:img:a", 1, 0.75),
    ]
    table = image_pairs_table(evidence_table([(("demo:img:a", "demo:img:b"), e) for e in evidence]))
    [row] = table.to_pylist()
    assert (row["method"], row["id1"], row["id2"], row["image1"], row["image2"]) == (
        I2I_CSIM,
        "demo:img:a",
        "demo:img:b",
        "demo:img:a",
        "demo:img:b",
    )
    assert [(e["space"], e["query"]) for e in json.loads(row["provenance"])] == [
        ("text/bow", "demo:img:a"),
        ("text/use", "demo:img:a"),
        ("text/use", "demo:img:b"),
    ]
    assert image_pairs_table(EVIDENCE_SCHEMA.empty_table()).num_rows == 0


# Image ids of one dataset whose native parts hold non-ASCII and astral characters, so Arrow's
# byte order and Python's code-point order are both exercised; similarities are float32, as the
# neighbour tables hold them.
_IDS = st.builds(lambda native: f"demo:img:{native}", st.text(st.sampled_from("ab~é☃😀\u00ff\u0100"), min_size=1, max_size=3))
_EVIDENCE_ROWS = st.lists(
    st.tuples(
        _IDS,
        _IDS,
        st.sampled_from(["text/use", "text/bow", "tëxt"]),
        _IDS,
        st.integers(1, 30),
        st.sampled_from([0.5, 0.25, 1e-7, -0.0, 0.1]).map(lambda x: float(np.float32(x))),
    ),
    max_size=40,
)


@settings(max_examples=300, derandomize=True, database=None, deadline=None)
@given(_EVIDENCE_ROWS)
def test_image_pairs_table_is_candidates_table_of_the_pairs_as_objects(rows_: list[tuple[str, str, str, str, int, float]]):
    """The columnar i2i path makes the bytes :class:`Candidate` objects make, one per pair, in any input order."""
    findings = [
        (tuple(sorted((a, b))), Evidence(space, query, rank, similarity)) for a, b, space, query, rank, similarity in rows_ if a != b
    ]
    grouped: dict[tuple[str, str], list[Evidence]] = {}
    for pair, finding in findings:
        grouped.setdefault(pair, []).append(finding)
    objects = [Candidate(I2I_CSIM, a, b, a, b, tuple(sorted(e))) for (a, b), e in grouped.items()]
    for order in (findings, findings[::-1]):
        assert image_pairs_table(evidence_table(order)).equals(candidates_table(objects))
        assert dict(evidence_by_pair(evidence_table(order))) == {pair: sorted(e) for pair, e in grouped.items()}


# Ids and space names with quotes, backslashes, control, non-ASCII and lone surrogate characters.
_ANY_TEXT = st.text(st.one_of(st.sampled_from('"\\/\n\r\t\x00\x1f\x7f\u2028é☃😀'), st.characters(exclude_categories=())))
_FINDINGS = st.lists(st.builds(Evidence, _ANY_TEXT, _ANY_TEXT, st.integers(), st.floats()), max_size=4)


@settings(max_examples=500, derandomize=True, database=None, deadline=None)
@given(_FINDINGS)
@example([Evidence("text/use", "i:a", 1, math.nan), Evidence("s", "q", -2, math.inf), Evidence("s", "q", 0, -math.inf)])
@example([Evidence("s", "q", 10**30, x) for x in (1e-7, 5e-7, -0.0, 1e16, 123456.1234565, 5e-324, 1.7976931348623157e308)])
def test_provenance_json_is_what_json_dumps_writes(findings: list[Evidence]):
    """The template :meth:`Candidate.provenance_json` fills gives json's own bytes for any finding."""
    candidate = Candidate(I2I_CSIM, "i:a", "i:b", "i:a", "i:b", tuple(findings))
    reference = [{"space": e.space, "query": e.query, "rank": e.rank, "similarity": round(e.similarity, 6)} for e in findings]
    assert candidate.provenance_json() == json.dumps(reference, sort_keys=True)


def test_caption_draw_is_seeded_per_pair_and_order_free():
    one = caption_pair_for_images(("i:a", "i:b"), [], CAPTIONS, seed=1)
    again = caption_pair_for_images(("i:a", "i:b"), [], {k: list(reversed(v)) for k, v in CAPTIONS.items()}, seed=1)
    assert one == again and one.method == C2C_ISIM
    assert one.id1 in CAPTIONS[one.image1] and one.id2 in CAPTIONS[one.image2] and one.id1 < one.id2
    draws = {caption_pair_for_images(("i:a", "i:b"), [], CAPTIONS, seed=s).id1 for s in range(40)}
    assert draws == {"c:a1", "c:a2", "c:a3"}  # every caption of image a gets drawn across seeds
    missing = caption_pair_for_images(("i:a", "i:z"), [], CAPTIONS, seed=1)
    assert isinstance(missing, Rejected) and missing.reason == "no-captions"


def test_cocaption_pairs_are_distinct_within_image_pairs():
    pairs = cocaption_pairs(CAPTIONS, 3, seed=4)
    assert len(pairs) == 3 and len({(p.id1, p.id2) for p in pairs}) == 3
    assert all(p.method == C2C_COCAPTION and p.image1 == p.image2 and p.id1 < p.id2 for p in pairs)
    assert pairs == cocaption_pairs(CAPTIONS, 3, seed=4)
    assert len(cocaption_pairs(CAPTIONS, 100, seed=4)) == 4  # only 3 + 1 within-image pairs exist


def constrained(candidates: list[Candidate], allow_cross_method: bool = False) -> tuple[list[tuple[str, ...]], list[Rejected]]:
    """``enforce_constraints`` over the candidates split in two tables, as two shards send them."""
    half = len(candidates) // 2
    kept, rejected = enforce_constraints([candidates_table(candidates[half:]), candidates_table(candidates[:half])], allow_cross_method)
    assert kept.schema == CANDIDATES_SCHEMA and kept.column("method").num_chunks == 1
    return [tuple(row.values()) for row in kept.to_pylist()], rejected


def test_constraints_keep_the_first_and_reject_the_rest():
    def cand(method: str, a: str, b: str) -> Candidate:
        return Candidate(method, a, b, a, b, ())

    kept, rejected = constrained(
        [
            cand(I2I_CSIM, "coco:img:2", "coco:img:1"),
            cand(I2I_CSIM, "coco:img:1", "coco:img:2"),
            cand(I2I_CSIM, "coco:img:3", "coco:img:3"),
            cand(C2C_ISIM, "coco:cap:4", "coco:cap:5"),
            cand(C2C_COCAPTION, "coco:cap:4", "coco:cap:5"),
        ]
    )
    assert [row[:3] for row in kept] == [(C2C_COCAPTION, "coco:cap:4", "coco:cap:5"), (I2I_CSIM, "coco:img:1", "coco:img:2")]
    assert kept[1][5:] == ("COCO_val2014_000000000001.jpg", "COCO_val2014_000000000002.jpg", "[]")
    assert sorted((r.reason, r.key) for r in rejected) == [
        ("cross-method", "coco:cap:4|coco:cap:5"),
        ("duplicate-pair", "coco:img:1|coco:img:2"),
        ("self-pair", "coco:img:3|coco:img:3"),
    ]
    kept, rejected = constrained([cand(C2C_ISIM, "coco:cap:4", "coco:cap:5"), cand(C2C_COCAPTION, "coco:cap:4", "coco:cap:5")], True)
    assert len(kept) == 2 and rejected == []
    # cross-method pairs allowed, a pair repeated within its second method is still a duplicate there
    pair_twice_in_isim = [
        cand(C2C_COCAPTION, "coco:cap:4", "coco:cap:5"),
        cand(C2C_ISIM, "coco:cap:4", "coco:cap:5"),
        cand(C2C_ISIM, "coco:cap:5", "coco:cap:4"),
    ]
    kept, rejected = constrained(pair_twice_in_isim, True)
    assert [row[0] for row in kept] == [C2C_COCAPTION, C2C_ISIM]
    assert [(r.reason, r.key) for r in rejected] == [("duplicate-pair", "coco:cap:4|coco:cap:5")]
    kept, rejected = constrained([])
    assert kept == [] and rejected == []


def test_constraints_keep_the_first_in_the_candidates_order_whatever_order_they_come_in():
    """Repeats of one pair within a method are ordered by their other columns, provenance last, so
    the same one is kept however the shards deliver them."""
    low, high = (Evidence("text/use", "coco:img:1", 2, 0.5),), (Evidence("text/use", "coco:img:2", 1, 0.9),)
    a = Candidate(I2I_CSIM, "coco:img:1", "coco:img:2", "coco:img:1", "coco:img:2", high)
    b = Candidate(I2I_CSIM, "coco:img:1", "coco:img:2", "coco:img:1", "coco:img:2", low)
    for order in ([a, b], [b, a]):
        kept, rejected = constrained(order)
        assert [json.loads(row[-1])[0]["query"] for row in kept] == ["coco:img:1"] and [r.reason for r in rejected] == ["duplicate-pair"]


def test_candidate_csvs_are_the_release_shape_of_each_task_s_pairs():
    """The CSVs are joined from the table's published ids: the bytes :func:`cxc_csv` writes from
    the canonical ids of each file's methods, in the table's order."""
    pairs = [
        Candidate(I2I_CSIM, "coco:img:10", "coco:img:9", "coco:img:10", "coco:img:9", ()),
        Candidate(C2C_ISIM, "coco:cap:3", "coco:cap:70", "coco:img:1", "coco:img:2", ()),
        Candidate(I2I_CSIM, "coco:img:1", "coco:img:2", "coco:img:1", "coco:img:2", ()),
        Candidate(C2C_COCAPTION, "coco:cap:4", "coco:cap:5", "coco:img:1", "coco:img:1", ()),
    ]
    table = candidates_table(pairs)
    rows = [(row["id1"], row["id2"], None, row["method"]) for row in table.to_pylist()]
    files = candidate_csvs(table)
    assert files["sis_candidates.csv"] == cxc_csv("SIS", [r for r in rows if r[3] == I2I_CSIM], scored=False)
    assert files["sts_candidates.csv"] == cxc_csv("STS", [r for r in rows if r[3] != I2I_CSIM], scored=False)
    assert files["sis_candidates.csv"].decode().splitlines()[1:] == [
        "COCO_val2014_000000000001.jpg,COCO_val2014_000000000002.jpg,i2i_csim",
        "COCO_val2014_000000000010.jpg,COCO_val2014_000000000009.jpg,i2i_csim",
    ]
