"""SITS (CxC §3): caption–image semantic similarity, 0–5 continuous.

Criteria: CxC appendix Table 2, quoted, shown when the rater hovers a score ("since the SITS
instructions are longer"); guidance and slider labels: the interface (Figure 6), which asks no
question.  Worked examples come from the collection: an image with its own caption and another's.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from crisscross.core.ids import CAPTION_KIND, IMAGE_KIND
from crisscross.tasktypes.base import SAME_IMAGE, Scale, TaskType, caption_image_examples, cosine, rating_instructions
from crisscross.tasktypes.papers import CXC_SAMPLING

SCALE = Scale(
    threshold=3.0,
    hover=True,
    points={
        0: ("Completely unmatched", "The image and sentence are completely unmatched."),
        1: ("Thematically matched", "The image and sentence are not matched, but are loosely thematically related."),
        2: (
            "Not matched, but share some details",
            "The image and sentence are not matched, but share some details in one or more of the types of participants, actions, objects or background.",
        ),
        3: (
            "Roughly matched",
            "The image and sentence are roughly matched, but some important details are different or missing such as involving a notable difference in the types of participants, actions, objects or background. The image cannot be described using the text.",
        ),
        4: (
            "Mostly matched",
            "The image and sentence are mostly matched, but some unimportant details differ such as involving different but the same or highly similar types of participants, actions, objects and background. The text can partially describe the image.",
        ),
        5: (
            "Perfectly matched",
            "The image and sentence are perfectly matched. The sentence is an almost perfect description for the image.",
        ),
    },
)

GUIDANCE = """\
Compare the image and snippet of text to answer the question below.

For this task, you will compare an image and a snippet of text and select whether or not they have the same underlying meaning in terms of what they refer to, say or ask about the world.

For example, do both the image and the text snippet refer to the exact same person, action, event, idea or thing? Or are they similar but different according to either large or small details?

Tips
1. Assign ratings according to the underlying meaning and/or theme of the image and the text snippet and not only based on superficial similarities or differences.
2. Be careful of wording differences that have an important impact on what is being said or described.
3. Ignore grammatical errors and awkward wordings as long as they do not obscure what is being conveyed.
4. Use the full range of scores and do not be concerned about selecting precise values such as (2.0) or (3.5).
5. Be fast! Do not spend time obsessing over one numerical value versus another (e.g. a (1) vs a (2)) – in such cases, pick a value somewhere between them and closer to the value you think represents their similarity."""


def sits_signals(a: Sequence[str], b: Sequence[str], spaces: Sequence[Any], image_of: Mapping[str, str]) -> dict[str, np.ndarray]:
    """The caption's cosine to the image's caption mean (without the caption itself when it
    describes that image, so the signal is not the caption against itself), the cosine of the
    caption's own image's mean (without it) to the image's, and ``same-image``."""
    out: dict[str, np.ndarray] = {}
    own = [image_of.get(c, "") for c in a]
    for space in spaces:
        target = space.image_means(b, leave_out=a)
        out[f"{space.name}:caption-image"] = cosine(space.captions(a), target)
        out[f"{space.name}:images"] = cosine(space.image_means(own, leave_out=a), target)
    out[SAME_IMAGE] = np.asarray([x == y for x, y in zip(own, b, strict=True)], dtype=np.float64)
    return out


class SITS(TaskType):
    name = "SITS"
    kinds = (CAPTION_KIND, IMAGE_KIND)
    title = "caption–image semantic similarity, 0–5"
    source = "Crisscrossed Captions (Parekh et al. 2021) §3"
    sampling = CXC_SAMPLING
    retrieval = True
    methods = ("c2i_",)
    scale = SCALE
    alpha_level = "interval"
    instructions = rating_instructions(GUIDANCE, "", SCALE)
    side_labels = ("Snippet of text", "Image")
    anchors = (0.1, 0.85)  # a caption against its own image's co-caption mean scores high, as people rate it
    seconds_mean = 17.0  # CxC appendix
    signals = staticmethod(sits_signals)

    def examples(self, catalog, asked_pairs, asked_ids):  # type: ignore[no-untyped-def]
        return caption_image_examples(
            self,
            catalog,
            asked_pairs,
            asked_ids,
            (
                "The caption was written for this image: usually 4–5, lower when it gets details wrong.",
                "The caption was written for another photo: usually 0–1, higher only for the details it shares.",
            ),
        )
