"""The simulated crowd for the Flickr30k Entities tasks, and the truth it answers from.

There are no Flickr30k Entities annotations offline, so the oracle *defines* the truth:

* **Entities.**  Two mentions of one image refer to the same entity iff they have the same
  category and the same canonical head noun (the last word, through ``SYNONYMS``: "guy" and "man"
  are one entity, "man" and "men" are two).  A mention read from a ``Sentences`` file keeps the
  chain its release gave it as its entity.  A head repeated within one caption ("a man hands a
  man a cup") is a new entity each time (§2.1: mentions of one caption are never coreferent), so
  the n-th such mention of every caption is one entity (:func:`image_entities`).
* **Box requirement.**  ``scene`` entities are the scene; ``notvisual`` ones and heads of
  ``NO_BOX_HEADS`` ("camera", "trick") need no box; every other entity needs boxes.
* **Boxes.**  An entity needing boxes has one box, two when its head is a plural noun ("men",
  "dogs"), none in its collective form ("crowd", "team": one box).  Their corners are drawn
  inside the image by the seeded generator keyed by image and entity, so every run, runner and
  error rate sees the same truth.

Each answer is the truth, made wrong with a probability from :class:`OracleSettings`: a link
answer with ``link_error``, a verification / requirement / quality / coverage answer with
``wrong_answer``; a drawn box is a true box whose corners move by ``box_jitter`` × its size
(normal noise).  A question's random draws are keyed by the question (its ids and how many
times it was asked) and not by the rates, so a larger rate only turns more answers wrong.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace

from crisscross.core.rng import generator
from crisscross.core.settings import setting
from crisscross.entities.chunker import GROUP_NOUNS, TYPE_WORDS
from crisscross.entities.files import Box
from crisscross.entities.mentions import NOT_VISUAL, Mention

SYNONYMS = {
    "guy": "man",
    "gentleman": "man",
    "guys": "men",
    "gentlemen": "men",
    "lady": "woman",
    "ladies": "women",
    "kid": "child",
    "kids": "children",
    "youngster": "child",
    "puppy": "dog",
    "bike": "bicycle",
    "bikes": "bicycles",
    "t-shirt": "shirt",
    "automobile": "car",
}
NO_BOX_HEADS = frozenset(["camera", "picture", "photo", "trick", "fun", "game", "time", "day", "night", "way", "view", "race", "match"])
BOX = "box"
SCENE = "scene"
NO_BOX = "none"
REQUIREMENT_ANSWERS = (BOX, SCENE, NO_BOX)
COLLECTIVE = GROUP_NOUNS | frozenset(["crowd", "team", "family", "audience", "people", "group"])


@dataclass(frozen=True)
class OracleSettings:
    """Error rates of the simulated crowd (set from the ``coref:`` and ``boxes:`` params sections)."""

    link_error: float = setting(0.0, low=0.0, high=1.0)  # a coreference link answer is wrong
    wrong_answer: float = setting(0.0, low=0.0, high=1.0)  # a verification / requirement / quality / coverage answer is wrong
    box_jitter: float = setting(0.0, low=0.0, high=1.0)  # sd of a drawn corner's shift, as a fraction of the box's size


def entity_of(mention: Mention) -> str:
    """The oracle's entity of a mention: its release chain, or category + canonical head."""
    if mention.given_chain:
        return f"chain:{mention.given_chain}"
    return f"{mention.kind}:{SYNONYMS.get(mention.head, mention.head)}"


def image_entities(mentions: Iterable[Mention]) -> dict[str, str]:
    """Each mention's entity (by id); the n-th mention of a head in one caption is the n-th entity of that head."""
    seen: Counter[tuple[str, str]] = Counter()
    out: dict[str, str] = {}
    for mention in sorted(mentions, key=lambda m: (m.caption_id, m.index)):
        base = entity_of(mention)
        seen[(mention.caption_id, base)] += 1
        repeat = seen[(mention.caption_id, base)]
        out[mention.mention_id] = base if repeat == 1 or mention.given_chain else f"{base}#{repeat}"
    return out


def requirement_of(mention: Mention) -> str:
    if mention.kind == SCENE:
        return SCENE
    if mention.kind == NOT_VISUAL or mention.head in NO_BOX_HEADS:
        return NO_BOX
    return BOX


def _plural(head: str) -> bool:
    if head in COLLECTIVE:
        return False
    irregular = {"men", "women", "children", "people", "feet", "teeth", "geese", "mice"}
    singular_s = {"glass", "dress", "bus", "grass", "class", "cross", "jeans", "pants", "shorts", "glasses", "sunglasses", "goggles"}
    if head in irregular:
        return True
    return head.endswith("s") and not head.endswith("ss") and head not in singular_s and head[:-1] not in TYPE_WORDS["scene"]


def true_boxes(mention: Mention, width: int, height: int, seed: int, entity: str | None = None) -> tuple[Box, ...]:
    """The truth boxes of the entity a mention refers to (none for scene or no-box entities)."""
    if requirement_of(mention) != BOX or width < 2 or height < 2:
        return ()
    rng = generator(seed, "entities-truth", mention.image_id, entity or entity_of(mention))
    boxes = []
    for _ in range(2 if _plural(mention.head) else 1):
        w = max(1, int(width * rng.uniform(0.15, 0.6)))
        h = max(1, int(height * rng.uniform(0.15, 0.6)))
        x = int(rng.integers(0, width - w + 1))
        y = int(rng.integers(0, height - h + 1))
        boxes.append((x, y, min(width - 1, x + w - 1), min(height - 1, y + h - 1)))
    return tuple(sorted(boxes))


def iou(a: Box, b: Box) -> float:
    """Intersection over union of inclusive pixel boxes."""
    ix = min(a[2], b[2]) - max(a[0], b[0]) + 1
    iy = min(a[3], b[3]) - max(a[1], b[1]) + 1
    if ix <= 0 or iy <= 0:
        return 0.0
    inter = ix * iy
    area = (a[2] - a[0] + 1) * (a[3] - a[1] + 1) + (b[2] - b[0] + 1) * (b[3] - b[1] + 1) - inter
    return inter / area


@dataclass(frozen=True)
class Oracle:
    settings: OracleSettings
    seed: int
    entities: Mapping[str, str] = field(default_factory=dict)  # one image's, from :meth:`for_image`

    def for_image(self, mentions: Iterable[Mention]) -> Oracle:
        """The oracle knowing the entities of one image's mentions (repeated heads of a caption)."""
        return replace(self, entities=image_entities(mentions))

    def entity(self, mention: Mention) -> str:
        return self.entities.get(mention.mention_id) or entity_of(mention)

    def truth(self, mention: Mention, size: tuple[int, int]) -> tuple[Box, ...]:
        return true_boxes(mention, size[0], size[1], self.seed, self.entity(mention))

    def _wrong(self, rate: float, *keys: str) -> bool:
        return rate > 0 and float(generator(self.seed, "entities-oracle", *keys).random()) < rate

    def link(self, mention: Mention, other: Mention) -> bool:
        """Do the two mentions refer to the same entity?"""
        truth = self.entity(mention) == self.entity(other)
        return truth != self._wrong(self.settings.link_error, "link", mention.mention_id, other.mention_id)

    def verify(self, chain_id: str, members: Sequence[Mention]) -> bool:
        """Do all of a chain's mentions refer to the same entity?"""
        truth = len({self.entity(m) for m in members}) == 1
        return truth != self._wrong(self.settings.wrong_answer, "verify", chain_id, *(m.mention_id for m in members))

    def requirement(self, mention: Mention, ask: str) -> str:
        """Box requirement for the representative mention: box, scene or none."""
        truth = requirement_of(mention)
        if not self._wrong(self.settings.wrong_answer, "requirement", mention.mention_id, ask):
            return truth
        others = [a for a in REQUIREMENT_ANSWERS if a != truth]
        return others[int(generator(self.seed, "entities-oracle", "requirement-wrong", mention.mention_id, ask).integers(0, 2))]

    def draw(self, mention: Mention, drawn: Sequence[Box], truth: Sequence[Box], size: tuple[int, int], ask: str) -> Box | None:
        """One new box around an entity not boxed yet, or None for "no further boxes"."""
        missing = [t for t in truth if not any(iou(t, d) >= 0.5 for d in drawn)]
        wrong = self._wrong(self.settings.wrong_answer, "draw", mention.mention_id, ask)
        if missing and wrong:
            return None
        if not missing and not wrong:
            return None
        target = missing[0] if missing else truth[0] if truth else None
        if target is None:
            return None
        return self._jitter(target, size, mention.mention_id, ask)

    def _jitter(self, box: Box, size: tuple[int, int], *keys: str) -> Box:
        if self.settings.box_jitter <= 0:
            return box
        rng = generator(self.seed, "entities-oracle", "jitter", *keys)
        w, h = box[2] - box[0] + 1, box[3] - box[1] + 1
        shift = rng.normal(0.0, self.settings.box_jitter, 4) * [w, h, w, h]
        x0, y0, x1, y1 = (int(round(v + d)) for v, d in zip(box, shift, strict=True))
        x0, x1 = sorted((max(0, min(size[0] - 1, x0)), max(0, min(size[0] - 1, x1))))
        y0, y1 = sorted((max(0, min(size[1] - 1, y0)), max(0, min(size[1] - 1, y1))))
        return (x0, y0, x1, y1)

    def quality(self, mention: Mention, box: Box, kept: Sequence[Box], truth: Sequence[Box], ask: str) -> bool:
        """Is the box tight around an entity no kept box covers yet?"""
        open_truth = [t for t in truth if not any(iou(t, k) >= 0.5 for k in kept)]
        good = any(iou(box, t) >= 0.7 for t in open_truth)
        return good != self._wrong(self.settings.wrong_answer, "quality", mention.mention_id, ask)

    def coverage(self, mention: Mention, kept: Sequence[Box], truth: Sequence[Box], ask: str) -> bool:
        """Have all the boxes been drawn?"""
        done = all(any(iou(t, k) >= 0.5 for k in kept) for t in truth)
        return done != self._wrong(self.settings.wrong_answer, "coverage", mention.mention_id, ask)
