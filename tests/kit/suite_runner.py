"""Suite runs for the kit's meta-tests, forked from one process that imported everything.

Starting pytest with hypothesis, the kit and the reference costs over a second of CPU,
and the meta-tests run the whole suite about ninety times. A *zygote* process imports all
of that once, then forks one child per run: a fork is a copy, so every run starts from
the same just-imported state a new interpreter would reach, without paying for it. Runs
can overlap: a suite run spends most of its time waiting on timers (retry backoffs, the
kit's patience), so a few at once keep the cores busy.

The zygote never runs a test or starts a thread or an event loop, which is what makes
forking it safe. A child writes its output to ``out.txt`` and, last, its exit status to
``exit.txt`` in its directory; the test process polls for that file.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

__all__ = ["SuiteRun", "Zygote"]

_ZYGOTE = r"""
import json, os, signal, sys
import hypothesis, pytest, reference_impl, stm_conformance.plugin  # imported once, shared

signal.signal(signal.SIGCHLD, signal.SIG_IGN)  # the kernel reaps the children
for line in sys.stdin:
    job = json.loads(line)
    if os.fork():
        continue
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
    code = 98
    try:
        os.chdir(job["cwd"])
        with open("pid.txt", "w") as f:
            f.write(str(os.getpid()))
        os.environ.clear()
        os.environ.update(job["env"])
        sys.path[:0] = [p for p in job["path"] if p not in sys.path]
        out = os.open("out.txt", os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        os.dup2(out, 1)
        os.dup2(out, 2)
        devnull = os.open(os.devnull, os.O_RDONLY)
        os.dup2(devnull, 0)
        code = int(pytest.main(job["args"]))
    except BaseException as exc:
        print(f"suite run crashed: {exc!r}", flush=True)
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        with open("exit.tmp", "w") as f:
            f.write(str(code))
        os.replace("exit.tmp", "exit.txt")
        os._exit(code)
"""


@dataclass
class SuiteRun:
    """One forked run of pytest; :meth:`wait` for its exit status and output."""

    cwd: Path
    command: str

    def done(self) -> bool:
        return (self.cwd / "exit.txt").is_file()

    def kill(self) -> None:
        """End the run (it is a child of the zygote, not of this process)."""
        with contextlib.suppress(OSError, ValueError):
            os.kill(int((self.cwd / "pid.txt").read_text(encoding="utf-8")), signal.SIGKILL)

    def wait(self, timeout: float) -> tuple[int, str]:
        """The exit status and output, once the run has ended (``TimeoutError`` after
        ``timeout`` seconds)."""
        deadline = time.monotonic() + timeout
        while not self.done():
            if time.monotonic() > deadline:
                self.kill()
                raise TimeoutError(f"{self.command} did not end within {timeout:.0f}s")
            time.sleep(0.05)
        code = int((self.cwd / "exit.txt").read_text(encoding="utf-8"))
        out = (self.cwd / "out.txt").read_text(encoding="utf-8", errors="replace")
        return code, f"$ {self.command}\nexit {code}\n{out}"


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

    def start(
        self, cwd: Path, args: list[str], env: Mapping[str, str], path: list[str]
    ) -> SuiteRun:
        """Fork ``pytest args`` in ``cwd`` with environment ``env`` and ``path`` first on
        ``sys.path``; returns at once."""
        assert self._process.stdin is not None
        for name in ("exit.txt", "out.txt", "pid.txt"):
            (cwd / name).unlink(missing_ok=True)
        job = {"cwd": str(cwd), "args": args, "env": dict(env), "path": path}
        self._process.stdin.write(json.dumps(job) + "\n")
        self._process.stdin.flush()
        return SuiteRun(cwd, "pytest " + " ".join(args))

    def close(self) -> None:
        if self._process.stdin is not None:
            self._process.stdin.close()
        self._process.wait(timeout=30)
