"""Cost of ``add_turn`` (and ``estimate_tokens``) against the number of retained turns.

Turns are retained by a ``rolling_summary`` memory whose summarizer never answers (it waits
on an ``asyncio.Event`` that is never set), so every evicted turn stays pending. Two budgets:

* ``total_max_tokens=0`` (no limit): every pending turn is in the view;
* ``total_max_tokens=10000`` (the default): most pending turns are hidden from the view.

For N retained turns (100 and 3,200 by default) each memory is pre-filled with N turns, then
a chunk of further ``add_turn`` calls is timed with ``time.perf_counter_ns``; chunks are at
most N/4 calls, on fresh memories, so the memory holds between N and 1.25 N turns while it
is timed. A run times ``--ops`` calls in all; the reported figure is the median of
``--repeats`` runs. ``estimate_tokens()`` is timed the same way, on a memory holding N turns.

PenguiFlow's ``DefaultShortTermMemory`` is measured side by side when ``penguiflow`` is
importable; its column is skipped otherwise. Note that under a token limit PenguiFlow deletes
the pending turns that do not fit, so it retains fewer turns than were added (the
``retained`` column shows how many).

Usage::

    python tests/bench/bench_add_turn.py [--ops 2000] [--repeats 5] [--sizes 100,3200]
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import importlib
import importlib.metadata
import os
import platform
import statistics
import sys
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

try:
    import reference_impl
except ImportError:  # run from a checkout without installing it
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
    import reference_impl

FULL_ZONE_TURNS = 5
BUDGETS = (0, 10_000)


@dataclass(frozen=True)
class Implementation:
    name: str
    module: Any  # exposes DefaultShortTermMemory, ShortTermMemoryConfig, MemoryBudget, ...


@dataclass(frozen=True)
class Result:
    retained: int
    add_turn_us: float
    estimate_tokens_us: float


def implementations() -> list[Implementation]:
    found = [Implementation(f"reference {reference_impl.__version__}", reference_impl)]
    try:
        module: ModuleType = importlib.import_module("penguiflow.planner.memory")
    except ImportError:
        print("penguiflow is not importable: its column is skipped\n")
    else:
        version = importlib.metadata.version("penguiflow")
        found.append(Implementation(f"penguiflow {version}", module))
    return found


def make_turn(impl: Implementation, index: int) -> Any:
    """A turn of about 200 characters (roughly 50 tokens in the view)."""
    return impl.module.ConversationTurn(
        user_message=f"Question {index}: how should service {index % 17} retry failed calls?",
        assistant_response=(
            f"Answer {index}: use exponential backoff starting at 2 s, at most 3 retries, "
            "and alert when the circuit opens."
        ),
        ts=float(index),
    )


def make_memory(impl: Implementation, total_max_tokens: int, never: asyncio.Event) -> Any:
    async def blocked_summarizer(payload: Mapping[str, Any]) -> Mapping[str, Any]:
        await never.wait()
        return {"summary": ""}

    config = impl.module.ShortTermMemoryConfig(
        strategy="rolling_summary",
        budget=impl.module.MemoryBudget(
            full_zone_turns=FULL_ZONE_TURNS,
            summary_max_tokens=min(1000, total_max_tokens) if total_max_tokens else 1000,
            total_max_tokens=total_max_tokens,
        ),
    )
    return impl.module.DefaultShortTermMemory(config=config, summarizer=blocked_summarizer)


def retained_turns(memory: Any) -> int:
    state = memory.to_dict()
    return sum(len(state[name]) for name in ("turns", "pending", "backlog"))


async def filled_memory(impl: Implementation, total: int, size: int, never: asyncio.Event) -> Any:
    memory = make_memory(impl, total, never)
    for index in range(size):
        await memory.add_turn(make_turn(impl, index))
    for _ in range(3):  # let the summarizer call start (and block)
        await asyncio.sleep(0)
    return memory


async def close(memory: Any) -> None:
    aclose: Callable[[], Any] | None = getattr(memory, "aclose", None)
    if aclose is not None:
        await aclose()
    else:  # PenguiFlow has no aclose: cancel its background summarization
        task = getattr(memory, "_summarize_task", None)
        if task is not None and not task.done():
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)


async def time_add_turn(impl: Implementation, total: int, size: int, ops: int) -> tuple[float, int]:
    """Mean ns per add_turn over ``ops`` calls, and the turns retained before timing."""
    never = asyncio.Event()
    chunk = max(1, size // 4)
    elapsed = done = 0
    retained = 0
    while done < ops:
        memory = await filled_memory(impl, total, size, never)
        retained = retained_turns(memory)
        count = min(chunk, ops - done)
        turns = [make_turn(impl, size + index) for index in range(count)]
        gc.collect()
        start = time.perf_counter_ns()
        for turn in turns:
            await memory.add_turn(turn)
        elapsed += time.perf_counter_ns() - start
        done += count
        await close(memory)
    return elapsed / ops, retained


async def time_estimate_tokens(impl: Implementation, total: int, size: int, calls: int) -> float:
    never = asyncio.Event()
    memory = await filled_memory(impl, total, size, never)
    gc.collect()
    start = time.perf_counter_ns()
    for _ in range(calls):
        memory.estimate_tokens()
    elapsed = time.perf_counter_ns() - start
    await close(memory)
    return elapsed / calls


def measure(
    impl: Implementation, total: int, sizes: tuple[int, int], *, ops: int, calls: int, repeats: int
) -> tuple[Result, Result]:
    """Medians for both sizes; runs alternate between the sizes so drift hits both alike."""
    add_ns: dict[int, list[float]] = {size: [] for size in sizes}
    estimate_ns: dict[int, list[float]] = {size: [] for size in sizes}
    retained: dict[int, int] = {}
    asyncio.run(time_add_turn(impl, total, sizes[0], min(ops, 200)))  # warm-up, not reported
    for _ in range(repeats):
        for size in sizes:
            per_add, retained[size] = asyncio.run(time_add_turn(impl, total, size, ops))
            add_ns[size].append(per_add)
            estimate_ns[size].append(asyncio.run(time_estimate_tokens(impl, total, size, calls)))
    small, large = (
        Result(
            retained[size],
            statistics.median(add_ns[size]) / 1000,
            statistics.median(estimate_ns[size]) / 1000,
        )
        for size in sizes
    )
    return small, large


def machine_info() -> str:
    cpus = os.cpu_count()
    try:
        usable: int | None = len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        usable = cpus
    return (
        f"Python {platform.python_version()} ({platform.python_implementation()}) on "
        f"{platform.system()} {platform.machine()}; cpu_count={cpus} (usable {usable}); "
        f"processor: {processor_name()}"
    )


def processor_name() -> str:
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as cpuinfo:
            for line in cpuinfo:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def print_table(
    title: str,
    rows: list[tuple[str, str, Result, Result]],
    value: Callable[[Result], float],
    small: int,
    large: int,
) -> None:
    header = (
        f"{'budget':<30} {'implementation':<18} {'retained':>17} "
        f"{f'us/op @{small}':>12} {f'us/op @{large}':>12} {f'ratio {large}/{small}':>15}"
    )
    print(title)
    print(header)
    print("-" * len(header))
    for budget, name, at_small, at_large in rows:
        retained = f"{at_small.retained}/{at_large.retained}"
        ratio = value(at_large) / value(at_small)
        print(
            f"{budget:<30} {name:<18} {retained:>17} {value(at_small):>12.1f} "
            f"{value(at_large):>12.1f} {ratio:>14.1f}x"
        )
    print()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ops", type=int, default=2000, help="timed add_turn calls per run")
    parser.add_argument("--calls", type=int, default=200, help="timed estimate_tokens calls")
    parser.add_argument("--repeats", type=int, default=5, help="runs; the median is reported")
    parser.add_argument("--sizes", default="100,3200", help="two retained-turn counts: SMALL,LARGE")
    args = parser.parse_args(argv)
    small, large = (int(part) for part in args.sizes.split(","))

    print(machine_info())
    print(
        f"rolling_summary, summarizer blocked, full_zone_turns={FULL_ZONE_TURNS}; "
        f"median of {args.repeats} runs; add_turn: {args.ops} calls per run, timed while the "
        f"memory holds N..1.25N turns; estimate_tokens: {args.calls} calls per run\n"
    )
    impls = implementations()
    rows: list[tuple[str, str, Result, Result]] = []
    for total in BUDGETS:
        budget = f"total_max_tokens={total}" + (" (no limit)" if total == 0 else "")
        for impl in impls:
            at_small, at_large = measure(
                impl, total, (small, large), ops=args.ops, calls=args.calls, repeats=args.repeats
            )
            rows.append((budget, impl.name, at_small, at_large))
            budget = ""

    print_table("add_turn()", rows, lambda r: r.add_turn_us, small, large)
    print_table("estimate_tokens()", rows, lambda r: r.estimate_tokens_us, small, large)


if __name__ == "__main__":
    main()
