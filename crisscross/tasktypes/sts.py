"""STS (CxC §3): caption–caption semantic textual similarity, 0–5 continuous.

Criteria: CxC appendix Table 2, STS column after Agirre et al. (2012), quoted (the PDF's stray
spaces before commas removed); guidance, question and slider labels: the interface (Figure 4);
worked examples: two of CxC Table 1's rated pairs.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from crisscross.core.ids import CAPTION_KIND
from crisscross.tasktypes.base import SAME_IMAGE, Example, ExampleSide, Scale, TaskType, cosine, rating_instructions
from crisscross.tasktypes.papers import CXC_SAMPLING

SCALE = Scale(
    threshold=3.0,
    points={
        0: ("On different topics", "The texts are on different topics."),
        1: ("Not equivalent, but on the same topic", "The texts are not equivalent but are on the same topic."),
        2: ("Not equivalent, but share some details", "The texts are not equivalent but share some details."),
        3: (
            "Roughly equivalent, but some important information differs or is missing",
            "The texts are roughly equivalent but some important information differs or is missing.",
        ),
        4: (
            "Mostly equivalent, but some unimportant details differ",
            "The texts are mostly equivalent but some unimportant details differ.",
        ),
        5: ("Completely equivalent as they mean the same thing", "The texts are completely equivalent as they mean the same thing."),
    },
)

GUIDANCE = """\
For this task, you will compare two sentence length snippets of English text and rate how similar they are in meaning to each other.

Two snippets of text can mean the same thing even if they use very different words and phrases. Conversely, two texts that are superficially very similar in their word choice, phrasing and overall composition can have very different meanings.

For this task, you will compare two phrase or sentence length segments of text and select whether or not they have same underlying meaning or message in terms of what they refer to, say or ask about the world.

For example, do both snippets refer to the exact same person, action, event, idea or thing? Or are they similar but different according to either large or small details?

Tips
- Assign ratings according to the underlying meaning of the two snippets rather than their superficial similarities or differences.
- Be careful of wording differences that have an important impact on what is being said or described.
- Ignore grammatical errors and awkward wordings as long as they do not obscure what is being conveyed.
- Use the full range of scores and do not be concerned about selecting precise values such as (2.0) or (3.5).
- Be fast! Do not spend time obsessing over one numerical value versus another (e.g. a (1) vs a (2)) -- in such cases, pick a value somewhere between them and closer to the value you think represents their similarity."""

QUESTION = "Are the following two snippets of text equivalent in meaning?"

# CxC Table 1: two caption pairs with their STS ratings.
EXAMPLES = (
    Example(
        ExampleSide("text", "A man riding a skateboard off the side of a ramp."),
        ExampleSide("text", "A man riding up the side of a skateboard ramp."),
        "CxC raters gave 4.2: mostly equivalent — the same scene, but where on the ramp he rides differs.",
    ),
    Example(
        ExampleSide("text", "An old car sitting on top of a lush green field."),
        ExampleSide("text", "A couple of motorcycles parked next to each other."),
        "CxC raters gave 1.3: not equivalent, but loosely on the same topic (parked vehicles).",
    ),
)


def sts_signals(a: Sequence[str], b: Sequence[str], spaces: Sequence[Any], image_of: Mapping[str, str]) -> dict[str, np.ndarray]:
    """The two captions' cosine, the cosine of their images' caption means, and ``same-image``
    (co-captions, which CxC rated 3.0 on average)."""
    out: dict[str, np.ndarray] = {}
    images_a, images_b = [image_of.get(c, "") for c in a], [image_of.get(c, "") for c in b]
    for space in spaces:
        out[f"{space.name}:captions"] = cosine(space.captions(a), space.captions(b))
        out[f"{space.name}:images"] = cosine(space.image_means(images_a), space.image_means(images_b))
    out[SAME_IMAGE] = np.asarray([x == y and x != "" for x, y in zip(images_a, images_b, strict=True)], dtype=np.float64)
    return out


class STS(TaskType):
    name = "STS"
    kinds = (CAPTION_KIND, CAPTION_KIND)
    symmetric = True
    title = "caption–caption semantic similarity, 0–5"
    source = "Crisscrossed Captions (Parekh et al. 2021) §3"
    sampling = CXC_SAMPLING
    retrieval = True
    methods = ("c2c_",)
    scale = SCALE
    alpha_level = "interval"
    instructions = rating_instructions(GUIDANCE, QUESTION, SCALE)
    question = QUESTION
    side_labels = ("Sentence 1", "Sentence 2")
    # use-m3 cosines roughly follow CxC Table 1 (USE 0.11 ≈ STS 0.2, 0.99 ≈ 5); CxC appendix: 37 s per item.
    anchors = (0.1, 0.9)
    seconds_mean = 37.0
    signals = staticmethod(sts_signals)

    def examples(self, catalog, asked_pairs, asked_ids):  # type: ignore[no-untyped-def]
        return EXAMPLES
