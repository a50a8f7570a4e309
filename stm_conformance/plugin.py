"""pytest plugin entry point; inert until a backend is selected.

Only options live here. Once ``--stm-backend`` (or ``$STM_BACKEND``, or the ``stm_backend``
ini option) names a backend, or the suite itself is being collected, the session plugin in
:mod:`stm_conformance._session` is imported and registered; otherwise nothing else of the
kit is imported and no test is added.

Where the suite runs:

* ``pytest --stm-backend=NAME`` on the command line with no paths runs the conformance suite
  (instead of the directory or ``testpaths`` pytest would otherwise collect);
* ``--stm-suite`` adds the suite to what is collected, next to any paths given;
* a path into the suite or ``--pyargs stm_conformance.suite`` collects (part of) it;
* ``$STM_BACKEND`` and the ``stm_backend`` ini option only choose the backend: a plain
  ``pytest`` still runs the project's own tests, with the kit's fixtures and markers.

A node ID as a run prints it (``test_budget.py::test_x[p]``) whose file does not exist
where pytest runs is looked up in the suite, so a failure can be rerun by pasting its ID.
"""

from __future__ import annotations

import argparse
import math
import os
from collections.abc import Callable, Iterable
from pathlib import Path

import pytest

__all__ = [
    "DEFAULT_TIMEOUT",
    "ENV_VAR",
    "SUITE_DIR",
    "apply_ini_options",
    "backend_setting",
    "suite_selected",
]

#: Environment variable naming the backend (below the command line, above the ini file).
ENV_VAR = "STM_BACKEND"
#: Where the conformance checks live.
SUITE_DIR = Path(__file__).resolve().parent / "suite"
#: ``--stm-timeout`` when neither the command line nor the ini file sets it.
DEFAULT_TIMEOUT = 30.0
_SUITE_MODULE = "stm_conformance.suite"
#: The options ``apply_ini_options`` took from the ini file (not from the command line).
FROM_INI = pytest.StashKey[frozenset[str]]()


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("stm_conformance", "short-term memory conformance")
    group.addoption(
        "--stm-backend",
        dest="stm_backend",
        metavar="NAME",
        help="the backend to check: a registered name (e.g. 'reference') or "
        "'package.module:provider'. With no paths given, runs the conformance suite. "
        f"${ENV_VAR} or ini stm_backend only choose the backend (add --stm-suite to run it).",
    )
    group.addoption(
        "--stm-suite",
        dest="stm_suite",
        action="store_true",
        default=False,
        help="collect the conformance suite (besides any paths given), against the "
        "configured backend or 'reference'",
    )
    group.addoption(
        "--stm-report",
        dest="stm_report",
        metavar="FILE",
        help="write a JSON report to FILE (also ini stm_report)",
    )
    group.addoption(
        "--stm-xfail",
        dest="stm_xfail",
        metavar="FILE",
        help="TOML file of expected failures, by requirement ID, node ID or check name "
        "(also ini stm_xfail)",
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
        type=_argument(_parse_timeout),
        default=None,
        metavar="SECONDS",
        help=f"fail a check that runs longer (0: no limit; default {DEFAULT_TIMEOUT:g}; "
        "also ini stm_timeout)",
    )
    group.addoption(
        "--stm-patience",
        dest="stm_patience",
        type=_argument(_parse_patience),
        default=None,
        metavar="FACTOR",
        help="scale how long checks wait for the backend to reach a required state "
        "(default 1; below 1: quicker verdicts on a fast backend, above 1: a slow one; "
        "also ini stm_patience)",
    )
    group.addoption(
        "--stm-require-level",
        dest="stm_require_level",
        metavar="LEVEL",
        help="fail the run (exit status 1) unless the backend reaches LEVEL: Core, Summary, "
        "Durable or Distributed (also ini stm_require_level)",
    )
    parser.addini(
        "stm_backend",
        help="conformance backend, below --stm-backend and $STM_BACKEND; only chooses it "
        "(--stm-suite runs the suite)",
    )
    parser.addini(
        "stm_report", help="JSON report file, relative to the rootdir (below --stm-report)"
    )
    parser.addini(
        "stm_xfail",
        help="expected-failures TOML file, relative to the rootdir (below --stm-xfail)",
    )
    parser.addini(
        "stm_require_level",
        help="level the backend must reach, else the run fails (below --stm-require-level)",
    )
    parser.addini(
        "stm_patience",
        help="factor of how long checks wait for the backend (below --stm-patience; default 1)",
    )
    parser.addini(
        "stm_timeout",
        help=f"per-check time limit in seconds, 0: none (below --stm-timeout; default "
        f"{DEFAULT_TIMEOUT:g})",
    )


def backend_setting(config: pytest.Config) -> tuple[str, str] | None:
    """The selected backend and where it came from (``cli``, ``env`` or ``ini``), if any."""
    cli = config.getoption("stm_backend", None)
    if cli:
        return str(cli), "cli"
    env = os.environ.get(ENV_VAR, "").strip()
    if env:
        return env, "env"
    ini = _ini(config, "stm_backend")
    return (ini, "ini") if ini else None


@pytest.hookimpl(tryfirst=True)
def pytest_configure(config: pytest.Config) -> None:
    selected = backend_setting(config)
    explicit = config.args_source is pytest.Config.ArgsSource.ARGS
    add_suite = bool(config.getoption("stm_suite", False)) or (
        selected is not None and selected[1] == "cli" and not explicit
    )
    if selected is None and not add_suite and not _collects_suite(config):
        return
    if explicit:
        config.args = _find_in_suite(config.args, config.invocation_params.dir)
    if add_suite:
        if not explicit:
            config.args = [str(SUITE_DIR)]
        elif not suite_selected(config):
            config.args = [*config.args, str(SUITE_DIR)]
    from ._session import activate

    activate(config, *(selected or ("reference", "default")))


def suite_selected(config: pytest.Config) -> bool:
    """Whether the collected arguments name (part of) the suite."""
    pyargs = bool(config.getoption("pyargs", False))
    return any(_in_suite(arg, pyargs) for arg in config.args)


def _collects_suite(config: pytest.Config) -> bool:
    """Whether the command line names the suite (``--pyargs stm_conformance.suite``, a path)."""
    if config.args_source is not pytest.Config.ArgsSource.ARGS:
        return False
    return suite_selected(config)


def _in_suite(arg: str, pyargs: bool) -> bool:
    target = arg.split("::", 1)[0]
    if pyargs and (target == _SUITE_MODULE or target.startswith(_SUITE_MODULE + ".")):
        return True
    path = Path(target).resolve()
    return path == SUITE_DIR or SUITE_DIR in path.parents


def _find_in_suite(args: Iterable[str], here: Path) -> list[str]:
    """Arguments with suite paths as a run prints them (``test_budget.py::test_x``) resolved.

    A path that exists where pytest runs is left alone; one that exists only in the suite
    is made absolute there.
    """
    found = []
    for arg in args:
        path, sep, rest = arg.partition("::")
        if path and not (here / path).exists() and (SUITE_DIR / path).exists():
            arg = f"{SUITE_DIR / path}{sep}{rest}"
        found.append(arg)
    return found


def apply_ini_options(config: pytest.Config) -> None:
    """Fill ``--stm-report``, ``--stm-xfail``, ``--stm-require-level``, ``--stm-timeout`` and
    ``--stm-patience`` from the ini file.

    The command line wins; paths in the ini file are relative to the rootdir. Which of
    the report, expected failures and level came from the ini file is kept under
    :data:`FROM_INI`: they are for runs that have checks, not for a backend repository's
    plain ``pytest`` of its own tests.
    """
    from_ini = set()
    for name in ("stm_report", "stm_xfail"):
        value = _ini(config, name)
        if value and not getattr(config.option, name, None):
            setattr(config.option, name, str(config.rootpath / value))
            from_ini.add(name)
    from .capabilities import LEVELS  # not at import: an inert plugin imports nothing

    level = getattr(config.option, "stm_require_level", None)
    source = "--stm-require-level"
    if not level:
        level, source = _ini(config, "stm_require_level") or None, "ini option stm_require_level"
        if level is not None:
            from_ini.add("stm_require_level")
    if level is not None and level not in LEVELS:
        raise pytest.UsageError(
            f"stm_conformance: {source}: {level!r} is not a level (one of {', '.join(LEVELS)})"
        )
    config.option.stm_require_level = level
    config.stash[FROM_INI] = frozenset(from_ini)
    _number_from_ini(config, "stm_timeout", _parse_timeout, DEFAULT_TIMEOUT)
    _number_from_ini(config, "stm_patience", _parse_patience, 1.0)
    from ._patience import set_factor

    set_factor(config.option.stm_patience)


def _number_from_ini(
    config: pytest.Config, name: str, parse: Callable[[str], float], default: float
) -> None:
    """Fill option ``name`` from the ini file (else ``default``) unless the command line
    set it; a bad ini value is a usage error."""
    if getattr(config.option, name, None) is not None:
        return
    value, number = _ini(config, name), default
    if value:
        try:
            number = parse(value)
        except ValueError as exc:
            raise pytest.UsageError(f"stm_conformance: ini option {name}: {exc}") from None
    setattr(config.option, name, number)


def _ini(config: pytest.Config, name: str) -> str:
    try:
        value = config.getini(name)
    except ValueError:  # the option is unknown when this plugin is disabled
        return ""
    return str(value or "").strip()


def _parse_timeout(text: str) -> float:
    try:
        seconds = float(text)
    except ValueError:
        raise ValueError(f"{text!r} is not a number of seconds") from None
    if math.isnan(seconds) or seconds < 0:
        raise ValueError(f"must be a number of seconds >= 0 (0: no limit), got {text!r}")
    return seconds


def _parse_patience(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise ValueError(f"{text!r} is not a number") from None
    if not (math.isfinite(value) and value > 0):
        raise ValueError(f"must be a number > 0, got {text!r}")
    return value


def _argument(parse: Callable[[str], float]) -> Callable[[str], float]:
    """``parse`` as an argparse ``type``: its ``ValueError`` becomes a usage error."""

    def convert(text: str) -> float:
        try:
            return parse(text)
        except ValueError as exc:
            raise argparse.ArgumentTypeError(str(exc)) from None

    return convert
