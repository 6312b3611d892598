"""Atomic, deterministic output: a crash never leaves a half-written file or stage output.

Files are written to a temporary sibling and renamed into place (through Beam's ``FileSystems``,
so the same code writes local paths and ``gs://`` paths).  A stage's whole output directory is
built under a staging name and swapped in only when the stage succeeded.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import shutil
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
from apache_beam.io.filesystem import CompressionTypes
from apache_beam.io.filesystems import FileSystems


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


def write_parquet(path: str, table: pa.Table) -> None:
    buffer = io.BytesIO()
    pq.write_table(table, buffer, compression="zstd")
    write_bytes(path, buffer.getvalue())


def write_npy(path: str, array: np.ndarray) -> None:
    buffer = io.BytesIO()
    np.save(buffer, np.ascontiguousarray(array), allow_pickle=False)
    write_bytes(path, buffer.getvalue())


def read_bytes(path: str) -> bytes:
    with FileSystems.open(path, compression_type=CompressionTypes.UNCOMPRESSED) as handle:
        return handle.read()


def read_parquet(path: str) -> pa.Table:
    return pq.read_table(io.BytesIO(read_bytes(path)))


def exists(path: str) -> bool:
    return FileSystems.exists(path)


def join(base: str, *parts: str) -> str:
    return FileSystems.join(base, *parts)


def failed_path(final: str) -> Path:
    return Path(f"{final.rstrip('/')}.failed")


@contextlib.contextmanager
def staged_directory(final: str) -> Iterator[str]:
    """Yield a staging directory that replaces ``final`` only if the block succeeds.

    On failure the previous output stays untouched and whatever the stage wrote is moved to
    ``<final>.failed`` for inspection (a ``--strict`` failure keeps its quarantine there).
    Local paths only: remote outputs rely on the per-file atomic writes above.
    """
    final_path = Path(final)
    staging = final_path.with_name(f".{final_path.name}.staging-{os.getpid()}")
    shutil.rmtree(staging, ignore_errors=True)
    staging.mkdir(parents=True)
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
