"""Fixtures for testing the kit: pytest runs in a scratch directory, a tiny fake suite."""

from __future__ import annotations

import textwrap
from collections.abc import Callable
from pathlib import Path

import pytest
from kit_support import RunPytest

#: A provider module for fake suites: the reference memory, a few capabilities, and a
#: ``close`` that records what it closed.
FAKE_PROVIDER = """
from reference_impl import DefaultShortTermMemory
from stm_conformance import Provider

closed = []


async def create(config, key, summarizer):
    return DefaultShortTermMemory(config=config, summarizer=summarizer, key=key)


async def close(memory):
    closed.append(memory)
    await memory.aclose()


provider = Provider(
    name="fake",
    create=create,
    capabilities=frozenset({"truncation", "rolling_summary"}),
    close=close,
)


def build():
    return provider
"""


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture
def run_pytest(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> RunPytest:
    """Run pytest in a subprocess inside the scratch directory, with a clean environment."""
    for name in ("STM_BACKEND", "CI", "PYTEST_XDIST_WORKER"):
        monkeypatch.delenv(name, raising=False)

    def run(*args: str) -> pytest.RunResult:
        return pytester.runpytest_subprocess(*args)

    return run


@pytest.fixture
def fake_suite(pytester: pytest.Pytester) -> Callable[[str], Path]:
    """Write ``fakeprov.py`` and a ``test_fake.py`` of the given (dedented) body."""

    def write(body: str) -> Path:
        pytester.makepyfile(fakeprov=FAKE_PROVIDER)
        header = (
            "import pytest\n\nreq = pytest.mark.stm_requirement\ncap = pytest.mark.stm_capability\n"
        )
        return pytester.makepyfile(test_fake=header + textwrap.dedent(body))

    return write
