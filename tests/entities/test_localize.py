"""Phrase-localization metrics: recall at 1 and K at IoU 0.5, AP per type, the proposals file."""

from __future__ import annotations

import pytest

from crisscross.entities.localize import (
    LocalizeSettings,
    Phrase,
    average_precision,
    evaluate,
    image_phrases,
    read_proposals,
    simulate_proposals,
)

DOG = Phrase("c0", 0, "animals", ((0, 0, 99, 99),))
MEN = Phrase("c0", 1, "people", ((200, 0, 299, 99), (300, 0, 399, 99)))


def test_recall_at_one_and_k_and_ap_per_type_on_a_worked_example():
    proposals = {
        ("c0", 0): [(0, 0, 99, 89, 0.9), (500, 500, 599, 599, 0.95)],  # the hit is ranked second
        ("c0", 1): [(200, 0, 299, 99, 0.8), (205, 0, 299, 99, 0.7), (300, 0, 399, 99, 0.6)],  # a duplicate, then the second man
    }
    metrics = evaluate([DOG, MEN], proposals, 2)
    assert metrics["animals"] == {"instances": 1, "r_at_1": 0.0, "r_at_2": 100.0, "ap": 50.0}
    # people: TP (p=1, r=.5), FP duplicate, TP (p=2/3, r=1): AP = .5·1 + .5·(2/3)
    assert metrics["people"]["ap"] == pytest.approx(100 * (0.5 + 0.5 * 2 / 3))
    assert metrics["overall"]["r_at_1"] == 50.0 and metrics["overall"]["mean_ap"] == pytest.approx((50.0 + 100 * (0.5 + 1 / 3)) / 2)


def test_a_phrase_without_proposals_is_a_miss_and_ap_of_nothing_is_zero():
    assert evaluate([DOG], {}, 10)["animals"] == {"instances": 1, "r_at_1": 0.0, "r_at_10": 0.0, "ap": 0.0}
    assert average_precision([], 3) == 0.0


def test_the_proposals_file_is_json_lines_and_a_bad_line_is_quarantined():
    data = b'{"caption_id": "c0", "index": 0, "boxes": [[0, 0, 9, 9, 0.5]]}\n\n{"caption_id": "c1"}\n'
    out = list(read_proposals(data, "p.jsonl"))
    assert out[0] == (("c0", 0), [(0, 0, 9, 9, 0.5)])
    assert out[1].reason == "malformed-proposals" and out[1].source == "p.jsonl:3"


def test_phrases_are_the_mentions_of_chains_with_boxes():
    chains = [
        {"chain": "1", "caption_id": "c0", "index": 0, "kind": "people"},
        {"chain": "2", "caption_id": "c0", "index": 1, "kind": "scene"},
    ]
    boxes = [{"chains": "1/3", "xmin": 1, "ymin": 2, "xmax": 3, "ymax": 4}, {"chains": "1", "xmin": 50, "ymin": 0, "xmax": 60, "ymax": 3}]
    # two men, two boxes: the phrase's ground truth is their union (§3.1, §3.2: one box per phrase)
    assert image_phrases(chains, boxes, {("c0", 0): "people/other"}) == [Phrase("c0", 0, "people", ((1, 0, 60, 4),))]


def test_simulated_proposals_are_seeded_and_inside_the_image():
    settings = LocalizeSettings(simulated=5)
    one = simulate_proposals(MEN, (400, 120), settings, 7)
    assert one == simulate_proposals(MEN, (400, 120), settings, 7) and len(one) == 5
    assert all(0 <= x0 <= x1 < 400 and 0 <= y0 <= y1 < 120 for x0, y0, x1, y1, _ in one)


def test_proposal_lines_python_cannot_hold_are_quarantined_not_raised():
    # json.loads raised RecursionError for deep nesting, float() OverflowError for a 400-digit score
    data = b"[" * 100_000 + b"]" * 100_000 + b'\n{"caption_id": "c0", "index": 0, "boxes": [[0, 0, 9, 9, ' + b"9" * 400 + b"]]}\n"
    out = list(read_proposals(data, "p.jsonl"))
    assert [(r.reason, r.source) for r in out] == [("malformed-proposals", "p.jsonl:1"), ("malformed-proposals", "p.jsonl:2")]
