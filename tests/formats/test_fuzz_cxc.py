"""Property-based tests (Hypothesis) of the CxC release reader (:func:`crisscross.formats.cxc.read_cxc_file`):
random, mutated and structurally valid ``{sts,sis,sits}_<split>.csv`` files (:mod:`tests.fuzzing`).

For every input: usable rows and rejects, or an ``InputError`` whose message is one line naming
the file; never another exception.  The reader raises exactly when the file is not UTF-8 (a BOM
allowed), its first CSV record cannot be parsed or lacks a column the file type needs.  Otherwise
every later CSV record that is not an empty line (one the csv module raises ``csv.Error`` on
included) is exactly one usable row or one reject, sourced ``<file>:<first physical line>``.
Usable rows hold canonical ``coco`` ids of the file's kinds and a score in 0–5.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from pathlib import Path

import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from crisscross.core.errors import InputError
from crisscross.core.ids import split_id
from crisscross.formats.cxc import CXC_FILES, METHOD, SCORE, read_cxc_file
from tests.fuzzing import (
    Expect,
    assert_accounted,
    assert_one_line,
    csv_record_starts,
    decoded,
    describe,
    edited_row,
    encode,
    file_inputs,
    fuzz,
    guarded,
    json_tokens,
)

EXAMPLES = 300  # per file type
REASONS = {"malformed-row", "bad-id", "bad-score", "score-out-of-range"}
SAMPLES = {
    "STS": b"caption1,caption2,agg_score,sampling_method\n"
    b"COCO_val2014:sentid:770337,COCO_val2014:sentid:771687,3.2,c2c_cocaption\n"
    b"COCO_val2014:sentid:775,COCO_val2014:sentid:770337,0.8,c2c_isim\n",
    "SIS": b"image1,image2,agg_score,sampling_method\nCOCO_val2014_000000391895.jpg,COCO_val2014_000000522418.jpg,2.6,i2i_csim\n",
    "SITS": b"caption,image,agg_score,sampling_method\nCOCO_val2014:sentid:770337,COCO_val2014_000000391895.jpg,4.5,c2i_intrasim\n",
}


class Row:
    """A usable row, with the source a reject would have."""

    def __init__(self, values: tuple[str, str, float, str, str]) -> None:
        self.id_a, self.id_b, self.score, self.method, self.source = values


def expect(task: str, name: str, data: bytes) -> Expect:
    text = decoded(data)
    records = None if text is None else csv_record_starts(text)
    if records is None or set([*CXC_FILES[task].columns, SCORE, METHOD]) - set(records[0] or []):
        return Expect(True)
    return Expect(False, {f"{name}:{start}": (1, 1) for start in records[1]})


def check(task: str, path: Path, data: bytes) -> None:
    """Read ``data`` as the CxC file ``path`` of ``task`` and check the rule (module docstring)."""
    where = describe(f"{task} {path.name}", data)
    path.write_bytes(data)

    def read() -> tuple[list[object], InputError | None]:
        try:
            frame, rejected = read_cxc_file(path, task)
        except InputError as error:
            assert_one_line(str(error), path.name)
            return [], error
        return [*map(Row, frame.itertuples(index=False, name=None)), *rejected], None

    outputs, error = guarded(where, read)
    kinds = CXC_FILES[task].kinds

    def well_formed(output: object) -> None:
        if isinstance(output, Row):
            assert (split_id(output.id_a)[:2], split_id(output.id_b)[:2]) == (("coco", kinds[0]), ("coco", kinds[1])), output
            assert math.isfinite(output.score) and 0 <= output.score <= 5 and output.method, output
        else:
            assert output.reason in REASONS, output
            json.loads(output.record)

    assert_accounted(where, expect(task, path.name, data), error, outputs, well_formed, "output")


# ---------------------------------------------------------------------------- strategies

CELLS = [
    *["COCO_val2014:sentid:770337", "COCO_val2014_000000391895.jpg", "770337", "391895", "coco:cap:1", "coco:img:1", "f30k:img:1"],
    *[
        "COCO_val2014:sentid:" + "9" * 5000,
        "3.2",
        "-1",
        "5.0001",
        "1e999",
        "nan",
        "inf",
        "",
        " ",
        '"',
        '"a,\nb"',
        "a\rb",
        "\x00",
        "x" * 140_000,
    ],
]


@st.composite
def cxc_files(draw: st.DrawFn, task: str) -> bytes:
    """The sample's header (sometimes a column renamed) and 0 to 5 of its rows with cells replaced,
    added or dropped, joined by one line ending, sometimes after a BOM."""
    lines = [line.split(",") for line in SAMPLES[task].decode().splitlines()]
    header, rows = lines[0], lines[1:]
    if draw(st.integers(0, 5)) == 0:
        header[draw(st.integers(0, len(header) - 1))] = draw(st.sampled_from(["extra", "", "agg_score", "\ufeffcaption1"]))
    out = [
        header,
        *draw(
            st.lists(
                st.sampled_from(rows).flatmap(lambda row: edited_row(row, st.sampled_from(CELLS) | st.text(max_size=6), 3)), max_size=5
            )
        ),
    ]
    end = draw(st.sampled_from(["\n", "\r\n", "\r"]))
    bom = draw(st.sampled_from(["", "", "\ufeff"]))
    return encode(bom + end.join(",".join(cells) for cells in out) + draw(st.sampled_from([end, ""])))


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("fuzz-cxc")


@pytest.mark.parametrize("task", sorted(SAMPLES))
def test_the_samples_read_cleanly(folder: Path, task: str) -> None:
    path = folder / CXC_FILES[task].name("test")
    path.write_bytes(SAMPLES[task])
    frame, rejected = read_cxc_file(path, task)
    assert len(frame) == SAMPLES[task].count(b"\n") - 1 and rejected == []


# Inputs that once ended a read in a traceback, for every file type: an invalid UTF-8 byte in a row
# (UnicodeDecodeError mid-file), a header lacking columns (a plain ValueError, shown with its
# traceback); and an id of more digits than int() converts (ValueError).
FOUND = [b"x\xff\n", b"caption1,caption2\n1,2\n"]
FOUND_STS = [
    SAMPLES["STS"] + b"COCO_val2014:sentid:1,COCO_val2014:sentid:2,1,x\xff\n",
    SAMPLES["STS"] + b"COCO_val2014:sentid:" + b"9" * 5000 + b",COCO_val2014:sentid:2,1,x\n",
]


def task_property(task: str) -> Callable[..., None]:
    """The property test of one CxC file type."""

    def test(folder: Path, data: bytes) -> None:
        check(task, folder / CXC_FILES[task].name("test"), data)

    for data in FOUND + (FOUND_STS if task == "STS" else []):
        test = example(data=data)(test)
    tokens = json_tokens(
        ['"', ",", "\n", "\r", "COCO_val2014:sentid:1", "3.5", *(c for c in SAMPLES[task].decode().split("\n")[0].split(","))]
    )
    return fuzz(EXAMPLES)(given(data=file_inputs(SAMPLES[task], cxc_files(task), tokens))(test))


for _task in SAMPLES:
    globals()[f"test_property_{_task.lower()}"] = task_property(_task)
