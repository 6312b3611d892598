"""numpy's huge-page advice, off in every process that runs the project's steps.

numpy asks the kernel for transparent huge pages (``madvise(MADV_HUGEPAGE)``) for every array of
4 MiB or more.  Where the kernel then compacts memory to find them (``defrag`` set to ``madvise``,
the hosts measured), the first touch of a fresh array costs about ten times as much: squaring
123,287 × 512 float32 rows into a new array took 1.27 s against 0.13 s without the advice (AMD EPYC,
2 cores), and every stage makes such arrays (unit rows, lists, co-caption means).  No output byte
depends on the pages.  numpy reads :data:`VARIABLE` when it loads, and a worker whose runner loaded
numpy first is switched in place; a value the user set is kept.
"""

from __future__ import annotations

import os
import sys
from collections.abc import MutableMapping

VARIABLE = "NUMPY_MADVISE_HUGEPAGE"  # numpy's own switch: "0" turns its advice off


def advise(environ: MutableMapping[str, str] | None = None) -> None:
    """Turn numpy's huge-page advice off unless ``$NUMPY_MADVISE_HUGEPAGE`` is set (on import of
    :mod:`crisscross`, in the command and in every worker; the variable reaches the processes it starts)."""
    environ = os.environ if environ is None else environ
    if VARIABLE in environ:
        return
    environ[VARIABLE] = "0"
    if "numpy" in sys.modules:
        from numpy._core.multiarray import _set_madvise_hugepage

        _set_madvise_hugepage(False)
