"""Arrow's memory pool in every process that runs the project's steps: jemalloc, where pyarrow has it.

pyarrow allocates from mimalloc unless told otherwise.  In a step that builds and drops tables of
hundreds of thousands of rows (task rows, quarantined pairs), mimalloc has the kernel spend seconds
zeroing the pages it faults in, whether or not it hands unused pages back to the system (with its
purge delay set to never, ``tasks`` spent 19.5 s in the kernel against 14.7 s); jemalloc, half or
less of that.  All of COCO's ``tasks`` stage took 0.67× its mimalloc time with jemalloc in both pairings measured
(25.4 s against 38.0 s, 4.7 s of it in the kernel against 13.3 s; 32.2 s against 48.3 s in
``benchmarks/coco_scale``); ``sample`` gained in one (28.0 s against 35.6 s) and not in the other
(42.2 s against 40.8 s); ingest, embed and similarity ran as fast with either.  No output byte
depends on the allocator.  A pool the user chose with pyarrow's own variable is kept, and a
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
