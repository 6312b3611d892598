"""Shared fixtures: the real data in ``../shared/data`` (skipped, with the reason shown, if absent)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

PROJECT = Path(__file__).resolve().parents[1]
SHARED_DATA = Path(os.environ.get("CRISSCROSS_SHARED_DATA", PROJECT.parent / "shared" / "data"))
DEMO = PROJECT / "data" / "demo"


@pytest.fixture(scope="session")
def shared_data() -> Path:
    """Root of the real datasets; tests that need it skip visibly when it is missing."""
    if not SHARED_DATA.is_dir():
        pytest.skip(f"real data folder {SHARED_DATA} is absent (set CRISSCROSS_SHARED_DATA)")
    return SHARED_DATA


@pytest.fixture(scope="session")
def test_photos(shared_data: Path) -> Path:
    return shared_data / "coco-images" / "karpathy-test"


@pytest.fixture(scope="session")
def demo_dir() -> Path:
    return DEMO
