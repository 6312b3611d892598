"""SIS (CxC §3): image–image semantic similarity, 0–5 continuous.

Criteria: CxC appendix Table 2, quoted; guidance and slider labels: the interface (Figure 5).
Worked examples come from the collection: an image with itself and with another image.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from crisscross.core.ids import IMAGE_KIND
from crisscross.tasktypes.base import Example, ExampleSide, Scale, TaskType, cosine, rating_instructions
from crisscross.tasktypes.papers import CXC_SAMPLING

SCALE = Scale(
    threshold=2.5,
    points={
        0: ("The two scenes are completely dissimilar.", "The two scenes are completely dissimilar."),
        1: ("The two scenes are not equivalent.", "The two scenes are not equivalent, but are loosely thematically related."),
        2: (
            "The two scenes are partially similar.",
            "The two scenes are not equivalent, but share some details in terms of the types of participants, actions, objects or background.",
        ),
        3: (
            "The two scenes are roughly equivalent.",
            "The two scenes are roughly equivalent, but some important details are different or missing such as involving a notable difference in the types of participants, actions, objects or background.",
        ),
        4: (
            "The two scenes are mostly equivalent.",
            "The two scenes are mostly equivalent, but some unimportant details differ such as involving different but the same or highly similar types of participants, actions, objects and background.",
        ),
        5: ("The scenes are completely equivalent.", "The scenes are near duplicates, possibly being viewed from a different perspective."),
    },
)

GUIDANCE = """\
Evaluate the 2 images and answer the question below.

For this task, you will compare two images and select whether or not they have the same underlying meaning in terms of what they refer to, say or ask about the world.

For example, do both images refer to the exact same person, action, event, idea or thing? Or are they similar but different according to either large or small visual details?

Tips
1. Assign ratings according to the underlying meaning and/or theme of the images and not only based on visual similarities or differences.
2. Use the full range of scores and do not be concerned about selecting precise values such as (2.0) or (3.5).
3. Be fast! Do not spend time obsessing over one numerical value versus another (e.g. a (1) vs a (2)) – in such cases, pick a value somewhere between them and closer to the value you think represents their similarity."""

QUESTION = "Do you think the 2 images above are the same?"


def sis_signals(a: Sequence[str], b: Sequence[str], spaces: Sequence[Any], image_of: Mapping[str, str]) -> dict[str, np.ndarray]:
    """The cosine of the two caption means, and the best cosine between a caption of one and a caption of the other."""
    out: dict[str, np.ndarray] = {}
    for space in spaces:
        out[f"{space.name}:images"] = cosine(space.image_means(a), space.image_means(b))
        out[f"{space.name}:best-captions"] = space.best_caption_cosine(a, b)
    return out


class SIS(TaskType):
    name = "SIS"
    kinds = (IMAGE_KIND, IMAGE_KIND)
    symmetric = True
    title = "image–image semantic similarity, 0–5"
    source = "Crisscrossed Captions (Parekh et al. 2021) §3"
    sampling = CXC_SAMPLING
    retrieval = True
    methods = ("i2i_",)
    scale = SCALE
    alpha_level = "interval"
    instructions = rating_instructions(GUIDANCE, QUESTION, SCALE)
    question = QUESTION
    side_labels = ("Image 1", "Image 2")
    # Co-caption means' cosines sit higher than captions'; CxC appendix: 17 s per item.
    anchors = (0.15, 0.85)
    seconds_mean = 17.0
    signals = staticmethod(sis_signals)

    def examples(self, catalog, asked_pairs, asked_ids):  # type: ignore[no-untyped-def]
        images = sorted(catalog.paths, key=lambda i: (i in asked_ids, i))
        if len(images) < 2:
            return ()
        first, second = ExampleSide("image", images[0]), ExampleSide("image", images[1])
        return (
            Example(first, first, "The same photo twice: 5, near duplicates."),
            Example(
                first,
                second,
                "Two photos of the collection: rate what their scenes share — 0–1 for unrelated scenes, more for the same kind of scene.",
            ),
        )
