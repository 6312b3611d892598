"""VERIFY (ECCV Caption §3.2): is this caption right for this image?  One of four answers.

ECCV Caption names the four answers ("100% YES", "Partially YES, but", "Mostly NO, because",
"100% NO") and counts the first two as positives (§3.3: "Yes" or "Weak Yes"); it gives no longer
definitions, so the meanings below are this project's wording of those labels.  The answers are
ordinal (best first), which Dawid–Skene and alpha see.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from crisscross.core.ids import CAPTION_KIND, IMAGE_KIND
from crisscross.tasktypes.base import TaskType, caption_image_examples
from crisscross.tasktypes.papers import CXC_SAMPLING

ANSWERS = ("100% yes", "partially yes", "mostly no", "100% no")
MEANINGS = dict(
    zip(
        ANSWERS,
        (
            "The caption correctly describes the image.",
            "The caption describes the image, but some details are wrong or missing.",
            "The caption does not describe the image, although some details match.",
            "The caption has nothing to do with the image.",
        ),
        strict=True,
    )
)

GUIDANCE = """\
Look at the image and read the caption: does the caption describe the image?

Choose one of four answers. There is no "not sure": if the caption is right but imprecise, choose "partially yes"; if it is wrong but shares something with the image, choose "mostly no"."""


class VERIFY(TaskType):
    name = "VERIFY"
    kinds = (IMAGE_KIND, CAPTION_KIND)
    title = "image–caption verification: one of four answers"
    source = "ECCV Caption (Chun et al. 2022) §3.2"
    sampling = CXC_SAMPLING
    retrieval = True
    answers = ANSWERS
    meanings = MEANINGS
    positive_answers = frozenset(ANSWERS[:2])
    alpha_level = "ordinal"
    instructions = GUIDANCE + "\n\nAnswers\n" + "\n".join(f"{a}: {m}" for a, m in MEANINGS.items())
    side_labels = ("Image", "Caption")
    anchors = (0.1, 0.85)
    seconds_mean = 10.0  # a four-way choice

    @property
    def wanted(self) -> str:
        return f"one of the four answers ({', '.join(ANSWERS)})"

    def answer_of_score(self, scores: np.ndarray, cuts: Sequence[float]) -> np.ndarray:
        """The rater's score against the panel's descending ``verify_cuts``: above the first is "100% yes"."""
        return np.asarray(ANSWERS, dtype=object)[(scores[..., None] < np.asarray(cuts)).sum(axis=-1)]

    def examples(self, catalog, asked_pairs, asked_ids):  # type: ignore[no-untyped-def]
        return caption_image_examples(
            self,
            catalog,
            asked_pairs,
            asked_ids,
            (
                "Written for this image: usually “100% yes” (“partially yes” when a detail is off).",
                "Written for another photo: usually “100% no” (“mostly no” when some details match).",
            ),
        )
