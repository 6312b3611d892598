"""Paths named like input files that are no regular files (a FIFO, a directory, a socket, a link
to a FIFO): what every reader must refuse without reading, so it neither waits for a writer nor
reads forever."""

from __future__ import annotations

import os
import socket
import tempfile
from pathlib import Path

KINDS = {
    "fifo": "a named pipe (FIFO)",
    "directory": "a directory",
    "socket": "a socket",
    "link-to-fifo": "a named pipe (FIFO)",
}


def make_special(path: Path, kind: str) -> Path:
    """``path`` made a special file of ``kind`` (a key of :data:`KINDS`)."""
    if kind == "fifo":
        os.mkfifo(path)
    elif kind == "directory":
        path.mkdir()
    elif kind == "socket":  # bound under a short name (a socket path has at most 107 bytes), then moved
        with tempfile.TemporaryDirectory(dir="/tmp") as short, socket.socket(socket.AF_UNIX) as server:
            server.bind(os.path.join(short, "s"))
            os.rename(os.path.join(short, "s"), path)
    else:
        target = path.with_name(f".{path.name}.fifo")
        os.mkfifo(target)
        path.symlink_to(target.name)
    return path
