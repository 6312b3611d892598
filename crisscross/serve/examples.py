"""What the rater page shows around the pair: the scale's labels and a pair of worked examples
per task type (CxC appendix: "task-specific high-level instructions … followed by a pair of
examples … a sliding bar with 0–5 score instructions along the scale").

Scale labels are quoted from the interfaces (CxC Figures 4–6); the full criteria stay in
:mod:`crisscross.annotate.instructions` (Table 2), which SITS shows on hover.  STS examples are two
of CxC Table 1's rated pairs.  Image examples are drawn from the collection itself, never from a
pair the round asks about, so an example cannot give away an item's (or a gold item's) answer: an
image with its own caption and with another image's caption (SITS, VERIFY), and an image with
itself and with another image (SIS).
"""

from __future__ import annotations

from dataclasses import dataclass

from crisscross.annotate.catalog import Catalog
from crisscross.formats.schema import CHOOSE, SIS, SITS, STS, VERIFY, VERIFY_TRIPLE, item_id

# CxC Figures 4 (STS), 5 (SIS) and 6 (SITS): the labels along each interface's scale.
SCALE_LABELS: dict[str, dict[int, str]] = {
    STS: {
        0: "On different topics",
        1: "Not equivalent, but on the same topic",
        2: "Not equivalent, but share some details",
        3: "Roughly equivalent, but some important information differs or is missing",
        4: "Mostly equivalent, but some unimportant details differ",
        5: "Completely equivalent as they mean the same thing",
    },
    SIS: {
        0: "The two scenes are completely dissimilar.",
        1: "The two scenes are not equivalent.",
        2: "The two scenes are partially similar.",
        3: "The two scenes are roughly equivalent.",
        4: "The two scenes are mostly equivalent.",
        5: "The scenes are completely equivalent.",
    },
    SITS: {
        0: "Completely unmatched",
        1: "Thematically matched",
        2: "Not matched, but share some details",
        3: "Roughly matched",
        4: "Mostly matched",
        5: "Perfectly matched",
    },
}

# What each side of a pair is called on the page (the interfaces' "sentence 1", "Image 1", …).
SIDE_LABELS: dict[str, tuple[str, str]] = {
    STS: ("Sentence 1", "Sentence 2"),
    SIS: ("Image 1", "Image 2"),
    SITS: ("Snippet of text", "Image"),
    VERIFY: ("Image", "Caption"),
    CHOOSE: ("Target image", "Other image"),  # BISON §4.1: the rater knows which image the captions were written for
    VERIFY_TRIPLE: ("Caption", "Images"),  # the two images come in a seeded order, labelled Image 1 and Image 2
}


@dataclass(frozen=True)
class ExampleSide:
    kind: str  # "text" or "image"
    value: str  # caption text, or image id (served through the example image route, never as a path)


@dataclass(frozen=True)
class Example:
    a: ExampleSide
    b: ExampleSide
    verdict: str


# CxC Table 1: two caption pairs with their STS ratings.
_STS_EXAMPLES = (
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


def worked_examples(catalog: Catalog, asked: set[str], asked_ids: set[str]) -> dict[str, tuple[Example, ...]]:
    """Two examples per task type.  ``asked``: the round's item ids (no example pair may be one);
    ``asked_ids``: the ids in the round, avoided where the collection has others to show."""
    images = sorted(catalog.paths, key=lambda i: (i in asked_ids, i))
    captions_of = catalog.captions_by_image
    out: dict[str, tuple[Example, ...]] = {STS: _STS_EXAMPLES}

    def unasked(image: str, caption: str) -> bool:
        return item_id(SITS, caption, image) not in asked and item_id(VERIFY, image, caption) not in asked

    pairs = [(i, c) for i in images for c in captions_of.get(i, [])]
    own = next(((i, c) for i, c in pairs if unasked(i, c)), None)
    other = next((c for i, c in pairs if own and i != own[0] and unasked(own[0], c)), None)
    if own and other:
        image, caption = own
        text, foreign, picture = (
            ExampleSide("text", catalog.texts[caption]),
            ExampleSide("text", catalog.texts[other]),
            ExampleSide("image", image),
        )
        out[SITS] = (
            Example(text, picture, "The caption was written for this image: usually 4–5, lower when it gets details wrong."),
            Example(foreign, picture, "The caption was written for another photo: usually 0–1, higher only for the details it shares."),
        )
        out[VERIFY] = (
            Example(picture, text, "Written for this image: usually “100% yes” (“partially yes” when a detail is off)."),
            Example(picture, foreign, "Written for another photo: usually “100% no” (“mostly no” when some details match)."),
        )
    if len(images) >= 2:
        first, second = images[0], images[1]
        out[SIS] = (
            Example(ExampleSide("image", first), ExampleSide("image", first), "The same photo twice: 5, near duplicates."),
            Example(
                ExampleSide("image", first),
                ExampleSide("image", second),
                "Two photos of the collection: rate what their scenes share — 0–1 for unrelated scenes, more for the same kind of scene.",
            ),
        )
    return out
