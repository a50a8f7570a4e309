"""The session plugin: what runs once a backend is selected.

:mod:`stm_conformance.plugin` registers it through :func:`activate`; it loads the provider,
marks and filters checks (capabilities, expected failures), runs them on asyncio with a
deadline, prefixes failures with their requirement, and reports per group and per level.
"""

from __future__ import annotations

import datetime as dt
import functools
import gc
import inspect
import json
import warnings
from collections.abc import Callable, Generator, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from . import __version__, _deadline, scenarios
from ._determinism import apply_profile, choose_profile, choose_seed, seed_check
from .capabilities import CAPABILITIES, skip_reason, undeclared
from .plugin import FROM_INI, SUITE_DIR, apply_ini_options, suite_selected
from .provider import Provider, ProviderError, load_provider
from .report import (
    PROP_BLAMED,
    PROP_SCENARIO,
    LevelResult,
    Results,
    RunInfo,
    blame_exception,
    prefix_failure,
    properties_for,
)
from .requirements import Spec, load_spec
from .xfail import XfailEntry, XfailFileError, load_xfail_file, matching_entries

__all__ = [
    "PLUGIN_NAME",
    "ActiveBackend",
    "StmConformanceWarning",
    "active_backend",
    "activate",
    "ensure_active",
]

PLUGIN_NAME = "stm_conformance.session"
MARKERS = (
    "stm_requirement(*ids): spec requirement IDs a conformance check verifies",
    "stm_capability(*names): capabilities a conformance check needs (skipped if undeclared)",
    "stm_probe(name): the check verifies that a declared capability works",
    "stm_scenario(*tags): scenarios the check asserts that no observation can tell "
    "(direction:accept, direction:reject, bound:lower, bound:upper)",
)


class StmConformanceWarning(pytest.PytestWarning):
    """A problem with the conformance run's configuration (e.g. an unused xfail entry)."""


class XfailEntryError(StmConformanceWarning):
    """An unused xfail entry while warnings are errors, passed from a pytest-xdist worker."""


@dataclass(frozen=True, slots=True)
class ActiveBackend:
    """The backend under test and how it was selected."""

    setting: str
    source: str
    provider: Provider
    target: str


_BACKEND = pytest.StashKey[ActiveBackend]()
_PROBLEM = pytest.StashKey[str]()
_HEADLINES = pytest.StashKey[list[str]]()
#: The requirement IDs an xfail entry expects a check to fail on; ``None``: any failure.
_XFAIL_IDS = pytest.StashKey[frozenset[str] | None]()


def active_backend(config: pytest.Config) -> ActiveBackend:
    """The selected backend; fails when the kit is not active."""
    try:
        return config.stash[_BACKEND]
    except KeyError:
        raise RuntimeError("no conformance backend is active (use --stm-backend)") from None


def activate(config: pytest.Config, setting: str, source: str) -> None:
    """Load the provider and register the session plugin and the public fixtures."""
    if config.pluginmanager.has_plugin(PLUGIN_NAME):
        return
    apply_ini_options(config)
    try:
        provider, target = load_provider(setting)
    except ProviderError as exc:
        raise pytest.UsageError(f"stm_conformance: {exc}") from None
    config.stash[_BACKEND] = ActiveBackend(setting, source, provider, target)
    for line in MARKERS:
        config.addinivalue_line("markers", line)
    from . import fixtures

    config.pluginmanager.register(SessionPlugin(config), PLUGIN_NAME)
    config.pluginmanager.register(fixtures, "stm_conformance.fixtures")


def ensure_active(config: pytest.Config) -> None:
    """Activate with the configured backend, or ``reference`` (for ``--pyargs`` runs)."""
    if config.pluginmanager.has_plugin(PLUGIN_NAME):
        return
    from .plugin import backend_setting

    activate(config, *(backend_setting(config) or ("reference", "default")))


class SessionPlugin:
    """Hooks of an active conformance run."""

    def __init__(self, config: pytest.Config) -> None:
        self.config = config
        self.backend = active_backend(config)
        self.spec: Spec = load_spec()
        self.xfails: tuple[XfailEntry, ...] = ()
        xfail_path = config.getoption("stm_xfail", None)
        if xfail_path:
            try:
                self.xfails = load_xfail_file(xfail_path, self.spec.requirements)
            except XfailFileError as exc:
                raise pytest.UsageError(str(exc)) from None
        workerinput: dict[str, Any] = getattr(config, "workerinput", {})
        self.is_worker = bool(workerinput)
        # Collection-time warnings are issued once: by the only process, or by worker gw0.
        self.warns = workerinput.get("workerid", "gw0") == "gw0"
        profile = choose_profile(config.getoption("stm_hypothesis_profile", None))
        self.seed = choose_seed(
            config.getoption("stm_seed", None), profile, workerinput.get("stm_seed")
        )
        apply_profile(profile, self.seed)
        self.timeout: float = config.getoption("stm_timeout", None) or 0.0
        self.results = Results(self.spec)
        self.run = RunInfo(
            kit_version=__version__,
            spec_version=self.spec.version,
            backend_setting=self.backend.setting,
            backend_name=self.backend.provider.name,
            backend_target=self.backend.target,
            backend_source=self.backend.source,
            declared=self.backend.provider.capabilities,
            hypothesis_profile=profile,
            seed=self.seed,
        )
        self.complete = True
        #: ``--stm-require-level``, as the run reached it or not (set at the end).
        self.required: LevelResult | None = None
        #: A configuration error found on a pytest-xdist worker, reported at the end.
        self.usage_error: str | None = None
        #: False once writing ``--stm-report`` failed.
        self.report_written = True
        #: Whether this run froze the collector's generations (undone at the end).
        self._unfreeze = False

    # -- header -----------------------------------------------------------------------

    def pytest_report_header(self) -> list[str]:
        run = self.run
        declared = ", ".join(sorted(run.declared)) or "none"
        seed = "derandomized" if run.seed is None else f"{run.seed} (--stm-seed={run.seed})"
        lines = [
            f"stm_conformance {run.kit_version}, spec {run.spec_version}",
            f"stm backend: {run.backend_name} = {run.backend_target} "
            f"(from {run.backend_source}: {run.backend_setting})",
            f"stm capabilities declared: {declared}",
            f"stm hypothesis profile: {run.hypothesis_profile}, seed: {seed}",
        ]
        patience = self.config.getoption("stm_patience", None)
        if patience not in (None, 1.0):
            lines.append(f"stm patience: {patience:g} (waits for the backend scaled)")
        if not suite_selected(self.config):
            lines.append("stm suite: not collected here (add --stm-suite to run it)")
        return lines

    @pytest.hookimpl(optionalhook=True)
    def pytest_configure_node(self, node: Any) -> None:
        """pytest-xdist: every worker uses the controller's seed."""
        node.workerinput["stm_seed"] = self.seed

    # -- collection -------------------------------------------------------------------

    @pytest.hookimpl(tryfirst=True)
    def pytest_pycollect_makemodule(
        self, module_path: Path, parent: pytest.Collector
    ) -> pytest.Module | None:
        """Outside the rootdir, name a suite module by its path in the suite.

        Its checks are then ``test_budget.py::test_x[p]`` whether the run collects the
        whole suite or only that file, so a node ID a run prints can be passed back on the
        command line (:mod:`stm_conformance.plugin` finds it in the suite).
        """
        rootpath = self.config.rootpath
        if (
            not _is_suite_path(module_path)
            or rootpath == module_path
            or rootpath in (module_path.parents)
        ):
            return None
        nodeid = module_path.relative_to(SUITE_DIR).as_posix()
        module: pytest.Module = pytest.Module.from_parent(parent, path=module_path, nodeid=nodeid)
        return module

    @pytest.hookimpl(tryfirst=True)
    def pytest_pycollect_makeitem(
        self, collector: pytest.Module | pytest.Class, name: str, obj: object
    ) -> None:
        """Run ``async def`` checks on anyio's asyncio runner."""
        if not (_is_suite_path(collector.path) and collector.istestfunction(obj, name)):
            return
        hypothesis = getattr(obj, "hypothesis", None)
        inner = getattr(hypothesis, "inner_test", obj)
        if not inspect.iscoroutinefunction(inner):
            return
        marks = {m.name for m in getattr(obj, "pytestmark", [])}
        if "anyio" not in marks:
            pytest.mark.anyio(obj)
        pytest.mark.usefixtures("anyio_backend")(obj)

    @pytest.hookimpl(tryfirst=True)
    def pytest_collection_modifyitems(self, items: list[pytest.Item]) -> None:
        """Skip checks of undeclared capabilities, apply expected failures, tag for JUnit."""
        declared = self.backend.provider.capabilities
        used: set[XfailEntry] = set()
        checks = 0
        for item in items:
            if not _is_check(item):
                continue
            checks += 1
            requirements = _marker_args(item, "stm_requirement")
            probe = next(iter(_marker_args(item, "stm_probe")), None)
            capabilities = _marker_args(item, "stm_capability")
            if probe is not None and probe not in capabilities:
                capabilities += (probe,)
            problem = self._problem(requirements, capabilities)
            if problem is not None:
                item.stash[_PROBLEM] = problem
            item.stash[_HEADLINES] = [self.spec.headline(rid) for rid in requirements]
            missing = undeclared(capabilities, declared)
            if missing:
                item.add_marker(pytest.mark.skip(reason=skip_reason(missing[0])))
            entries = matching_entries(self.xfails, item.nodeid, item.name, requirements)
            used.update(entries)
            if entries:
                item.add_marker(pytest.mark.xfail(strict=True, reason=entries[0].marker_reason()))
                by_id = all(entry.is_requirement for entry in entries)
                item.stash[_XFAIL_IDS] = (
                    frozenset(entry.selector for entry in entries) if by_id else None
                )
            item.user_properties.extend(
                properties_for(
                    requirements,
                    capabilities,
                    probe,
                    entries[0].category if entries else None,
                    problem,
                )
            )
        if self.warns and (checks or not self._from_ini("stm_xfail")):
            self._warn_unused([entry for entry in self.xfails if entry not in used])

    def _warn_unused(self, unused: list[XfailEntry]) -> None:
        """Warn of each unused xfail entry; one clear error when warnings are errors.

        A pytest-xdist worker must not fail its collection (the run would end in an internal
        error): it passes the error on as an :class:`XfailEntryError` warning, which the
        controller reports as a usage error at the end of the run.
        """
        messages = [
            f"--stm-xfail entry [{entry.selector!r}] matches no collected check" for entry in unused
        ]
        try:
            for message in messages:
                warnings.warn(StmConformanceWarning(message), stacklevel=1)
        except StmConformanceWarning:  # -W error (or a filter) made the warning an error
            path = self.config.getoption("stm_xfail", None)
            error = (
                f"{'; '.join(messages)} (file {str(path)!r}; an error under the warning "
                "filters: remove the entry or fix its selector)"
            )
            if not self.is_worker:
                raise pytest.UsageError(error) from None
            with warnings.catch_warnings():
                warnings.simplefilter("always", XfailEntryError)
                warnings.warn(XfailEntryError(error), stacklevel=1)

    def pytest_warning_recorded(self, warning_message: warnings.WarningMessage) -> None:
        """pytest-xdist controller: remember an unused-entry error passed on by a worker."""
        if not self.is_worker and isinstance(warning_message.message, XfailEntryError):
            self.usage_error = str(warning_message.message)

    def _problem(self, requirements: tuple[str, ...], capabilities: tuple[str, ...]) -> str | None:
        if not requirements:
            return "conformance check has no @pytest.mark.stm_requirement('GROUP-NNN') marker"
        unknown_ids = [rid for rid in requirements if rid not in self.spec]
        if unknown_ids:
            return f"conformance check names requirement IDs not in the spec: {unknown_ids}"
        unknown_caps = sorted(set(capabilities) - CAPABILITIES)
        if unknown_caps:
            return f"conformance check names unknown capabilities: {unknown_caps}"
        return None

    # -- running ----------------------------------------------------------------------

    def pytest_collection_finish(self) -> None:
        # Everything imported and collected lives to the end of the run: moved out of the
        # collector's reach, it is not walked again by each full collection (one before
        # every failing check's report, below: ~40 ms each with hypothesis and pydantic
        # loaded, a few ms once frozen). Unfrozen at the end unless someone else froze
        # first (a process forking runs), so that a process running pytest again and again
        # can free what each run collected.
        self._unfreeze = gc.get_freeze_count() == 0
        gc.collect()
        gc.freeze()

    @pytest.hookimpl(tryfirst=True)
    def pytest_runtest_setup(self, item: pytest.Item) -> None:
        problem = item.stash.get(_PROBLEM, None)
        if problem is not None:
            pytest.fail(problem, pytrace=False)
        if _is_check(item):
            seed_check(self.seed, item.nodeid)

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_call(self, item: pytest.Item) -> Generator[None, None, None]:
        """Note the scenarios a check exercises (``stm_conformance.scenarios``)."""
        if not _is_check(item):
            return (yield)
        try:
            with scenarios.observing() as tags:
                return (yield)
        finally:
            tags.update(_marker_args(item, "stm_scenario"))
            item.user_properties.extend((PROP_SCENARIO, tag) for tag in sorted(tags))

    @pytest.hookimpl(wrapper=True)
    def pytest_pyfunc_call(self, pyfuncitem: pytest.Function) -> Generator[None, Any, Any]:
        """End a check that runs longer than ``--stm-timeout`` seconds (see ``_deadline``)."""
        if not (self.timeout > 0 and _is_check(pyfuncitem)):
            return (yield)
        original = pyfuncitem.obj
        hypothesis = getattr(original, "hypothesis", None)
        inner = getattr(hypothesis, "inner_test", None)
        if inner is not None:
            # anyio runs each example of an async hypothesis check: guard every example.
            inner = getattr(inner, "_anyio_original_func", inner)
            if inspect.iscoroutinefunction(inner):
                hypothesis.inner_test = _guarded(inner, None)  # type: ignore[union-attr]
        elif inspect.iscoroutinefunction(original):
            pyfuncitem.obj = _guarded(original, self.timeout)
        try:
            with _deadline.check_deadline(
                self.timeout, pyfuncitem.nodeid, getattr(pyfuncitem.module, "__file__", None)
            ):
                return (yield)
        except _deadline.CheckTimeout as exc:
            stopped = str(exc)
        finally:
            pyfuncitem.obj = original
            if inner is not None:
                hypothesis.inner_test = inner  # type: ignore[union-attr]
        pytest.fail(stopped, pytrace=False)

    @pytest.hookimpl(wrapper=True, tryfirst=True)
    def pytest_runtest_makereport(
        self, item: pytest.Item, call: pytest.CallInfo[None]
    ) -> Generator[None, pytest.TestReport, pytest.TestReport]:
        """Start each failure of a check with the requirement it is blamed on and its text
        (the check's requirements when nothing was blamed; none when its time limit
        stopped it with nothing found stuck: it judged none of them).

        An expected failure listed by requirement ID holds only when the check fails on
        that requirement: failing on another one is a failure (it is not what was expected).
        """
        if call.excinfo is not None and _is_check(item):
            # The backend's abandoned work is finalized now, not inside the traceback's
            # ast.parse: a finalizer running there left CPython 3.11's compiler with a
            # "recursion depth mismatch" SystemError, which ended the whole run.
            gc.collect()
        report = yield
        concluded = True
        blamed: str | None = None
        if call.excinfo is not None and _is_check(item) and (report.failed or report.skipped):
            requirements = _marker_args(item, "stm_requirement")
            blamed = blame_exception(call.excinfo.value, requirements, self.spec)
            report.user_properties.append((PROP_BLAMED, blamed or ""))
            # Stopped by its time limit with nothing found stuck: no requirement to head it.
            concluded = blamed is not None or not requirements
        if getattr(report, "wasxfail", None) is not None and call.excinfo is not None:
            expected = item.stash.get(_XFAIL_IDS, None)
            if (
                expected is not None
                and dict(report.user_properties).get(PROP_BLAMED) not in expected
            ):
                del report.wasxfail
                report.outcome = "failed"
                report.longrepr = item.repr_failure(call.excinfo)
        headlines = item.stash.get(_HEADLINES, None)
        if report.failed and headlines and concluded:
            # The check's other requirements were not judged: they do not head it.
            prefix_failure(report, [self.spec.headline(blamed)] if blamed else headlines)
        return report

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        if not self.is_worker:
            self.results.add(report)

    # -- reporting --------------------------------------------------------------------

    @pytest.hookimpl(trylast=True)
    def pytest_sessionfinish(self, session: pytest.Session, exitstatus: int) -> None:
        if self._unfreeze:
            gc.unfreeze()
        if self.is_worker:
            return
        if self.usage_error is not None:
            session.exitstatus = pytest.ExitCode.USAGE_ERROR
        self.complete = _is_complete(session, exitstatus)
        self.required = self._required_level()
        if self.required is not None and not self.required.reached and exitstatus == 0:
            session.exitstatus = exitstatus = pytest.ExitCode.TESTS_FAILED
        path = self._report_path()
        if path:
            document = self.results.as_json(
                self.run,
                complete=self.complete,
                exit_status=int(exitstatus),
                finished=dt.datetime.now(dt.UTC),
            )
            text = json.dumps(document, indent=2, ensure_ascii=False) + "\n"
            try:
                Path(path).parent.mkdir(parents=True, exist_ok=True)  # as --junitxml does
                Path(path).write_text(text, encoding="utf-8")
            except OSError as exc:
                # The run's results are still printed; its exit status says the report is not.
                self.usage_error = f"--stm-report: cannot write {path}: {exc.strerror or exc}"
                self.report_written = False
                session.exitstatus = pytest.ExitCode.USAGE_ERROR

    def pytest_terminal_summary(self, terminalreporter: Any) -> None:
        if self.usage_error is not None and self.report_written:
            terminalreporter.write_line(f"ERROR: {self.usage_error}", red=True)
        if self.is_worker:
            return
        required = self.required
        if not self.results.checks:
            if required is not None:  # asked for on the command line: fail loudly
                terminalreporter.write_line(
                    f"FAILED: required level {required.name} not reached: no conformance "
                    "check ran (add --stm-suite to run the suite)",
                    red=True,
                )
            return
        terminalreporter.section("stm conformance")
        for line in self.results.terminal_lines(self.run, complete=self.complete):
            terminalreporter.write_line(line)
        path = self._report_path()
        if not self.report_written:  # where its path would be, after the results
            terminalreporter.write_line(f"ERROR: {self.usage_error}", red=True)
        elif path:
            terminalreporter.write_line(f"report written to {path}")
        if required is not None:
            if required.reached:
                terminalreporter.write_line(f"required level {required.name} reached", green=True)
            else:
                terminalreporter.write_line(
                    f"FAILED: required level {required.name} not reached: {required.reason}",
                    red=True,
                )

    def _from_ini(self, name: str) -> bool:
        """Whether option ``name`` came from the ini file, which sets it for runs of checks
        only: plain ``pytest`` in a backend's repository runs its own tests, none a check."""
        return name in self.config.stash.get(FROM_INI, frozenset())

    def _report_path(self) -> str | None:
        path: str | None = self.config.getoption("stm_report", None)
        if not self.results.checks and self._from_ini("stm_report"):
            return None
        return path

    def _required_level(self) -> LevelResult | None:
        """The level ``--stm-require-level`` names, as this run reached it or not."""
        name = self.config.getoption("stm_require_level", None)
        if not name or (not self.results.checks and self._from_ini("stm_require_level")):
            return None
        levels = self.results.levels(complete=self.complete, declared=self.run.declared)
        return next(level for level in levels if level.name == name)


def _guarded(test: Callable[..., Any], seconds: float | None) -> Callable[..., Any]:
    """``test`` run by a guard: within ``seconds``, or the check's remaining time."""

    @functools.wraps(test, updated=())
    async def run(**kwargs: Any) -> Any:
        limit = _deadline.remaining() if seconds is None else seconds
        return await _deadline.run_guarded(
            test(**kwargs),
            seconds=limit,
            what="check",
            probe=_deadline.kit_probe,
            limit=_deadline.CHECK_LIMIT,
        )

    return run


def _is_suite_path(path: Path) -> bool:
    return path == SUITE_DIR or SUITE_DIR in path.parents


def _is_check(item: pytest.Item) -> bool:
    if not isinstance(item, pytest.Function):
        return False
    if _is_suite_path(item.path):
        return True
    return any(
        item.get_closest_marker(name) is not None
        for name in ("stm_requirement", "stm_capability", "stm_probe")
    )


def _marker_args(item: pytest.Item, name: str) -> tuple[str, ...]:
    values: list[str] = []
    for marker in reversed(list(item.iter_markers(name))):
        values += [str(arg) for arg in marker.args]
    return tuple(dict.fromkeys(values))


def _is_complete(session: pytest.Session, exitstatus: int) -> bool:
    """Whether the whole suite was selected and ran to the end."""
    option = session.config.option
    selecting = ("keyword", "markexpr", "lf", "deselect", "ignore", "ignore_glob")
    if any(getattr(option, name, None) for name in selecting):
        return False
    if session.shouldstop or session.shouldfail or exitstatus == pytest.ExitCode.INTERRUPTED:
        return False
    return _covers_suite(session.config.args, bool(getattr(option, "pyargs", False)))


def _covers_suite(args: Iterable[str], pyargs: bool) -> bool:
    """Whether one of the arguments collects the whole suite (other arguments may be
    the project's own tests, or parts of the suite again)."""
    for arg in args:
        if "::" in arg:
            continue
        if pyargs and arg in ("stm_conformance", "stm_conformance.suite"):
            return True
        path = Path(arg).resolve()
        if path == SUITE_DIR or path in SUITE_DIR.parents:
            return True
    return False
