"""A campaign plan's file (``crisscross plan`` writes it): what the tasks stage, the stop rules and
the rater app read of it, without the planning library and its plotting behind them."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from crisscross.core import io
from crisscross.core.errors import InputError

PLAN_FILE = "plan.json"


def read_plan(folder: str) -> dict[str, Any]:
    """The plan document in a plan stage output; one line naming what to run when there is none."""
    path = io.join(folder, PLAN_FILE)
    if not io.exists(path):
        raise InputError(f"no {path}: run the plan stage first (crisscross plan)")
    return io.json_document(io.read_bytes(path), path)


def designs(plan: Mapping[str, Any]) -> dict[str, tuple[int, int]]:
    """Per task type, the design's (items, replicas)."""
    found = {kind: (int(entry["design"]["items"]), int(entry["design"]["replicas"])) for kind, entry in plan.get("types", {}).items()}
    if not found:
        raise InputError("the plan names no task type: plan from a pilot round with rated items")
    return dict(sorted(found.items()))


def ceiling(plan: Mapping[str, Any]) -> int:
    """The most judgments the plan gives any item: the round's ``replicas`` under it."""
    return max(replicas for _, replicas in designs(plan).values())


def pilot_rater_sd(plan: Mapping[str, Any]) -> dict[str, float]:
    """Per task type, one rater's spread the pilot measured."""
    return {kind: float(entry["pilot"]["rater_sd"]) for kind, entry in sorted(plan.get("types", {}).items())}


def budgets(plan: Mapping[str, Any]) -> dict[str, tuple[int, bool, float | None, str]]:
    """Per task type, what may be spent: (judgments, whether a budget set them rather than the design,
    the cost of one judgment at the pilot's time and the plan's pay or None for a pilot without
    times, the currency).  Without ``plan.budget_judgments`` the design's judgments are the spend planned."""
    out = {}
    for kind, entry in sorted(plan.get("types", {}).items()):
        design, budget = entry["design"], entry.get("budget")
        per_judgment = design["cost"] / design["judgments"] if design.get("cost") is not None and design["judgments"] else None
        if budget is not None:
            out[kind] = (int(budget.get("judgments", budget["items"] * design["replicas"])), True, per_judgment, str(design["currency"]))
        else:
            out[kind] = (int(design["judgments"]), False, per_judgment, str(design["currency"]))
    return out
