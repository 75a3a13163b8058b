"""Shared fixtures."""

from __future__ import annotations

import pytest
from study_factory import build_study


@pytest.fixture(scope="session")
def small_study(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, str]:
    """A finished study like `autotune run` stores (tests/study_factory.py): (url, name).

    Built once per session: tests only read it (`autotune dashboard` is read-only by default).
    """
    return build_study(tmp_path_factory.mktemp("study"))
