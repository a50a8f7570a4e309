"""Suite runs for the kit's meta-tests, forked from one process that imported everything.

Starting pytest with hypothesis, the kit and the reference costs over a second of CPU,
and the meta-tests run the whole suite some 275 times. A *zygote* process imports all
of that once, then forks one child per run: a fork is a copy, so every run starts from
the same just-imported state a new interpreter would reach, without paying for it. Runs
can overlap: a suite run spends most of its time waiting on timers (retry backoffs, the
kit's patience), so a few at once keep the cores busy.

The zygote never runs a test or starts a thread or an event loop, which is what makes
forking it safe. A child writes its output to ``out.txt`` (its standard error to
``err.txt`` when asked to keep them apart) and, last, its exit status to ``exit.txt`` in
its directory; the test process polls for that file.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

__all__ = ["SuiteRun", "Zygote"]

_ZYGOTE = r"""
import gc, json, os, signal, sys
import hypothesis, pytest, reference_impl, stm_conformance.plugin  # imported once, shared
import importlib

# And what a run imports next, so that no run pays for it (a module's asserts are not
# rewritten once imported; the kit's only ones narrow types).
for name in (
    "anyio.pytest_plugin", "hypothesis.stateful", "xdist.plugin", "xdist.looponfail",
    "platformdirs.pytest_plugin", "pdb", "tomllib", "xml.etree.ElementTree", "faulthandler",
    "_pytest.faulthandler", "_pytest.junitxml", "_pytest.pastebin", "_pytest.skipping",
    "_pytest.unittest", "_pytest.threadexception", "_pytest.unraisableexception",
    "_pytest.warnings", "_pytest.helpconfig", "_pytest.setuponly", "_pytest.setupplan",
    "_pytest.tracemalloc", "stm_conformance.checks", "stm_conformance.fixtures",
    "stm_conformance.stateful", "stm_conformance.scripted", "stm_conformance.report",
    "stm_conformance.xfail", "reference_impl.provider", "fakeredis", "stm_redis.provider",
):
    try:
        importlib.import_module(name)
    except ImportError:  # an optional plugin not installed
        pass
from _pytest.assertion.rewrite import AssertionRewritingHook

# pytest warns that the plugins imported above are too late for assert rewriting; a new
# interpreter would not have imported them yet. Their asserts are not what the runs check.
AssertionRewritingHook._warn_already_imported = lambda self, name: None

# The kit's strategies, built once: the first draw of a text strategy builds hypothesis'
# character tables (tens of milliseconds), which every run would otherwise do again.
# Hypothesis warns of such work before its plugin is configured, which here is on purpose;
# imported first, its plugin warns here (silenced) rather than in every run.
import _hypothesis_pytestplugin, warnings
from hypothesis.errors import HypothesisSideeffectWarning
from hypothesis.strategies import SearchStrategy
with warnings.catch_warnings():
    warnings.simplefilter("ignore", HypothesisSideeffectWarning)
    for module in [m for n, m in sys.modules.items() if n.startswith("stm_conformance.")]:
        for value in list(vars(module).values()):
            if isinstance(value, SearchStrategy):
                value.validate()

# Hypothesis reads the literal constants of every module outside site-packages (here the
# kit and the reference, installed editable) when a run collects its first test: some 40 ms
# a run, done once here. Later runs read only the modules they import themselves.
# Hypothesis warns of that too (as of 6.170), here on purpose and silenced.
try:
    from hypothesis.internal.conjecture.providers import _get_local_constants
except ImportError:  # another version of hypothesis: each run reads them as before
    pass
else:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", HypothesisSideeffectWarning)
        _get_local_constants()

# Every object imported so far outlives the runs: out of the collector's sight, a run's
# full collections (pytest's at exit, hypothesis', the automatic ones) walk only what the
# run made -- a tenth of a run's CPU.
gc.collect()
gc.freeze()

OURS = {"stm_conformance", "reference_impl", "stm_stores", "stm_penguiflow", "stm_redis"}
signal.signal(signal.SIGCHLD, signal.SIG_IGN)  # the kernel reaps the children
for line in sys.stdin:
    job = json.loads(line)
    if os.fork():
        continue
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
    code = 98
    try:
        os.chdir(job["cwd"])
        files = job["files"]
        with open(os.path.join(files, "pid.txt"), "w") as f:
            f.write(str(os.getpid()))
        os.environ.clear()
        os.environ.update(job["env"])
        sys.path[:0] = [p for p in job["path"] if p not in sys.path]
        if job["split"]:
            # A run that must look like a new interpreter's: this project's modules are
            # imported afresh (pytest rewrites their asserts and would otherwise warn).
            for name in [m for m in sys.modules if m.split(".")[0] in OURS]:
                del sys.modules[name]
        flags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC
        out = os.open(os.path.join(files, "out.txt"), flags, 0o644)
        err = os.open(os.path.join(files, "err.txt"), flags, 0o644) if job["split"] else out
        os.dup2(out, 1)
        os.dup2(err, 2)
        devnull = os.open(os.devnull, os.O_RDONLY)
        os.dup2(devnull, 0)
        code = int(pytest.main(job["args"]))
    except BaseException as exc:
        print(f"suite run crashed: {exc!r}", flush=True)
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        with open(os.path.join(job["files"], "exit.tmp"), "w") as f:
            f.write(str(code))
        os.replace(os.path.join(job["files"], "exit.tmp"), os.path.join(job["files"], "exit.txt"))
        os._exit(code)
"""


@dataclass
class SuiteRun:
    """One forked run of pytest; :meth:`wait` for its exit status and output.

    ``cwd`` is where it runs and ``files`` where it writes its output, process ID and exit
    status (``cwd`` unless told otherwise)."""

    cwd: Path
    command: str
    files: Path

    def done(self) -> bool:
        return (self.files / "exit.txt").is_file()

    def kill(self) -> None:
        """End the run (it is a child of the zygote, not of this process)."""
        with contextlib.suppress(OSError, ValueError):
            os.kill(int((self.files / "pid.txt").read_text(encoding="utf-8")), signal.SIGKILL)

    def wait(self, timeout: float) -> tuple[int, str]:
        """The exit status and output, once the run has ended (``TimeoutError`` after
        ``timeout`` seconds)."""
        deadline = time.monotonic() + timeout
        while not self.done():
            if time.monotonic() > deadline:
                self.kill()
                tail = self.output()[0][-6000:]
                raise TimeoutError(
                    f"{self.command} did not end within {timeout:.0f}s;"
                    f" the end of its output:\n{tail}"
                )
            time.sleep(0.05)
        code = int((self.files / "exit.txt").read_text(encoding="utf-8"))
        return code, f"$ {self.command}\nexit {code}\n{self.output()[0]}"

    def output(self) -> tuple[str, str]:
        """What the run wrote to its standard output and, when kept apart, its error."""

        def read(name: str) -> str:
            path = self.files / name
            return path.read_text(encoding="utf-8", errors="replace") if path.is_file() else ""

        return read("out.txt"), read("err.txt")


class Zygote:
    """A process that has imported pytest, hypothesis, the kit and the reference, and
    forks a pytest run on request."""

    def __init__(self, env: Mapping[str, str]) -> None:
        self._process = subprocess.Popen(
            [sys.executable, "-c", _ZYGOTE],
            stdin=subprocess.PIPE,
            env=dict(env),
            text=True,
        )
        self._lock = threading.Lock()  # runs are started from more than one thread

    def start(
        self,
        cwd: Path,
        args: list[str],
        env: Mapping[str, str],
        path: list[str],
        *,
        split: bool = False,
        files: Path | None = None,
    ) -> SuiteRun:
        """Fork ``pytest args`` in ``cwd`` with environment ``env`` and ``path`` first on
        ``sys.path``; returns at once. ``split`` keeps standard error apart; ``files`` is
        where the run's own files go (default ``cwd``)."""
        files = files or cwd
        for name in ("exit.txt", "out.txt", "err.txt", "pid.txt"):
            (files / name).unlink(missing_ok=True)
        job = {
            "cwd": str(cwd),
            "files": str(files),
            "args": args,
            "env": dict(env),
            "path": path,
            "split": split,
        }
        with self._lock:
            assert self._process.stdin is not None
            self._process.stdin.write(json.dumps(job) + "\n")
            self._process.stdin.flush()
        return SuiteRun(cwd, "pytest " + " ".join(args), files)

    def close(self) -> None:
        if self._process.stdin is not None:
            self._process.stdin.close()
        self._process.wait(timeout=30)
