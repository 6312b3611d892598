"""The one seeded generator: every random draw in the project starts here.

A draw's generator comes from the base seed and a stable hash (crc32) of what the draw is for,
never from a shared stream, so any runner, worker count or processing order draws the same.
"""

from __future__ import annotations

import zlib

import numpy as np


def generator(seed: int, *keys: str) -> np.random.Generator:
    """A generator for one draw, from the base seed and what the draw is for."""
    return np.random.default_rng([int(seed), *(zlib.crc32(key.encode()) for key in keys)])
