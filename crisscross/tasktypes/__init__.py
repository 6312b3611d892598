"""The task types, one class per file, registered by name: the only place the pipeline learns
what a judgment type is (:class:`~crisscross.tasktypes.base.TaskType` lists the parts).

The four papers' six types come with the package, in the order every stage lists them; more come
from installed packages through the ``crisscross.task_types`` entry point group (``NAME =
"package.module:Class"``), loaded the first time the types are asked for, in name order after the
built-in ones.  A type lacking a part it needs is refused when it is registered, so a plugin
fails at once, naming what it lacks, rather than halfway through a campaign.
"""

from __future__ import annotations

import re
from importlib.metadata import entry_points

from crisscross.core.errors import UserError
from crisscross.core.ids import CAPTION_KIND, IMAGE_KIND
from crisscross.tasktypes.base import SCORE_MAX, SCORE_MIN, TaskType
from crisscross.tasktypes.choose import CHOOSE
from crisscross.tasktypes.sis import SIS
from crisscross.tasktypes.sits import SITS
from crisscross.tasktypes.sts import STS
from crisscross.tasktypes.verify import VERIFY
from crisscross.tasktypes.verify_triple import VERIFY_TRIPLE

ENTRY_POINTS = "crisscross.task_types"
NAME = re.compile(r"[A-Z][A-Z0-9-]{0,31}")
_BUILT_IN = (STS, SIS, SITS, VERIFY, CHOOSE, VERIFY_TRIPLE)
_REGISTERED: dict[str, TaskType] = {}
_plugins_loaded = False


class TaskTypeError(UserError, ValueError):
    """A task type that cannot be registered, or a name no registered type has."""


def missing_parts(kind: TaskType) -> list[str]:
    """The parts ``kind`` lacks (empty when it has them all)."""
    needed = ["name", "kinds", "title", "instructions", "side_labels", "anchors", "seconds_mean"]
    lacking = [part for part in needed if not getattr(kind, part, None)]
    if not lacking and (len(kind.kinds) != 2 or not set(kind.kinds) <= {CAPTION_KIND, IMAGE_KIND}):
        lacking.append(f"kinds (two of {CAPTION_KIND!r}, {IMAGE_KIND!r})")
    if not lacking and not NAME.fullmatch(kind.name):
        lacking.append("name (upper-case letters, digits and '-', at most 32; it names files, URLs and item ids)")
    if kind.scale is not None and (kind.scale.low, kind.scale.high) != (SCORE_MIN, SCORE_MAX):
        lacking.append(f"scale from {SCORE_MIN:g} to {SCORE_MAX:g} (the judgments table, plots and stop rules read that range)")
    if kind.scale is None and not kind.answers:  # answers of its own per item: QC needs them as numbers, gold its rule
        if type(kind).qc_values is TaskType.qc_values:
            lacking.append("qc_values (its answers as numbers for rater QC)")
        if kind.plants_gold and type(kind).passes_gold is TaskType.passes_gold:
            lacking.append("passes_gold or plants_gold = False (what a right answer to a gold item is)")
    if kind.scale is None and not kind.answers and type(kind).fits is TaskType.fits:
        lacking.append("scale, answers or fits (what an answer is)")
    lacking += [f"meanings[{a!r}]" for a in kind.answers if a not in kind.meanings]
    if kind.scale is None and kind.answers and not kind.positive_answers and type(kind).positive is TaskType.positive:
        lacking.append("positive_answers or positive (what a positive is)")
    if kind.simulated_from_pairs and kind.scale is None and type(kind).answer_of_score is TaskType.answer_of_score:
        lacking.append("answer_of_score (how a simulated rater answers)")
    if not kind.simulated_from_pairs and type(kind).seen_answers is TaskType.seen_answers:
        lacking.append("seen and seen_answers (how a simulated rater answers)")
    return lacking


def register(cls: type[TaskType]) -> type[TaskType]:
    """Add a task type (a :class:`TaskType` subclass), refusing one that lacks a part or takes a used name."""
    if not (isinstance(cls, type) and issubclass(cls, TaskType)):
        raise TaskTypeError(f"task type {cls!r} is not a subclass of crisscross.tasktypes.base.TaskType")
    kind = cls()
    lacking = missing_parts(kind)
    if lacking:
        raise TaskTypeError(f"task type {cls.__module__}.{cls.__qualname__} lacks {', '.join(lacking)}")
    if kind.name in _REGISTERED and type(_REGISTERED[kind.name]) is not cls:
        raise TaskTypeError(f"task type {kind.name} is registered twice ({type(_REGISTERED[kind.name]).__module__} and {cls.__module__})")
    for other in _REGISTERED.values():
        clash = [(a, b) for a in kind.methods for b in other.methods if other.name != kind.name and (a.startswith(b) or b.startswith(a))]
        if clash:
            raise TaskTypeError(
                f"task type {kind.name}'s method prefix {clash[0][0]!r} overlaps {other.name}'s {clash[0][1]!r}: a candidate would be either"
            )
    _REGISTERED[kind.name] = kind
    return cls


def _load_plugins() -> None:
    """Register the installed plugins, once; a plugin that fails fails every call, never leaving the registry half loaded."""
    global _plugins_loaded
    if _plugins_loaded:
        return
    for point in sorted(entry_points(group=ENTRY_POINTS), key=lambda p: p.name):
        try:
            cls = point.load()
        except Exception as error:  # an installed plugin that does not import: say which, and why
            raise TaskTypeError(f"task type plugin {point.name} = {point.value} does not load: {error}") from error
        register(cls)
    _plugins_loaded = True


def task_types() -> tuple[TaskType, ...]:
    """Every registered type: the built-in six in their order, then plugins by name."""
    _load_plugins()
    return tuple(_REGISTERED.values())


def type_names() -> tuple[str, ...]:
    return tuple(t.name for t in task_types())


def rated_type_names() -> tuple[str, ...]:
    """The types answered on a scale (CxC's three ratings)."""
    return tuple(t.name for t in task_types() if t.scale is not None)


def default_thresholds() -> dict[str, float]:
    """Each rated type's positive threshold (CxC §3: STS and SITS 3, SIS 2.5)."""
    return {t.name: t.scale.threshold for t in task_types() if t.scale is not None}


def task_type(name: str) -> TaskType:
    """The registered type called ``name`` (any case)."""
    found = _REGISTERED.get(str(name).upper())
    if found is None:
        _load_plugins()
        found = _REGISTERED.get(str(name).upper())
    if found is None:
        raise TaskTypeError(f"unknown task type {name!r}; known: {', '.join(type_names())}")
    return found


for _cls in _BUILT_IN:
    register(_cls)
