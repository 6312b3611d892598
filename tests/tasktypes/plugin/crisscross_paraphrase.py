"""A task type the papers do not have, as a plugin: do two captions say the same thing, yes or no?

The README's "Add your own task type" shows this file.  It is installed as a package whose entry
point (group ``crisscross.task_types``) names the class; every stage then handles its items.
"""

from __future__ import annotations

from typing import ClassVar

import numpy as np

from crisscross.core.ids import CAPTION_KIND
from crisscross.tasktypes.base import Example, ExampleSide, TaskType

YES, NO = "yes", "no"


class Paraphrase(TaskType):
    name = "PARAPHRASE"
    kinds = (CAPTION_KIND, CAPTION_KIND)
    symmetric = True  # (a, b) and (b, a) are one item
    title = "caption–caption paraphrase: yes or no"
    source = "crisscross-paraphrase, an example plugin"
    methods = ("para_",)  # candidate pairs whose sampling method starts so become its items
    answers = (YES, NO)
    meanings: ClassVar[dict[str, str]] = {
        YES: "Both captions say the same thing about the scene.",
        NO: "The captions differ in something that matters.",
    }
    positive_answers = frozenset({YES})
    instructions = (
        "Read the two captions: do they say the same thing?\n\n"
        "Answer yes when one could replace the other without changing what is described, no otherwise."
    )
    side_labels = ("Caption 1", "Caption 2")
    anchors = (0.1, 0.9)  # the simulated rater's reference cosine at score 0 and at score 5
    seconds_mean = 8.0

    def answer_of_score(self, scores: np.ndarray, cuts) -> np.ndarray:  # type: ignore[no-untyped-def]
        """A simulated rater says yes when its noisy 0–5 reading is at least 2.5."""
        return np.where(scores >= 2.5, YES, NO).astype(object)

    def examples(self, catalog, asked_pairs, asked_ids):  # type: ignore[no-untyped-def]
        return (
            Example(
                ExampleSide("text", "A man rides a wave on a surfboard."),
                ExampleSide("text", "A surfer riding a wave in the ocean."),
                "yes: the same scene in other words.",
            ),
        )
