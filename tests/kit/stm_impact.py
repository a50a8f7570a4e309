"""Which checks a mutant's change can reach: a pytest plugin for the meta-tests' suite runs.

A mutant is the reference with one change, and a check that never runs the changed code
runs exactly the reference's code, which passes it (``test_reference_passes_everything``
judges such a run in the same session). So a mutant's run needs only the checks that can
reach its change, and the meta-tests run only those; what each check reaches is read off
the reference.

- ``--impact-record=FILE`` (a run of the reference): note, for every check, the functions
  of ``reference_impl`` that ran during it (setup, call and teardown, in any thread), and
  write them to ``FILE`` with the checks that did not pass (for those the record may stop
  short, so they are always run).
- ``--impact-select=FILE`` (a run of a mutant): find the reference's functions the mutant
  replaces (its *footprint*) and deselect the checks that ran none of them in ``FILE``.

The footprint is taken from the objects, not the source: the attributes the mutant's
classes define over a reference class's, and the attributes of ``reference_impl``'s modules
and classes that importing the mutant changed (``_util.own_memory_only`` and the like).
Anything the record cannot speak for makes the mutant run every check: a replaced value
that is not a function of ``reference_impl`` (a constant, say), a provider that differs
from the reference's in more than the memory it creates (a key resolver, the Redis
backend), a missing or unreadable record.

A record holds what one run of the reference did, and the checks are deterministic up to
timing: a change reached only on a path the reference took in another run's timing is
missed. ``STM_MUTANT_RUNS=full`` runs every mutant against every check instead.
"""

from __future__ import annotations

import dataclasses
import importlib
import inspect
import json
import pkgutil
import sys
import threading
import types
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import pytest

import reference_impl

#: As the code objects' ``co_filename`` spell it (the path the package was imported from).
REFERENCE_DIR = str(Path(reference_impl.__file__).parent)
_PREFIX = "reference_impl"
#: Attributes every class has of its own: not a change of behaviour.
_PLAIN = frozenset(
    {
        "__module__", "__qualname__", "__doc__", "__dict__", "__weakref__", "__slots__",
        "__annotations__", "__orig_bases__", "__parameters__", "__abstractmethods__",
        "_abc_impl", "__firstlineno__", "__static_attributes__", "__match_args__",
        "__dataclass_fields__", "__dataclass_params__",
    }
)  # fmt: skip


class Unknown(Exception):
    """The mutant changes something the record cannot speak for: run every check."""


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("stm-impact", "meta-tests: the checks a mutant can change")
    group.addoption("--impact-record", metavar="FILE", help="record what each check runs")
    group.addoption("--impact-select", metavar="FILE", help="run only the checks reaching it")


def pytest_configure(config: pytest.Config) -> None:
    record = config.getoption("impact_record")
    select = config.getoption("impact_select")
    if record:
        config.pluginmanager.register(Recorder(Path(record)), "stm-impact-recorder")
    elif select:
        config.pluginmanager.register(Selector(Path(select)), "stm-impact-selector")


# -- recording ------------------------------------------------------------------------


def code_key(code: types.CodeType) -> str:
    """A function's name across processes: its file (under ``reference_impl``), first
    line and qualified name."""
    path = Path(code.co_filename).relative_to(REFERENCE_DIR).as_posix()
    return f"{path}:{code.co_firstlineno}:{code.co_qualname}"


class Recorder:
    """Note the code objects that run during each check, in every thread."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.ran: set[types.CodeType] = set()
        self.checks: dict[str, list[str]] = {}
        self.not_passed: set[str] = set()

    def _trace(self, frame: types.FrameType, event: str, arg: Any) -> None:
        # A global trace function only: called once per call (and resumption), with no
        # tracing of lines inside.
        self.ran.add(frame.f_code)

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_protocol(self, item: pytest.Item) -> Iterator[None]:
        self.ran.clear()
        sys.settrace(self._trace)
        threading.settrace(self._trace)
        try:
            return (yield)
        finally:
            sys.settrace(None)
            threading.settrace(None)  # type: ignore[arg-type]
            ran = list(self.ran)
            self.ran.clear()
            self.checks[item.nodeid] = sorted(
                code_key(code) for code in ran if code.co_filename.startswith(REFERENCE_DIR)
            )

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        # A check that skipped itself while running stopped where the backend's answers
        # led it: against a mutant it may go on.
        if report.failed or (report.skipped and report.when == "call"):
            self.not_passed.add(report.nodeid)

    def pytest_sessionfinish(self) -> None:
        record = {"checks": self.checks, "not_passed": sorted(self.not_passed)}
        tmp = self.path.with_suffix(".tmp")
        tmp.write_text(json.dumps(record), encoding="utf-8")
        tmp.replace(self.path)


# -- the mutant's footprint -----------------------------------------------------------


def _reference_modules() -> list[types.ModuleType]:
    for info in pkgutil.walk_packages(reference_impl.__path__, f"{_PREFIX}."):
        importlib.import_module(info.name)
    return [m for n, m in sorted(sys.modules.items()) if n.split(".")[0] == _PREFIX]


def _is_reference(obj: Any) -> bool:
    return str(getattr(obj, "__module__", "")).split(".")[0] == _PREFIX


Snapshot = dict[tuple[str, str], dict[str, Any]]


def snapshot() -> Snapshot:
    """The attributes of every module of ``reference_impl`` and of the classes they define."""
    taken: Snapshot = {}
    for module in _reference_modules():
        taken[(module.__name__, "")] = dict(vars(module))
        for value in vars(module).values():
            if isinstance(value, type) and value.__module__ == module.__name__:
                taken[(module.__name__, value.__qualname__)] = dict(vars(value))
    return taken


def _functions(value: Any) -> list[Any]:
    """The plain functions behind a class or module attribute; :class:`Unknown` when it
    is not code of ``reference_impl`` (a constant, a class, a generated method)."""
    if isinstance(value, staticmethod | classmethod):
        value = value.__func__
    if isinstance(value, property):
        found = [f for f in (value.fget, value.fset, value.fdel) if f is not None]
    else:
        found = [value]
    functions = [inspect.unwrap(f) for f in found]
    for function in functions:
        code = getattr(function, "__code__", None)
        if code is None or not code.co_filename.startswith(REFERENCE_DIR):
            raise Unknown(f"{value!r} is not a function of reference_impl")
    return functions


def _owned_classes(module: types.ModuleType, roots: Iterable[Any]) -> list[type]:
    """The classes the mutant module defines, reachable from its namespace and ``roots``
    (through class attributes, bases and closures: a class a helper builds around one)."""
    seen: set[int] = set()
    owned: list[type] = []
    stack = [*vars(module).values(), *roots]
    while stack:
        obj = stack.pop()
        if id(obj) in seen:
            continue
        seen.add(id(obj))
        if isinstance(obj, type):
            if obj.__module__ == module.__name__:
                owned.append(obj)
            if not _is_reference(obj) and obj.__module__ != "builtins":
                stack.extend(obj.__mro__[1:])
                stack.extend(vars(obj).values())
        elif isinstance(obj, staticmethod | classmethod):
            stack.append(obj.__func__)
        elif isinstance(obj, types.FunctionType) and not _is_reference(obj):
            stack.extend(cell.cell_contents for cell in obj.__closure__ or () if _filled(cell))
    return owned


def _is_mutant(cls: type) -> bool:
    """A class of a mutant or of its helpers (``_util``), which only the replaced
    reference functions lead to."""
    return cls.__module__.split(".")[0] == "stm_mutants"


def _filled(cell: Any) -> bool:
    try:
        cell.cell_contents  # noqa: B018 - an empty cell raises
    except ValueError:
        return False
    return True


def footprint(module: types.ModuleType, before: Snapshot) -> set[str]:
    """The code keys of the reference's functions the mutant ``module`` replaces (raises
    :class:`Unknown` when its change is not only functions of the reference)."""
    from stm_mutants import reference_provider

    provider = module.provider
    if provider.create.__qualname__ != "mutant_provider.<locals>.create":
        raise Unknown(f"its provider creates memories its own way ({provider.create.__qualname__})")
    for field in dataclasses.fields(provider):
        name = field.name
        if name not in ("name", "create") and getattr(provider, name) != getattr(
            reference_provider, name
        ):
            raise Unknown(f"its provider's {name} is not the reference's")
    replaced: list[Any] = []
    after = snapshot()
    for where, attributes in after.items():
        old = before.get(where)
        if old is None:
            raise Unknown(f"{'.'.join(filter(None, where))} appeared on import")
        for name, value in attributes.items():
            if name not in old:
                raise Unknown(f"{'.'.join(filter(None, where))}.{name} appeared on import")
            if value is not old[name] and name not in _PLAIN:
                replaced += _functions(old[name])
    for cls in _owned_classes(module, [provider.create]):
        if not any(_is_reference(base) for base in cls.__mro__):
            continue  # the mutant's own kind of object, reached only through what it replaces
        for name in vars(cls):
            if name in _PLAIN:
                continue
            owners = [b for b in cls.__mro__[1:] if name in vars(b) and not _is_mutant(b)]
            reference = next((b for b in owners if _is_reference(b)), None)
            if reference is not None:
                replaced += _functions(vars(reference)[name])
            elif owners:
                # Replaces what the reference inherits from Python (``__eq__``, say).
                raise Unknown(f"{cls.__qualname__}.{name} replaces {owners[0]!r}'s")
            elif not isinstance(
                vars(cls)[name], types.FunctionType | staticmethod | classmethod | property
            ):
                # Data the reference may read (``getattr`` with a default, an instance
                # attribute's class-level fallback).
                raise Unknown(f"{cls.__qualname__}.{name} is data of its own")
            # Else a function of the mutant's own, reached only through what it replaces.
    return {code_key(function.__code__) for function in replaced}


#: Taken as ``-p stm_impact`` loads this module: before the kit imports the mutant (in its
#: ``pytest_configure``).
_BEFORE = snapshot()


class Selector:
    """Deselect the checks that ran none of the mutant's footprint in the record."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.note = ""

    @pytest.hookimpl(trylast=True)
    def pytest_collection_modifyitems(
        self, config: pytest.Config, items: list[pytest.Item]
    ) -> None:
        backend = str(config.getoption("stm_backend") or "")
        name = backend.partition(":")[0]
        module = sys.modules.get(name)
        if module is None or not hasattr(module, "provider"):
            self.note = f"every check: {backend!r} names no mutant module"
            return
        try:
            keys = footprint(module, _BEFORE)
            record = json.loads(self.path.read_text(encoding="utf-8"))
        except Unknown as exc:
            self.note = f"every check: {exc}"
            return
        except OSError as exc:
            self.note = f"every check: no record of the reference ({exc})"
            return
        checks: dict[str, list[str]] = record["checks"]
        always = set(record["not_passed"])
        keep, drop = [], []
        for item in items:
            ran = checks.get(item.nodeid)
            if ran is None or item.nodeid in always or keys.intersection(ran):
                keep.append(item)
            else:
                drop.append(item)
        if drop:
            config.hook.pytest_deselected(items=drop)
            items[:] = keep
        self.note = f"{len(keep)} of {len(keep) + len(drop)} checks reach {sorted(keys)}"

    def pytest_report_header(self) -> str:
        return "stm impact: selecting the checks that reach the mutant's change"

    def pytest_terminal_summary(self, terminalreporter: Any) -> None:
        terminalreporter.write_line(f"stm impact: {self.note}")
