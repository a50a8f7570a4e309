"""Development tasks: ``nox -s tests lint typecheck``, ``nox -s conformance``, ``nox -s bench``,
``nox -s matrix``."""

from __future__ import annotations

import os
import shutil
import tempfile
import time
from pathlib import Path

import nox

nox.options.sessions = ["tests", "lint", "typecheck", "conformance", "conformance_redis"]
nox.options.reuse_existing_virtualenvs = True

PYTHON = "3.11"
TYPED = [
    "stm_conformance",
    "reference_impl",
    "adapters/stm_stores",
    "adapters/stm_penguiflow",
    "adapters/stm_redis",
]


def _scratch() -> str:
    """An empty directory outside the project, where the suite runs as a backend author
    runs it: no ini file of this project's above it (``session.create_tmp()`` has one)."""
    return tempfile.mkdtemp(prefix="stm-conformance-")


@nox.session(python=PYTHON)
def tests(session: nox.Session) -> None:
    """The project's own tests (reference backend, stores, the Redis backend, the kit itself).

    The Redis tests use fakeredis and, when ``redis-server`` is on PATH, real servers of
    their own (skipped otherwise).
    """
    session.install("-e", ".[dev,fakeredis]")
    # The whole-suite runs the kit's meta-tests judge start at collection, beside the other
    # tests (tests/kit/run_ahead.py).
    session.run("pytest", "-q", "-n", "2", *session.posargs)


@nox.session(python=PYTHON)
def conformance(session: nox.Session) -> None:
    """The conformance suite against the reference backend, from an empty directory."""
    session.install(".")
    session.chdir(_scratch())
    session.run(
        "pytest", "--stm-backend=reference", "--stm-report=stm-report.json", *session.posargs
    )


@nox.session(python=PYTHON)
def conformance_redis(session: nox.Session) -> None:
    """The conformance suite against the Redis backend: in-process fakeredis, then a real
    ``redis-server`` (``$STM_REDIS_URL``, else one the run starts on a free port)."""
    session.install(".[fakeredis]")
    session.chdir(_scratch())
    for backend in ("fakeredis", "redis"):
        session.run(
            "pytest",
            f"--stm-backend={backend}",
            f"--stm-report=stm-report-{backend}.json",
            *session.posargs,
        )


@nox.session(python=PYTHON)
def conformance_penguiflow(session: nox.Session) -> None:
    """The suite against PenguiFlow's own memory, with its expected-failures file: green
    and strict (a listed check that passes fails the run); then each reproduction in
    ``docs/findings`` must still fail on the installed PenguiFlow."""
    session.install(".[penguiflow]", "pytest-xdist")
    xfail = Path("adapters/stm_penguiflow/xfail.toml").resolve()
    session.run("pytest", "tests/adapters/test_findings.py", "-q", "-n", "2")
    session.chdir(_scratch())
    # Six workers on two cores: PenguiFlow's memory fails 20 requirements, and each failing
    # check waits its patience for what never comes, so the run mostly sleeps (9 % of two
    # cores busy with two workers, 104 s; 31 % with six, 41 s).
    session.run(
        "pytest",
        "--stm-backend=penguiflow",
        f"--stm-xfail={xfail}",
        "--stm-report=stm-report-penguiflow.json",
        "-n",
        "6",
        *session.posargs,
    )


#: The backends of the conformance matrix, in its column order.
MATRIX_BACKENDS = ("reference", "penguiflow", "fakeredis", "redis")
#: Standalone reproductions of PenguiFlow's failures, linked from the matrix.
FINDINGS = Path("docs/findings")


@nox.session(python=PYTHON)
def matrix(session: nox.Session) -> None:
    """Run the suite against every bundled backend and regenerate the conformance matrix.

    The JSON reports go to ``docs/matrix/``; the tables of ``docs/conformance-matrix.md``
    and the README's levels are rendered from them, and ``docs/coverage.md`` from the
    reference's report (``tests/kit/test_matrix.py`` and ``tests/kit/test_coverage.py``
    check that the committed files match the committed reports). Needs ``redis-server``.
    """
    if shutil.which("redis-server") is None and not os.environ.get("STM_REDIS_URL"):
        session.error("the redis backend needs redis-server on PATH (or $STM_REDIS_URL)")
    session.install(".[penguiflow,fakeredis]")
    out = Path("docs/matrix").resolve()
    out.mkdir(parents=True, exist_ok=True)
    documents = [str(Path(name).resolve()) for name in ("docs/conformance-matrix.md", "README.md")]
    gaps, coverage_doc = (
        str(Path(n).resolve()) for n in ("docs/coverage-gaps.toml", "docs/coverage.md")
    )
    findings = f"penguiflow={FINDINGS.resolve()}"
    session.chdir(_scratch())
    reports = []
    for backend in MATRIX_BACKENDS:
        report = out / f"{backend}.json"
        # Exit status 1 (failed checks) is a result here, not an error of the session.
        session.run(
            "pytest",
            f"--stm-backend={backend}",
            "--stm-hypothesis-profile=ci",
            f"--stm-report={report}",
            "-q",
            "-p",
            "no:cacheprovider",
            success_codes=[0, 1],
        )
        reports.append(str(report))
    updates = [arg for path in documents for arg in ("--update", path)]
    session.run(
        "python", "-m", "stm_conformance.matrix", "--findings", findings, *updates, *reports
    )
    session.run(
        "python",
        "-m",
        "stm_conformance.coverage",
        str(out / "reference.json"),
        "--gaps",
        gaps,
        "--update",
        coverage_doc,
    )


@nox.session(python=PYTHON)
def mutation(session: nox.Session) -> None:
    """Mutation testing: mutmut mutates the reference's core modules (``[tool.mutmut]`` in
    pyproject.toml) and runs only the conformance suite against each mutant; the score and
    every survivor go to ``docs/coverage.md``. Not run in CI: it takes about 20 minutes on
    2 cores. Exit status 1 below 90%."""
    session.install("-e", ".[dev]", "mutmut>=3.3,<4")
    shutil.rmtree("mutants", ignore_errors=True)
    started = time.monotonic()
    session.run("mutmut", "run", "--max-children", str(os.cpu_count() or 1))
    wall = time.monotonic() - started
    session.run(
        "python",
        "tests/mutation/mutation_report.py",
        "--update",
        "docs/coverage.md",
        "--wall-s",
        f"{wall:.0f}",
        *session.posargs,
    )


@nox.session(python=PYTHON)
def lint(session: nox.Session) -> None:
    session.install("ruff>=0.6")
    session.run("ruff", "check", ".")
    session.run("ruff", "format", "--check", ".")


@nox.session(python=PYTHON)
def typecheck(session: nox.Session) -> None:
    session.install("-e", ".[dev,fakeredis]")
    session.run("mypy", "--strict", *TYPED)


@nox.session(python=PYTHON)
def bench(session: nox.Session) -> None:
    """The reference memory next to PenguiFlow's, operation by operation, and the session
    layer's turns per second next to the OpenAI Agents SDK's ``SQLiteSession`` (results in
    ``docs/benchmarks/``, explained in ``docs/performance.md``); the Redis backend's round
    trips and throughput against raw redis-py and the OpenAI Agents SDK's ``RedisSession``
    (needs redis-server). Arguments go to ``tests/bench/bench_memory.py``."""
    session.install("-e", ".[dev,penguiflow,redis,tiktoken,bench]")
    session.run("python", "tests/bench/bench_memory.py", *session.posargs)
    session.run("python", "tests/bench/bench_session.py")
    session.run("python", "tests/bench/bench_redis.py")
