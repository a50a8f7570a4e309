"""Development tasks: ``nox -s tests lint typecheck``, ``nox -s conformance``, ``nox -s bench``."""

from __future__ import annotations

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


@nox.session(python=PYTHON)
def tests(session: nox.Session) -> None:
    """The project's own tests (reference backend, stores, the Redis backend, the kit itself).

    The Redis tests use fakeredis and, when ``redis-server`` is on PATH, real servers of
    their own (skipped otherwise).
    """
    session.install("-e", ".[dev,fakeredis]")
    session.run("pytest", "-q", "-n", "2", *session.posargs)


@nox.session(python=PYTHON)
def conformance(session: nox.Session) -> None:
    """The conformance suite against the reference backend, from an empty directory."""
    session.install(".")
    tmp = session.create_tmp()
    session.chdir(tmp)
    session.run(
        "pytest", "--stm-backend=reference", "--stm-report=stm-report.json", *session.posargs
    )


@nox.session(python=PYTHON)
def conformance_redis(session: nox.Session) -> None:
    """The conformance suite against the Redis backend: in-process fakeredis, then a real
    ``redis-server`` (``$STM_REDIS_URL``, else one the run starts on a free port)."""
    session.install(".[fakeredis]")
    tmp = session.create_tmp()
    session.chdir(tmp)
    for backend in ("fakeredis", "redis"):
        session.run(
            "pytest",
            f"--stm-backend={backend}",
            f"--stm-report=stm-report-{backend}.json",
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
    """Cost of ``add_turn`` against the number of retained turns, next to PenguiFlow's; the
    Redis backend's round trips and throughput against raw redis-py and the OpenAI Agents
    SDK's ``RedisSession`` (needs redis-server)."""
    session.install("-e", ".[dev,penguiflow,redis]", "openai-agents")
    session.run("python", "tests/bench/bench_add_turn.py", *session.posargs)
    session.run("python", "tests/bench/bench_redis.py")
