"""Judgment validation: every reason code with counts, duplicates, symmetric pairs, times, summary."""

from __future__ import annotations

import csv
import io
import json
from collections import Counter
from datetime import UTC, datetime

import pyarrow as pa
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from crisscross.annotate.formats import JUDGMENT_FORMATS, RawJudgment
from crisscross.annotate.validate import REASONS, parse_time, summary, validate
from crisscross.formats.schema import JUDGMENTS_SCHEMA, TASKS_SCHEMA, item_id
from crisscross.tasktypes.names import CHOOSE, SIS, SITS, STS, VERIFY

C1, C2, C3 = "t:cap:1", "t:cap:2", "t:cap:3"
I1, I2 = "t:img:1", "t:img:2"
ITEM = {
    STS: item_id(STS, C1, C2),
    SIS: item_id(SIS, I1, I2),
    SITS: item_id(SITS, C1, I2),
    VERIFY: item_id(VERIFY, I1, C3),
}


def tasks_table() -> pa.Table:
    rows = [
        (STS, C1, C2, "sts-00001", 1),
        (SIS, I1, I2, "sis-00001", 1),
        (SITS, C1, I2, "sits-00001", 1),
        (SITS, C2, I1, "sits-00001", 2),
        (VERIFY, I1, C3, "verify-00001", 1),
    ]
    return pa.Table.from_pylist(
        [
            {
                "item_id": item_id(k, a, b),
                "task_type": k,
                "id_a": a,
                "id_b": b,
                "sampling_method": "m",
                "gold": "",
                "batch_id": batch,
                "position": p,
            }
            for k, a, b, batch, p in rows
        ],
        schema=TASKS_SCHEMA,
    )


def jsonl(*lines: object) -> bytes:
    return "\n".join(line if isinstance(line, str) else json.dumps(line) for line in lines).encode()


def read(spec: str, name: str, data: bytes) -> list:
    return JUDGMENT_FORMATS.create(spec).read(name, data)


# Each line with the reason it must be rejected for (None: kept).
CASES: list[tuple[object, str | None]] = [
    ({"item_id": ITEM[STS], "worker": "w1", "score": 3.2, "time": "2026-01-01T10:00:00Z"}, None),
    ({"task_type": "sts", "id_a": C2, "id_b": C1, "worker": "w2", "score": "4"}, None),  # symmetric, reversed
    ({"batch_id": "verify-00001", "position": "1", "worker": "w1", "answer": " Partially YES, but "}, None),
    ({"item_id": ITEM[SIS], "worker": "w1", "score": 0}, None),
    ({"item_id": ITEM[SIS], "worker": "w2", "score": 5.0, "seconds": "2.5"}, None),
    ({"task_type": "SITS", "id_a": C1, "id_b": I2, "worker": "w1", "score": 2.5}, None),
    ({"item_id": ITEM[STS], "score": 3}, "missing-field"),
    ({"worker": "w3", "score": 3}, "missing-field"),
    ({"item_id": ITEM[STS], "worker": "w3"}, "missing-field"),
    ({"item_id": "sts:t:cap:8|t:cap:9", "worker": "w1", "score": 1}, "unknown-task"),
    ({"task_type": "XYZ", "id_a": C1, "id_b": C2, "worker": "w4", "score": 1}, "unknown-task"),
    ({"item_id": ITEM[STS], "batch_id": "sts-00002", "worker": "w4", "score": 1}, "unknown-task"),
    ({"task_type": "SITS", "id_a": I2, "id_b": C1, "worker": "w4", "score": 1}, "unknown-task"),  # not symmetric
    ({"batch_id": "sits-00001", "position": 9, "worker": "w4", "score": 1}, "unknown-task"),
    ({"item_id": ITEM[STS], "task_type": "SIS", "worker": "w4", "score": 1}, "unknown-task"),
    ({"item_id": ITEM[STS], "worker": "w5", "score": "abc"}, "bad-score"),
    ({"item_id": ITEM[STS], "worker": "w6", "score": "NaN"}, "bad-score"),
    (f'{{"item_id": "{ITEM[STS]}", "worker": "w7", "score": Infinity}}', "bad-score"),
    ({"item_id": ITEM[STS], "worker": "w8", "score": True}, "bad-score"),
    ({"item_id": ITEM[STS], "worker": "w9", "score": 5.5}, "score-out-of-range"),
    ({"item_id": ITEM[SIS], "worker": "w9", "score": -0.1}, "score-out-of-range"),
    ({"item_id": ITEM[VERIFY], "worker": "w2", "answer": "maybe"}, "bad-answer"),
    ({"item_id": ITEM[VERIFY], "worker": "w3", "answer": ["100% yes", "100% no"]}, "bad-answer"),
    ({"item_id": ITEM[VERIFY], "worker": "w4", "score": 4}, "wrong-value-kind"),
    ({"item_id": ITEM[SITS], "worker": "w2", "answer": "100% yes"}, "wrong-value-kind"),
    ({"item_id": ITEM[SITS], "worker": "w3", "score": 1, "seconds": -3}, "bad-seconds"),
    ({"item_id": ITEM[SITS], "worker": "w4", "score": 1, "seconds": "fast"}, "bad-seconds"),
    ({"item_id": ITEM[SIS], "worker": "w7", "score": 1, "batch_seconds": 10, "batch_items": "0"}, "bad-seconds"),
    ({"item_id": ITEM[SITS], "worker": "w6", "score": 1, "seconds": 1e9}, "seconds-over-limit"),  # the rater app refuses it too
    ({"item_id": ITEM[SITS], "worker": "w7", "score": 1, "seconds": "1e300"}, "seconds-over-limit"),
    ({"item_id": ITEM[SITS], "worker": "w5", "score": 1, "time": "yesterday"}, "bad-time"),
    ({"item_id": ITEM[STS], "worker": "w1", "score": 1.0, "time": "2026-01-01T11:00:00Z"}, "duplicate-judgment"),
    ({"item_id": ITEM[STS], "worker": "w1", "score": 2.0}, "duplicate-judgment"),
    ("{not json", "malformed-record"),
    ("[1, 2]", "malformed-record"),
]


def test_every_reason_is_counted_and_nothing_is_dropped():
    records = read("jsonl", "j.jsonl", jsonl(*(line for line, _ in CASES)))
    judgments, rejected = validate(records, tasks_table())
    assert judgments.schema == JUDGMENTS_SCHEMA
    want = Counter(reason for _, reason in CASES if reason)
    assert Counter(r.reason for r in rejected) == want
    assert set(want) == set(REASONS)
    assert judgments.num_rows + len(rejected) == len(CASES)
    by_line = {int(r.source.rpartition(":")[2]): r.reason for r in rejected}
    assert by_line == {n: reason for n, (_, reason) in enumerate(CASES, start=1) if reason}
    assert all(r.kind == "judgment" and r.record for r in rejected)


def test_kept_judgments_are_normalised_and_sorted():
    lines = [line for line, reason in CASES if reason is None]
    judgments, _ = validate(read("jsonl", "j.jsonl", jsonl(*lines)), tasks_table())
    rows = judgments.to_pylist()
    assert [(r["item_id"], r["worker"]) for r in rows] == sorted((r["item_id"], r["worker"]) for r in rows)
    sts = [r for r in rows if r["task_type"] == STS]
    assert [(r["worker"], r["score"], r["id_a"], r["id_b"]) for r in sts] == [("w1", 3.2, C1, C2), ("w2", 4.0, C1, C2)]
    verify = next(r for r in rows if r["task_type"] == VERIFY)
    assert (verify["answer"], verify["score"], verify["batch_id"]) == ("partially yes", None, "verify-00001")
    assert {r["source"] for r in rows} == {"people"} and not any(r["simulated"] for r in rows)
    assert next(r for r in rows if r["worker"] == "w2" and r["task_type"] == SIS)["seconds"] == 2.5


def test_first_judgment_wins_by_time_then_by_place_in_the_input():
    item = ITEM[SITS]
    first = jsonl(
        {"item_id": item, "worker": "w", "score": 1, "time": "2026-01-01T12:00:00Z"},
        {"item_id": item, "worker": "w", "score": 2, "time": "2026-01-01T12:30:00+01:00"},  # 11:30 UTC: earliest
        {"item_id": item, "worker": "w", "score": 3},
        {"item_id": ITEM[SIS], "worker": "w", "score": 4},
        {"item_id": ITEM[SIS], "worker": "w", "score": 5},
    )
    second = jsonl({"item_id": ITEM[SIS], "worker": "w", "score": 0})
    records = read("jsonl", "b.jsonl", first) + read("jsonl", "a.jsonl", second)
    judgments, rejected = validate(records, tasks_table())
    assert {r["item_id"]: r["score"] for r in judgments.to_pylist()} == {item: 2.0, ITEM[SIS]: 0.0}
    assert sorted(r.source for r in rejected) == ["b.jsonl:1", "b.jsonl:3", "b.jsonl:4", "b.jsonl:5"]
    assert all(r.reason == "duplicate-judgment" for r in rejected)
    # The input's order does not matter: the place in the input is part of each record.
    again, rejected_again = validate(list(reversed(records)), tasks_table())
    assert again.equals(judgments) and rejected_again == rejected


def test_times_are_read_in_iso_and_mturk_forms_and_written_in_utc():
    assert parse_time("Wed Nov 20 10:11:12 PST 2024") == datetime(2024, 11, 20, 18, 11, 12, tzinfo=UTC)
    assert parse_time("Mon Jul  1 10:00:00 PDT 2024") == datetime(2024, 7, 1, 17, 0, tzinfo=UTC)
    assert parse_time("2024-07-01T10:00:00") == datetime(2024, 7, 1, 10, 0, tzinfo=UTC)
    with pytest.raises(ValueError, match="known zone"):
        parse_time("Mon Jul  1 10:00:00 XYZ 2024")
    records = read("jsonl", "t.jsonl", jsonl({"item_id": ITEM[SIS], "worker": "w", "score": 1, "time": "2024-07-01T10:00:00.5-02:00"}))
    assert validate(records, tasks_table())[0].column("time").to_pylist() == ["2024-07-01T12:00:00.500000Z"]


def test_csv_readers_report_lines_and_malformed_rows():
    buffer = io.StringIO()
    writer = csv.writer(buffer)
    writer.writerow(["item_id", "worker", "score", "answer"])
    writer.writerow([ITEM[STS], "w\nwith newline", "1", ""])  # a quoted cell over two lines
    writer.writerow([ITEM[STS], "w2", "2"])  # a cell short
    writer.writerow([ITEM[SIS], "w3", "", ""])  # no score
    records = read("csv", "r.csv", buffer.getvalue().encode())
    judgments, rejected = validate(records, tasks_table())
    assert judgments.num_rows == 1
    assert [(r.source, r.reason) for r in rejected] == [("r.csv:4", "malformed-record"), ("r.csv:5", "missing-field")]


def csv_bytes(*rows: list[str]) -> bytes:
    buffer = io.StringIO()
    csv.writer(buffer).writerows(rows)
    return buffer.getvalue().encode()


def test_crowd_csv_matches_positions_and_splits_the_batch_time():
    answers = ["Answer.item_1_score", "Answer.item_2_score", "Answer.item_3_score"]
    with_ids = csv_bytes(
        [
            "WorkerId",
            "WorkTimeInSeconds",
            "AcceptTime",
            "SubmitTime",
            "Input.batch_id",
            "Input.item_1_id",
            "Input.item_2_id",
            "Input.item_3_id",
            *answers,
        ],
        [
            "A1",
            "90",
            "Wed Nov 20 10:00:00 PST 2024",
            "Wed Nov 20 10:01:30 PST 2024",
            "sits-00001",
            ITEM[SITS],
            item_id(SITS, C2, I1),
            "",
            "4.5",
            "",
            "",
        ],
    )
    without_ids = csv_bytes(  # a template that does not copy item ids: batch and position find the items
        ["WorkerId", "WorkTimeInSeconds", "AcceptTime", "SubmitTime", "Input.batch_id", *answers],
        ["A2", "30", "Wed Nov 20 11:00:00 PST 2024", "", "sits-00001", "1", "2", ""],
    )
    records = read("crowd-csv", "a.csv", with_ids) + read("crowd-csv", "b.csv", without_ids)
    judgments, rejected = validate(records, tasks_table())
    assert [(r["worker"], r["item_id"], r["score"], r["seconds"], r["time"]) for r in judgments.to_pylist()] == [
        ("A1", ITEM[SITS], 4.5, 45.0, "2024-11-20T18:01:30Z"),  # 90 s over the batch's 2 items
        ("A2", ITEM[SITS], 1.0, 15.0, "2024-11-20T19:00:00Z"),  # no SubmitTime: AcceptTime
        ("A2", item_id(SITS, C2, I1), 2.0, 15.0, "2024-11-20T19:00:00Z"),
    ]
    # A1 left item 2 blank; position 3 is no item of A1's batch (empty id), so it is no record.
    # Without item ids nothing says position 3 is not an item: it names a place the batch lacks.
    assert sorted((r.source, r.reason) for r in rejected) == [("a.csv:2", "missing-field"), ("b.csv:2", "unknown-task")]


def test_label_studio_cancelled_and_multi_choice_annotations_are_refused():
    export = [
        {
            "id": 1,
            "data": {"item_id": ITEM[VERIFY], "batch_id": "verify-00001"},
            "annotations": [
                {
                    "completed_by": 4,
                    "result": [{"from_name": "answer", "type": "choices", "value": {"choices": ["100% no"]}}],
                    "lead_time": 2.0,
                    "created_at": "2026-01-01T00:00:00Z",
                },
                {"completed_by": 5, "result": [], "was_cancelled": True, "lead_time": 1.0},
                {"completed_by": 6, "result": [{"from_name": "answer", "type": "choices", "value": {"choices": ["100% no", "mostly no"]}}]},
                "not an annotation",
            ],
        },
        {"id": 2, "annotations": []},
    ]
    judgments, rejected = validate(read("label-studio", "ls.json", json.dumps(export).encode()), tasks_table())
    assert [(r["worker"], r["answer"], r["seconds"]) for r in judgments.to_pylist()] == [("4", "100% no", 2.0)]
    assert sorted((r.source, r.reason) for r in rejected) == [
        ("ls.json:[0].annotations[1]", "missing-field"),
        ("ls.json:[0].annotations[2]", "bad-answer"),
        ("ls.json:[0].annotations[3]", "malformed-record"),
        ("ls.json:[1]", "malformed-record"),
    ]


def test_provenance_marks_simulated_judgments():
    records = read("jsonl", "s.jsonl", jsonl({"item_id": ITEM[SIS], "worker": "sim-1", "score": 3}))
    table, _ = validate(records, tasks_table(), provenance="simulate")
    assert table.to_pylist()[0]["simulated"] is True and table.to_pylist()[0]["source"] == "simulate"
    with pytest.raises(ValueError, match="provenance must be"):
        validate(records, tasks_table(), provenance="robots")


def test_summary_counts_per_task_type_and_reason():
    judgments, rejected = validate(read("jsonl", "j.jsonl", jsonl(*(line for line, _ in CASES))), tasks_table())
    report = summary(judgments, rejected)
    assert report["judgments"] == 6 and report["rejected_total"] == len(rejected)
    assert report["by_task_type"] == {
        STS: {"judgments": 2, "items": 1, "workers": 2},
        SIS: {"judgments": 2, "items": 1, "workers": 2},
        SITS: {"judgments": 1, "items": 1, "workers": 1},
        VERIFY: {"judgments": 1, "items": 1, "workers": 1},
    }
    assert report["rejected"] == dict(sorted(Counter(r.reason for r in rejected).items()))
    assert report["rejected_by_task_type"]["STS"]["duplicate-judgment"] == 2
    assert sum(sum(c.values()) for c in report["rejected_by_task_type"].values()) == len(rejected)


def test_reversed_symmetric_item_ids_are_found_and_rejects_name_the_item_they_found():
    records = read(
        "jsonl",
        "r.jsonl",
        jsonl(
            {"item_id": f"sts:{C2}|{C1}", "worker": "w", "score": 2},
            {"item_id": f"sits:{I2}|{C1}", "worker": "w", "score": 2},
            {"batch_id": "sis-00001", "position": 1, "worker": "w", "score": "x"},
        ),
    )
    judgments, rejected = validate(records, tasks_table())
    assert judgments.column("item_id").to_pylist() == [ITEM[STS]]
    assert sorted((r.key, r.reason) for r in rejected) == [(ITEM[SIS], "bad-score"), (f"sits:{I2}|{C1}", "unknown-task")]


def test_an_item_in_several_batches_needs_the_record_to_name_its_batch():
    shared = tasks_table().to_pylist()
    shared.append({**shared[1], "batch_id": "sis-00002", "position": 1})  # one SIS item, two batches
    tasks = pa.Table.from_pylist(shared, schema=TASKS_SCHEMA)
    records = read(
        "jsonl",
        "s.jsonl",
        jsonl(
            {"item_id": ITEM[SIS], "batch_id": "sis-00002", "worker": "w", "score": 1},
            {"item_id": ITEM[SIS], "worker": "v", "score": 1},
            {"batch_id": "sis-00001", "position": 1, "worker": "w", "score": 2},
        ),
    )
    judgments, rejected = validate(records, tasks)
    assert [(r["worker"], r["batch_id"]) for r in judgments.to_pylist()] == [("w", "sis-00002")]
    assert sorted((r.source, r.reason) for r in rejected) == [("s.jsonl:2", "missing-field"), ("s.jsonl:3", "duplicate-judgment")]


CHOOSE_ITEM = item_id(CHOOSE, I1, I2)
CHOSEN_TASKS = pa.Table.from_pylist(
    [
        *tasks_table().to_pylist(),
        {
            "item_id": CHOOSE_ITEM,
            "task_type": CHOOSE,
            "id_a": I1,
            "id_b": I2,
            "sampling_method": "m",
            "gold": "",
            "batch_id": "choose-1",
            "position": 1,
        },
    ],
    schema=TASKS_SCHEMA,
)
FIELDS = ("item_id", "worker", "score", "answer", "seconds", "batch_seconds", "batch_items", "time", "batch_id", "position", "task_type")
VALUES = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(10**30), max_value=10**30),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=12),
    st.sampled_from([CHOOSE_ITEM, ITEM[STS], ITEM[VERIFY], "choose-1", "0", " x:cap: ", "x:cap:", "none", "100% yes", "1e300", "-1"]),
    st.lists(st.integers(), max_size=2),
)


@given(records=st.lists(st.dictionaries(st.sampled_from(FIELDS), VALUES, max_size=7), max_size=12))
@settings(max_examples=300, derandomize=True, database=None, deadline=None)
@example(records=[{"worker": "w", "batch_id": "choose-1", "position": "1", "answer": " x:cap: "}])  # was a TypeError: a traceback on import
@example(records=[{"worker": "w", "item_id": ITEM[SIS], "score": 1, "batch_seconds": 10, "batch_items": 0}])  # a stated 0 items stays 0
def test_any_record_is_kept_or_quarantined_with_a_known_reason(records: list[dict]) -> None:
    raws = [RawJudgment(f"f.jsonl:{n}", ("f.jsonl", n, 0), values, values) for n, values in enumerate(records, start=1)]
    judgments, rejected = validate(raws, CHOSEN_TASKS)
    assert judgments.num_rows + len(rejected) == len(records)
    assert {r.reason for r in rejected} <= set(REASONS)
    assert all(r["seconds"] is None or 0 <= r["seconds"] <= 3600 for r in judgments.to_pylist())
