import csv
import gzip
import io as std_io
import re
from pathlib import Path
from unittest import mock

import numpy as np
import pyarrow as pa
import pytest
from apache_beam.io.filesystem import CompressionTypes
from hypothesis import example, given, settings
from hypothesis import strategies as st

from crisscross.core import io
from crisscross.core.errors import InputError, UserError
from tests.special_files import KINDS, make_special


def test_atomic_write_leaves_nothing_when_the_block_fails(tmp_path: Path):
    target = tmp_path / "table.parquet"
    target.write_bytes(b"old")
    with pytest.raises(RuntimeError), io.atomic_write(str(target)) as handle:
        handle.write(b"half")
        raise RuntimeError("crash mid-write")
    assert target.read_bytes() == b"old"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["table.parquet"]


def test_writes_are_byte_identical_for_the_same_value(tmp_path: Path):
    table = pa.table({"id": ["b", "a"], "x": [1, 2]})
    for name in ("one", "two"):
        io.write_parquet(str(tmp_path / f"{name}.parquet"), table)
        io.write_json(str(tmp_path / f"{name}.json"), {"b": 1, "a": [1, 2]})
        io.write_npy(str(tmp_path / f"{name}.npy"), np.arange(6, dtype=np.float32).reshape(2, 3))
    for suffix in ("parquet", "json", "npy"):
        assert (tmp_path / f"one.{suffix}").read_bytes() == (tmp_path / f"two.{suffix}").read_bytes()
    assert io.read_parquet(str(tmp_path / "one.parquet")).equals(table)
    assert (tmp_path / "one.json").read_text() == '{\n  "a": [\n    1,\n    2\n  ],\n  "b": 1\n}\n'


@pytest.mark.parametrize("shape", [(0, 4), (5, 3), (io.NPY_CHUNK_BYTES // 8 * 2 + 7, 2), (3, io.NPY_CHUNK_BYTES // 4 + 1), (9,)])
def test_write_npy_streams_the_bytes_np_save_writes(tmp_path: Path, shape: tuple[int, ...]):
    from io import BytesIO

    array = np.random.default_rng(0).standard_normal(shape).astype(np.float32)
    order = np.random.default_rng(1).permutation(len(array))
    for rows in (None, order):
        io.write_npy(str(tmp_path / "a.npy"), array, rows)
        expected = BytesIO()
        np.save(expected, array if rows is None else array[rows], allow_pickle=False)
        assert (tmp_path / "a.npy").read_bytes() == expected.getvalue()


def test_staged_directory_replaces_only_on_success(tmp_path: Path):
    out = tmp_path / "items"
    out.mkdir()
    (out / "old.txt").write_text("previous release")

    with pytest.raises(RuntimeError), io.staged_directory(str(out)) as staging:
        (Path(staging) / "new.txt").write_text("half done")
        raise RuntimeError("stage crashed")
    assert [p.name for p in out.iterdir()] == ["old.txt"]
    # What the failed run wrote is kept for inspection, beside the untouched output.
    assert (io.failed_path(str(out)) / "new.txt").read_text() == "half done"

    with io.staged_directory(str(out)) as staging:
        (Path(staging) / "new.txt").write_text("complete")
    assert [p.name for p in out.iterdir()] == ["new.txt"]
    assert not [p for p in tmp_path.iterdir() if ".staging-" in p.name or ".previous-" in p.name]


# ---------------------------------------------------------------------------------------------
# One run per output: the lock on --out, and cleaning up after runs that were killed.
# ---------------------------------------------------------------------------------------------

import logging  # noqa: E402
import select  # noqa: E402
import shutil  # noqa: E402
import signal  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402

PROJECT = Path(__file__).resolve().parents[2]

# Enters staged_directory for argv[1], says "ready" and holds the lock until killed.
HOLD_LOCK = """
import sys, time
from crisscross.core import io
with io.staged_directory(sys.argv[1]):
    print("ready", flush=True)
    time.sleep(120)
"""

# Writes into staging over an existing output, then dies as a SIGKILL (OOM killer, kill -9) kills.
KILLED_MID_STAGE = """
import os, signal, sys
from pathlib import Path
from crisscross.core import io
with io.staged_directory(sys.argv[1]) as staging:
    (Path(staging) / "new.txt").write_text("half done")
    os.kill(os.getpid(), signal.SIGKILL)
"""


def _python(code: str, *args: str) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, "-c", code, *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _wait_ready(process: subprocess.Popen[str]) -> None:
    readable, _, _ = select.select([process.stdout], [], [], 60)
    line = process.stdout.readline() if readable else ""
    assert line == "ready\n", f"the lock holder did not start: {line!r}"


def _dead_pid() -> int:
    process = subprocess.Popen([sys.executable, "-c", "pass"])
    process.wait()
    return process.pid


def _leftovers(directory: Path) -> list[str]:
    return sorted(p.name for p in directory.iterdir() if ".staging-" in p.name or ".previous-" in p.name or p.name.endswith(".failed"))


def test_a_second_run_on_a_locked_output_fails_at_once_naming_the_holder(tmp_path: Path, caplog):
    out = tmp_path / "items"
    holder = _python(HOLD_LOCK, str(out))
    try:
        _wait_ready(holder)
        with pytest.raises(io.OutputLockedError, match=f"pid {holder.pid} ") as raised, io.staged_directory(str(out)):
            pytest.fail("entered a locked output")
        message = str(raised.value)
        assert "\n" not in message and "since " in message and "wait for it to finish, or stop it" in message
        # the loser touched nothing: the holder's staging is still there, no .failed
        assert _leftovers(tmp_path) == [f".items.staging-{holder.pid}"]
    finally:
        holder.kill()
        holder.wait()
    assert holder.returncode == -signal.SIGKILL

    # the OS released the dead holder's lock; the next run takes it and cleans up after it
    caplog.set_level(logging.INFO, logger="crisscross")
    with io.staged_directory(str(out)) as staging:
        (Path(staging) / "new.txt").write_text("complete")
    assert [p.name for p in out.iterdir()] == ["new.txt"]
    assert _leftovers(tmp_path) == []
    assert f"removed .items.staging-{holder.pid}" in caplog.text


def test_a_run_killed_mid_stage_keeps_the_previous_output_and_the_next_run_cleans_up(tmp_path: Path, caplog):
    out = tmp_path / "items"
    out.mkdir()
    (out / "old.txt").write_text("previous release")
    killed = _python(KILLED_MID_STAGE, str(out))
    _, stderr = killed.communicate(timeout=60)
    assert killed.returncode == -signal.SIGKILL, stderr
    assert [p.name for p in out.iterdir()] == ["old.txt"]
    assert (tmp_path / f".items.staging-{killed.pid}" / "new.txt").read_text() == "half done"

    caplog.set_level(logging.INFO, logger="crisscross")
    with io.staged_directory(str(out)) as staging:
        (Path(staging) / "new.txt").write_text("complete")
    assert [p.name for p in out.iterdir()] == ["new.txt"]
    assert _leftovers(tmp_path) == []
    assert [r.getMessage() for r in caplog.records if "cleaned up" in r.getMessage()] == [
        f"cleaned up after an interrupted run of {out}: removed .items.staging-{killed.pid}"
    ]


def test_the_previous_output_of_a_run_killed_between_the_renames_is_restored(tmp_path: Path, caplog):
    out = tmp_path / "items"
    dead = _dead_pid()
    previous = tmp_path / f".items.previous-{dead}"
    previous.mkdir()
    (previous / "old.txt").write_text("previous release")
    (tmp_path / f".items.staging-{dead}").mkdir()
    alive = _python("import time; time.sleep(120)")  # a live pid's folder is not ours to remove
    try:
        (tmp_path / f".items.staging-{alive.pid}").mkdir()
        caplog.set_level(logging.INFO, logger="crisscross")
        with pytest.raises(RuntimeError, match="this run fails too"), io.staged_directory(str(out)):
            assert (out / "old.txt").read_text() == "previous release"
            raise RuntimeError("this run fails too")
    finally:
        alive.kill()
        alive.wait()
    assert [p.name for p in out.iterdir()] == ["old.txt"]
    assert set(_leftovers(tmp_path)) == {"items.failed", f".items.staging-{alive.pid}"}
    assert f"restored {out} from .items.previous-{dead}" in caplog.text


def test_two_ingest_commands_on_the_same_out_one_publishes_the_other_names_the_holder(tmp_path: Path):
    crisscross = shutil.which("crisscross", path=str(Path(sys.executable).parent)) or shutil.which("crisscross")
    assert crisscross, "the crisscross command is not installed"
    out = tmp_path / "items"
    command = [crisscross, "ingest", "--in", "data/demo/captions.jsonl", "--images", "data/demo/images"]
    command += ["--out", str(out), "--params", "params.yaml"]
    # Both start together and hold the lock for the whole stage (~1 s), so they nearly always
    # overlap; should one finish before the other reaches the lock, both succeed: try again.
    for _attempt in range(2):
        runs = [subprocess.Popen(command, cwd=PROJECT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for _ in range(2)]
        outputs = [run.communicate(timeout=120) for run in runs]
        if any(run.returncode for run in runs):
            break
    codes = sorted(run.returncode for run in runs)
    assert codes[0] == 0 and codes[1] != 0, outputs
    (winner, _), (_, (_, stderr)) = sorted(zip(runs, outputs, strict=True), key=lambda pair: pair[0].returncode)
    assert "ingest: done" in outputs[runs.index(winner)][0]
    assert "Traceback" not in stderr
    errors = [line for line in stderr.splitlines() if "error:" in line]
    assert len(errors) == 1 and errors[0].startswith(f"crisscross ingest: error: {out} is being written by another run"), stderr
    assert f"(pid {winner.pid} on " in errors[0] and "wait for it to finish, or stop it" in errors[0]
    assert (out / "captions.parquet").is_file()
    assert _leftovers(tmp_path) == []


# ---------------------------------------------------------------------------- CSV formula-injection guard (csv_bytes)
# Security hardening: csv_cell / csv_bytes / frame_csv_bytes and the CSVs written through them.


def _read_csv(data: bytes) -> list[list[str]]:
    return list(csv.reader(std_io.StringIO(data.decode(), newline=""), strict=True))


def test_csv_bytes_guards_cells_that_would_start_a_formula():
    texts = [
        '=HYPERLINK("http://x","y")',
        "@SUM(1)",
        "+1+1",  # not a number: a formula
        "-2+3+cmd|' /C calc'!A0",
        "\t=1+1",
        "\r=1+1",
        "-inf",  # the text forms of special floats are not plain numbers
        "-",
        "a dog = a cat",  # only the first character counts
        "'quoted",
    ]
    written = _read_csv(io.csv_bytes(["text"], [[t] for t in texts]))
    assert [row[0] for row in written[1:]] == [
        '\'=HYPERLINK("http://x","y")',
        "'@SUM(1)",
        "'+1+1",
        "'-2+3+cmd|' /C calc'!A0",
        "'\t=1+1",
        "'\r=1+1",
        "'-inf",
        "'-",
        "a dog = a cat",
        "'quoted",
    ]
    assert io.csv_bytes(["caption"], [['=HYPERLINK("http://x","y")']]) == b'caption\n"\'=HYPERLINK(""http://x"",""y"")"\n'


def test_csv_bytes_quotes_a_row_with_a_carriage_return_so_it_stays_one_row():
    # csv.writer quotes "\n" but not a bare "\r"; unquoted, "'\r=1+1" would read as a new line "=1+1".
    data = io.csv_bytes(["t", "n"], [["\r=1+1", 2], ["a\rb", -1.5], ["x", None]])
    assert data == b't,n\n"\'\r=1+1","2"\n"a\rb","-1.5"\nx,\n'
    assert _read_csv(data) == [["t", "n"], ["'\r=1+1", "2"], ["a\rb", "-1.5"], ["x", ""]]


def test_csv_bytes_leaves_plain_numbers_and_ordinary_values_as_they_were():
    import numpy as np

    numbers = ["-0.5", "-3", "+1e-3", "-.5", "+7", "-1E+20", "0"]
    assert _read_csv(io.csv_bytes(["n"], [[n] for n in numbers]))[1:] == [[n] for n in numbers]
    values = [-0.5, -3, np.float32(-0.25), np.int64(-7), 1e-05, -1e-05, None, True, "a dog", ""]
    assert io.csv_bytes(["v"], [[v] for v in values]) == b'v\n-0.5\n-3\n-0.25\n-7\n1e-05\n-1e-05\n""\nTrue\na dog\n""\n'
    assert [io.csv_cell(v) for v in values] == values  # unchanged objects: the writer formats them as before
    assert io.csv_cell(float("-inf")) == "'-inf"


def _row_by_row_csv(header: list[object], rows: list[list[object]]) -> bytes:
    """csv_bytes' rule cell by cell, with no chunk written at once: the reference for its fast path."""
    buffer = std_io.StringIO()
    minimal = csv.writer(buffer, lineterminator="\n")
    quoting_all = csv.writer(buffer, lineterminator="\n", quoting=csv.QUOTE_ALL)
    for row in [header, *rows]:
        cells = [io.csv_cell(c) for c in row]
        (quoting_all if any(c is not None and "\r" in str(c) for c in cells) else minimal).writerow(cells)
    return buffer.getvalue().encode()


_CSV_TEXT = st.text(st.one_of(st.sampled_from("=+-@\t\r\n\",' 1.eE"), st.characters(exclude_categories=("Cs",))), max_size=6)
_CSV_CELL = st.one_of(_CSV_TEXT, _CSV_TEXT, _CSV_TEXT, st.none(), st.integers(), st.floats())


@settings(max_examples=400, derandomize=True, database=None, deadline=None)
@given(st.lists(st.lists(_CSV_CELL, max_size=4), max_size=14), st.integers(1, 5))
@example([["a", "b"], ["x\n=1", "y"], ["-1", "\r"], [""], ["c", "-d"]], 2)
def test_csv_bytes_writes_what_the_row_by_row_guard_writes(rows: list[list[object]], chunk: int):
    """Chunks of plain text go to the writer at once; the bytes are those of the cell-by-cell rule."""
    with mock.patch.object(io, "_CSV_CHUNK_ROWS", chunk):
        assert io.csv_bytes(["id", "=h"], rows) == _row_by_row_csv(["id", "=h"], rows)


@settings(max_examples=300, derandomize=True, database=None, deadline=None)
@given(st.integers(1, 3).flatmap(lambda width: st.lists(st.lists(st.none() | _CSV_TEXT, min_size=width, max_size=width), max_size=10)))
@example([["a", "b", "c"], ["COCO_val2014_000000000001.jpg", "é😀", "i2i_csim"]])
@example([[""], ["x"]])
def test_text_columns_are_written_as_csv_bytes_writes_their_rows(rows: list[list[str | None]]):
    """Columns joined in Arrow, or row by row when a cell needs quotes, a guard or is missing: the
    bytes of the cell-by-cell rule either way."""
    width = len(rows[0]) if rows else 2
    columns = [pa.array([row[n] for row in rows], pa.string()) for n in range(width)]
    header = ["id", "=h", "x"][:width]
    assert io.text_columns_csv_bytes(header, columns) == _row_by_row_csv(header, rows)


def test_csv_bytes_guards_the_header():
    assert _read_csv(io.csv_bytes(["id", "=cmd", "-x", "-1"], []))[0] == ["id", "'=cmd", "'-x", "-1"]


def test_frame_csv_bytes_guards_the_aggregate_raters_table():
    import io as std_io

    import pandas as pd

    from crisscross.aggregate.quality import rater_report
    from crisscross.formats.schema import JUDGMENTS_SCHEMA, TASKS_SCHEMA, item_id
    from crisscross.tasktypes.names import STS

    items = [item_id(STS, f"t:cap:{i}", f"t:cap:{i + 10}") for i in range(4)]
    judgment = {"task_type": STS, "id_a": "a", "id_b": "b", "answer": None, "seconds": 5.0, "time": None, "batch_id": "b1"}
    rows = [
        {**judgment, "item_id": item, "worker": worker, "score": float(score), "source": "people", "simulated": False}
        for worker, scores in {"=cmd": [0, 1, 2, 3], "@w": [3, 2, 1, 0], "w3": [0, 1, 3, 2]}.items()
        for item, score in zip(items, scores, strict=True)
    ]
    tasks = [
        {"item_id": item, "task_type": STS, "id_a": "a", "id_b": "b", "sampling_method": "c2c_isim", "gold": "", "batch_id": "b1"}
        for item in items
    ]
    raters = rater_report(
        pa.Table.from_pylist(rows, schema=JUDGMENTS_SCHEMA).to_pandas(),
        pa.Table.from_pylist([{**t, "position": p} for p, t in enumerate(tasks, 1)], schema=TASKS_SCHEMA).to_pandas(),
    )
    written = _read_csv(io.frame_csv_bytes(raters))
    header, body = written[0], written[1:]
    assert [row[header.index("worker")] for row in body] == ["'=cmd", "'@w", "w3"]
    correlations = [row[header.index("loo_correlation")] for row in body]
    assert any(c.startswith("-") for c in correlations)  # negative numbers stay numbers
    assert not any(c.startswith("'") for row in body for c in row[1:])
    read_back = pd.read_csv(std_io.BytesIO(io.frame_csv_bytes(raters)))  # as pipelines/aggregate.py reads raters.csv
    assert read_back["worker"].tolist() == ["'=cmd", "'@w", "w3"]  # the apostrophe stays: data is kept as written


def test_crowd_csv_task_export_guards_formula_captions():
    from crisscross.annotate.exports import TASK_FORMATS, Batch, BatchItem, Side

    texts = ["=1+1", "@SUM(1)", "-0.5", "- a dash first"]
    items = tuple(
        BatchItem(f"sts:t:cap:{i}|t:cap:{i + 10}", i + 1, Side(f"t:cap:{i}", "text", text), Side(f"t:cap:{i + 10}", "text", "plain"))
        for i, text in enumerate(texts)
    )
    files = TASK_FORMATS.create("crowd-csv").write([Batch("b1", "STS", items)], replicas=3)
    header, row = _read_csv(files["sts.csv"])
    cells = dict(zip(header, row, strict=True))
    assert [cells[f"item_{i}_a_text"] for i in range(1, 5)] == ["'=1+1", "'@SUM(1)", "-0.5", "'- a dash first"]
    assert cells["item_1_b_text"] == "plain" and cells["replicas"] == "3"


def test_paths_handed_to_workers_are_absolute_and_outputs_name_them_relative(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """Workers start in other directories: the launcher makes every local path absolute; what the
    outputs record is relative to the launching directory, however the path was typed."""
    monkeypatch.chdir(tmp_path)
    typed = ("data/demo", "./data/demo/", str(tmp_path / "data" / "demo"))
    assert {io.absolute(p) for p in typed} == {str(tmp_path / "data" / "demo")}
    assert {io.relative(p) for p in typed} == {"data/demo"}
    assert io.absolute("gs://bucket/x") == "gs://bucket/x" and io.relative("gs://bucket/x") == "gs://bucket/x"
    assert io.absolute("images", "/project") == "/project/images" and io.relative("/project/images/a.jpg", "/project") == "images/a.jpg"


def test_source_specs_have_their_folders_located_and_bare_names_kept(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.chdir(tmp_path)
    assert io.located("release:build/rated,build/sits/rated") == f"release:{tmp_path}/build/rated,{tmp_path}/build/sits/rated"
    assert io.shown(io.located("cxc:../shared/cxc")) == "cxc:../shared/cxc"
    assert io.located_source("coco") == "coco" and io.located_source("use-m3") == "use-m3"
    assert io.located_source("precomputed:clip.npz", "/p") == "precomputed:/p/clip.npz"
    assert io.located_source("tfhub:https://tfhub.dev/x/1") == "tfhub:https://tfhub.dev/x/1"


@pytest.mark.timeout(30)  # reading a FIFO used to wait for a writer forever
@pytest.mark.parametrize("kind", sorted(KINDS))
def test_only_regular_files_are_read_as_input(tmp_path: Path, kind: str) -> None:
    path = make_special(tmp_path / "captions.jsonl", kind)
    assert io.not_regular(str(path)) == KINDS[kind]
    with pytest.raises(io.NotARegularFileError, match=f"captions.jsonl is {re.escape(KINDS[kind])}, not a regular file") as raised:
        io.read_bytes(str(path))
    assert isinstance(raised.value, OSError) and isinstance(raised.value, UserError) and len(str(raised.value).splitlines()) == 1
    with pytest.raises(io.NotARegularFileError):
        io.open_input(str(path))


def test_a_device_is_refused_and_regular_files_read_plain_or_compressed(tmp_path: Path) -> None:
    with pytest.raises(io.NotARegularFileError, match="/dev/zero is a character device"):
        io.read_bytes("/dev/zero")  # would never end
    assert io.not_regular("/dev/null") == "a character device"
    (tmp_path / "a.txt").write_bytes(b"plain")
    (tmp_path / "a.txt.gz").write_bytes(gzip.compress(b"packed"))
    (tmp_path / "link.txt").symlink_to("a.txt")
    assert io.read_bytes(str(tmp_path / "a.txt")) == io.read_bytes(str(tmp_path / "link.txt")) == b"plain"
    assert io.not_regular(str(tmp_path / "a.txt")) == io.not_regular(str(tmp_path / "missing")) == ""
    with io.open_input(str(tmp_path / "a.txt.gz"), CompressionTypes.AUTO) as handle:
        assert handle.read() == b"packed"
    with pytest.raises(FileNotFoundError):
        io.read_bytes(str(tmp_path / "missing"))


def test_json_documents_that_python_cannot_parse_are_one_line_errors() -> None:
    for data in (b"[" * 100_000 + b"]" * 100_000, b"1" * 5000, b"{nope", b"\xff"):
        with pytest.raises(InputError, match=r"^f\.json: not a JSON document \(") as raised:
            io.json_document(data, "f.json")
        assert len(str(raised.value).splitlines()) == 1
    assert io.json_document(b'{"a": [1]}', "f.json") == {"a": [1]}


def test_confined_keeps_a_named_file_inside_its_folder(tmp_path: Path):
    folder, outside = tmp_path / "images", tmp_path / "secret.jpg"
    (folder / "sub").mkdir(parents=True)
    (folder / "sub" / "a.jpg").write_bytes(b"x")
    outside.write_bytes(b"x")
    (folder / "link.jpg").symlink_to(outside)
    assert io.confined(str(folder / "sub" / "a.jpg"), str(folder)) == (folder / "sub" / "a.jpg").resolve()
    for name in ("../secret.jpg", "link.jpg", "sub", "absent.jpg", "a\0.jpg"):
        assert io.confined(str(folder / name), str(folder)) is None, name
    assert io.confined(str(outside), str(folder)) is None and io.confined("gs://bucket/a.jpg", "gs://bucket") is None


@pytest.mark.parametrize("damage", ["junk", "truncated"])
def test_bytes_that_are_no_parquet_table_are_an_input_error_naming_the_file(tmp_path: Path, damage: str):
    whole = io.parquet_bytes(pa.table({"id": ["a", "b"], "n": [1, 2]}))
    path = tmp_path / "t.parquet"
    path.write_bytes(b"not parquet at all" if damage == "junk" else whole[: len(whole) // 2])
    for read in (io.read_parquet, io.parquet_rows):
        with pytest.raises(InputError, match=rf"^{re.escape(str(path))}: not a readable Parquet file \("):
            read(str(path))
    path.write_bytes(whole)
    assert io.read_parquet(str(path)).to_pylist() == [{"id": "a", "n": 1}, {"id": "b", "n": 2}]
    assert io.parquet_rows(str(path)) == 2
