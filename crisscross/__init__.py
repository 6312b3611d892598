"""crisscross: graded intra- and inter-modal similarity datasets over images and captions."""

from __future__ import annotations

from typing import Any

from crisscross.core import collector, numerics, pages

numerics.pin()  # before numpy or torch load, in every process that imports crisscross (see core/numerics)
collector.pace()  # steps hold millions of objects: the older generations are walked less often (see core/collector)
pages.advise()  # fresh arrays without numpy's huge-page advice, whose first touch cost ten times as much (see core/pages)

__version__ = "0.1.0"
__all__ = ["__version__", "load_release"]


def __getattr__(name: str) -> Any:
    """``crisscross.load_release`` (a release folder's tables), imported on first use so the
    command line does not load pandas and pyarrow just to print its help."""
    if name == "load_release":
        from crisscross.release.load import load_release

        return load_release
    raise AttributeError(f"module 'crisscross' has no attribute {name!r}")
