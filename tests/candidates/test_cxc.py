"""CxC candidate sampling rules on small known cases."""

from __future__ import annotations

import json
import math

import pyarrow as pa
from hypothesis import example, given, settings
from hypothesis import strategies as st

from crisscross.candidates.cxc import (
    C2C_COCAPTION,
    C2C_ISIM,
    CANDIDATES_SCHEMA,
    I2I_CSIM,
    Candidate,
    Evidence,
    candidates_table,
    caption_pair_for_images,
    cocaption_pairs,
    enforce_constraints,
    image_pair,
    neighbour_pairs,
)
from crisscross.core.quarantine import Rejected
from crisscross.similarity.neighbours import NEIGHBOURS_SCHEMA

CAPTIONS = {"i:a": ["c:a1", "c:a2", "c:a3"], "i:b": ["c:b1", "c:b2"], "i:c": ["c:c1"]}


def rows(query: str, neighbours: list[str]) -> pa.Table:
    return pa.Table.from_pylist(
        [{"query_id": query, "rank": r + 1, "neighbour_id": n, "similarity": 1 - r / 10} for r, n in enumerate(neighbours)],
        schema=NEIGHBOURS_SCHEMA,
    )


def test_neighbour_pairs_are_unordered_and_cut_at_top():
    found = list(neighbour_pairs(rows("i:b", ["i:a", "i:b", "i:c", "i:d"]), "text/use/cm", top=3))
    assert [pair for pair, _ in found] == [("i:a", "i:b"), ("i:b", "i:c")]
    assert found[0][1] == Evidence("text/use/cm", "i:b", 1, 1.0) and found[1][1].rank == 3


def test_image_pair_unites_evidence_from_both_ends_and_encoders():
    evidence = [Evidence("text/use", "i:b", 2, 0.8), Evidence("text/bow", "i:a", 1, 0.9), Evidence("text/use", "i:a", 1, 0.8)]
    candidate = image_pair(I2I_CSIM, ("i:a", "i:b"), evidence)
    assert (candidate.id1, candidate.id2, candidate.image1, candidate.image2) == ("i:a", "i:b", "i:a", "i:b")
    assert [e["space"] for e in json.loads(candidate.provenance_json())] == ["text/bow", "text/use", "text/use"]


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
