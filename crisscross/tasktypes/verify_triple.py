"""VERIFY-TRIPLE (COCO-BISON §4.1 step 3): a chosen caption beside its own image (the target) and
the decoy, in a seeded order; a different rater says which image the caption describes.

"We only accepted the corresponding BISON example if both annotators correctly selected the target
image": an item is positive when at least :data:`VERIFIERS` raters judged it and every one answered
``target``.  The page never says which image is the target.
"""

from __future__ import annotations

from collections import Counter

import numpy as np

from crisscross.core.ids import CAPTION_KIND, IMAGE_KIND
from crisscross.core.rng import generator
from crisscross.tasktypes.base import AnswerError, Option, Seen, TaskType, cosine_to_score
from crisscross.tasktypes.choose import perceived_margins
from crisscross.tasktypes.papers import BISON_SAMPLING

TARGET, DECOY = "target", "decoy"
ANSWERS = (TARGET, DECOY, "both", "neither")  # the paper's order
WORDS = ("both", "neither")  # answers a rater gives as words; the two images are picked by number
VERIFIERS = 2  # BISON §4.1: "Each verification trial was performed by two annotators"
MEANINGS = dict(
    zip(
        ANSWERS,
        (
            "The caption describes the target image only.",
            "The caption describes the decoy image only.",
            "The caption describes both images.",
            "The caption describes neither image.",
        ),
        strict=True,
    )
)

GUIDANCE = """\
Read the caption and look at the two images: which of them does the caption describe?

Answer with the image the caption describes, "both" if it describes both images, or "neither" if it describes neither."""


def decoy_first(item: str, seed: int) -> bool:
    """Whether an item shows the decoy before the target (BISON: the verifier must not learn which
    image the caption was chosen for from where it stands)."""
    return bool(generator(seed, "triple-order", item).random() < 0.5)


class VERIFY_TRIPLE(TaskType):
    name = "VERIFY-TRIPLE"
    kinds = (CAPTION_KIND, IMAGE_KIND)
    title = "caption beside two images: which one it describes"
    source = "COCO-BISON (Hu et al. 2019) §4.1"
    sampling = BISON_SAMPLING
    methods = ("bison_chosen",)
    answers = ANSWERS
    meanings = MEANINGS
    positive_answers = frozenset({TARGET})
    instructions = GUIDANCE
    side_labels = ("Caption", "Images")  # the two images come in a seeded order, labelled Image 1 and Image 2
    plants_gold = False
    variation_rules = False  # a careful verifier answers "target" for nearly every item (the paper's 95% yield)
    anchors = (0.1, 0.85)  # the caption's cosine to the target's mean, like SITS
    seconds_mean = 10.0
    simulated_from_pairs = False

    def shown(self, id_a, id_b, catalog):  # type: ignore[no-untyped-def]
        return (id_a, id_b, catalog.image(id_a))

    def options(self, item_id, id_a, id_b, catalog, seed):  # type: ignore[no-untyped-def]
        shown = (Option(catalog.image(id_a), TARGET), Option(id_b, DECOY))
        return shown[::-1] if decoy_first(item_id, seed) else shown

    def unshowable(self, id_a, id_b, catalog):  # type: ignore[no-untyped-def]
        target = catalog.image(id_a)
        if target == id_b:
            return "same-image", f"decoy {id_b} is the image of caption {id_a}"
        return catalog.problem(target)

    def canonical(self, given, options):  # type: ignore[no-untyped-def]
        by_number = {str(k): option.answer for k, option in enumerate(options, start=1)}
        if given in by_number or given in WORDS:
            return by_number.get(str(given), given)
        raise AnswerError(f"needs image 1, image 2, {' or '.join(WORDS)}")

    def batch_answers(self):  # type: ignore[no-untyped-def]
        return None  # each item brings its options: image 1, image 2, both, neither

    def page_item(self, view, options, catalog, image_url):  # type: ignore[no-untyped-def]
        images = [{"image": image_url(str(k)), "label": f"Image {k}"} for k in (1, 2)]
        picks = [{"answer": str(k), "text": f"Image {k}", "meaning": f"The caption describes image {k} only."} for k in (1, 2)]
        picks += [{"answer": word, "text": word, "meaning": MEANINGS[word]} for word in WORDS]
        return {"position": view["position"], "a": view["a"], "images": images, "options": picks}

    def image_sides(self):  # type: ignore[no-untyped-def]
        return {"1": 0, "2": 1}

    def page_images(self, id_a, id_b, options):  # type: ignore[no-untyped-def]
        return tuple(option.shows for option in options)

    def seen(self, item_id, id_a, id_b, catalog, seed):  # type: ignore[no-untyped-def]
        caption, decoy, target = self.shown(id_a, id_b, catalog)
        return Seen((caption,), target, decoy)

    def seen_answers(self, seen, margin, to_target, draws, noise, params):  # type: ignore[no-untyped-def]
        """Does the caption fit its image (``triple_cut``), and tell it from the decoy (``choose_cut``)."""
        perceived = perceived_margins(margin, draws.bias, noise, params)
        fits_low, fits_high = params.anchors[self.name]
        fit = cosine_to_score(to_target[0], fits_low, fits_high) + draws.bias + params.noise_sd * draws.normal
        apart = perceived[:, 0] >= params.choose_cut
        attentive = np.where(fit >= params.triple_cut, np.where(apart, TARGET, "both"), np.where(apart, "neither", DECOY))
        sloppy = np.asarray(ANSWERS, dtype=object)[(draws.unit * len(ANSWERS)).astype(np.int64)]
        lined = np.where(draws.constant >= params.triple_cut, TARGET, "neither")
        return attentive, sloppy, lined

    def qc_values(self, scores, answers):  # type: ignore[no-untyped-def]
        return (answers == TARGET).to_numpy().astype(np.float64)

    def positive(self, frame, long, threshold):  # type: ignore[no-untyped-def]
        votes = long.assign(target=long["label"] == TARGET).groupby("task")["target"].agg(["all", "size"])
        accepted = votes["all"] & (votes["size"] >= VERIFIERS)
        return accepted.reindex(frame.index, fill_value=False).astype(bool)

    def round_facts(self, frame, long):  # type: ignore[no-untyped-def]
        answers = Counter(long["label"])
        return {
            "accepted": int(frame["positive"].sum()),
            "too_few_verifiers": int((frame["n"] < VERIFIERS).sum()),
            "answers": {a: int(answers[a]) for a in ANSWERS},
        }

    def positive_rule(self, threshold: float | None = None) -> str:
        return f"at least {VERIFIERS} verifiers answered and every one said “target”"
