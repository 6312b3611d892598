"""The per-chain box state machine, box and chain merging, and Label Studio's format both ways."""

from __future__ import annotations

import json
from collections import defaultdict

import pytest
from PIL import Image

from crisscross.core.errors import InputError
from crisscross.core.quarantine import Rejected
from crisscross.entities import labelstudio
from crisscross.entities.boxes import BOXED, NOT_VISUAL_CHAIN, SCENE_CHAIN, BoxSettings, ChainBoxes, annotate_chain, check_box
from crisscross.entities.coref import Chain, resolve
from crisscross.entities.files import read_annotation
from crisscross.entities.mentions import CHUNKER, Caption, Mention, chunked_mentions
from crisscross.entities.merge import annotate_image, imported_from_annotation, merge_image
from crisscross.entities.oracle import BOX, NO_BOX, SCENE, Oracle, OracleSettings, iou, true_boxes

SIZE = (400, 300)


def _chain(chain: str, text: str, types: str, caption: str = "c0") -> Chain:
    return Chain("img", chain, (Mention("img", caption, 0, 0, len(text.split()), text, types, "", CHUNKER),))


class _Answers(Oracle):
    """An oracle whose requirement answers follow a script (the rest answer truthfully)."""

    script: tuple[str, ...] = ()

    def requirement(self, mention, ask):
        self.asked = getattr(self, "asked", 0) + 1
        return self.script[self.asked - 1]


def _scripted(*answers: str) -> _Answers:
    oracle = _Answers(OracleSettings(), 3)
    object.__setattr__(oracle, "script", answers)
    return oracle


def test_a_perfect_crowd_draws_the_true_boxes_and_people_skip_the_requirement():
    oracle = Oracle(OracleSettings(), 3)
    men = annotate_chain(_chain("1", "Two men", "people"), SIZE, oracle, 40, "t")
    assert men.outcome == BOXED and men.boxes == tuple(sorted(true_boxes(men.chain.representative, *SIZE, 3)))
    assert len(men.boxes) == 2
    # no requirement; each box drawn, judged good; coverage: "no" after the first, "yes" twice after the second
    assert dict(men.tasks) == {"requirement": 0, "drawing": 2, "quality": 2, "coverage": 3}
    ball = annotate_chain(_chain("2", "a ball", "other"), SIZE, oracle, 40, "t")
    assert dict(ball.tasks) == {"requirement": 1, "drawing": 1, "quality": 1, "coverage": 2}
    park = annotate_chain(_chain("3", "the park", "scene"), SIZE, oracle, 40, "t")
    assert (park.outcome, park.boxes, dict(park.tasks)["requirement"]) == (SCENE_CHAIN, (), 2)
    trick = annotate_chain(_chain("4", "a trick", "other"), SIZE, oracle, 40, "t")
    assert trick.outcome == NOT_VISUAL_CHAIN


def test_a_chain_with_a_people_clothing_or_bodyparts_mention_skips_the_requirement():
    shirt = Mention("img", "c1", 0, 0, 3, "a red costume", "other/clothing", "", CHUNKER)
    chain = Chain("img", "1", (Mention("img", "c0", 0, 0, 2, "a costume", "other", "", CHUNKER), shirt))
    result = annotate_chain(chain, SIZE, _scripted(), 40, "t")  # a requirement question would run out of script
    assert result.outcome == BOXED and dict(result.tasks)["requirement"] == 0


def test_requirement_takes_the_majority_of_up_to_three_answers_and_sends_a_split_to_review():
    assert annotate_chain(_chain("1", "a cup", "other"), SIZE, _scripted(NO_BOX, NO_BOX), 40, "t").outcome == NOT_VISUAL_CHAIN
    assert annotate_chain(_chain("1", "a cup", "other"), SIZE, _scripted(NO_BOX, SCENE, SCENE), 40, "t").outcome == SCENE_CHAIN
    assert annotate_chain(_chain("1", "a cup", "other"), SIZE, _scripted(SCENE, BOX, BOX), 40, "t").outcome == BOXED
    review = annotate_chain(_chain("1", "a cup", "other"), SIZE, _scripted(SCENE, BOX, NO_BOX), 40, "t")
    assert isinstance(review, Rejected) and review.reason == "needs-review" and review.key == "img#1"


class _Picky(Oracle):
    """Judges every box bad: the chain goes back to drawing forever."""

    def quality(self, mention, box, kept, truth, ask):
        return False


def test_a_chain_that_cycles_goes_to_review():
    result = annotate_chain(_chain("1", "a dog", "animals"), SIZE, _Picky(OracleSettings(), 3), 12, "t")
    assert isinstance(result, Rejected) and result.reason == "needs-review"
    assert json.loads(result.record)["tasks"] == {"requirement": 1, "drawing": 6, "quality": 6}


def test_a_box_outside_its_image_or_empty_cannot_be_kept():
    assert check_box((0, 0, 399, 299), *SIZE) is None
    assert check_box((10, 10, 400, 20), *SIZE) == "box-outside-image"
    assert check_box((-1, 10, 40, 20), *SIZE) == "box-outside-image"
    assert check_box((30, 10, 20, 20), *SIZE) == "empty-box"


def _boxed(chain: str, kind: str, *boxes: tuple[int, int, int, int]) -> ChainBoxes:
    return ChainBoxes(_chain(chain, f"a {kind}", kind, caption=f"c{chain}"), BOXED, boxes, ())


def test_close_boxes_merge_but_never_people_with_clothing_and_other_needs_point_nine():
    a, b = (100, 100, 199, 199), (100, 100, 199, 209)  # IoU 100/110 = 0.909
    c = (100, 100, 199, 224)  # IoU with a: 0.8
    assert round(iou(a, b), 3) == 0.909 and iou(a, c) == 0.8
    merged = merge_image([_boxed("1", "people", a), _boxed("2", "people", c)], 0.8, 0.9)
    assert merged.merged_boxes == 1 and merged.merged_chains == 1
    assert [(r.chain.chain, len(r.chain.members), r.boxes) for r in merged.chains] == [("1", 2, ((100, 100, 199, 212),))]
    apart = merge_image([_boxed("1", "people", a), _boxed("2", "clothing", b)], 0.8, 0.9)
    assert apart.merged_boxes == 0 and [r.boxes for r in apart.chains] == [(a,), (b,)]
    other = merge_image([_boxed("1", "other", a), _boxed("2", "other", c)], 0.8, 0.9)
    assert other.merged_boxes == 0
    assert merge_image([_boxed("1", "other", a), _boxed("2", "other", b)], 0.8, 0.9).merged_boxes == 1


def test_equal_people_and_clothing_boxes_stay_two_boxes_and_their_chains_stay_apart():
    box = (10, 10, 99, 199)
    man, coat = _boxed("1", "people", box), _boxed("2", "clothing", box)
    merged = merge_image([man, coat], 0.8, 0.9)
    assert (merged.merged_boxes, merged.merged_chains) == (0, 0)
    assert [(r.chain.chain, r.boxes) for r in merged.chains] == [("1", (box,)), ("2", (box,))]
    # a third chain between them does not join them either, but joins the one it may merge with
    boy = _boxed("3", "people", (10, 10, 99, 200))
    merged = merge_image([man, coat, boy], 0.8, 0.9)
    assert [(r.chain.chain, r.boxes) for r in merged.chains] == [("1", ((10, 10, 99, 200),)), ("2", (box,))]


def test_merged_chains_keep_the_answers_of_every_part():
    a = ChainBoxes(
        _chain("1", "a dog", "animals"), BOXED, ((0, 0, 99, 99),), (("requirement", 1), ("drawing", 1), ("quality", 1), ("coverage", 2))
    )
    b = ChainBoxes(
        _chain("2", "the dog", "animals", "c2"),
        BOXED,
        ((0, 0, 99, 99),),
        (("requirement", 2), ("drawing", 3), ("quality", 3), ("coverage", 3)),
    )
    merged = merge_image([a, b], 0.8, 0.9)
    assert merged.merged_chains == 1 and dict(merged.chains[0].tasks) == {"requirement": 3, "drawing": 4, "quality": 4, "coverage": 5}


def test_merging_is_a_fixpoint_so_merging_again_changes_nothing():
    boxes = [(0, 0, 99, 99), (0, 0, 99, 109), (0, 0, 99, 121), (0, 0, 99, 135)]
    once = merge_image([_boxed(str(i + 1), "animals", b) for i, b in enumerate(boxes)], 0.8, 0.9)
    again = merge_image(once.chains, 0.8, 0.9)
    assert [r.boxes for r in again.chains] == [r.boxes for r in once.chains] and again.merged_boxes == 0


def test_box_tasks_go_to_label_studio_and_its_export_comes_back_as_the_same_boxes():
    caption = Caption("img", 0, "c0", "img.jpg", "Two men ride a horse .")
    boxes = ((0, 0, 99, 99), (37, 41, 399, 299))
    task = labelstudio.task(1, "/data/local-files/?d=img.jpg", caption, 0, 2, "img#1", "people")
    assert task["data"]["caption"] == "[[ Two men ]] ride a horse ." and task["data"]["mention"] == "Two men"
    exported = json.loads(json.dumps(labelstudio.export_with_annotations([task], [boxes], [SIZE])))
    value = exported[0]["annotations"][0]["result"][1]["value"]
    assert value["rectanglelabels"] == ["people"] and round(value["x"], 2) == 9.25 and value["width"] == 90.75
    assert list(labelstudio.read_export(json.dumps(exported).encode(), "export.json")) == [("img#1", list(boxes))]
    assert 'RectangleLabels name="box" toName="image"' in labelstudio.label_config()


def test_a_malformed_export_task_is_quarantined():
    export = [
        {"data": {}},
        {"data": {"chain": "img#2"}, "annotations": [{"was_cancelled": True, "result": []}]},
        {"data": {"chain": "img#3"}, "annotations": [{"result": [{"type": "rectanglelabels", "value": {"x": 1}}]}]},
        {"data": {"chain": "img#4"}, "annotations": "not a list"},
        {"data": {"chain": "img#5"}, "annotations": [{"result": {"type": "rectanglelabels"}}]},
        "not a task",
    ]
    out = list(labelstudio.read_export(json.dumps(export).encode(), "e.json"))
    assert [(r.reason, r.source) for r in out[:3]] == [
        ("no-chain", "e.json[0]"),
        ("no-annotation", "e.json[1]"),
        ("malformed-box", "e.json[2]"),
    ]
    assert out[3] == ("img#3", [])
    assert [(r.key, r.reason) for r in out[4:]] == [("img#4", "malformed-annotation"), ("img#5", "malformed-annotation"), ("", "no-chain")]


def test_imported_boxes_are_checked_against_their_image_and_a_release_keeps_scene_chains():
    caption = Caption("img", 0, "c0", "img.jpg", "A man in the park .")
    man = Chain("img", "1", (Mention("img", "c0", 0, 0, 2, "A man", "people", "", CHUNKER),))
    park = Chain("img", "2", (Mention("img", "c0", 1, 3, 5, "the park", "scene", "", CHUNKER),))
    imported = {"img#1": (None, ((0, 0, 99, 99), (350, 0, 450, 99)))}
    out = annotate_image(
        {"image_id": "img", "file_name": "img.jpg", **dict(zip(("width", "height"), SIZE))},
        [caption],
        [man, park],
        BoxSettings(),
        3,
        imported,
        "t",
    )
    rejected, result = out[0], out[-1]
    assert (rejected.kind, rejected.key, rejected.reason) == ("box", "img#1", "box-outside-image")
    assert [(r.chain.chain, r.outcome, r.boxes) for r in result.merged.chains] == [("1", BOXED, ((0, 0, 99, 99),)), ("2", SCENE_CHAIN, ())]
    assert b"<scene>1</scene>" in result.annotation and result.sentences.startswith(b"[/EN#1/people A man] in [/EN#2/scene the park] .")
    annotation = read_annotation(result.annotation, "x")
    assert imported_from_annotation("img", annotation) == {"img#1": (BOXED, ((0, 0, 99, 99),)), "img#2": (SCENE_CHAIN, ())}


def test_box_recall_on_the_demo_photos_declines_as_the_crowd_errs_more(demo_dir):
    """The demo's 97 photos and 485 captions, chains exact: every true box found at error 0 in
    4,127 answers; with wrong answers more chains go to review and fewer true boxes are found."""
    by_image: dict[str, list[Mention]] = defaultdict(list)
    sizes: dict[str, tuple[int, int]] = {}
    for line in (demo_dir / "captions.jsonl").read_text().splitlines():
        row = json.loads(line)
        image = f"coco:img:{row['image_id']}"
        if image not in sizes:
            with Image.open(demo_dir / "images" / row["file_name"]) as photo:
                sizes[image] = photo.size
        caption = Caption(image, 0, f"coco:cap:{row['caption_id']}", row["file_name"], row["caption_tok"])
        by_image[image] += [m for m in chunked_mentions(caption, "t")[0] if isinstance(m, Mention)]
    chains = [c for image, ms in sorted(by_image.items()) for c in resolve(image, ms, Oracle(OracleSettings(), 20260701)).chains]
    rows = []
    for rate in (0.0, 0.05, 0.1, 0.2):
        oracle = Oracle(OracleSettings(wrong_answer=rate, box_jitter=0.03), 20260701)
        review = answers = truth = found = 0
        for chain in chains:
            true = true_boxes(chain.representative, *sizes[chain.image_id], 20260701)
            truth += len(true)
            result = annotate_chain(chain, sizes[chain.image_id], oracle, 40, "t")
            if isinstance(result, Rejected):
                review += 1
                continue
            answers += sum(n for _, n in result.tasks)
            found += sum(any(iou(t, b) >= 0.5 for b in result.boxes) for t in true)
        rows.append((rate, review, answers, round(found / truth, 3)))
    assert len(chains) == 864
    assert rows == [(0.0, 0, 4127, 1.0), (0.05, 2, 4457, 0.993), (0.1, 13, 4790, 0.972), (0.2, 50, 5362, 0.884)]


def test_an_export_python_cannot_parse_is_one_line_and_an_infinite_box_is_quarantined():
    # json.loads raised RecursionError (deep nesting) or a plain ValueError (a 5000-digit number), and
    # round() OverflowError for a coordinate of 1e308 scaled by the image size
    for data in (b"[" * 100_000 + b"]" * 100_000, b"[" + b"1" * 5000 + b"]"):
        with pytest.raises(InputError, match=r"^e.json: not a JSON document") as raised:
            list(labelstudio.read_export(data, "e.json"))
        assert len(str(raised.value).splitlines()) == 1
    result = {
        "type": "rectanglelabels",
        "original_width": 10,
        "original_height": 10,
        "value": {"x": 1e308, "y": 0, "width": 1e308, "height": 1},
    }
    export = [{"data": {"chain": "img#1"}, "annotations": [{"result": [result]}]}]
    out = list(labelstudio.read_export(json.dumps(export).encode(), "e.json"))
    assert [(r.reason, r.source) for r in out[:1]] == [("malformed-box", "e.json[0]")] and out[1] == ("img#1", [])
