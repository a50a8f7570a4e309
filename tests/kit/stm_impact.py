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
A provider's fields count as what the kit calls them through: a key resolver the mutant
gives its provider replaces the reference provider's, and a storage key of its own (the
reference has none) is reached through the kit's ``Provider.key_for_storage``, which the
record notes too. Data a mutant's class adds under a name no code of the reference or the
kit names is read only by the mutant's own functions, reached through what it replaces.

Anything the record cannot speak for makes the mutant run every check: a replaced value
that is not a function of ``reference_impl`` (a constant, say), data under a name the
reference reads, a provider that creates memories its own way (the Redis backend) or
differs in another field, a missing or unreadable record.

A record holds what one run of the reference did, and the checks are deterministic up to
timing: a change reached only on a path the reference took in another run's timing is
missed. ``STM_MUTANT_RUNS=full`` runs every mutant against every check instead.
"""

from __future__ import annotations

import dataclasses
import functools
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
from stm_conformance.provider import Provider

#: As the code objects' ``co_filename`` spell it (the path the package was imported from).
REFERENCE_DIR = str(Path(reference_impl.__file__).parent)
_PREFIX = "reference_impl"
#: The kit's functions that call a provider field the reference leaves unset: a mutant
#: setting the field changes only the checks that run them.
_DOORS: dict[str, Any] = {"storage_key": Provider.key_for_storage}
_DOOR_CODES = frozenset(door.__code__ for door in _DOORS.values())
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
    """A function's name across processes: its file (under ``reference_impl``; a kit's
    door by module), first line and qualified name."""
    if code in _DOOR_CODES:
        path = f"<kit>/{Path(code.co_filename).name}"
    else:
        path = Path(code.co_filename).relative_to(REFERENCE_DIR).as_posix()
    return f"{path}:{code.co_firstlineno}:{code.co_qualname}"


def _recorded(code: types.CodeType) -> bool:
    return code.co_filename.startswith(REFERENCE_DIR) or code in _DOOR_CODES


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
            self.checks[item.nodeid] = sorted(code_key(code) for code in ran if _recorded(code))

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


@functools.cache
def _names_read() -> frozenset[str]:
    """Every name the code of the reference and the kit names: attributes, globals and
    string constants (``getattr(x, "name")``), from their source. Data of a mutant's own
    under any other name is read only by the mutant's own code."""
    import stm_conformance

    names: set[str] = set()
    for package in (REFERENCE_DIR, str(Path(stm_conformance.__file__).parent)):
        for path in sorted(Path(package).rglob("*.py")):
            stack = [compile(path.read_bytes(), str(path), "exec", dont_inherit=True)]
            while stack:
                code = stack.pop()
                names.update(code.co_names)
                for const in code.co_consts:
                    if isinstance(const, str):
                        names.add(const)
                    elif isinstance(const, types.CodeType):
                        stack.append(const)
    return frozenset(names)


def _provider_changes(provider: Provider) -> tuple[list[Any], list[Any]]:
    """What a mutant's provider changes: the reference's functions (and the kit's doors)
    its fields replace, and its own functions that stand in for them."""
    from stm_mutants import reference_provider

    replaced: list[Any] = []
    own: list[Any] = []
    for field in dataclasses.fields(provider):
        name = field.name
        ours, theirs = getattr(provider, name), getattr(reference_provider, name)
        if name == "name" or ours == theirs:
            continue
        if name == "create" and ours.__qualname__ == "mutant_provider.<locals>.create":
            own.append(ours)  # the reference's create, making the mutant's memory class
        elif name == "create":
            raise Unknown(f"its provider creates memories its own way ({ours.__qualname__})")
        elif isinstance(ours, types.FunctionType) and theirs is None and name in _DOORS:
            replaced.append(_DOORS[name])
            own.append(ours)
        elif isinstance(ours, types.FunctionType) and _is_reference(theirs):
            replaced += _functions(theirs)
            own.append(ours)
        else:
            raise Unknown(f"its provider's {name} is not the reference's")
    return replaced, own


def footprint(module: types.ModuleType, before: Snapshot) -> set[str]:
    """The code keys of the reference's functions the mutant ``module`` replaces (raises
    :class:`Unknown` when its change is not only functions of the reference)."""
    replaced, own = _provider_changes(module.provider)
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
    for cls in _owned_classes(module, own):
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
            elif (
                not isinstance(
                    vars(cls)[name], types.FunctionType | staticmethod | classmethod | property
                )
                and name in _names_read()  # read from source: only for data
            ):
                # Data the reference or the kit may read (``getattr`` with a default, an
                # instance attribute's class-level fallback).
                raise Unknown(f"{cls.__qualname__}.{name} is data of its own, by a name read")
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
