"""Fixtures for the session layer tests."""

from __future__ import annotations

import pytest


@pytest.fixture
def anyio_backend() -> str:
    """The router uses asyncio primitives: run ``@pytest.mark.anyio`` tests on asyncio."""
    return "asyncio"
