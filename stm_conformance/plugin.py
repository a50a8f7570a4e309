"""pytest plugin entry point; inert until a backend is selected.

Only options live here. Once ``--stm-backend`` (or ``$STM_BACKEND``, or the ``stm_backend``
ini option) names a backend, or the suite itself is being collected, the session plugin in
:mod:`stm_conformance._session` is imported and registered; otherwise nothing else of the
kit is imported and no test is added.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

__all__ = ["ENV_VAR", "SUITE_DIR", "backend_setting"]

#: Environment variable naming the backend (below the command line, above the ini file).
ENV_VAR = "STM_BACKEND"
#: Where the conformance checks live.
SUITE_DIR = Path(__file__).resolve().parent / "suite"
_SUITE_MODULE = "stm_conformance.suite"


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("stm_conformance", "short-term memory conformance")
    group.addoption(
        "--stm-backend",
        dest="stm_backend",
        metavar="NAME",
        help="run the conformance suite against a backend: a registered name "
        f"(e.g. 'reference') or 'package.module:provider'. Also ${ENV_VAR} or ini stm_backend.",
    )
    group.addoption(
        "--stm-report", dest="stm_report", metavar="FILE", help="write a JSON report to FILE"
    )
    group.addoption(
        "--stm-xfail",
        dest="stm_xfail",
        metavar="FILE",
        help="TOML file of expected failures (by requirement ID, node ID or check name)",
    )
    group.addoption(
        "--stm-hypothesis-profile",
        dest="stm_hypothesis_profile",
        choices=("dev", "ci", "thorough"),
        help="hypothesis profile of the checks (default: ci when $CI is set, else dev)",
    )
    group.addoption(
        "--stm-seed", dest="stm_seed", type=int, metavar="N", help="seed for hypothesis and random"
    )
    group.addoption(
        "--stm-timeout",
        dest="stm_timeout",
        type=float,
        default=30.0,
        metavar="SECONDS",
        help="fail a check that runs longer (0: no limit; default 30)",
    )
    parser.addini("stm_backend", help="conformance backend (below --stm-backend and $STM_BACKEND)")


def backend_setting(config: pytest.Config) -> tuple[str, str] | None:
    """The selected backend and where it came from (``cli``, ``env`` or ``ini``), if any."""
    cli = config.getoption("stm_backend", None)
    if cli:
        return str(cli), "cli"
    env = os.environ.get(ENV_VAR, "").strip()
    if env:
        return env, "env"
    try:
        ini = str(config.getini("stm_backend") or "").strip()
    except ValueError:  # the option is unknown when this plugin is disabled
        ini = ""
    return (ini, "ini") if ini else None


@pytest.hookimpl(tryfirst=True)
def pytest_configure(config: pytest.Config) -> None:
    selected = backend_setting(config)
    if selected is None:
        if not _collects_suite(config):
            return
        selected = ("reference", "default")
    elif config.args_source is not pytest.Config.ArgsSource.ARGS:
        config.args = [str(SUITE_DIR)]
    from ._session import activate

    activate(config, *selected)


def _collects_suite(config: pytest.Config) -> bool:
    """Whether the command line names the suite (``--pyargs stm_conformance.suite``, a path)."""
    if config.args_source is not pytest.Config.ArgsSource.ARGS:
        return False
    pyargs = bool(config.getoption("pyargs", False))
    for arg in config.args:
        target = arg.split("::", 1)[0]
        if pyargs and (target == _SUITE_MODULE or target.startswith(_SUITE_MODULE + ".")):
            return True
        path = Path(target).resolve()
        if path == SUITE_DIR or SUITE_DIR in path.parents:
            return True
    return False
