"""C2I derivation (CxC §2 "Intermodality"): directions, draws, both rank modes, skipping, constraints,
shortfall, bad rows — and fidelity to CxC's own c2i_intrasim pairs on the real release files."""

from __future__ import annotations

import json
import random
import time
from pathlib import Path

import pytest

from crisscross.annotate.items import method_task_type
from crisscross.candidates.c2i import (
    BOTH,
    C2I_INTRASIM,
    C2I_ORIGINAL,
    FIRST,
    GLOBAL,
    PER_QUERY,
    C2ICandidate,
    CaptionIndex,
    DeriveSettings,
    RatedPair,
    candidates_table,
    caption_for,
    cxc_rows,
    derive,
    derive_all,
    enforce_constraints,
    quota_for,
    rated_pair,
    select,
    sits_csv,
)
from crisscross.core.ids import split_id
from crisscross.core.quarantine import Rejected
from crisscross.formats.cxc import read_cxc_file
from crisscross.tasktypes import task_type
from crisscross.tasktypes.names import SIS, SITS, STS


def img(n: int) -> str:
    return f"coco:img:{n}"


def cap(n: int) -> str:
    return f"coco:cap:{n}"


# img1: 11, 12; img2: 21, 22; img3: 31; img4: 41, 42, 43
CAPTIONS = {1: (11, 12), 2: (21, 22), 3: (31,), 4: (41, 42, 43)}
INDEX = CaptionIndex.from_rows({"caption_id": cap(c), "image_id": img(i)} for i, cs in CAPTIONS.items() for c in cs)


def sts(a: int, b: int, score: float) -> RatedPair:
    return RatedPair(STS, cap(a), cap(b), score, "c2c_isim", "test")


def sis(a: int, b: int, score: float) -> RatedPair:
    return RatedPair(SIS, img(a), img(b), score, "i2i_csim", "test")


def pairs_of(candidates: list[C2ICandidate]) -> set[tuple[str, str]]:
    return {(c.caption, c.image) for c in candidates}


def test_c2c_pair_gives_both_directions_and_cocaptions_give_none() -> None:
    assert [(d.other, d.image) for d in derive(sts(11, 21, 4.0), INDEX)] == [(cap(21), img(1)), (cap(11), img(2))]
    assert [(d.other, d.image) for d in derive(sts(11, 21, 4.0), INDEX, FIRST)] == [(cap(21), img(1))]
    assert derive(sts(11, 12, 5.0), INDEX) == []


def test_i2i_draw_is_keyed_by_direction_so_pair_order_and_runs_do_not_matter() -> None:
    forward = {d.query: caption_for(d, INDEX, 7) for d in derive(sis(1, 4, 3.0), INDEX)}
    backward = {d.query: caption_for(d, INDEX, 7) for d in derive(sis(4, 1, 3.0), INDEX)}
    assert forward == backward
    assert forward[img(1)] in {cap(41), cap(42), cap(43)} and forward[img(4)] in {cap(11), cap(12)}
    draws = {caption_for(derive(sis(1, 4, 3.0), INDEX)[0], INDEX, seed) for seed in range(30)}
    assert len(draws) > 1  # the seed matters


def test_global_ranks_half_from_c2c_then_i2i() -> None:
    rated = [sts(11, 21, 4.0), sts(31, 41, 2.0), sts(11, 12, 5.0), sis(1, 4, 4.5), sis(3, 4, 1.0)]
    derived = [d for p in rated for d in derive(p, INDEX)]
    selection = select(derived, INDEX, 0, quota=4, c2c_share=0.5, ranks=GLOBAL)
    chosen = pairs_of(selection.candidates)
    assert {(cap(21), img(1)), (cap(11), img(2))} <= chosen  # the top C2C pair, both directions
    assert {c.image for c in selection.candidates if dict(c.provenance)["task_type"] == SIS} == {img(1), img(4)}
    assert selection.facts["sources"][STS] == {"target": 2, "selected": 2, "derived": 4}
    assert selection.facts["shortfall"] == 0
    top = next(c for c in selection.candidates if c.caption == cap(21))
    assert dict(top.provenance) == {
        "pair": [cap(11), cap(21)],
        "query": cap(11),
        "query_rank": 1,
        "rank": 1,
        "score": 4.0,
        "task_type": STS,
    }


def test_per_query_takes_each_querys_best_before_global_order() -> None:
    rated = [sis(1, 2, 4.5), sis(1, 3, 4.0), sis(4, 2, 1.0)]
    derived = [d for p in rated for d in derive(p, INDEX, FIRST)]
    by_global = select(derived, INDEX, 0, quota=2, c2c_share=0.0, ranks=GLOBAL)
    by_query = select(derived, INDEX, 0, quota=2, c2c_share=0.0, ranks=PER_QUERY, depth=1)
    assert {c.image for c in by_global.candidates} == {img(1)}  # image 1's two pairs outrank the rest
    assert {c.image for c in by_query.candidates} == {img(1), img(4)}
    assert sorted(dict(c.provenance)["rank"] for c in by_query.candidates) == [1, 3]
    deeper = select(derived, INDEX, 0, quota=2, c2c_share=0.0, ranks=PER_QUERY, depth=2)
    assert pairs_of(deeper.candidates) == pairs_of(by_global.candidates)


def test_i2i_skips_pairs_already_selected_from_c2c() -> None:
    index = CaptionIndex.from_rows({"caption_id": cap(10 * n + 1), "image_id": img(n)} for n in (1, 2, 3))  # one caption each
    rated = [sts(11, 21, 2.0), sis(1, 2, 5.0), sis(1, 3, 1.0)]
    derived = [d for p in rated for d in derive(p, index)]
    selection = select(derived, index, 0, quota=4, c2c_share=0.5, ranks=GLOBAL)
    assert selection.facts["skipped"] == {"already-selected": 2}  # (21, img1) and (11, img2) came from C2C
    assert pairs_of(selection.candidates) == {(cap(21), img(1)), (cap(11), img(2)), (cap(31), img(1)), (cap(11), img(3))}
    assert len(selection.candidates) == 4 and selection.facts["shortfall"] == 0


def test_shortfall_is_reported_not_raised() -> None:
    kept, rejected, facts = derive_all([sts(11, 21, 4.0), sis(3, 4, 1.0)], INDEX, DeriveSettings(quota=10), 0)
    assert rejected == []
    assert facts["quota"] == 10 and facts["selected"] == 4 and facts["shortfall"] == 6
    assert facts["sources"][STS]["selected"] == 2 and facts["sources"][SIS]["target"] == 8  # I2I fills what C2C could not
    assert sum(c.method == C2I_ORIGINAL for c in kept) == 8  # every caption with its image


def test_quota_fixed_or_ratio() -> None:
    assert quota_for(DeriveSettings(quota=5), 1000) == 5
    assert quota_for(DeriveSettings(quota=None, quota_ratio=0.25), 10) == 2  # round half to even
    assert quota_for(DeriveSettings(), 90_764) == 19_968  # CxC: 19,833 for 90,764


def test_constraints_reject_original_duplicate_and_cross_method_pairs() -> None:
    prov = (("rank", 1),)
    candidates = [
        C2ICandidate(C2I_ORIGINAL, cap(11), img(1), img(1)),
        C2ICandidate(C2I_INTRASIM, cap(12), img(1), img(1), prov),  # an original pair among intrasim
        C2ICandidate(C2I_INTRASIM, cap(21), img(1), img(2), prov),
        C2ICandidate(C2I_INTRASIM, cap(21), img(1), img(2), (("rank", 2),)),  # twice
        C2ICandidate(C2I_INTRASIM, cap(11), img(1), img(9), prov),  # also an original
    ]
    kept, rejected = enforce_constraints(candidates)
    assert [(c.method, c.caption) for c in kept] == [(C2I_ORIGINAL, cap(11)), (C2I_INTRASIM, cap(21))]
    assert sorted(r.reason for r in rejected) == ["cross-method", "duplicate-pair", "original-pair"]
    assert all(json.loads(r.record)["id2"] == img(1) for r in rejected)


def test_derive_all_is_deterministic_and_order_free() -> None:
    rated = [sts(11, 21, 4.0), sts(31, 41, 2.0), sts(11, 12, 5.0), sis(1, 4, 4.5), sis(3, 4, 1.0), sis(2, 3, 3.3), sis(4, 1, 4.5)]
    settings = DeriveSettings(quota=6)
    first = candidates_table(derive_all(rated, INDEX, settings, 3)[0])
    shuffled = rated[:]
    random.Random(1).shuffle(shuffled)
    assert candidates_table(derive_all(shuffled, INDEX, settings, 3)[0]).equals(first)
    assert first.num_rows == 6 + 8


def test_bad_rows_are_rejected_with_reasons() -> None:
    def row(task: str, a: str, b: str, score: object) -> dict:
        return {"item_id": f"{task.lower()}:{a}|{b}", "task_type": task, "id_a": a, "id_b": b, "agg_score": score, "sampling_method": "m"}

    cases = {
        "unknown-caption": row(STS, cap(11), cap(99), 3.0),
        "unknown-image": row(SIS, img(1), img(99), 3.0),
        "bad-id": row(STS, img(1), cap(11), 3.0),
        "self-pair": row(SIS, img(1), img(1), 3.0),
        "bad-score": row(STS, cap(11), cap(21), float("nan")),
        "score-out-of-range": row(SIS, img(1), img(2), 7.5),
        "missing-field": row(STS, cap(11), None, 1.0),
    }
    for reason, bad in cases.items():
        made = rated_pair(bad, INDEX, "rated.parquet")
        assert isinstance(made, Rejected) and made.reason == reason, (reason, made)
        assert json.loads(made.record)["id_a"] == bad["id_a"]  # the original row is kept
    good = rated_pair({**row(STS, cap(11), cap(21), 5.0)}, INDEX, "rated.parquet")
    assert good == RatedPair(STS, cap(11), cap(21), 5.0, "m", "rated.parquet")


def test_table_orientation_is_what_the_tasks_stage_reads_as_sits() -> None:
    kept, _, _ = derive_all([sts(11, 21, 4.0)], INDEX, DeriveSettings(quota=2), 0)
    table = candidates_table(kept)
    assert method_task_type("c2i_intrasim") == SITS
    for row in table.to_pylist():
        assert (split_id(row["id1"])[1], split_id(row["id2"])[1]) == task_type(SITS).kinds
        assert row["image1"] == INDEX.image_of[row["id1"]] and row["image2"] == row["id2"]
    assert row["published1"].startswith("COCO_val2014:sentid:") and row["published2"].endswith(".jpg")
    lines = sits_csv(kept).decode().splitlines()
    assert lines[0] == "caption,image,sampling_method"
    assert "COCO_val2014:sentid:21,COCO_val2014_000000000001.jpg,c2i_intrasim" in lines


# ---------------------------------------------------------------------------- fidelity on the real release

CXC_QUOTA = 19_833  # c2i_intrasim rows of CxC's sits_test.csv
# Measured (seed 20260701): fraction of CxC's c2i_intrasim pairs recovered, (caption level, image-pair level).
EXPECTED = {
    (GLOBAL, BOTH): (0.097, 0.444),
    (PER_QUERY, BOTH): (0.107, 0.489),
    (GLOBAL, FIRST): (0.151, 0.707),
    (PER_QUERY, FIRST): (0.154, 0.713),
}


@pytest.fixture(scope="module")
def cxc_test(shared_data: Path) -> tuple[CaptionIndex, list[RatedPair], list]:
    lines = (json.loads(line) for line in (shared_data / "coco-karpathy" / "test5k.jsonl").open())
    index = CaptionIndex.from_rows({"caption_id": cap(o["caption_id"]), "image_id": img(o["image_id"])} for o in lines)
    pairs = []
    for task in (STS, SIS):
        for row in cxc_rows(str(shared_data / "cxc" / f"{task.lower()}_test.csv"), task):
            made = row if isinstance(row, Rejected) else rated_pair(row, index, "cxc")
            assert not isinstance(made, Rejected), made
            pairs.append(made)
    sits, _ = read_cxc_file(shared_data / "cxc" / "sits_test.csv", SITS)
    intrasim = sits[sits["sampling_method"] == C2I_INTRASIM]
    theirs = list(zip(intrasim["id_a"], intrasim["id_b"], strict=True))
    assert len(theirs) == CXC_QUOTA and len(pairs) == 44_045 + 46_719
    return index, pairs, theirs


def test_about_71_percent_of_cxc_c2i_pairs_trace_back_to_a_released_pair(cxc_test) -> None:
    index, pairs, theirs = cxc_test
    from_sts, from_sis = set(), set()
    for p in pairs:
        if p.task_type == STS:
            from_sts |= {(p.id_b, index.image_of[p.id_a]), (p.id_a, index.image_of[p.id_b])}
        else:
            from_sis |= {(p.id_a, p.id_b), (p.id_b, p.id_a)}
    traced = [(c, i) in from_sts or (index.image_of[c], i) in from_sis for c, i in theirs]
    share = sum(traced) / len(theirs)
    print(f"\nCxC test c2i_intrasim traced to a released STS or SIS pair: {sum(traced):,} / {len(theirs):,} = {share:.1%}")
    assert share == pytest.approx(0.711, abs=0.005)


@pytest.mark.parametrize(("ranks", "directions"), list(EXPECTED))
def test_fidelity_to_cxc_test_c2i_intrasim(cxc_test, ranks: str, directions: str) -> None:
    index, pairs, theirs = cxc_test
    started = time.perf_counter()
    settings = DeriveSettings(quota=CXC_QUOTA, ranks=ranks, depth=1, directions=directions)
    kept, rejected, facts = derive_all(pairs, index, settings, 20260701)
    seconds = time.perf_counter() - started
    ours = [c for c in kept if c.method == C2I_INTRASIM]
    assert rejected == [] and len(ours) == CXC_QUOTA and facts["shortfall"] == 0
    assert sum(c.method == C2I_ORIGINAL for c in kept) == 25_000
    caption_level = pairs_of(ours)
    image_level = {(c.caption_image, c.image) for c in ours}
    hits = sum((c, i) in caption_level for c, i in theirs) / len(theirs)
    image_hits = sum((index.image_of[c], i) in image_level for c, i in theirs) / len(theirs)
    print(
        f"\n{ranks} ranks, directions {directions}: recovered {hits:.1%} of CxC's c2i_intrasim at caption–image level,"
        f" {image_hits:.1%} at image-pair level (derive in {seconds:.1f}s)"
    )
    caption_expected, image_expected = EXPECTED[(ranks, directions)]
    assert hits == pytest.approx(caption_expected, abs=0.01)
    assert image_hits == pytest.approx(image_expected, abs=0.01)
