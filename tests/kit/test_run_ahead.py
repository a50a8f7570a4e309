"""The batch of whole-suite runs (``run_ahead``) starts each run once, a few at once."""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path

import pytest
from run_ahead import AT_ONCE, Batch, Job
from suite_runner import SuiteRun


class FakeRuns:
    """Stand-in for ``start_suite``: a run ends when the test says so, with a report."""

    def __init__(self) -> None:
        self.started: list[str] = []
        self.running: set[str] = set()
        self.most_at_once = 0
        self.lock = threading.Lock()

    def start(self, cwd: Path, backend: str, args: list[str], env: dict[str, str]) -> SuiteRun:
        with self.lock:
            self.started.append(cwd.name)
            self.running.add(cwd.name)
            busy = [n for n in self.running if not n.startswith("idle")]
            self.most_at_once = max(self.most_at_once, len(busy))
        (cwd / "env.json").write_text(json.dumps([backend, args, env]), encoding="utf-8")
        return SuiteRun(cwd, backend, cwd)

    def end(self, root: Path, name: str) -> None:
        with self.lock:
            self.running.discard(name)
        (root / name / "r.json").write_text(json.dumps({"name": name}), encoding="utf-8")
        (root / name / "out.txt").write_text("output", encoding="utf-8")
        (root / name / "exit.txt").write_text("0", encoding="utf-8")

    def wait_started(self, count: int) -> None:
        """Wait until ``count`` runs have started."""
        deadline = time.monotonic() + 10
        while len(self.started) < count:
            assert time.monotonic() < deadline, f"only {self.started} started"
            time.sleep(0.01)


def test_each_run_starts_once_idle_and_slow_first_at_most_at_once(tmp_path: Path) -> None:
    runs = FakeRuns()
    jobs = [Job(f"busy{i}", f"b{i}", ("-x",), (("K", str(i)),)) for i in range(AT_ONCE + 3)]
    jobs += [Job("slow", "s", slow=True), Job("idle-a", "i", idle=True)]
    batch = Batch(tmp_path, jobs, runs.start)
    batch.start_all()
    runs.wait_started(AT_ONCE + 1)  # the idle run and AT_ONCE of the others
    time.sleep(0.2)
    assert len(runs.started) == AT_ONCE + 1, "a run that uses CPU started beyond AT_ONCE"
    assert runs.started[:2] == ["slow", "idle-a"], runs.started
    deadline = time.monotonic() + 10
    while len(runs.started) < len(jobs) or runs.running:  # end runs as they come
        assert time.monotonic() < deadline, f"stuck: {runs.started}, {runs.running}"
        for name in sorted(runs.running, reverse=True):  # in another order than started
            runs.end(tmp_path, name)
        time.sleep(0.02)
    batch.join()
    assert sorted(runs.started) == sorted(job.name for job in jobs)
    assert runs.most_at_once == AT_ONCE
    ended = Batch(tmp_path, jobs).result("busy1")  # read from another process's batch
    assert ended.report == {"name": "busy1"} and ended.took_s >= 0
    assert "exit 0" in ended.output and "output" in ended.output
    backend, args, env = json.loads((tmp_path / "busy1" / "env.json").read_text("utf-8"))
    assert (backend, args, env) == ("b1", ["-x"], {"K": "1"})


def test_a_run_after_another_starts_once_that_one_ended_and_others_go_meanwhile(
    tmp_path: Path,
) -> None:
    runs = FakeRuns()
    first = Job("first", "f")
    jobs = [Job("waiting", "w", after=first), first, Job("free", "x")]
    batch = Batch(tmp_path, jobs, runs.start)
    batch.start_all()
    runs.wait_started(2)
    time.sleep(0.2)
    assert sorted(runs.started) == ["first", "free"], runs.started
    runs.end(tmp_path, "free")
    time.sleep(0.2)
    assert "waiting" not in runs.started, "started before the run it comes after ended"
    runs.end(tmp_path, "first")
    runs.wait_started(3)
    assert runs.started[-1] == "waiting"
    runs.end(tmp_path, "waiting")
    batch.join()


def test_a_run_never_started_is_a_clear_error(tmp_path: Path) -> None:
    batch = Batch(tmp_path, [Job("never", "x")], timeout_s=0.05)  # nobody starts it
    with pytest.raises(TimeoutError, match="never started"):
        batch.result("never")


def test_a_stopped_batch_ends_its_runs_and_starts_no_more(tmp_path: Path) -> None:
    runs = FakeRuns()
    killed: list[str] = []

    def start(cwd: Path, backend: str, args: list[str], env: dict[str, str]) -> SuiteRun:
        run = runs.start(cwd, backend, args, env)
        return _Killable(run.cwd, run.command, run.files, killed)

    batch = Batch(tmp_path, [Job(f"busy{i}", "b") for i in range(AT_ONCE + 2)], start)
    batch.start_all()
    runs.wait_started(AT_ONCE)
    batch.stop()
    batch.join()
    assert len(runs.started) == AT_ONCE and sorted(killed) == sorted(runs.started)


class _Killable(SuiteRun):
    def __init__(self, cwd: Path, command: str, files: Path, killed: list[str]) -> None:
        super().__init__(cwd, command, files)
        self.killed = killed

    def kill(self) -> None:
        self.killed.append(self.cwd.name)


def test_a_crashed_schedule_is_reported_to_every_judge(tmp_path: Path) -> None:
    def start(cwd: Path, backend: str, args: list[str], env: dict[str, str]) -> SuiteRun:
        raise OSError("no zygote")

    batch = Batch(tmp_path, [Job("a", "x")], start)
    batch.start_all()
    batch.join()
    with pytest.raises(RuntimeError, match=r"schedule crashed(.|\n)*OSError: no zygote"):
        Batch(tmp_path, [Job("a", "x")]).result("a")  # another process's view of the batch
