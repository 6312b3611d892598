"""The cyclic garbage collector's pace in every process that runs the project's steps.

A step holds millions of small objects at once (records, pairs, rows) for as long as it runs and
makes garbage without cycles, which reference counting frees.  With CPython's default thresholds
(700, 10, 10) the collector still walks every live object of the older generations again and
again while they grow: a sixth of all of COCO's ``sample`` stage (59.2 s against 49.9 s with
:data:`THRESHOLDS`, same machine and inputs).  The young generation keeps its default, so short-lived
cycles are still freed soon; the older two are walked a hundred times less often.
"""

from __future__ import annotations

import gc

THRESHOLDS = (700, 1000, 1000)


def pace() -> None:
    """Set :data:`THRESHOLDS` (on import of :mod:`crisscross`, in the command and in every worker)."""
    gc.set_threshold(*THRESHOLDS)
