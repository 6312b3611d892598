"""CHOOSE (COCO-BISON §4.1 step 2): a target image and its nearest other image (the decoy); the
rater picks the target's caption that describes the target but not the decoy, or ``none``.

The rater sees both images and the target's captions, numbered; the stored answer is the chosen
caption's id.  An item is positive when a caption was chosen.  The paper shows its interface only
in the supplement, so the guidance paraphrases §4.1.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from crisscross.core.ids import CAPTION_KIND, IMAGE_KIND, IdFormError, split_id
from crisscross.tasktypes.base import AnswerError, Option, Seen, TaskType, cosine_to_score
from crisscross.tasktypes.papers import BISON_SAMPLING

NONE = "none"  # "none of the above": no caption tells the target from the decoy

GUIDANCE = f"""\
You see two similar images, the target image and another image, and the captions written for the target.

Choose the one caption that describes the target image but does not describe the other image. If every caption fits both images, choose "{NONE}" (none of the above)."""


def perceived_margins(margin: np.ndarray, bias: np.ndarray, noise: np.ndarray, params: Any) -> np.ndarray:
    """Raters × captions: how much better each caption fits the target than the decoy, as each
    simulated rater reads it (the margin of cosines mapped by CHOOSE's anchors, plus bias and noise).
    Target and decoy are nearest neighbours, so both cosines are high and the margin is what tells
    (on the demo under use-m3 a target's best caption beats its decoy by a median 0.47)."""
    low, high = params.anchors[CHOOSE.name]
    return cosine_to_score(margin, low, high)[None, :] + bias[:, None] + noise


class CHOOSE(TaskType):
    name = "CHOOSE"
    kinds = (IMAGE_KIND, IMAGE_KIND)
    title = "target image–decoy image: the caption that tells the target apart, or none"
    source = "COCO-BISON (Hu et al. 2019) §4.1"
    sampling = BISON_SAMPLING
    methods = ("bison_decoy",)
    instructions = GUIDANCE
    side_labels = ("Target image", "Other image")  # the rater knows which image the captions were written for
    plants_gold = False  # any caption may be the discriminative one: there is no known answer
    variation_rules = False  # a careful rater picks a caption for nearly every item, so values hardly vary
    anchors = (-0.05, 0.35)  # on a caption's margin, not its cosine
    seconds_mean = 30.0  # reading five captions against two images
    simulated_from_pairs = False

    def fits(self, answer: object) -> bool:
        try:
            return answer == NONE or (isinstance(answer, str) and split_id(answer)[1] == CAPTION_KIND)
        except IdFormError:
            return False

    @property
    def wanted(self) -> str:
        return f"a caption id of the target or {NONE!r}"

    def options(self, item_id, id_a, id_b, catalog, seed):  # type: ignore[no-untyped-def]
        return tuple(Option(caption, caption) for caption in catalog.captions_of(id_a))

    def unshowable(self, id_a, id_b, catalog):  # type: ignore[no-untyped-def]
        return None if catalog.captions_of(id_a) else ("no-captions", f"target {id_a} has no caption raters can read")

    def canonical(self, given, options):  # type: ignore[no-untyped-def]
        numbers = {str(k): option.answer for k, option in enumerate(options, start=1)}
        if given == NONE or given in numbers:
            return numbers.get(str(given), NONE)
        raise AnswerError(f"needs one of its {len(options)} captions or {NONE}")

    def page_item(self, view, options, catalog, image_url):  # type: ignore[no-untyped-def]
        captions = [{"answer": str(k), "text": catalog.texts[c.shows]} for k, c in enumerate(options, start=1)]
        none = {"answer": NONE, "text": "None of the above", "meaning": "Every caption also describes the other image."}
        return {**view, "options": [*captions, none]}

    def seen(self, item_id, id_a, id_b, catalog, seed):  # type: ignore[no-untyped-def]
        return Seen(tuple(option.answer for option in self.options(item_id, id_a, id_b, catalog, seed)), id_a, id_b)

    def seen_answers(self, seen, margin, to_target, draws, noise, params):  # type: ignore[no-untyped-def]
        """The best caption by noisy margin among those the page shows, or ``none`` below ``choose_cut``."""
        perceived = perceived_margins(margin, draws.bias, noise, params)
        options = np.asarray(seen.captions, dtype=object)
        attentive = np.where(perceived.max(axis=1) >= params.choose_cut, options[perceived.argmax(axis=1)], NONE)
        sloppy = np.asarray([*seen.captions, NONE], dtype=object)[draws.pick]
        lined = np.where(draws.constant >= params.choose_cut, seen.captions[0], NONE)
        return attentive, sloppy, lined

    def passes_gold(self, values, answers, positive, low, high):  # type: ignore[no-untyped-def]
        """A caption chosen answers a positive gold item, ``none`` a negative one (BISON plants none; a round may)."""
        return values == 1 if positive else values == 0

    def qc_values(self, scores, answers):  # type: ignore[no-untyped-def]
        return (answers != NONE).to_numpy().astype(np.float64)

    def positive(self, frame, long, threshold):  # type: ignore[no-untyped-def]
        return frame["agg_label"] != NONE

    def round_facts(self, frame, long):  # type: ignore[no-untyped-def]
        none = int((frame["agg_label"] == NONE).sum())
        return {"chosen": int(len(frame) - none), "none_discarded": none}

    def positive_rule(self, threshold: float | None = None) -> str:
        return "a caption was chosen (not “none”); its label is that caption"
