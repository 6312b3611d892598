"""Arrow's memory pool in every process that runs the project's steps: jemalloc, where pyarrow has it.

pyarrow allocates from mimalloc unless told otherwise, and mimalloc hands freed pages back to the
system within milliseconds.  A step that builds and drops tables of hundreds of thousands of rows
(candidates, task rows, quarantined pairs) then has the kernel zero fresh pages for it again and
again: all of COCO's ``tasks`` stage spent 13.3 s of its 38.0 s in the kernel with mimalloc and
4.7 s of 25.4 s with jemalloc, its ``sample`` stage took 35.6 s against 28.0 s, while ingest and
similarity ran as fast with either (same machine and inputs; ``benchmarks/README.md``).  No output
byte depends on the allocator.  A pool the user chose with pyarrow's own variable is kept, and a
pyarrow built without jemalloc keeps its default.
"""

from __future__ import annotations

import os
from collections.abc import Mapping

import pyarrow as pa

CHOICE = "ARROW_DEFAULT_MEMORY_POOL"  # pyarrow's variable: a user's choice of pool wins
PREFERRED = "jemalloc"


def choose(environ: Mapping[str, str] | None = None) -> str:
    """Make :data:`PREFERRED` pyarrow's default pool unless ``$ARROW_DEFAULT_MEMORY_POOL`` names
    one or pyarrow lacks it; returns the default pool's backend.  Run on import of
    :mod:`crisscross.core.io`, which every step's process imports before it makes a table."""
    environ = os.environ if environ is None else environ
    if CHOICE not in environ and PREFERRED in pa.supported_memory_backends():
        pa.set_memory_pool(pa.jemalloc_memory_pool())
    return pa.default_memory_pool().backend_name
