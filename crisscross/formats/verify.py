"""The VERIFY round's CSV layout: ECCV Caption's verification answers, one row per image–caption pair.

A round's ``verify.csv`` (the aggregate stage) names the pair by canonical ids; a release's
``verify_<split>.csv`` names it by the published ids and adds ``positive``, the pair's label under
the release's rule.  Both are written here, so the columns cannot drift apart by accident.
"""

from __future__ import annotations

from collections.abc import Sequence

import pandas as pd

from crisscross.core import io

COLUMNS = ("image", "caption", "agg_label", "n", "sampling_method")
RELEASE_COLUMNS = ("image", "caption", "agg_label", "n", "positive", "sampling_method")


def verify_csv(rows: pd.DataFrame, image: str, caption: str, columns: Sequence[str] = COLUMNS) -> bytes:
    """Rated VERIFY pairs as the CSV; ``image`` and ``caption`` name the id columns shown."""
    return io.frame_csv_bytes(rows.rename(columns={image: "image", caption: "caption"})[list(columns)])
