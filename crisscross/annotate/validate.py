"""Judgment validation: raw records read by any judgment format → the judgments table + rejects.

A record is kept when it names a worker and an item of the tasks table, and carries the value
its task type asks for (``TaskType.value_problem``): a finite 0–5 ``score`` for STS / SIS / SITS,
one of the four answers for VERIFY, a canonical caption id or ``none`` for CHOOSE (whether the
caption is the target's is checked where the captions table is at hand, when triples are made),
target, decoy, both or neither for VERIFY-TRIPLE.  Everything else becomes a ``Rejected`` (kind ``judgment``) with
one of these stable reasons:

* ``malformed-record`` (from the readers: a line or element that is not a record at all);
* ``missing-field``: no worker, no way to name the item (nor its batch, for an item the tasks
  table puts in several batches), or no score / answer;
* ``unknown-task``: the item is not in the tasks table, or the record's batch, position or type
  contradict the item it names;
* ``bad-score`` (not a number, NaN, ±inf) and ``score-out-of-range`` (outside 0–5);
* ``bad-answer``: not one of the type's answers (compared ignoring case and outer spaces;
  ECCV Caption's HIT wording "Partially YES, but" / "Mostly NO, because" is accepted; caption
  ids are kept as written);
* ``wrong-value-kind``: a score for VERIFY, or an answer for a rating;
* ``bad-seconds`` (not a finite number >= 0), ``seconds-over-limit`` (more than
  ``annotate.max_seconds_per_item`` on one item: the rule the rater app refuses by) and ``bad-time`` (not ISO-8601 nor the MTurk form
  ``Wed Nov 20 10:11:12 PST 2024``);
* ``duplicate-judgment``: the same worker judged the same item more than once.  The earliest
  judgment is kept (by time; judgments without a time come after timed ones; ties and untimed
  ones by their place in the input: file name, record, sub-record) and the others are rejected,
  since a second look at an item is no longer an independent rating.

Symmetric task types find their item whichever order a record writes the pair in: records
naming ``task_type`` + ``id_a`` + ``id_b``, or an ``item_id`` with the pair reversed, are resolved
through :func:`~crisscross.formats.schema.item_id`.  Times are
written as ISO-8601 UTC (``…Z``); times without a zone are taken to be UTC.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Iterable, Mapping
from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import pyarrow as pa

from crisscross.annotate.formats import RawJudgment
from crisscross.core.quarantine import Rejected, reject
from crisscross.formats.schema import (
    DEFAULT_RULES,
    JUDGMENTS_SCHEMA,
    SOURCE_PEOPLE,
    SOURCE_REPLAY,
    SOURCE_SIMULATED,
    JudgmentRules,
    item_id,
)
from crisscross.tasktypes import task_type, task_types, type_names

REASONS = (
    "malformed-record",
    "missing-field",
    "unknown-task",
    "bad-score",
    "score-out-of-range",
    "bad-answer",
    "wrong-value-kind",
    "bad-seconds",
    "seconds-over-limit",
    "bad-time",
    "duplicate-judgment",
)
# ECCV Caption §3.2's HIT labels for the two middle answers.
ANSWER_ALIASES = {"partially yes, but": "partially yes", "mostly no, because": "mostly no"}
# Zone abbreviations MTurk writes in its results CSV (US zones and UTC).
_ZONES = {"UTC": 0, "GMT": 0, "PST": -8, "PDT": -7, "MST": -7, "MDT": -6, "CST": -6, "CDT": -5, "EST": -5, "EDT": -4}
_MTURK_TIME = re.compile(r"[A-Za-z]{3} ([A-Za-z]{3} +\d{1,2} \d{2}:\d{2}:\d{2}) ([A-Z]{3,4}) (\d{4})", re.ASCII)


class _Refused(Exception):
    """A record fails one check: reason code and detail."""

    def __init__(self, reason: str, detail: str) -> None:
        super().__init__(detail)
        self.reason = reason
        self.detail = detail
        self.item = ""  # the item, once the record was found to name one


def parse_time(value: object) -> datetime:
    """An aware UTC datetime from ISO-8601 (``Z`` or an offset; none means UTC) or MTurk's
    ``Wed Nov 20 10:11:12 PST 2024``; ``ValueError`` otherwise."""
    text = str(value).strip()
    try:
        parsed = datetime.fromisoformat(text)
    except ValueError:
        match = _MTURK_TIME.fullmatch(text)
        if not match or match.group(2) not in _ZONES:
            raise ValueError(f"{text!r} is neither ISO-8601 nor an MTurk time with a known zone") from None
        zone = timezone(timedelta(hours=_ZONES[match.group(2)]))
        parsed = datetime.strptime(f"{match.group(1)} {match.group(3)}", "%b %d %H:%M:%S %Y").replace(tzinfo=zone)
    return (parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC)).astimezone(UTC)


def format_time(moment: datetime) -> str:
    return moment.isoformat().replace("+00:00", "Z")


class _Tasks:
    """The tasks table indexed the three ways a record can name an item.  Tables made by
    :func:`crisscross.annotate.tasks.make_batches` hold each item once; tables that put one item in several
    batches (shared gold) are accepted, and then a record must name its batch."""

    def __init__(self, tasks: pa.Table) -> None:
        rows = tasks.to_pylist()
        self.by_item: dict[str, list[dict[str, Any]]] = {}
        for r in sorted(rows, key=lambda r: r["batch_id"]):
            self.by_item.setdefault(r["item_id"], []).append(r)
        self.by_place = {(r["batch_id"], int(r["position"])): r for r in rows}
        if len(self.by_place) != len(rows):
            raise ValueError(f"the tasks table repeats a (batch_id, position) ({len(rows) - len(self.by_place)} repeats)")
        self.batch_size = Counter(r["batch_id"] for r in rows)

    def find(self, values: Mapping[str, Any]) -> dict[str, Any]:
        """The task row a record names; ``_Refused`` when it names none or contradicts itself."""
        pair = [values.get(k) for k in ("task_type", "id_a", "id_b")]
        pair_item = item_id(_type_name(pair[0]), str(pair[1]), str(pair[2])) if all(pair) else None
        if "item_id" in values:
            wanted = _canonical_item(str(values["item_id"]))
        elif pair_item:
            wanted = pair_item
        elif "batch_id" in values and "position" in values:
            place = (str(values["batch_id"]), _position(values["position"]))
            if place not in self.by_place:
                raise _Refused("unknown-task", f"batch {place[0]} has no position {place[1]}")
            wanted = self.by_place[place]["item_id"]
        else:
            raise _Refused("missing-field", "no item: give item_id, task_type + id_a + id_b, or batch_id + position")
        row = self._in_batch(wanted, values)
        if pair_item and pair_item != row["item_id"]:
            raise _Refused("unknown-task", f"record gives item {row['item_id']} but the pair of {pair_item}")
        if "task_type" in values and _type_name(values["task_type"]) != row["task_type"]:
            raise _Refused(
                "unknown-task", f"record gives task type {values['task_type']!r} but item {row['item_id']} is {row['task_type']}"
            )
        if "position" in values and _position(values["position"]) != row["position"]:
            raise _Refused(
                "unknown-task", f"record gives position {values['position']!r} but item {row['item_id']} is at {row['position']}"
            )
        return row

    def _in_batch(self, wanted: str, values: Mapping[str, Any]) -> dict[str, Any]:
        rows = self.by_item.get(wanted)
        if not rows:
            raise _Refused("unknown-task", f"item {wanted} is not in the tasks table")
        batches = ", ".join(r["batch_id"] for r in rows)
        if "batch_id" in values:
            row = next((r for r in rows if r["batch_id"] == str(values["batch_id"])), None)
            if row is None:
                raise _Refused("unknown-task", f"record gives batch {values['batch_id']!r} but item {wanted} is in {batches}")
            return row
        if len(rows) > 1:
            raise _Refused("missing-field", f"item {wanted} is in {len(rows)} batches ({batches}) and the record names none")
        return rows[0]


def _canonical_item(value: str) -> str:
    """An item id with a symmetric pair in item order (``sts:b|a`` → ``sts:a|b``); ids that are
    not of the ``<type>:<a>|<b>`` form are returned as given (and then not found)."""
    kind, _, pair = value.partition(":")
    first, bar, second = pair.partition("|")
    if not bar or kind.upper() not in type_names():
        return value
    return item_id(kind, first, second)


def _type_name(value: object) -> str:
    try:
        return task_type(str(value)).name
    except ValueError as error:
        raise _Refused("unknown-task", str(error)) from None


def _position(value: object) -> int:
    try:
        return int(str(value).strip())
    except ValueError:
        raise _Refused("unknown-task", f"position {value!r} is not an integer") from None


def _number(value: object, reason: str, what: str) -> float:
    if isinstance(value, bool):
        raise _Refused(reason, f"{what} {value!r} is a boolean, not a number")
    try:
        number = float(value.strip() if isinstance(value, str) else value)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        raise _Refused(reason, f"{what} {value!r} is not a number") from None
    if not math.isfinite(number):
        raise _Refused(reason, f"{what} {value!r} is not finite")
    return number


def _value(values: Mapping[str, Any], kind: str, rules: JudgmentRules) -> tuple[float | None, str | None]:
    """(score, answer) of a record for its task type."""
    rated = task_type(kind).rated
    wrong, right = ("answer", "score") if rated else ("score", "answer")
    if wrong in values:
        raise _Refused("wrong-value-kind", f"{kind} takes a {right}, but the record gives {wrong} {values[wrong]!r}")
    if right not in values:
        raise _Refused("missing-field", f"no {right}")
    if rated:
        score = _number(values["score"], "bad-score", "score")
        _obey(rules.value_problem(kind, score, None))
        return score, None
    given = values["answer"]
    exact = given.strip() if isinstance(given, str) else given  # caption ids are case-sensitive: tried as written first
    text = exact.casefold() if isinstance(exact, str) else None
    problems = []
    for answer in (exact, ANSWER_ALIASES.get(text, text)):
        problem = rules.value_problem(kind, None, answer)
        if problem is None:
            return None, answer
        problems.append(problem)
    # the answer as given names the problem; it may pass where its stripped form fails (" x:cap: "), then the stripped one does
    raise _Refused(*(rules.value_problem(kind, None, given) or problems[0]))


def _obey(problem: tuple[str, str] | None) -> None:
    if problem is not None:
        raise _Refused(*problem)


def _seconds(values: Mapping[str, Any], batch_items: int, rules: JudgmentRules) -> float | None:
    if "seconds" in values:
        total, share = values["seconds"], 1
    elif "batch_seconds" in values:
        shown = values["batch_items"] if values.get("batch_items") not in (None, "") else batch_items  # a stated 0 stays 0
        total, share = values["batch_seconds"], _number(shown, "bad-seconds", "batch_items")
        if share < 1 or not share.is_integer():
            raise _Refused("bad-seconds", f"batch_items {shown!r} is not a count of items")
    else:
        return None
    seconds = _number(total, "bad-seconds", "seconds")
    _obey(rules.seconds_problem(seconds / share))
    return seconds / share


def _check(raw: RawJudgment, tasks: _Tasks, provenance: str, rules: JudgmentRules) -> tuple[dict[str, Any], datetime | None]:
    """The judgments row of a record and its parsed time; ``_Refused`` when it fails a check."""
    values = raw.values
    worker = str(values.get("worker", "")).strip()
    if not worker:
        raise _Refused("missing-field", "no worker")
    row = tasks.find(values)
    try:
        score, answer = _value(values, row["task_type"], rules)
        seconds = _seconds(values, tasks.batch_size[row["batch_id"]], rules)
        moment = None
        if "time" in values:
            try:
                moment = parse_time(values["time"])
            except ValueError as error:
                raise _Refused("bad-time", str(error)) from None
    except _Refused as refused:
        refused.item = row["item_id"]
        raise
    judgment = {
        "item_id": row["item_id"],
        "task_type": row["task_type"],
        "id_a": row["id_a"],
        "id_b": row["id_b"],
        "worker": worker,
        "score": score,
        "answer": answer,
        "seconds": seconds,
        "time": format_time(moment) if moment else None,
        "batch_id": row["batch_id"],
        "source": provenance,
        "simulated": provenance == SOURCE_SIMULATED,
    }
    return judgment, moment


def validate(
    records: Iterable[RawJudgment | Rejected], tasks: pa.Table, provenance: str = SOURCE_PEOPLE, rules: JudgmentRules = DEFAULT_RULES
) -> tuple[pa.Table, list[Rejected]]:
    """The judgments table (:data:`JUDGMENTS_SCHEMA`, sorted by item, then worker) and a sorted
    ``Rejected`` for every record not in it (readers' rejects pass through); values are checked
    by ``rules``, as the rater app checks them."""
    if provenance not in (SOURCE_PEOPLE, SOURCE_REPLAY, SOURCE_SIMULATED):
        raise ValueError(f"provenance must be {SOURCE_PEOPLE}, {SOURCE_REPLAY} or {SOURCE_SIMULATED}, got {provenance!r}")
    index = _Tasks(tasks)
    rejected: list[Rejected] = []
    by_key: dict[tuple[str, str], list[tuple[tuple[Any, ...], dict[str, Any], RawJudgment]]] = {}
    for raw in records:
        if isinstance(raw, Rejected):
            rejected.append(raw)
            continue
        try:
            judgment, moment = _check(raw, index, provenance, rules)
        except _Refused as refused:
            key = refused.item or str(raw.values.get("item_id", ""))
            rejected.append(reject("judgment", key, refused.reason, refused.detail, raw.source, raw.record))
            continue
        first_key = (moment is None, moment or datetime.min.replace(tzinfo=UTC), raw.order)
        by_key.setdefault((judgment["worker"], judgment["item_id"]), []).append((first_key, judgment, raw))
    kept = []
    for (worker, item), found in by_key.items():
        found.sort(key=lambda entry: entry[0])
        kept.append(found[0][1])
        for _, _, raw in found[1:]:
            detail = f"worker {worker} already judged {item} (kept: {found[0][2].source})"
            rejected.append(reject("judgment", item, "duplicate-judgment", detail, raw.source, raw.record))
    kept.sort(key=lambda j: (j["item_id"], j["worker"]))
    return pa.Table.from_pylist(kept, schema=JUDGMENTS_SCHEMA), sorted(rejected)


def summary(judgments: pa.Table, rejected: Iterable[Rejected]) -> dict[str, Any]:
    """Counts for reports: judgments, items and workers per task type; rejects per reason and
    per task type (taken from the item id when the record named a known item, else ``unknown``)."""
    rows = judgments.select(["task_type", "item_id", "worker"]).to_pylist()
    per_type = {}
    for kind in type_names():
        of_kind = [r for r in rows if r["task_type"] == kind]
        if of_kind:
            per_type[kind] = {
                "judgments": len(of_kind),
                "items": len({r["item_id"] for r in of_kind}),
                "workers": len({r["worker"] for r in of_kind}),
            }
    rejected = list(rejected)
    by_type: dict[str, Counter[str]] = {}
    prefixes = {kind.prefix: kind.name for kind in task_types()}
    for r in rejected:
        kind = prefixes.get(r.key.partition(":")[0], "unknown")
        by_type.setdefault(kind, Counter())[r.reason] += 1
    return {
        "judgments": len(rows),
        "by_task_type": per_type,
        "rejected_total": len(rejected),
        "rejected": dict(sorted(Counter(r.reason for r in rejected).items())),
        "rejected_by_task_type": {kind: dict(sorted(c.items())) for kind, c in sorted(by_type.items())},
    }
