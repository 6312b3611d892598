"""Boxes for one coreference chain: the §2.2 state machine (requirement → drawing → quality → coverage).

The representative (longest) mention is the one shown.  A chain holding a mention typed people,
clothing or body parts (any of its "/"-joined types) skips the requirement step.  Requirement: a first "box" answer goes to drawing; otherwise answers
are collected until one has a majority (at most three: a second, then a third on disagreement);
a "no box needed" from drawing with no box yet counts as a requirement answer and sends the chain
back.  Drawing adds one box or says "no further boxes"; every box goes to quality (bad boxes are
discarded, the chain returns to drawing); coverage asks "all boxes drawn?": a "no" goes back to
drawing, a "yes" needs a second opinion and, on disagreement, a third.  A chain that reaches no
decision (three different requirement answers, a 2–2 tie) or cycles past ``max_steps`` goes to
review: it is quarantined, as the paper's additional review took such chains out.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from crisscross.core.quarantine import Rejected, reject
from crisscross.core.settings import setting
from crisscross.entities.coref import Chain
from crisscross.entities.files import Box
from crisscross.entities.mentions import Mention
from crisscross.entities.oracle import BOX, NO_BOX, SCENE, Oracle

SKIP_REQUIREMENT = frozenset(["people", "clothing", "bodyparts"])
BOXED, SCENE_CHAIN, NOT_VISUAL_CHAIN = "boxes", "scene", "nobox"  # a chain's outcomes
REVIEW = "review"  # no decision: the chain goes to the quarantine
TASKS = ("requirement", "drawing", "quality", "coverage")


@dataclass(frozen=True)
class BoxSettings:
    """``params.yaml`` ``boxes:``: the simulated crowd's error rates and the merging thresholds."""

    wrong_answer: float = setting(0.0, low=0.0, high=1.0)  # a requirement / quality / coverage / drawing answer is wrong
    box_jitter: float = setting(0.0, low=0.0, high=1.0)  # sd of a drawn corner's shift, as a fraction of the box's size
    max_steps: int = setting(40, low=4)  # tasks one chain may take before it goes to review
    merge_iou: float = setting(0.8, low=0.0, high=1.0)  # boxes at least this close are merged …
    merge_iou_other: float = setting(0.9, low=0.0, high=1.0)  # … or this close when either chain is "other"
    image_root: str = setting("/data/local-files/?d=")  # prefix of Label Studio image values (its local-files serving)
    strict: bool = setting(False)


@dataclass(frozen=True)
class ChainBoxes:
    chain: Chain
    outcome: str  # BOXED, SCENE_CHAIN or NOT_VISUAL_CHAIN
    boxes: tuple[Box, ...]
    tasks: tuple[tuple[str, int], ...]  # how many answers each task took, in TASKS order


def check_box(box: Box, width: int, height: int) -> str | None:
    """Why a box cannot be kept for an image of this size, or None."""
    x0, y0, x1, y1 = box
    if x1 < x0 or y1 < y0:
        return "empty-box"
    if x0 < 0 or y0 < 0 or x1 >= width or y1 >= height:
        return "box-outside-image"
    return None


def _majority(votes: Sequence[str]) -> str | None:
    ranked = Counter(votes).most_common()
    if ranked[0][1] >= 2 and (len(ranked) == 1 or ranked[1][1] < ranked[0][1]):
        return ranked[0][0]
    return None


@dataclass
class _Run:
    """One chain's walk through the tasks: what it was asked, its requirement votes, its kept boxes."""

    rep: Mention
    size: tuple[int, int]
    truth: tuple[Box, ...]
    oracle: Oracle
    asked: Counter[str] = field(default_factory=Counter)
    votes: list[str] = field(default_factory=list)
    kept: list[Box] = field(default_factory=list)

    def ask(self, task: str) -> str:
        """Count one answer of ``task``; the key seeds its random draw (stable across runs)."""
        key = f"{task[0]}{sum(self.asked.values())}"
        self.asked[task] += 1
        return key


Step = Callable[[_Run], str]  # runs one task; the next state, or an outcome / REVIEW


def _requirement(run: _Run) -> str:
    run.votes.append(run.oracle.requirement(run.rep, run.ask("requirement")))
    if run.votes == [BOX]:
        return "drawing"
    decision = _majority(run.votes)
    if decision is None:
        return REVIEW if len(run.votes) >= 3 else "requirement"
    return {BOX: "drawing", SCENE: SCENE_CHAIN, NO_BOX: NOT_VISUAL_CHAIN}[decision]


def _drawing(run: _Run) -> str:
    box = run.oracle.draw(run.rep, run.kept, run.truth, run.size, run.ask("drawing"))
    if box is None:
        if run.kept:
            return "coverage"  # "all boxes drawn"
        run.votes.append(NO_BOX)  # "no box needed": back to requirement to settle it
        return "requirement"
    if run.oracle.quality(run.rep, box, run.kept, run.truth, run.ask("quality")):
        run.kept.append(box)
        return "coverage"
    return "drawing"


def _coverage(run: _Run) -> str:
    if not run.oracle.coverage(run.rep, run.kept, run.truth, run.ask("coverage")):
        return "drawing"
    if run.oracle.coverage(run.rep, run.kept, run.truth, run.ask("coverage")):  # the second opinion agrees
        return BOXED
    return BOXED if run.oracle.coverage(run.rep, run.kept, run.truth, run.ask("coverage")) else "drawing"  # a third breaks the tie


STEPS: dict[str, Step] = {"requirement": _requirement, "drawing": _drawing, "coverage": _coverage}


def annotate_chain(chain: Chain, size: tuple[int, int], oracle: Oracle, max_steps: int, source: str) -> ChainBoxes | Rejected:
    """Run one chain through the four tasks with the oracle as the crowd."""
    rep = chain.representative
    run = _Run(rep, size, oracle.truth(rep, size), oracle)
    skips = any(kind in SKIP_REQUIREMENT for m in chain.members for kind in m.types.split("/"))
    state = "drawing" if skips else "requirement"
    while state in STEPS and sum(run.asked.values()) < max_steps:
        state = STEPS[state](run)
    if state in (BOXED, SCENE_CHAIN, NOT_VISUAL_CHAIN):
        return ChainBoxes(chain, state, tuple(run.kept), tuple((t, run.asked[t]) for t in TASKS))
    why = f"no majority in requirement answers {run.votes}" if state == REVIEW else f"still undecided after {max_steps} tasks"
    record = {"chain": chain.chain, "image_id": chain.image_id, "representative": rep.text, "votes": run.votes, "tasks": dict(run.asked)}
    return reject("chain", f"{chain.image_id}#{chain.chain}", "needs-review", why, source, record)
