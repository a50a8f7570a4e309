"""Fixtures for testing the kit: pytest runs in a scratch directory, a tiny fake suite."""

from __future__ import annotations

import itertools
import os
import textwrap
import time
from collections.abc import Callable, Sequence
from pathlib import Path

import pytest
from kit_support import RUN_TIMEOUT_S, RunPytest, zygote
from run_ahead import Batch, Ended, Job

_BATCH = pytest.StashKey[Batch]()

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
    """Run pytest in a subprocess inside the scratch directory, with a clean environment.

    Like ``pytester.runpytest_subprocess``, but forked from the zygote (``suite_runner``),
    which has imported pytest, hypothesis and the kit already: a new interpreter would
    spend about a second of CPU on that, in each of these tests."""
    for name in ("STM_BACKEND", "CI", "PYTEST_XDIST_WORKER"):
        monkeypatch.delenv(name, raising=False)
    runs = itertools.count()

    def run(*args: str, path: Sequence[str] = ()) -> pytest.RunResult:
        """``path``: directories put first on the run's ``sys.path``."""
        files = pytester.path.parent / f"{pytester.path.name}-run{next(runs)}"
        files.mkdir()
        command = [f"--basetemp={files / 'basetemp'}", *map(str, args)]
        started = time.monotonic()
        forked = zygote().start(
            pytester.path, command, dict(os.environ), list(path), split=True, files=files
        )
        code, _ = forked.wait(RUN_TIMEOUT_S)
        out, err = forked.output()
        return pytest.RunResult(
            code, out.splitlines(), err.splitlines(), time.monotonic() - started
        )

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


@pytest.hookimpl(trylast=True)  # after -k, -m and --deselect
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Start the whole-suite runs the selected tests judge (``run_ahead``), and move those
    tests last. Every xdist worker orders the same way; only one starts the runs."""
    judges = [item for item in items if item.get_closest_marker("suite_run")]
    if not judges or config.option.collectonly:  # nothing will judge the runs
        return
    items[:] = [item for item in items if not item.get_closest_marker("suite_run")] + judges
    jobs: dict[str, Job] = {}
    for item in judges:
        for mark in item.iter_markers("suite_run"):
            job: Job | None = mark.args[0]
            while job is not None:  # and the jobs it comes after
                jobs.setdefault(job.name, job)
                job = job.after
    basetemp = config._tmp_path_factory.getbasetemp()  # type: ignore[attr-defined]
    # xdist workers' base directories share a parent: the controller's.
    shared = basetemp.parent if hasattr(config, "workerinput") else basetemp
    batch = Batch(shared / "suite-runs", list(jobs.values()))
    config.stash[_BATCH] = batch
    if os.environ.get("PYTEST_XDIST_WORKER", "gw0") == "gw0":
        batch.start_all()


def pytest_sessionfinish(session: pytest.Session) -> None:
    batch = session.config.stash.get(_BATCH, None)
    if batch is not None:
        if session.shouldfail or session.shouldstop:  # -x, --maxfail: no judge is coming
            batch.stop()
        batch.join()  # the other workers may still be reading the runs this one started


@pytest.fixture
def suite_runs(request: pytest.FixtureRequest) -> Batch:
    """The session's batch of whole-suite runs (their directories are under its root)."""
    return request.config.stash[_BATCH]


@pytest.fixture
def suite_result(request: pytest.FixtureRequest, suite_runs: Batch) -> Ended:
    """The ended run this test's ``suite_run`` mark asks for (see ``run_ahead``)."""
    mark = request.node.get_closest_marker("suite_run")
    assert mark is not None, "suite_result needs a suite_run mark"
    return suite_runs.result(mark.args[0].name)
