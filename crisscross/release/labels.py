"""How a release's labels were obtained, computed once for the card, ``croissant.json`` and ``release.json``.

People's labels: per task type, the replication its items actually had (judgments per item, from
the judgments the release holds) and, where a round's annotate stage replicated adaptively
(``replication.parquet``), its stop rule and the items that stopped early.  Machine labels (the
``machine_labels`` part) are counted beside them, and :func:`kept_apart` refuses a release whose
rounds rated an item the machine labelled: a reader must never mistake one for the other.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pandas as pd

from crisscross.campaign.replication import FIXED
from crisscross.core.errors import InputError
from crisscross.release.contents import Contents
from crisscross.release.parts import MACHINE_LABELS, Part

ROUND_ITEM = ["round", "task_type", "item_id"]
UNKNOWN = "unknown"  # a round released without its annotate output: its stop rule and dropped judgments are not known


def replication(contents: Contents) -> dict[str, dict[str, Any]]:
    """Per task type of the rounds: items, judgments (and those kept after quality control),
    judgments per item (mean, min, max), the replication rule and how many items stopped early or
    are still open (``release.json``'s ``replication``)."""
    if contents.pairs.empty:
        return {}
    per_item = contents.judgments.groupby(ROUND_ITEM).size().rename("judgments").reset_index()
    items = contents.pairs[[*ROUND_ITEM, "n"]].merge(per_item, on=ROUND_ITEM, how="left").fillna({"judgments": 0})
    decided = [r.replication.assign(round=r.number) for r in contents.rounds if r.replication is not None]
    if decided:
        items = items.merge(pd.concat(decided, ignore_index=True), on=ROUND_ITEM, how="left")
    else:
        items = items.assign(stopped=False, open=False)
    found = {}
    for kind, rows in items.groupby("task_type", sort=True):
        counts = rows["judgments"].astype(int)
        rules = {
            UNKNOWN
            if not r.all_judgments
            else r.rule
            if r.replication is not None and (r.replication["task_type"] == kind).any()
            else FIXED
            for r in contents.rounds
            if r.number in set(rows["round"])
        }
        found[str(kind)] = {
            "items": len(rows),
            "judgments": int(counts.sum()),
            "kept": int(rows["n"].sum()),
            "per_item": {"mean": round(float(counts.mean()), 4), "min": int(counts.min()), "max": int(counts.max())},
            "rule": ", ".join(sorted(rules)),
            "stopped_early": int(rows["stopped"].eq(True).sum()),
            "open": int(rows["open"].eq(True).sum()),
        }
    return found


def replication_line(kind: str, figures: dict[str, Any]) -> str:
    """One task type's replication as a sentence (plain text)."""
    each = figures["per_item"]
    line = (
        f"{kind}: {figures['items']:,} items, {figures['judgments']:,} judgments ({figures['kept']:,} kept after quality control), "
        f"{each['mean']:.2f} per item (min {each['min']}, max {each['max']}); "
    )
    if figures["rule"] == FIXED:
        return line + "fixed design, no item stopped early"
    if UNKNOWN in figures["rule"]:
        return (
            line
            + "replication not known: the release was built without the round's annotate output, so only the kept judgments are counted"
        )
    still = f", {figures['open']:,} still open" if figures["open"] else ""
    return (
        line + f"adaptive replication ({figures['rule']}): {figures['stopped_early']:,} of {figures['items']:,} items stopped early{still}"
    )


def machine_part(parts: Sequence[Part]) -> Part | None:
    return next((p for p in parts if p.name == MACHINE_LABELS), None)


def machine_line(parts: Sequence[Part]) -> str:
    """What the machine labelled, or that it labelled nothing (plain text)."""
    machine = machine_part(parts)
    if machine is None:
        return "No label in this release was assigned by a machine."
    by_type = ", ".join(f"{kind} {sum(n.values()):,}" for kind, n in sorted(machine.counts["by_type"].items()))
    return (
        f"{machine.counts['labels']:,} labels ({by_type or 'none'}) were assigned by a calibrated machine, not by people; they are "
        f"kept apart in data/{MACHINE_LABELS}/ with their provenance, and no table of people's labels holds them."
    )


def obtained(contents: Contents, parts: Sequence[Part]) -> tuple[dict[str, str], str]:
    """The card's and Croissant's statement: per task type of the rounds its replication line, and
    the machine's share (both empty for a release of COCO-BISON or Flickr30k Entities files alone)."""
    lines = {kind: replication_line(kind, f) for kind, f in replication(contents).items()}
    return lines, machine_line(parts) if lines or machine_part(parts) is not None else ""


def kept_apart(contents: Contents, parts: Sequence[Part]) -> None:
    """Refuse machine labels for items the rounds rated: people's label would sit beside the
    machine's for one item, and the triage that labelled it is older than the rounds."""
    machine = machine_part(parts)
    if machine is None or contents.pairs.empty:
        return
    both = machine.tables["labels"].merge(contents.pairs[["task_type", "item_id", "round"]], on=["task_type", "item_id"])
    if not both.empty:
        first = both.iloc[0]
        raise InputError(
            f"{len(both)} item(s) the machine labelled are rated in the rounds too, e.g. {first['item_id']} ({first['task_type']}, "
            f"round {first['round']}): rerun triage with --rated naming those rounds, so people's labels stand and the machine's go"
        )
