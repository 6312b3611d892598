"""Property-based tests (Hypothesis) of every judgment format: random, mutated and structurally
valid files with random values (:mod:`tests.fuzzing`), built from a small valid sample of each format.

For every input two things are checked:

* **No crash without a one-line error.**  ``read`` returns records, or raises
  :class:`JudgmentFileError` whose message is one line naming the file.  Any other exception is a
  bug, and so is a ``JudgmentFileError`` for a file the accounting below says is usable.
* **No record lost without a quarantine row**, accounted per format.  A file that is not UTF-8
  is unusable as a whole in every format (``JudgmentFileError``), so the rules are about its text:

  - ``jsonl``: lines end at ``\\n``, ``\\r\\n`` or ``\\r``.  Every line holding anything besides
    whitespace yields exactly one output (a ``RawJudgment`` or a ``malformed-record``) sourced
    ``<file>:<line>``; content never makes the reader raise.
  - ``csv``: the header is the first CSV record (its being unparseable is the only reason to
    raise).  Every later CSV record that is not an empty line, one the csv module raises
    ``csv.Error`` on included, yields exactly one output sourced at its first physical line.
  - ``crowd-csv``: as ``csv``, except that a record yields one judgment per answered position
    that lists an item, or one reject: between 1 and (answer positions) outputs.  It also raises
    when the header has no ``Answer.item_<i>_score`` / ``_answer`` column (no results file).
  - ``label-studio``: raises exactly when the text is no JSON list.  Every task that is not an
    object with a ``data`` object, or whose ``annotations`` is neither a list nor null, yields one
    reject sourced ``<file>:[t]``; every element of a task's ``annotations`` list yields exactly
    one output sourced ``<file>:[t].annotations[a]``.  A task without annotations (absent, null,
    ``[]``) has no judgments, so it yields nothing.

Every output must also be well formed: a ``RawJudgment`` has canonical value names with no empty
or null value, its ``order`` starts with the file name and its record serialises to JSON; a
reject is a ``judgment`` ``malformed-record`` whose record is JSON.
"""

from __future__ import annotations

import copy
import csv
import io
import json
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from crisscross.annotate.formats import JUDGMENT_FIELDS, JUDGMENT_FORMATS, DatabaseFormat, JudgmentFileError, RawJudgment
from crisscross.core.quarantine import Rejected
from tests.fuzzing import (
    DEEP,
    RAWS,
    Expect,
    assert_accounted,
    assert_one_line,
    csv_record_starts,
    decoded,
    describe,
    dumps,
    edited_row,
    encode,
    file_inputs,
    fuzz,
    guarded,
    json_tokens,
    json_values,
    mutated_object,
)

MAX_TRUNCATIONS = 500
EXAMPLES = 300  # per format
ANSWER_COLUMN = re.compile(r"Answer\.item_(\d+)_(score|answer)", re.ASCII)

# ---------------------------------------------------------------------------- valid samples

JSONL_RECORDS = [
    {"item_id": "sts:t:cap:00-0|t:cap:01-1", "worker": "W0", "score": 3.5, "seconds": 3.5, "time": "2026-01-02T10:00:01+01:00"},
    {"task_type": "STS", "id_a": "t:cap:01-1", "id_b": "t:cap:00-0", "worker": "W1", "score": 0},
    {"batch_id": "b1", "position": 2, "worker": "W0", "answer": "yes", "time": "Tue Jan 20 10:10:00 PST 2026"},
]
CSV_SAMPLE = (
    b"item_id,worker,score,answer,seconds,time\n"
    b"sts:t:cap:00-0|t:cap:01-1,W0,3.5,,2,2026-01-02T10:00:00Z\n"
    b'verify:t:img:01|t:cap:02-0,W1,,"Mostly NO, because\nit is a cat",,\n'  # lines 3-4
    b"sis:t:img:01|t:img:04,W2,0,,,\n"
)
CROWD_HEADER = [
    *["HITId", "AssignmentId", "WorkerId", "AcceptTime", "SubmitTime", "WorkTimeInSeconds", "Input.batch_id", "Input.task_type"],
    *["Input.item_1_id", "Input.item_1_a_text", "Input.item_2_id", "Input.item_2_a_text", "Answer.item_1_score", "Answer.item_2_score"],
]
CROWD_ROWS = [
    [
        "H0",
        "A0",
        "W0",
        "Tue Jan 20 10:00:00 PST 2026",
        "Tue Jan 20 10:10:00 PST 2026",
        "600",
        "b1",
        "STS",
        "sts:a|b",
        "a &lt;b&gt;",
        "sts:c|d",
        "x",
    ]
    + ["3.5", "1"],
    ["H1", "A1", "W1", "Tue Jan 20 10:00:00 PST 2026", "", "60", "b2", "STS", "sts:e|f", 'a, "quoted"\ncaption', "", ""] + ["4", ""],
    ["H0", "A2", "W2", "Tue Jan 20 10:00:00 PST 2026", "Tue Jan 20 10:11:00 PST 2026", "500", "b1", "STS", "sts:a|b", "x", "sts:c|d", "y"]
    + ["0", "5"],
]
LABEL_STUDIO_TASKS = [
    {
        "id": 1000,
        "data": {"item_id": "sts:a|b", "batch_id": "b1", "position": 1, "task_type": "STS", "text_a": "A dog.", "text_b": "A cat."},
        "annotations": [
            {
                "id": 1,
                "completed_by": "W0",
                "result": [{"from_name": "score", "to_name": "text_a", "type": "number", "value": {"number": 3.5}}],
                "lead_time": 6.25,
                "created_at": "2026-01-03T08:00:00.250000Z",
            },
            {
                "id": 2,
                "completed_by": {"id": 2, "email": "W1"},
                "result": [{"from_name": "score", "value": {"number": 1}}],
                "was_cancelled": False,
            },
        ],
    },
    {
        "id": 1001,
        "data": {"item_id": "verify:i|c", "batch_id": "b2", "position": 1, "image_a": "x.jpg", "text_b": "A cat."},
        "annotations": [{"id": 3, "completed_by": 7, "result": [{"from_name": "answer", "value": {"choices": ["yes"]}}]}],
    },
    {"id": 1002, "data": {"item_id": "sts:c|d"}, "annotations": []},  # not annotated yet: no judgment
]


def csv_text(header: list[str], rows: list[list[str]], end: str = "\r\n") -> bytes:
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator=end)  # MTurk writes CRLF
    writer.writerow(header)
    writer.writerows(rows)
    return buffer.getvalue().encode()


@dataclass(frozen=True)
class Case:
    id: str  # the format's name
    file: str  # the name the bytes are read under
    sample: bytes
    n_judgments: int  # RawJudgments the valid sample gives
    keys: tuple[str, ...] = field(default=JUDGMENT_FIELDS)


CASES = [
    Case("jsonl", "judgments.jsonl", "".join(json.dumps(r) + "\n" for r in JSONL_RECORDS).encode(), 3),
    Case("csv", "judgments.csv", CSV_SAMPLE, 3, ("item_id", "worker", "score", "answer", "seconds", "time")),
    Case("crowd-csv", "results-sts.csv", csv_text(CROWD_HEADER, CROWD_ROWS), 5, tuple(CROWD_HEADER)),
    Case("label-studio", "export-sts-tasks.json", json.dumps(LABEL_STUDIO_TASKS, indent=1).encode(), 3),
]
IDS = [c.id for c in CASES]

# ---------------------------------------------------------------------------- reading and accounting


@dataclass
class Outcome:
    records: list[RawJudgment | Rejected]
    error: JudgmentFileError | None


def run(case: Case, data: bytes) -> Outcome:
    try:
        records = JUDGMENT_FORMATS.create(case.id).read(case.file, data)
    except JudgmentFileError as error:
        assert_one_line(str(error), case.file)
        return Outcome([], error)
    assert isinstance(records, list)
    return Outcome(records, None)


def expect_jsonl(case: Case, text: str) -> Expect:
    lines = re.split(r"\r\n|\r|\n", text)
    return Expect(False, {f"{case.file}:{n}": (1, 1) for n, line in enumerate(lines, start=1) if line.strip()})


def expect_csv(case: Case, text: str) -> Expect:
    records = csv_record_starts(text)
    if records is None:
        return Expect(True)
    header, starts = records
    if header is None:
        return Expect(False)
    most = 1
    if case.id == "crowd-csv":
        positions = [m.group(1) for c in header if (m := ANSWER_COLUMN.fullmatch(c))]
        if not positions or max(len(p) for p in positions) > 9:
            return Expect(True)
        most = len({int(p) for p in positions})
    return Expect(False, {f"{case.file}:{start}": (1, most) for start in starts})


def expect_label_studio(case: Case, text: str) -> Expect:
    try:
        document = json.loads(text)
    except (ValueError, RecursionError):
        return Expect(True)
    if not isinstance(document, list):
        return Expect(True)
    sources = {}
    for t, task in enumerate(document):
        annotations = task.get("annotations") if isinstance(task, dict) else None
        if not isinstance(task, dict) or not isinstance(task.get("data"), dict) or not isinstance(annotations, list | None):
            sources[f"{case.file}:[{t}]"] = (1, 1)
        else:
            sources.update({f"{case.file}:[{t}].annotations[{a}]": (1, 1) for a in range(len(annotations or []))})
    return Expect(False, sources)


EXPECT: dict[str, Callable[[Case, str], Expect]] = {
    "jsonl": expect_jsonl,
    "csv": expect_csv,
    "crowd-csv": expect_csv,
    "label-studio": expect_label_studio,
}


def check_output(record: RawJudgment | Rejected, case: Case) -> None:
    assert record.source.startswith(f"{case.file}:"), record
    if isinstance(record, Rejected):
        assert (record.kind, record.reason) == ("judgment", "malformed-record"), record
        assert all(isinstance(v, str) for v in (record.key, record.detail, record.record)), record
        for value in (record.key, record.detail, record.record, record.source):
            value.encode("utf-8")  # the quarantine is written to Parquet
        json.loads(record.record)  # the original record, kept as JSON
    else:
        assert isinstance(record, RawJudgment), f"a reader returned {record!r}"
        assert record.order[0] == case.file, record
        assert set(record.values) <= set(JUDGMENT_FIELDS), record
        assert all(v not in ("", None) for v in record.values.values()), record
        json.dumps(dict(record.values), ensure_ascii=False).encode("utf-8")  # the judgments table is Parquet: no lone surrogates
        json.dumps(record.record, default=str)  # validation quarantines it as JSON


def check(case: Case, data: bytes) -> Outcome:
    """Read ``data`` as ``case`` and check both rules; failures name the input."""
    where = describe(case.id, data)
    outcome = guarded(where, lambda: run(case, data))
    text = decoded(data)
    expect = Expect(True) if text is None else EXPECT[case.id](case, text)
    assert_accounted(where, expect, outcome.error, outcome.records, lambda record: check_output(record, case), "output")
    return outcome


# ---------------------------------------------------------------------------- strategies


STRINGS = [
    *["W0", "sts:a|b", "verify:i|c", "STS", "VERIFY", "yes", "Mostly NO, because", "3.5", "-1", "1e999", "NaN"],
    *["2026-01-02T10:00:00Z", "Tue Jan 20 10:10:00 PST 2026", "\ufeffW0"],
]
VALUES = json_values(STRINGS, [*STRINGS[:8], "number", "choices", "email", "id", "data", "annotations", "result", "value"])


@st.composite
def label_studio_files(draw: st.DrawFn) -> bytes:
    """The sample export with one to four changes: a task, its data or annotations, an annotation
    or one of its results replaced or with fields changed, or the whole document some other value."""
    tasks: Any = copy.deepcopy(LABEL_STUDIO_TASKS)
    for _ in range(draw(st.integers(1, 4))):
        t = draw(st.integers(0, len(tasks) - 1))
        task = tasks[t]
        action = draw(st.sampled_from(["whole", "task", "part", "data", "annotation", "annotation", "result"]))
        if action == "whole":
            return encode(dumps(draw(VALUES)))
        if action == "task" or not isinstance(task, dict):
            tasks[t] = draw(VALUES)
        elif action == "part":
            task[draw(st.sampled_from(["data", "annotations"]))] = draw(VALUES)
        elif action == "data" and isinstance(task.get("data"), dict):
            task["data"] = draw(mutated_object(task["data"], ["item_id", "batch_id", "position"], VALUES))
        elif isinstance(task.get("annotations"), list) and task["annotations"]:
            a = draw(st.integers(0, len(task["annotations"]) - 1))
            annotation = task["annotations"][a]
            results = annotation.get("result") if isinstance(annotation, dict) else None
            if action == "result" and isinstance(results, list) and results:
                i = draw(st.integers(0, len(results) - 1))
                result = results[i] if isinstance(results[i], dict) else {}
                if draw(st.booleans()):
                    results[i] = draw(mutated_object(result, ["from_name", "value"], VALUES))
                else:
                    result["value"] = draw(mutated_object(result.get("value") or {}, ["number", "choices"], VALUES))
            elif isinstance(annotation, dict):
                task["annotations"][a] = draw(mutated_object(annotation, ["completed_by", "result", "lead_time", "created_at"], VALUES))
            else:
                task["annotations"][a] = draw(VALUES)
    return encode(dumps(tasks))


CSV_CELLS = ['"', '""', '"unterminated', 'a"b', '"a""b"', "a,b", '"a,\nb"', "a\rb", "\x00", "", " ", "é", "\u2028", "x" * 140_000]
HEADER_CELLS = ["Answer.item_0_score", "Answer.item_007_answer", "Answer.item_x_score", "Answer.item_3_score", "extra", ""]


@st.composite
def csv_files(draw: st.DrawFn, case: Case) -> bytes:
    """The sample's header (sometimes with columns renamed) and 0 to 5 of its rows with cells
    replaced, added or dropped; written properly quoted, or joined raw so stray quotes and line
    breaks split records."""
    if case.id == "crowd-csv":
        header, rows = list(CROWD_HEADER), [list(r) for r in CROWD_ROWS]
    else:
        lines = list(csv.reader(io.StringIO(CSV_SAMPLE.decode(), newline="")))
        header, rows = lines[0], lines[1:]
    if draw(st.integers(0, 4)) == 0:
        for _ in range(draw(st.integers(1, 3))):
            header[draw(st.integers(0, len(header) - 1))] = draw(
                st.sampled_from([*header, *HEADER_CELLS, f"Answer.item_{'1' * 5000}_score"])
            )
    out = draw(st.lists(st.sampled_from(rows).flatmap(lambda row: edited_row(row, st.sampled_from(CSV_CELLS + STRINGS), 3)), max_size=5))
    end = draw(st.sampled_from(["\n", "\r\n", "\r"]))
    if draw(st.booleans()):
        return encode(csv_text(header, out, end).decode())
    return encode(end.join(",".join(cells) for cells in [header, *out]) + draw(st.sampled_from([end, ""])))


def jsonl_files(case: Case) -> st.SearchStrategy[bytes]:
    """1 to 6 lines: the sample's records with fields changed, or any JSON value."""
    record = st.sampled_from(JSONL_RECORDS).flatmap(lambda r: mutated_object(r, list(JUDGMENT_FIELDS), VALUES))
    return st.lists(st.one_of(record, record, record, VALUES, st.sampled_from(RAWS)), min_size=1, max_size=6).map(
        lambda values: encode("\n".join(map(dumps, values)) + "\n")
    )


STRUCTURED: dict[str, Callable[[Case], st.SearchStrategy[bytes]]] = {
    "jsonl": jsonl_files,
    "csv": csv_files,
    "crowd-csv": csv_files,
    "label-studio": lambda case: label_studio_files(),
}


def inputs(case: Case) -> st.SearchStrategy[bytes]:
    names = ['"W0"', '"data"', '"annotations"', '"result"', '"value"', '"number"', '"choices"', '"score"', *(f'"{k}"' for k in case.keys)]
    return file_inputs(case.sample, STRUCTURED[case.id](case), json_tokens(names))


# ---------------------------------------------------------------------------- tests


def test_every_format_is_fuzzed() -> None:
    assert [c.id for c in CASES] == ["jsonl", "csv", "crowd-csv", "label-studio"]
    files = {name for name in JUDGMENT_FORMATS.names() if not isinstance(JUDGMENT_FORMATS.create(name), DatabaseFormat)}
    assert {c.id for c in CASES} == files  # store reads a database, not file bytes: tests/serve checks it


@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_valid_sample_reads_cleanly(case: Case) -> None:
    outcome = check(case, case.sample)
    assert outcome.error is None
    assert all(isinstance(r, RawJudgment) for r in outcome.records)
    assert len(outcome.records) == case.n_judgments


@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_every_prefix_of_the_sample(case: Case) -> None:
    data = case.sample
    step = max(1, len(data) // MAX_TRUNCATIONS)
    for end in [*range(0, len(data), step), len(data)]:
        check(case, data[:end])


# Inputs the property tests found making a reader crash or lose a record, by format.
FOUND: dict[str, list[bytes]] = {}


def format_property(case: Case) -> Callable[[bytes], None]:
    """The property test of one format: every drawn input is read under both rules (module docstring)."""

    def test(data: bytes) -> None:
        check(case, data)

    for data in FOUND.get(case.id, []):
        test = example(data=data)(test)
    return fuzz(EXAMPLES)(given(data=inputs(case))(test))


for _case in CASES:
    globals()[f"test_property_{_case.id.replace('-', '_')}"] = format_property(_case)


# ---------------------------------------------------------------------------- regressions
# Inputs the fuzzing found making a reader crash or lose a record, and what they give now.


def read(spec: str, data: bytes, name: str = "f") -> list[RawJudgment | Rejected]:
    return JUDGMENT_FORMATS.create(spec).read(name, data)


def sources(records: list[RawJudgment | Rejected]) -> list[tuple[str, str]]:
    return [(type(r).__name__, r.source) for r in records]


@pytest.mark.parametrize("data", [DEEP.encode(), b"1" * 5000], ids=["deep-nesting", "huge-int"])
def test_json_the_parser_refuses(data: bytes) -> None:
    # json.loads raises RecursionError for deep nesting and a plain ValueError for long integers.
    assert sources(read("jsonl", b'{"worker": "W0"}\n' + data + b"\n")) == [("RawJudgment", "f:1"), ("Rejected", "f:2")]
    with pytest.raises(JudgmentFileError, match="f: not a JSON document"):
        read("label-studio", data)


def test_jsonl_lines_end_only_at_newlines() -> None:
    # str.splitlines() also broke at U+2028, U+0085, form feeds…, which JSON strings may hold raw:
    # one record became two rejects and every later line number was wrong.
    data = json.dumps({"worker": "W\u2028\x85\x0c1", "score": 1}, ensure_ascii=False).encode() + b"\r\n\n" + b"{nope\r" + b'{"score": 2}'
    records = read("jsonl", data)
    assert sources(records) == [("RawJudgment", "f:1"), ("Rejected", "f:3"), ("RawJudgment", "f:4")]
    assert records[0].values["worker"] == "W\u2028\x85\x0c1"
    assert json.loads(records[1].record) == "{nope"  # the line, as a JSON string


def test_lone_surrogates_are_refused() -> None:
    # JSON's \\udXXX escapes can write half a surrogate pair; validation kept the worker and the
    # judgments table could not be written (UnicodeEncodeError).  A whole pair is one character.
    data = b'{"worker": "W\\ud800", "score": 1}\n{"worker": "W\\ud83d\\ude00", "score": 1}\n'
    records = read("jsonl", data)
    assert sources(records) == [("Rejected", "f:1"), ("RawJudgment", "f:2")]
    assert "worker holds a lone surrogate" in records[0].detail
    task = {
        "data": {"item_id": "sts:a|b"},
        "annotations": [{"completed_by": "W0", "result": [{"from_name": "answer", "value": {"choices": ["\udfff"]}}]}],
    }
    assert sources(read("label-studio", json.dumps([task]).encode())) == [("Rejected", "f:[0].annotations[0]")]


def test_label_studio_annotations_and_results_that_are_not_lists() -> None:
    # `for a in task.get("annotations") or []` raised TypeError for a number, and iterated a
    # string's characters or an object's keys; the same held for an annotation's result.
    tasks = [
        {"data": {"item_id": "a"}, "annotations": 5},
        {"data": {"item_id": "b"}, "annotations": [{"completed_by": "W0", "result": 5}, {"completed_by": "W1", "result": None}]},
        {"data": {"item_id": "c"}, "annotations": "ab"},
        "not a task",
    ]
    records = read("label-studio", json.dumps(tasks).encode())
    assert sources(records) == [
        ("Rejected", "f:[0]"),
        ("Rejected", "f:[1].annotations[0]"),
        ("RawJudgment", "f:[1].annotations[1]"),
        ("Rejected", "f:[2]"),
        ("Rejected", "f:[3]"),
    ]
    assert json.loads(records[-1].record) == "not a task"


def test_csv_records_the_parser_refuses() -> None:
    # csv.Error (a cell over the field limit, a stray carriage return) ended the whole read.
    data = b"worker,score\nW0,1\nW1," + b"x" * 200_000 + b"\nW2,3\n"
    records = read("csv", data)
    assert sources(records) == [("RawJudgment", "f:2"), ("Rejected", "f:3"), ("RawJudgment", "f:4")]
    assert "field limit" in records[1].detail
    with pytest.raises(JudgmentFileError, match="f: the header line is not readable CSV"):
        read("csv", b"worker," + b"x" * 200_000 + b"\nW0\n")


def test_crowd_csv_never_drops_a_row_silently() -> None:
    # A file without answer columns gave no judgments and no error; a row listing no item vanished.
    with pytest.raises(JudgmentFileError, match="f: no Answer.item_<i>_score"):
        read("crowd-csv", b"WorkerId,Input.item_1_id,Result.item_1_score\nW0,sts:a|b,3\n")
    records = read("crowd-csv", b"WorkerId,Input.item_1_id,Answer.item_1_score\nW0,sts:a|b,3\nW1,,4\n")
    assert sources(records) == [("RawJudgment", "f:2"), ("Rejected", "f:3")]
    with pytest.raises(JudgmentFileError, match="position of 5000 digits"):  # int() refuses 4300 digits
        read("crowd-csv", f"WorkerId,Answer.item_{'1' * 5000}_score\nW0,3\n".encode())
