"""What each task type shows raters and what their pick means: one strategy per type.

The exports for crowd tools (:func:`crisscross.annotate.exports.batches`), the rater app
(``crisscross.serve.app``) and the tasks stage's check that an item can be shown all ask the
type's :class:`Presentation`, so a VERIFY-TRIPLE's "image 1" is the same image in an exported CSV
and on the app's page (the order is seeded by ``base.seed``), and a CHOOSE's caption 3 the same
caption.  What the judgments table accepts per type stays with the vocabulary
(:data:`crisscross.formats.schema.ANSWER_RULES`), which import validation and the store check.
"""

from __future__ import annotations

from dataclasses import dataclass

from crisscross.annotate.catalog import Catalog
from crisscross.formats.schema import (
    CHOOSE,
    CHOOSE_NONE,
    SIS,
    SITS,
    STS,
    TRIPLE_ANSWERS,
    TRIPLE_DECOY,
    TRIPLE_TARGET,
    VERIFY,
    VERIFY_TRIPLE,
    decoy_first,
)


@dataclass(frozen=True)
class Option:
    """Something a rater picks: the id it shows (a caption or an image) and the answer stored for it."""

    shows: str
    answer: str


class AnswerError(ValueError):
    """A rater's pick that is none of the item's options; the message says what it needs."""


class Presentation:
    """A pair type (STS, SIS, SITS, VERIFY): the two sides and nothing else; the rater's answer is
    the rating or the verdict itself."""

    def shown(self, id_a: str, id_b: str, catalog: Catalog) -> tuple[str, ...]:
        """Every id raters see for the item."""
        return (id_a, id_b)

    def options(self, item_id: str, id_a: str, id_b: str, catalog: Catalog, seed: int) -> tuple[Option, ...]:
        """What raters pick from, in the order shown (numbered from 1)."""
        return ()

    def unshowable(self, id_a: str, id_b: str, catalog: Catalog) -> tuple[str, str] | None:
        """Why the item cannot be shown as the type needs it (reason code, detail), beyond its own ids."""
        return None

    def canonical(self, given: str | None, options: tuple[Option, ...]) -> str | None:
        """The answer as stored, from the pick a page sends (an option's number, or a word)."""
        return given


class Choose(Presentation):
    """COCO-BISON step 2: the target's captions, numbered; the rater picks the one that describes the
    target but not the decoy, or ``none``."""

    def options(self, item_id: str, id_a: str, id_b: str, catalog: Catalog, seed: int) -> tuple[Option, ...]:
        return tuple(Option(caption, caption) for caption in catalog.captions_of(id_a))

    def unshowable(self, id_a: str, id_b: str, catalog: Catalog) -> tuple[str, str] | None:
        return None if catalog.captions_of(id_a) else ("no-captions", f"target {id_a} has no caption raters can read")

    def canonical(self, given: str | None, options: tuple[Option, ...]) -> str | None:
        numbers = {str(k): option.answer for k, option in enumerate(options, start=1)}
        if given == CHOOSE_NONE or given in numbers:
            return numbers.get(str(given), CHOOSE_NONE)
        raise AnswerError(f"needs one of its {len(options)} captions or {CHOOSE_NONE}")


class VerifyTriple(Presentation):
    """COCO-BISON step 3: the chosen caption beside the target (the caption's own image) and the
    decoy, in a seeded order, so the verifier cannot tell which the caption was chosen for."""

    WORDS = tuple(answer for answer in TRIPLE_ANSWERS if answer not in (TRIPLE_TARGET, TRIPLE_DECOY))  # both, neither

    def shown(self, id_a: str, id_b: str, catalog: Catalog) -> tuple[str, ...]:
        return (id_a, id_b, catalog.image(id_a))

    def options(self, item_id: str, id_a: str, id_b: str, catalog: Catalog, seed: int) -> tuple[Option, ...]:
        shown = (Option(catalog.image(id_a), TRIPLE_TARGET), Option(id_b, TRIPLE_DECOY))
        return shown[::-1] if decoy_first(item_id, seed) else shown

    def unshowable(self, id_a: str, id_b: str, catalog: Catalog) -> tuple[str, str] | None:
        target = catalog.image(id_a)
        if target == id_b:
            return "same-image", f"decoy {id_b} is the image of caption {id_a}"
        return catalog.problem(target)

    def canonical(self, given: str | None, options: tuple[Option, ...]) -> str | None:
        by_number = {str(k): option.answer for k, option in enumerate(options, start=1)}
        if given in by_number or given in self.WORDS:
            return by_number.get(str(given), given)
        raise AnswerError(f"needs image 1, image 2, {' or '.join(self.WORDS)}")


PAIR = Presentation()
PRESENTATIONS: dict[str, Presentation] = {STS: PAIR, SIS: PAIR, SITS: PAIR, VERIFY: PAIR, CHOOSE: Choose(), VERIFY_TRIPLE: VerifyTriple()}
