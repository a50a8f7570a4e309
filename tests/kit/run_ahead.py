"""Whole-suite runs of the meta-tests, all started ahead, at collection, in one batch.

A meta-test that judges a whole run of the suite (against a mutant, a hanging backend, the
reference) mostly waits: a run spends seconds on timers (retry backoffs, the kit's
patience, its hang detection) and two to three seconds of CPU. Run one after the other,
some 275 runs would take most of the project's test time, whichever worker they land on. So
the process that collects first (the only one, or xdist's ``gw0``) starts every run its
session selected as soon as collection ends, a few at once (:data:`AT_ONCE`) from a
thread, and the tests that judge them are moved to the end of the session: by then most
runs have ended, and any worker reads a run's result from the run's directory.

A test asks for a run with the ``suite_run`` mark (a :class:`Job`) and gets it, ended, from
the ``suite_result`` fixture (``tests/kit/conftest.py``).
"""

from __future__ import annotations

import threading
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kit_support import RUN_TIMEOUT_S, finish_suite, start_suite
from suite_runner import SuiteRun

__all__ = ["AT_ONCE", "Batch", "Job"]

#: Runs that use CPU at once. A run needs about 2.5 s of CPU over fifteen to thirty seconds
#: of waiting (its checks' timers); the rest of the tests run beside them on two cores.
#: Measured on two cores, the project's tests with 275 runs: 11 left the CPU 13 % idle
#: (531 s, 923 CPU-s), 14 kept it busy (499 s, 946 CPU-s), 16 was slower (537 s) for
#: more CPU spent in contention (1,049 CPU-s).
AT_ONCE = 14


@dataclass(frozen=True)
class Job:
    """One run of the whole suite: its directory ``name``, ``--stm-backend`` and options."""

    name: str
    backend: str
    args: tuple[str, ...] = ()
    #: Environment variables of the run, on top of the clean one.
    env: tuple[tuple[str, str], ...] = ()
    #: Waits on timers almost throughout (a hanging backend): not counted in AT_ONCE.
    idle: bool = False
    #: Known to take longest: started before the others.
    slow: bool = False
    #: A job that must have ended before this one starts (its output is an input of this
    #: one: ``stm_impact``'s record of the reference); it runs whenever this one does.
    after: Job | None = None


@dataclass(frozen=True)
class Ended:
    """A run's JSON report and output, and how long it took from start to end."""

    report: dict[str, Any]
    output: str
    took_s: float


Start = Callable[[Path, str, list[str], dict[str, str]], SuiteRun]


class Batch:
    """The runs of ``jobs``, in directories under ``root``.

    :meth:`start_all` (in the one process that starts them) runs the schedule in a
    thread; :meth:`result` (in any process) waits for one run to end.
    """

    def __init__(
        self,
        root: Path,
        jobs: list[Job],
        start: Start = start_suite,
        timeout_s: float = RUN_TIMEOUT_S,
    ) -> None:
        self.root = root
        self.jobs = {job.name: job for job in jobs}
        self._start = start
        #: Longest a run may take, and a test wait for a run to start.
        self.timeout_s = timeout_s
        self._thread: threading.Thread | None = None
        self._stop = threading.Event()

    def start_all(self) -> None:
        self._thread = threading.Thread(target=self._run_schedule, name="suite-runs", daemon=True)
        self._thread.start()

    @property
    def _crash(self) -> Path:
        return self.root / "schedule-crashed.txt"

    def _run_schedule(self) -> None:
        try:
            self._schedule()
        except BaseException:
            # Judges in any process read this rather than wait out their deadline.
            self.root.mkdir(parents=True, exist_ok=True)
            self._crash.write_text(traceback.format_exc(), encoding="utf-8")

    def join(self) -> None:
        """Wait until every run has started and ended (or timed out, or been stopped)."""
        if self._thread is not None:
            self._thread.join()

    def stop(self) -> None:
        """Start no more runs and end those running (nobody will judge them)."""
        self._stop.set()

    def _schedule(self) -> None:
        queue = sorted(self.jobs.values(), key=lambda job: not (job.idle or job.slow))
        running: dict[str, tuple[SuiteRun, float]] = {}
        ended: set[str] = set()
        while queue or running:
            if self._stop.is_set():
                for run, _ in running.values():
                    run.kill()
                return
            for name, (run, started) in list(running.items()):
                if run.done():
                    del running[name]
                    ended.add(name)
                elif time.monotonic() - started > self.timeout_s:
                    run.kill()  # the judging test reports the missing report
                    del running[name]
                    ended.add(name)
            busy = sum(not self.jobs[name].idle for name in running)
            for job in list(queue):
                if not (job.idle or busy < AT_ONCE):
                    continue
                if job.after is not None and job.after.name not in ended:
                    continue
                queue.remove(job)
                cwd = self.root / job.name
                cwd.mkdir(parents=True)
                now = repr(time.time())
                run = self._start(cwd, job.backend, list(job.args), dict(job.env))
                (cwd / "started.txt").write_text(now, encoding="utf-8")  # judges may wait now
                running[job.name] = (run, time.monotonic())
                busy += not job.idle
            time.sleep(0.05)

    def result(self, name: str) -> Ended:
        """Wait for the run of job ``name`` to end; its report, output and duration."""
        job = self.jobs[name]
        cwd = self.root / name
        run = SuiteRun(cwd, f"pytest --stm-backend={job.backend} {' '.join(job.args)}", cwd)
        deadline = time.monotonic() + self.timeout_s
        while not (cwd / "started.txt").is_file():
            if self._crash.is_file():
                raise RuntimeError(f"the runs' schedule crashed:\n{self._crash.read_text('utf-8')}")
            if time.monotonic() > deadline:
                raise TimeoutError(f"the run of {name} never started (is its starter alive?)")
            time.sleep(0.05)
        report, output = finish_suite(run, self.timeout_s)
        started = float((cwd / "started.txt").read_text(encoding="utf-8"))
        return Ended(report, output, (cwd / "exit.txt").stat().st_mtime - started)
