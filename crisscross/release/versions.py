"""Semantic versions of a release and the rule that picks them, from a diff of two releases.

* patch — metadata only (card text, licence, citation, build params): no pair, score or label moved;
* minor — pairs added or scores / labels refined, and no positive flipped;
* major — pairs removed or any positive flipped.

The rows of a part's tables (COCO-BISON triples, Flickr30k Entities boxes and chains; see
:mod:`crisscross.release.parts`) count like pairs: an added row is minor, a removed or changed row major.

The release stage computes the smallest allowed bump from the diff against the previous release
and refuses a version below it.  A release built from simulated judgments carries the
``-simulated`` label (``1.0.0-simulated``): it can never pass for a plain version.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import pandas as pd

from crisscross.core.errors import ParamError

SIMULATED_LABEL = "simulated"
LEVELS = ("none", "patch", "minor", "major")  # smallest first; "none": nothing changed, same version allowed
SCORE_TOLERANCE = 1e-9  # scores are rounded to 6 decimals upstream; smaller differences are float noise
KEY = ("task_type", "item_id")
_VERSION = re.compile(r"(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)(?:-([0-9A-Za-z-]+(?:\.[0-9A-Za-z-]+)*))?", re.ASCII)


@dataclass(frozen=True, order=True)
class Version:
    major: int
    minor: int
    patch: int
    label: str = ""

    @classmethod
    def parse(cls, text: str) -> Version:
        match = _VERSION.fullmatch(text.strip())
        if not match:
            raise ParamError(f"version {text!r} is not a semantic version MAJOR.MINOR.PATCH (e.g. 1.0.0, or 1.0.0-simulated)")
        major, minor, patch, label = match.groups()
        return cls(int(major), int(minor), int(patch), label or "")

    @property
    def core(self) -> tuple[int, int, int]:
        return (self.major, self.minor, self.patch)

    def bumped(self, level: str) -> Version:
        """The smallest version of ``level`` above this one (same label)."""
        steps = {
            "none": self.core,
            "patch": (self.major, self.minor, self.patch + 1),
            "minor": (self.major, self.minor + 1, 0),
            "major": (self.major + 1, 0, 0),
        }
        return Version(*steps[level], self.label)

    def labelled(self, label: str) -> Version:
        return Version(self.major, self.minor, self.patch, label)

    def __str__(self) -> str:
        return ".".join(map(str, self.core)) + (f"-{self.label}" if self.label else "")


FIRST = Version(1, 0, 0)


@dataclass(frozen=True)
class TypeDiff:
    """What changed for one task type between two releases."""

    task_type: str
    before: int
    after: int
    added: dict[str, int] = field(default_factory=dict)  # sampling method → pairs added
    removed: dict[str, int] = field(default_factory=dict)
    scores_changed: int = 0
    mean_abs_change: float = 0.0
    max_abs_change: float = 0.0
    labels_changed: int = 0
    became_positive: int = 0
    became_negative: int = 0
    positives_before: int = 0
    positives_after: int = 0

    @property
    def flipped(self) -> int:
        return self.became_positive + self.became_negative


@dataclass(frozen=True)
class TableDiff:
    """What changed in one table of a part (``bison/triples``, ``entities/boxes``): rows are units,
    so a changed row counts as one removed and one added."""

    table: str
    before: int
    after: int
    added: int
    removed: int


@dataclass(frozen=True)
class ReleaseDiff:
    types: tuple[TypeDiff, ...]
    metadata_changed: tuple[str, ...]  # metadata keys whose value differs
    tables: tuple[TableDiff, ...] = ()  # the parts' tables (COCO-BISON, Flickr30k Entities)

    @property
    def level(self) -> str:
        """The smallest bump this diff allows (see the module docstring); a part's removed row is
        a removed pair, an added row an added pair."""
        if any(t.removed or t.flipped for t in self.types) or any(t.removed for t in self.tables):
            return "major"
        if any(t.added or t.scores_changed or t.labels_changed for t in self.types) or any(t.added for t in self.tables):
            return "minor"
        return "patch" if self.metadata_changed else "none"

    def reason(self) -> str:
        """One phrase saying why :attr:`level` is needed."""
        removed = sum(sum(t.removed.values()) for t in self.types)
        flipped = sum(t.flipped for t in self.types)
        added = sum(sum(t.added.values()) for t in self.types)
        refined = sum(t.scores_changed + t.labels_changed for t in self.types)
        rows_removed = sum(t.removed for t in self.tables)
        rows_added = sum(t.added for t in self.tables)
        reasons = {
            "major": f"{removed} pairs removed, {flipped} positives flipped"
            + (f", {rows_removed} data rows removed" if rows_removed else ""),
            "minor": f"{added} pairs added, {refined} scores or labels refined, no positive flipped"
            + (f", {rows_added} data rows added" if rows_added else ""),
            "patch": f"metadata changed ({', '.join(self.metadata_changed)}), no pair or score",
            "none": "nothing changed",
        }
        return reasons[self.level]


def diff_pairs(before: pd.DataFrame, after: pd.DataFrame, meta_before: Mapping[str, Any], meta_after: Mapping[str, Any]) -> ReleaseDiff:
    """Diff two releases' pair tables (``task_type, item_id, sampling_method, agg_score, agg_label,
    positive``) and their metadata fingerprints."""
    merged = before.merge(after, on=list(KEY), how="outer", suffixes=("_0", "_1"), indicator=True)
    types = []
    for kind in sorted(set(before["task_type"]) | set(after["task_type"])):
        rows = merged[merged["task_type"] == kind]
        both = rows[rows["_merge"] == "both"]
        change = (both["agg_score_1"].astype(float) - both["agg_score_0"].astype(float)).abs()
        moved = change[change > SCORE_TOLERANCE]
        labels = both["agg_label_0"].fillna("") != both["agg_label_1"].fillna("")
        pos0, pos1 = both["positive_0"].astype(bool), both["positive_1"].astype(bool)
        types.append(
            TypeDiff(
                task_type=kind,
                before=int((rows["_merge"] != "right_only").sum()),
                after=int((rows["_merge"] != "left_only").sum()),
                added=_by_method(rows[rows["_merge"] == "right_only"], "sampling_method_1"),
                removed=_by_method(rows[rows["_merge"] == "left_only"], "sampling_method_0"),
                scores_changed=len(moved),
                mean_abs_change=round(float(moved.mean()), 6) if len(moved) else 0.0,
                max_abs_change=round(float(moved.max()), 6) if len(moved) else 0.0,
                labels_changed=int(labels.sum()),
                became_positive=int((~pos0 & pos1).sum()),
                became_negative=int((pos0 & ~pos1).sum()),
                positives_before=int(before.loc[before["task_type"] == kind, "positive"].sum()),
                positives_after=int(after.loc[after["task_type"] == kind, "positive"].sum()),
            )
        )
    changed = tuple(sorted(k for k in set(meta_before) | set(meta_after) if meta_before.get(k) != meta_after.get(k)))
    return ReleaseDiff(tuple(types), changed)


def diff_tables(before: Mapping[str, frozenset[tuple[str, ...]]], after: Mapping[str, frozenset[tuple[str, ...]]]) -> tuple[TableDiff, ...]:
    """Rows added and removed per part table (``parts.units`` of each release)."""
    return tuple(
        TableDiff(
            name,
            len(before.get(name, frozenset())),
            len(after.get(name, frozenset())),
            len(after.get(name, frozenset()) - before.get(name, frozenset())),
            len(before.get(name, frozenset()) - after.get(name, frozenset())),
        )
        for name in sorted(set(before) | set(after))
    )


def _by_method(rows: pd.DataFrame, column: str) -> dict[str, int]:
    counts = rows.groupby(column).size()
    return {str(k): int(v) for k, v in sorted(counts.items())}


def choose_version(requested: str, previous: Version | None, diff: ReleaseDiff | None, *, simulated: bool) -> Version:
    """The release's version: ``requested`` (``auto`` = the smallest allowed) checked against the
    previous version and the diff's level; a simulated build gets the ``-simulated`` label."""
    label = SIMULATED_LABEL if simulated else ""
    if (previous is None) != (diff is None):
        raise ValueError("a previous version and its diff come together")
    floor = FIRST if previous is None or diff is None else previous.bumped(diff.level)
    if requested == "auto":
        return floor.labelled(label)
    version = Version.parse(requested)
    if version.label and version.label != label:
        what = "a simulated build is labelled -simulated" if simulated else "only a simulated build carries a label"
        raise ParamError(f"version {version}: {what}; give the plain version MAJOR.MINOR.PATCH")
    if version.core < floor.core:
        why = "" if previous is None or diff is None else f": the diff against {previous} needs a {diff.level} bump ({diff.reason()})"
        raise ParamError(f"version {version.labelled('')} is too low{why}; the smallest allowed is {floor.labelled('')}")
    return version.labelled(label)


def changelog_entry(version: Version, date: str, diff: ReleaseDiff | None, previous: Version | None) -> str:
    """A Markdown section for ``CHANGELOG.md`` (also what ``crisscross release diff`` prints)."""
    lines = [f"## {version} — {date}", ""]
    if diff is None or previous is None:
        return "\n".join([*lines, "First release.", ""])
    lines += [f"Against {previous}: **{diff.level}** ({diff.reason()}).", ""]
    if diff.types or not diff.tables:
        lines += _types_table(diff)
    if diff.tables:
        lines += ([""] if diff.types else []) + ["| data | rows before | after | added | removed |", "|---|---|---|---|---|"]
        lines += [f"| {t.table} | {t.before} | {t.after} | {t.added} | {t.removed} |" for t in diff.tables]
    if diff.metadata_changed:
        lines += ["", f"Metadata changed: {', '.join(diff.metadata_changed)}."]
    return "\n".join([*lines, ""])


def _types_table(diff: ReleaseDiff) -> list[str]:
    lines = [
        "| type | pairs before | after | added | removed | scores changed (mean / max abs) | labels changed | positives before → after | flipped (→ pos / → neg) |"
    ]
    lines += ["|---|---|---|---|---|---|---|---|---|"]
    for t in diff.types:
        moved = f"{t.scores_changed} ({t.mean_abs_change:.3f} / {t.max_abs_change:.3f})" if t.scores_changed else "0"
        lines.append(
            f"| {t.task_type} | {t.before} | {t.after} | {_methods(t.added)} | {_methods(t.removed)} | {moved} | {t.labels_changed} "
            f"| {t.positives_before} → {t.positives_after} | {t.became_positive} / {t.became_negative} |"
        )
    return lines


def _methods(counts: Mapping[str, int]) -> str:
    total = sum(counts.values())
    return f"{total} ({', '.join(f'{m} {n}' for m, n in counts.items())})" if total else "0"
