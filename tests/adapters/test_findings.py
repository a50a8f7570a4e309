"""The reproductions of docs/findings/ still reproduce, one per failing requirement.

Each ``docs/findings/<ID>.py`` runs against PenguiFlow alone and ends by asserting what the
spec requires of ``<ID>``, so on the pinned PenguiFlow it exits with an ``AssertionError``
whose message starts with the ID. ``adapters/stm_penguiflow/xfail.toml`` names the
requirements PenguiFlow fails; every one of them has a reproduction, and no other.
"""

from __future__ import annotations

import ast
import os
import re
import select
import signal
import subprocess
import sys
import time
import tomllib
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

pytest.importorskip("penguiflow")

REPO = Path(__file__).resolve().parents[2]
FINDINGS = REPO / "docs" / "findings"
XFAIL_FILE = REPO / "adapters" / "stm_penguiflow" / "xfail.toml"
#: Each reproduction takes a second or two; this only guards against a hang.
TIMEOUT_S = 30

REQUIREMENT_ID = re.compile(r"^[A-Z]+-\d{3}$")
#: A check entry's reason names the requirement it fails first: ``"WM-006: ..."``.
REASON_ID = re.compile(r"^([A-Z]+-\d{3}):")
#: What a reproduction may import besides the standard library.
ALLOWED_IMPORTS = frozenset({"penguiflow"})
#: The project's own packages, which a reproduction must not touch.
PROJECT_PACKAGES = (
    "stm_conformance",
    "reference_impl",
    "stm_penguiflow",
    "stm_stores",
    "stm_redis",
)

SCRIPTS = sorted(FINDINGS.glob("*.py"))


def failing_requirements() -> set[str]:
    """The requirement IDs ``xfail.toml`` declares failing: table names and reason prefixes."""
    entries = tomllib.loads(XFAIL_FILE.read_text(encoding="utf-8"))
    ids = {name for name in entries if REQUIREMENT_ID.match(name)}
    for name, entry in entries.items():
        if not REQUIREMENT_ID.match(name):
            match = REASON_ID.match(entry["reason"])
            assert match, f"{name}: the reason must open with the requirement ID it fails"
            ids.add(match.group(1))
    return ids


def imported_modules(path: Path) -> set[str]:
    """The top-level names of every module ``path`` imports."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name.partition(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            assert node.level == 0, f"{path.name}: relative import"
            names.add((node.module or "").partition(".")[0])
    return names


#: Runs each script it is sent as ``python SCRIPT`` would, in a child forked after the
#: imports every reproduction makes: a fresh ``__main__``, an uncaught exception's
#: traceback on standard error and exit status 1. Importing penguiflow is most of a
#: reproduction's CPU. Protocol: a line ``script<TAB>stdout file<TAB>stderr file`` in;
#: the child's process ID, then its exit status, out.
_FORKER = r"""
import asyncio, json, os, runpy, sys, traceback
import penguiflow.planner.memory

for line in sys.stdin:
    script, out, err = line.rstrip("\n").split("\t")
    pid = os.fork()
    if pid:
        print(pid, flush=True)
        print(os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]), flush=True)
        continue
    code = 1
    try:
        for fd, name in ((1, out), (2, err)):
            os.dup2(os.open(name, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644), fd)
        sys.argv = [script]
        runpy.run_path(script, run_name="__main__")
        code = 0
    except SystemExit as exc:
        if exc.code is None or isinstance(exc.code, int):
            code = exc.code or 0
        else:
            print(exc.code, file=sys.stderr)
    except BaseException:
        traceback.print_exc()
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)
"""

Reproduce = Callable[[Path, Path], tuple[int, str, str]]


@pytest.fixture(scope="module")
def reproduce() -> Iterator[Reproduce]:
    """``reproduce(script, scratch)``: exit status, output and error of ``python script``."""
    forker = subprocess.Popen(
        [sys.executable, "-c", _FORKER], cwd=REPO, stdin=subprocess.PIPE, stdout=subprocess.PIPE
    )
    assert forker.stdin is not None and forker.stdout is not None
    stdin, answers = forker.stdin, forker.stdout.fileno()

    def line(timeout: float) -> str:
        # Unbuffered: a buffered reader would take both answers at once and leave select()
        # waiting for the second.
        data = b""
        deadline = time.monotonic() + timeout
        while not data.endswith(b"\n"):
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([answers], [], [], left)[0]:
                return ""
            chunk = os.read(answers, 1)
            if not chunk:
                return ""
            data += chunk
        return data.decode().strip()

    def run(script: Path, scratch: Path) -> tuple[int, str, str]:
        out, err = scratch / "stdout.txt", scratch / "stderr.txt"
        stdin.write(f"{script}\t{out}\t{err}\n".encode())
        stdin.flush()
        pid = line(TIMEOUT_S)
        if not pid:
            pytest.fail(f"the process forking the reproductions is gone (exit {forker.poll()})")
        status = line(TIMEOUT_S)
        if not status:
            os.kill(int(pid), signal.SIGKILL)
            line(TIMEOUT_S)  # the killed child's status, so the next script starts afresh
            pytest.fail(f"{script.name} did not end within {TIMEOUT_S}s")
        return int(status), out.read_text("utf-8"), err.read_text("utf-8")

    try:
        yield run
    finally:
        stdin.close()
        forker.wait(timeout=TIMEOUT_S)


@pytest.mark.parametrize("script", SCRIPTS, ids=[p.stem for p in SCRIPTS])
def test_the_finding_reproduces(script: Path, reproduce: Reproduce, tmp_path: Path) -> None:
    code, stdout, stderr = reproduce(script, tmp_path)
    output = f"exit {code}\n{stdout}\n{stderr}"[-3000:]
    assert code != 0, f"{script.name} no longer reproduces the defect:\n{output}"
    assert "AssertionError" in stderr, output
    assert f"AssertionError: {script.stem}:" in stderr, (
        f"the failed assertion must state the defect of {script.stem}:\n{output}"
    )


def test_every_failing_requirement_has_a_finding() -> None:
    failing = failing_requirements()
    found = {p.stem for p in SCRIPTS}
    assert failing, f"no failing requirement found in {XFAIL_FILE}"
    assert not failing - found, f"no docs/findings/<ID>.py for {sorted(failing - found)}"
    assert not found - failing, (
        f"findings for requirements xfail.toml does not list: {sorted(found - failing)}"
    )


@pytest.mark.parametrize("script", SCRIPTS, ids=[p.stem for p in SCRIPTS])
def test_the_finding_needs_penguiflow_alone(script: Path) -> None:
    text = script.read_text(encoding="utf-8")
    mentioned = [name for name in PROJECT_PACKAGES if name in text]
    assert not mentioned, f"{script.name} refers to this project's {mentioned}"
    foreign = imported_modules(script) - ALLOWED_IMPORTS - sys.stdlib_module_names
    assert not foreign, f"{script.name} imports {sorted(foreign)}: only penguiflow and the stdlib"
