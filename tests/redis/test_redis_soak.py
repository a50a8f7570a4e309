"""Many OS processes on a real ``redis-server``: no turn lost, none summarized twice.

Figures are printed (``pytest -s``) and recorded in ``docs/redis.md``. ``STM_SOAK_TURNS``
and ``STM_SOAK_SESSIONS`` scale the runs (defaults: 200 turns on one session, and 100
sessions x 5 turns, per process, 8 processes; the figures in the docs are for 1,000).
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import time
import uuid
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from redis.asyncio import Redis
from stm_redis import RedisShortTermMemory
from stm_redis.server import RedisServer

from reference_impl import MemoryKey

pytestmark = pytest.mark.anyio

WORKER = Path(__file__).with_name("soak_worker.py")
PROCS = 8


def _spawn(server: RedisServer, namespace: str, proc: int, log: Path, *extra: str) -> Any:
    return subprocess.Popen(
        [
            sys.executable,
            str(WORKER),
            f"--url={server.url}",
            f"--namespace={namespace}",
            f"--proc={proc}",
            f"--log={log}",
            *extra,
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def _wait(processes: list[Any], timeout: float) -> list[str]:
    """Every process's output once all have ended well; a post-mortem if they have not
    all ended ``timeout`` seconds from now."""
    deadline = time.monotonic() + timeout
    outs = []
    for process in processes:
        try:
            out, err = process.communicate(timeout=max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            break
        assert process.returncode == 0, err[-3000:]
        outs.append(out)
    else:
        return outs
    pytest.fail(_post_mortem(processes, timeout), pytrace=False)


def _post_mortem(processes: list[Any], timeout: float) -> str:
    """Ask every process still running what it waits on (``soak_worker.dump``), then kill it."""
    alive = [p for p in processes if p.poll() is None]
    for process in alive:
        process.send_signal(signal.SIGUSR1)
    time.sleep(2)
    lines = [f"{len(alive)} of {len(processes)} processes still running after {timeout:.0f}s"]
    for n, process in enumerate(processes):
        if process in alive:
            process.kill()
        _, err = process.communicate()
        lines.append(f"=== process {n} ({'hung' if process in alive else 'ended'}):\n{err[-8000:]}")
    return "\n".join(lines)


async def _final_state(server: RedisServer, namespace: str, session: str) -> dict[str, Any]:
    import soak_worker

    client = Redis.from_url(server.url)
    memory = RedisShortTermMemory(
        client,
        config=soak_worker.memory_config(),
        key=MemoryKey("soak", "user", session),
        namespace=namespace,
        summarizer=_never,
        owns_client=True,
    )
    try:
        await memory.get_llm_context()
        return memory.to_dict()
    finally:
        await memory.aclose()


async def _never(payload: Any) -> Any:
    raise AssertionError("the checker never summarizes")


def _account(state: dict[str, Any], expected: set[str]) -> dict[str, int]:
    """Every turn is in exactly one place; the ones nowhere are counted drops."""
    covered = [t for t in state["summary"].split(",") if t]
    counts = Counter(covered)
    twice = sorted(t for t, n in counts.items() if n > 1)
    assert not twice, f"turns summarized twice: {twice[:10]}"
    places = {
        "summary": set(covered),
        "pending": {t["user_message"] for t in state["pending"]},
        "recent": {t["user_message"] for t in state["turns"]},
        "backlog": {t["user_message"] for t in state["backlog"]},
    }
    seen: set[str] = set()
    for name, turns in places.items():
        assert not seen & turns, f"turns in two places ({name}): {sorted(seen & turns)[:10]}"
        seen |= turns
    assert seen <= expected, f"unknown turns: {sorted(seen - expected)[:10]}"
    missing = expected - seen
    assert len(missing) == state["dropped_turns"], (
        f"{len(missing)} turns missing but {state['dropped_turns']} counted as dropped"
    )
    return {name: len(turns) for name, turns in places.items()} | {"dropped": len(missing)}


async def test_eight_processes_on_one_session(redis_server: RedisServer, tmp_path: Path) -> None:
    turns = int(os.environ.get("STM_SOAK_TURNS", "200"))
    namespace = f"soak-{uuid.uuid4().hex[:8]}"
    log = tmp_path / "calls.jsonl"
    started = time.monotonic()
    processes = [
        _spawn(redis_server, namespace, p, log, f"--turns={turns}", "--slow=0.02", "--fail=0.2")
        for p in range(PROCS)
    ]
    _wait(processes, timeout=240)
    elapsed = time.monotonic() - started
    state = await _final_state(redis_server, namespace, "s0")
    expected = {f"p{p}-{i}" for p in range(PROCS) for i in range(turns)}
    figures = _account(state, expected)
    calls = [json.loads(line) for line in log.read_text().splitlines()]
    print(
        f"\nsoak 1 session: {PROCS} processes x {turns} turns in {elapsed:.1f}s; "
        f"{len(calls)} summarizer calls; {figures}; final health {state['health']}"
    )


async def test_eight_processes_on_many_sessions(redis_server: RedisServer, tmp_path: Path) -> None:
    sessions = int(os.environ.get("STM_SOAK_SESSIONS", "100"))
    namespace = f"soak-{uuid.uuid4().hex[:8]}"
    started = time.monotonic()
    processes = [
        _spawn(redis_server, namespace, p, tmp_path / "log", "--turns=5", f"--sessions={sessions}")
        for p in range(PROCS)
    ]
    _wait(processes, timeout=900)
    elapsed = time.monotonic() - started
    expected = {f"p{p}-{i}" for p in range(PROCS) for i in range(5)}
    total: Counter[str] = Counter()
    for s in range(sessions):
        total.update(_account(await _final_state(redis_server, namespace, f"s{s}"), expected))
    print(
        f"\nsoak {sessions} sessions: {PROCS} processes x {sessions} sessions x 5 turns "
        f"({PROCS * sessions * 5} turns) in {elapsed:.1f}s; {dict(total)}"
    )


async def test_a_killed_lease_holder_is_taken_over(
    redis_server: RedisServer, tmp_path: Path
) -> None:
    import soak_worker

    namespace = f"kill-{uuid.uuid4().hex[:8]}"
    log = tmp_path / "calls.jsonl"
    holder = _spawn(redis_server, namespace, 0, log, "--turns=6", "--hang", "--lease=0.5")
    # Killed once every turn is stored ("added") and while its summarizer call hangs: a
    # kill during the adds would lose a turn that no memory ever held.
    assert holder.stdout is not None
    added = await asyncio.wait_for(asyncio.to_thread(holder.stdout.readline), timeout=30)
    assert added.strip() == "added", f"holder did not add its turns: {added!r}"
    deadline = time.monotonic() + 30
    while not (log.exists() and log.read_text().strip()):
        assert time.monotonic() < deadline and holder.poll() is None, "holder never called"
        await asyncio.sleep(0.02)
    holder.send_signal(signal.SIGKILL)
    holder.wait()
    killed = time.monotonic()
    client = Redis.from_url(redis_server.url)
    calls: list[list[str]] = []

    async def summarize(payload: Any) -> Any:
        ids = [t["user"] for t in payload["turns"]]
        calls.append(ids)
        previous = payload["previous_summary"]
        return {"summary": ",".join([previous, *ids]) if previous else ",".join(ids)}

    survivor = RedisShortTermMemory(
        client,
        config=soak_worker.memory_config(),
        key=MemoryKey("soak", "user", "s0"),
        namespace=namespace,
        summarizer=summarize,
        lease_ttl_s=0.5,
        owns_client=True,
    )
    try:
        await survivor.flush()
        took = time.monotonic() - killed
        state = survivor.to_dict()
    finally:
        await survivor.aclose()
    figures = _account(state, {f"p0-{i}" for i in range(6)})
    assert figures["summary"] == 3 and figures["recent"] == 3, figures
    print(f"\nkilled lease holder taken over {took:.2f}s after SIGKILL (lease 0.5s): {figures}")
    assert took < 5
