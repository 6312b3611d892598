"""Atomic, deterministic output, and input read only from regular files.

Files are written to a temporary sibling and renamed into place (through Beam's ``FileSystems``,
so the same code writes local paths and ``gs://`` paths).  A stage's whole output directory is
built under a staging name and swapped in only when the stage succeeded.

Every input file a stage reads is opened by :func:`open_input` (or :func:`read_bytes`, which uses
it): a local path that names a FIFO, socket, device or directory is refused with
:class:`NotARegularFileError` instead of being read, since reading a FIFO blocks until a writer
comes and a device may never end.
"""

from __future__ import annotations

import contextlib
import csv
import errno
import fcntl
import io
import itertools
import json
import logging
import math
import os
import re
import shutil
import socket
import stat
import time
import uuid
from collections.abc import Callable, Iterable, Iterator, Sequence
from pathlib import Path
from typing import IO, Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from apache_beam.io.filesystem import CompressedFile, CompressionTypes
from apache_beam.io.filesystems import FileSystems

from crisscross.core import arrow_pool
from crisscross.core.errors import InputError, UserError, one_line

arrow_pool.choose()  # Arrow enters a step's process here, before its first table (see core/arrow_pool)


@contextlib.contextmanager
def atomic_write(path: str) -> Iterator[IO[bytes]]:
    """Yield a binary file that appears at ``path`` only if the block finishes."""
    temporary = f"{path}.tmp-{uuid.uuid4().hex}"
    handle = FileSystems.create(temporary)
    try:
        yield handle
        handle.close()
    except BaseException:
        handle.close()
        FileSystems.delete([temporary])
        raise
    if FileSystems.exists(path):
        FileSystems.delete([path])
    FileSystems.rename([temporary], [path])


def write_bytes(path: str, data: bytes) -> None:
    with atomic_write(path) as handle:
        handle.write(data)


def write_json(path: str, value: Any) -> None:
    """Sorted keys and a trailing newline: the same value always gives the same bytes."""
    write_bytes(path, (json.dumps(value, indent=2, sort_keys=True, default=str) + "\n").encode())


def strict_json(value: Any) -> Any:
    """``value`` with every NaN (a figure undefined for lack of data), however deep in dicts and
    lists, as None: JSON has no NaN, and ``json.dumps`` would write a token other readers refuse."""
    if isinstance(value, dict):
        return {k: strict_json(v) for k, v in value.items()}
    if isinstance(value, list):
        return [strict_json(v) for v in value]
    return None if isinstance(value, float) and math.isnan(value) else value


def parquet_bytes(table: pa.Table) -> bytes:
    """``table`` as the project writes every Parquet file (zstd)."""
    buffer = io.BytesIO()
    pq.write_table(table, buffer, compression="zstd")
    return buffer.getvalue()


def write_parquet(path: str, table: pa.Table) -> None:
    write_bytes(path, parquet_bytes(table))


# Rows are written a few MiB at a time through one reused buffer: on a machine where the first
# touch of fresh memory is dear, a new 100 MiB chunk per step (or a whole reordered copy) cost more
# than writing the file.
NPY_CHUNK_BYTES = 1 << 23


def write_npy(path: str, array: np.ndarray, order: np.ndarray | None = None) -> None:
    """``array`` (its rows in ``order`` when given) as ``.npy``, streamed in chunks of rows: the
    same bytes as ``np.save(array[order])`` without a second copy of a large matrix in memory
    (``array`` may be memory-mapped)."""
    rows = len(array) if order is None else len(order)
    header = {"descr": np.lib.format.dtype_to_descr(array.dtype), "fortran_order": False, "shape": (rows, *array.shape[1:])}
    step = max(1, NPY_CHUNK_BYTES // max(1, array[:1].nbytes))
    gathered = np.empty((min(step, rows), *array.shape[1:]), array.dtype) if order is not None else None
    with atomic_write(path) as handle:
        np.lib.format.write_array_header_1_0(handle, header)
        for start in range(0, rows, step):
            if gathered is None:
                part = np.ascontiguousarray(array[start : start + step])
            else:
                chosen = order[start : start + step]
                part = np.take(array, chosen, axis=0, out=gathered[: len(chosen)])
            handle.write(memoryview(part).cast("B"))


# Formula (CSV) injection guard.  Excel, LibreOffice and Google Sheets treat a cell starting with
# one of these as a formula (or, for tab / CR, strip them and look again), so a caption or worker id
# like ``=HYPERLINK("http://evil","click")`` would run when a person opens the file.
FORMULA_TRIGGERS = ("=", "+", "-", "@", "\t", "\r")
# A plain decimal number (``-0.5``, ``-3``, ``+1e-3``) starts with ``-`` or ``+`` but is data, not a
# formula: CxC scores and signed values must stay numbers.  ASCII digits only; the text forms
# ``nan``, ``inf``, ``-inf``, ``Infinity`` and ``1_000`` are not plain numbers, so ``-inf`` is guarded.
_PLAIN_NUMBER = re.compile(r"[+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][+-]?[0-9]+)?")


def csv_cell(value: object) -> object:
    """``value`` safe to open in a spreadsheet: a cell whose text starts with ``=``, ``+``, ``-``,
    ``@``, a tab or a carriage return gets a leading apostrophe ``'`` (OWASP's recommendation;
    spreadsheets then show the text, not a formula), unless the text is a plain number.

    Anything else, and ``None`` (an empty cell), is returned unchanged, so the CSV writer formats
    it exactly as before.  The apostrophe is part of the written data: readers of our own CSVs get
    ``'=cmd`` back, and no reader strips it (a value is kept as the file gives it).
    """
    if value is None:
        return None
    text = value if isinstance(value, str) else str(value)
    if text.startswith(FORMULA_TRIGGERS) and not _PLAIN_NUMBER.fullmatch(text):
        return "'" + text
    return value


# Rows :func:`csv_bytes` looks at together: ids and methods by the million (the sample stage's
# candidate files) are written in one call when no cell of theirs needs the guard.
_CSV_CHUNK_ROWS = 4096


def _unguarded_text(rows: list[Sequence[object]]) -> bool:
    """Whether every cell of ``rows`` is text that :func:`csv_cell` returns as it is and that holds
    no carriage return, so the minimal writer writes the rows just as :func:`csv_bytes`'s
    row-by-row path does."""
    try:
        joined = "\n".join(itertools.chain.from_iterable(rows))
    except TypeError:  # a cell that is not text (a number, None): the row-by-row path formats it
        return False
    # Each cell starts the joined text or follows a newline (a cell holding a newline may only make
    # a false alarm, which costs the row-by-row path, never a missed cell).  A trigger character
    # found nowhere (one fast scan) starts no cell.
    return "\r" not in joined and not any(
        trigger in joined and (joined.startswith(trigger) or f"\n{trigger}" in joined) for trigger in FORMULA_TRIGGERS
    )


def csv_bytes(header: Sequence[str], rows: Iterable[Sequence[object]]) -> bytes:
    """The project's one CSV writer: every CSV a person, a spreadsheet or a platform opens.

    Every cell, header included, passes :func:`csv_cell`, so no CSV we write can carry a
    spreadsheet formula (CSV injection): captions, worker ids and file names come from outside.
    Python's writer quotes a cell holding ``\n`` but not one holding a bare ``\r`` (it only
    looks for the line terminator's characters), which readers take as a line break: a row with
    such a cell is written with every cell quoted, so it stays one row and a guarded ``'\r=…``
    cannot become a fresh line starting with ``=``.  Rows come in chunks, and a chunk that is all
    text no cell of which needs either goes to the writer in one call (:func:`_unguarded_text`).
    """
    buffer = io.StringIO()
    minimal = csv.writer(buffer, lineterminator="\n")
    quoting_all = csv.writer(buffer, lineterminator="\n", quoting=csv.QUOTE_ALL)

    def write(row: Sequence[object]) -> None:
        cells = [csv_cell(c) for c in row]
        has_cr = any(c is not None and "\r" in (c if isinstance(c, str) else str(c)) for c in cells)
        (quoting_all if has_cr else minimal).writerow(cells)

    write(header)
    remaining = iter(rows)
    while chunk := list(itertools.islice(remaining, _CSV_CHUNK_ROWS)):
        if _unguarded_text(chunk):
            minimal.writerows(chunk)
        else:
            for row in chunk:
                write(row)
    return buffer.getvalue().encode()


# A text cell :func:`csv_bytes` would write otherwise than as it is: quoted, or guarded against a formula.
_CSV_SPECIAL = f'[,"\\n\\r]|^[{re.escape("".join(FORMULA_TRIGGERS))}]'


def text_columns_csv_bytes(header: Sequence[str], columns: Sequence[pa.Array | pa.ChunkedArray]) -> bytes:
    """:func:`csv_bytes` of rows given as text columns: joined in Arrow when no cell is missing,
    empty in a one-column file, or written otherwise than as it is (quoted, or guarded); else
    row by row.  A candidates file of all of COCO is 750k rows of three cells."""
    texts = [column.cast(pa.string()) for column in columns]
    special = _CSV_SPECIAL if len(texts) > 1 else f"{_CSV_SPECIAL}|^$"
    if not texts or any(t.null_count or pc.any(pc.match_substring_regex(t, special)).as_py() for t in texts):
        return csv_bytes(header, zip(*(t.to_pylist() for t in texts), strict=True))
    head = csv_bytes(header, [])
    lines = pa.chunked_array([pc.binary_join_element_wise(*texts, ",")]).combine_chunks().cast(pa.large_string())
    if not len(lines):
        return head
    whole = pa.ListArray.from_arrays(pa.array([0, len(lines)], pa.int32()), lines)
    return head + pc.binary_join(whole, pa.scalar("\n", pa.large_string()))[0].as_py().encode() + b"\n"


def frame_csv_bytes(frame: pd.DataFrame) -> bytes:
    """A DataFrame through :func:`csv_bytes` (missing values as empty cells, as pandas writes them;
    cells and column names guarded against formulas like every CSV we write)."""
    cells = frame.astype(object).where(frame.notna(), None)
    return csv_bytes([str(c) for c in frame.columns], cells.itertuples(index=False, name=None))


class NotARegularFileError(InputError, OSError):
    """An input path names a FIFO, socket, device or directory; ``str()`` is the one-line message.

    An ``OSError`` too, so code that already treats an unreadable file as unreadable (an image
    without usable pixels, a precomputed vectors file) treats this one alike; ``reason`` is the
    quarantine code of a record refused for it.
    """

    reason = "not-a-regular-file"


def refusal(path: str, kind: str) -> NotARegularFileError:
    """The error for ``path``, which is ``kind`` (:func:`not_regular`): what :func:`open_input`
    raises, and the detail of a record quarantined for its file."""
    return NotARegularFileError(f"{path} is {kind}, not a regular file: only regular files are read as input")


_FILE_KINDS = (
    (stat.S_ISDIR, "a directory"),
    (stat.S_ISFIFO, "a named pipe (FIFO)"),
    (stat.S_ISSOCK, "a socket"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
)


def file_kind(mode: int) -> str:
    """What a file of ``st_mode`` ``mode`` is, as messages name it (``"a directory"`` …)."""
    return next((name for test, name in _FILE_KINDS if test(mode)), "a special file")


def not_regular(path: str) -> str:
    """What a local ``path`` is when it exists and is not a regular file (symlinks followed):
    ``"a named pipe (FIFO)"``, ``"a directory"`` …; ``""`` for a regular file, a missing path or
    a URI (object stores hold only regular objects).  A ``stat``: nothing is opened, so a check
    of many files costs no descriptors; :func:`open_input` checks again on what it opens."""
    if is_uri(path):
        return ""
    try:
        mode = os.stat(path).st_mode
    except (OSError, ValueError):  # missing, a dangling link, a NUL in the name: whoever opens it says why
        return ""
    return "" if stat.S_ISREG(mode) else file_kind(mode)


def open_input(path: str, compression_type: str = CompressionTypes.UNCOMPRESSED, follow_symlinks: bool = True) -> IO[bytes]:
    """``path`` opened for reading, refusing anything but a regular file.

    A local path is opened without blocking (``O_NONBLOCK``: opening a FIFO otherwise waits for
    a writer) and the open descriptor is checked with ``fstat``, so what is read is what was
    checked (no race between a check and the open).  A FIFO, socket, device or directory raises
    :class:`NotARegularFileError`; a missing file raises ``FileNotFoundError`` as ``open`` does.
    URIs open through Beam's ``FileSystems``.  ``compression_type`` as Beam's (``AUTO``: by the
    file's extension).  Without ``follow_symlinks`` a symlink as the last part of ``path`` is
    refused (``ELOOP``); folders on the way are still followed, so a reader confined to a folder
    also walks it without entering linked folders (as ``release verify`` does).
    """
    if is_uri(path):
        return FileSystems.open(path, compression_type=compression_type)
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC | (0 if follow_symlinks else os.O_NOFOLLOW))
    except OSError as error:
        kind = not_regular(path) if error.errno == errno.ENXIO else ""  # a socket cannot be opened at all
        if kind:
            raise refusal(path, kind) from error
        raise
    mode = os.fstat(fd).st_mode
    if not stat.S_ISREG(mode):
        os.close(fd)
        raise refusal(path, file_kind(mode))
    os.set_blocking(fd, True)
    handle = os.fdopen(fd, "rb")
    if compression_type == CompressionTypes.AUTO:
        compression_type = CompressionTypes.detect_compression_type(path)
    return handle if compression_type == CompressionTypes.UNCOMPRESSED else CompressedFile(handle, compression_type=compression_type)


def read_bytes(path: str) -> bytes:
    """The whole file, read through :func:`open_input` (regular files only)."""
    with open_input(path) as handle:
        return handle.read()


# What ``json.loads`` raises for text that is no usable JSON: JSONDecodeError and UnicodeDecodeError
# (both ValueErrors), a plain ValueError for an integer longer than Python converts (4300 digits),
# RecursionError for nesting deeper than the interpreter's recursion limit.
JSON_ERRORS = (ValueError, RecursionError)


def json_document(data: bytes | str, where: str, error: Callable[[str], Exception] = InputError) -> Any:
    """``data`` parsed as JSON, or ``error`` (a reader's own one-line error class) naming ``where``."""
    try:
        return json.loads(data)
    except JSON_ERRORS as problem:
        raise error(f"{where}: not a JSON document ({one_line(problem)})") from problem


# What reading bytes that are no Parquet table raises: ArrowInvalid (a ValueError), OSError for a damaged footer.
PARQUET_ERRORS = (OSError, ValueError, pa.ArrowException)


def read_parquet(path: str) -> pa.Table:
    """A Parquet file read whole (regular files only); bytes that are no Parquet table are an
    :class:`InputError` naming the file."""
    return _parquet(path, pq.read_table)


def parquet_rows(path: str) -> int:
    """The number of rows of a Parquet file, from its footer (nothing decoded); refused as :func:`read_parquet` refuses."""
    return _parquet(path, lambda source: pq.read_metadata(source).num_rows)


def _parquet(path: str, read: Callable[[pa.BufferReader], Any]) -> Any:
    """``read`` of the file's bytes as Arrow's own reader of a buffer: through a Python file object
    Parquet reads every page by a call back into the interpreter: a 21 MB file of quarantine rows
    (416 MB in memory) took 1.24 s that way and 0.29 s this way."""
    data = read_bytes(path)
    try:
        return read(pa.BufferReader(data))
    except PARQUET_ERRORS as error:
        raise InputError(f"{path}: not a readable Parquet file ({one_line(error)})") from error


def exists(path: str) -> bool:
    return FileSystems.exists(path)


def join(base: str, *parts: str) -> str:
    return FileSystems.join(base, *parts)


def is_uri(path: str) -> bool:
    return "://" in path


def absolute(path: str, root: str | None = None) -> str:
    """Where a worker finds ``path``: a local path made absolute against ``root`` (the launching
    command's working directory by default); URIs as they are.  Workers of a portable runner start
    in other directories, so nothing handed to a pipeline may be relative."""
    return path if is_uri(path) else os.path.normpath(os.path.join(root or os.getcwd(), path))


def confined(path: str, root: str) -> Path | None:
    """``path`` as a file inside ``root`` (symlinks followed), or None when it leaves the folder,
    names no file, or is not a local path: the rule for a file a user's name points to (an image
    a rater is shown, an image a release's loader reads) that must not escape its folder."""
    if "\0" in path or is_uri(path):
        return None
    resolved, base = os.path.realpath(path), os.path.realpath(root)
    if not (resolved == base or resolved.startswith(base.rstrip("/") + "/")):
        return None
    return Path(resolved) if os.path.isfile(resolved) else None


_SPEC = re.compile(r"^([a-z][a-z0-9-]*):(?!//)(.+)$")  # "cxc:<folder>", "release:<a>,<b>": a reader's name, then paths


def _each_path(value: str, convert: Callable[[str], str]) -> str:
    """``convert`` applied to a path, or to each path of a ``name:path[,path…]`` source spec."""
    spec = _SPEC.match(value)
    return f"{spec.group(1)}:" + ",".join(map(convert, spec.group(2).split(","))) if spec else convert(value)


def located(value: str, root: str | None = None) -> str:
    """:func:`absolute` for a path or for a source spec's paths."""
    return _each_path(value, lambda path: absolute(path, root))


def located_source(value: str, root: str | None = None) -> str:
    """:func:`located` for a ``name:path`` spec; a bare name (``coco``, ``use-m3``) as it is."""
    return located(value, root) if _SPEC.match(value) else value


def shown(value: str, root: str | None = None) -> str:
    """:func:`relative` for a path or a source spec's paths: what reports say."""
    return _each_path(value, lambda path: relative(path, root))


def relative(path: str, root: str | None = None) -> str:
    """How outputs and reports name a local path: relative to ``root`` (the working directory by
    default, the project root under DVC), so their bytes do not depend on how the path was typed
    or where the project lives; URIs as they are."""
    if is_uri(path):
        return path
    return os.path.relpath(absolute(path, root), root or os.getcwd())


LOG = logging.getLogger("crisscross")


def failed_path(final: str) -> Path:
    return Path(f"{final.rstrip('/')}.failed")


class OutputLockedError(UserError, RuntimeError):
    """Another run is writing the same output directory; ``str()`` is the one-line message."""

    def __init__(self, final: str, lock: Path, holder: dict[str, Any]) -> None:
        self.final, self.lock, self.holder = final, lock, holder
        pid = holder.get("pid")
        if pid is None:
            who = "another run (holder unknown)"
        else:
            who = f"another run (pid {pid} on {holder.get('host', '?')}, since {holder.get('started', '?')})"
        stop = f"stop it (kill {pid})" if pid is not None else "stop it"
        super().__init__(f"{final} is being written by {who}: wait for it to finish, or {stop} [lock {lock}]")


def lock_path(final: str) -> Path:
    """The lock file of an output directory: ``.<name>.lock`` beside it (left in place between runs)."""
    final_path = Path(final)
    return final_path.with_name(f".{final_path.name}.lock")


def _pid_alive(pid: int) -> bool:
    if pid == os.getpid():
        return False  # a folder named after this process is from an earlier run that had the same pid
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _read_holder(fd: int) -> dict[str, Any]:
    """What the lock's holder wrote; it writes just after taking the lock, so wait a moment for it."""
    holder: dict[str, Any] = {}
    deadline = time.monotonic() + 1.0
    while True:
        try:
            holder = json.loads(os.pread(fd, 4096, 0).decode())
        except (ValueError, UnicodeDecodeError):
            holder = {}
        written = isinstance(holder, dict) and isinstance(holder.get("pid"), int)
        current = written and (holder.get("host") != socket.gethostname() or _pid_alive(holder["pid"]))
        if current or time.monotonic() > deadline:
            return holder if written else {}
        time.sleep(0.05)


def _lock_output(final: str) -> int:
    """Take the exclusive lock on ``final`` (an open descriptor; closing it, or dying, releases it)."""
    lock = lock_path(final)
    fd = os.open(lock, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        holder = _read_holder(fd)
        os.close(fd)
        raise OutputLockedError(final, lock, holder) from None
    except BaseException:
        os.close(fd)
        raise
    started = time.strftime("%Y-%m-%d %H:%M:%S%z")
    os.ftruncate(fd, 0)
    os.pwrite(fd, json.dumps({"pid": os.getpid(), "host": socket.gethostname(), "started": started}).encode(), 0)
    return fd


def _unlock_output(fd: int) -> None:
    # Emptied while still held, so a reader never takes a finished run for the holder; the file stays.
    with contextlib.suppress(OSError):
        os.ftruncate(fd, 0)
    os.close(fd)


def _clean_stale(final: str) -> None:
    """Remove what runs killed mid-stage left beside ``final`` (call while holding its lock).

    A dead run's ``.previous-<pid>`` is its predecessor's complete output: if ``final`` is missing
    (killed between the two renames) it is put back, never deleted.
    """
    final_path = Path(final)
    if not final_path.parent.is_dir():
        return
    stale: dict[str, list[Path]] = {"staging": [], "previous": []}
    for entry in final_path.parent.iterdir():
        for kind, found in stale.items():
            prefix = f".{final_path.name}.{kind}-"
            suffix = entry.name[len(prefix) :]
            if entry.name.startswith(prefix) and suffix.isdigit() and entry.is_dir() and not _pid_alive(int(suffix)):
                found.append(entry)
    done: list[str] = []
    previous = sorted(stale["previous"], key=lambda p: p.stat().st_mtime)
    if previous and not final_path.exists():
        restored = previous.pop()
        restored.rename(final_path)
        done.append(f"restored {final_path} from {restored.name}")
    for entry in sorted(stale["staging"]) + previous:
        shutil.rmtree(entry, ignore_errors=True)
        done.append(f"removed {entry.name}")
    if done:
        LOG.info("cleaned up after an interrupted run of %s: %s", final_path, "; ".join(done))


@contextlib.contextmanager
def staged_directory(final: str) -> Iterator[str]:
    """Yield a staging directory that replaces ``final`` only if the block succeeds.

    On failure the previous output stays untouched and whatever the stage wrote is moved to
    ``<final>.failed`` for inspection (a ``--strict`` failure keeps its quarantine there).
    The whole block holds an exclusive lock on ``final`` (``.<name>.lock`` beside it): a second
    run on the same output fails at once with :class:`OutputLockedError`.  Folders left by runs
    that were killed are cleaned up first.  Local paths only: remote outputs rely on the
    per-file atomic writes above.
    """
    final_path = Path(final)
    final_path.parent.mkdir(parents=True, exist_ok=True)
    fd = _lock_output(final)
    try:
        _clean_stale(final)
        staging = final_path.with_name(f".{final_path.name}.staging-{os.getpid()}")
        staging.mkdir()
        try:
            yield str(staging)
        except BaseException:
            failed = failed_path(final)
            shutil.rmtree(failed, ignore_errors=True)
            staging.rename(failed)
            raise
        previous = final_path.with_name(f".{final_path.name}.previous-{os.getpid()}")
        if final_path.exists():
            final_path.rename(previous)
        staging.rename(final_path)
        shutil.rmtree(previous, ignore_errors=True)
    finally:
        _unlock_output(fd)
