"""The reference memory next to PenguiFlow's, operation by operation, in one process.

For each estimator (the default length-based one; ``tiktoken``'s ``cl100k_base`` when
installed), budget (no limit; ``total_max_tokens=10000``) and number of retained turns N,
both memories are filled with N turns (``rolling_summary``, ``full_zone_turns=5``, a
summarizer that never answers, so evicted turns stay pending) and then timed:

* ``add_turn``: K more turns (K = min(200, N/4), so the memory holds N..1.25 N turns),
  each timed alone: the mean per call, and the median call (``add_turn median call``);
* ``get_llm_context`` and ``estimate_tokens``: K calls on the filled memory (the first
  ``estimate_tokens`` call is also kept alone, as ``first estimate_tokens``);
* ``add+context``: K agent turns, each ``add_turn`` then ``get_llm_context``.

Rounds interleave the implementations (the order alternates) so a noisy neighbour slows
both alike; each figure is the median over the rounds of the mean per call, with the range.
``tiktoken`` rows stop at 1,600 turns: filling PenguiFlow's memory re-encodes the whole
view twice per turn.

Then, for the reference only:

* **latency of ``add_turn``** (p50, p99, max over 400 turns, ``full_zone_turns=2``) while
  the summarizer takes 0 ms, 200 ms, 2 s or never answers (PenguiFlow side by side);
* **loop lag** with 10,000 pending turns: the time ``from_dict`` of such a state holds
  the event loop (all of it: it is synchronous); the longest hold during ``afrom_dict``
  of it and during ``flush()`` installing their summary, measured by a probe task that
  sleeps 1 ms and records how late it wakes; and the longest single step of that load
  with the garbage collector off (the memory's own code, without the collector's pauses).

Writes ``docs/benchmarks/memory.json`` (``--out``) and, with matplotlib, a plot next to it.

Usage::

    python tests/bench/bench_memory.py [--rounds 3] [--sizes 100,400,1600,6400] [--out DIR]
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import importlib
import importlib.metadata
import json
import platform
import statistics
import sys
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

try:
    import reference_impl
except ImportError:  # run from a checkout without installing it
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
    import reference_impl
from reference_impl.budget import Budget
from reference_impl.schema import load_steps

ROOT = Path(__file__).resolve().parents[2]
FULL_ZONE_TURNS = 5
BUDGETS = (0, 10_000)
OPERATIONS = ("add_turn", "get_llm_context", "estimate_tokens", "add+context")
#: The first of the timed ``estimate_tokens`` calls alone (µs; also in its mean): a memory
#: that nothing measured yet measures its retained turns then (docs/performance.md).
FIRST_ESTIMATE = "first estimate_tokens"
#: The median of the K ``add_turn`` calls timed one by one: the typical call, without the
#: first call after the collection and the cold caches that weigh on a mean of 25 calls.
MEDIAN_ADD = "add_turn median call"
TIKTOKEN_MAX_SIZE = 1600


@dataclass(frozen=True)
class Impl:
    name: str
    version: str
    module: Any  # DefaultShortTermMemory, ShortTermMemoryConfig, MemoryBudget, ConversationTurn


def implementations() -> list[Impl]:
    found = [Impl("reference", reference_impl.__version__, reference_impl)]
    try:
        module = importlib.import_module("penguiflow.planner.memory")
    except ImportError:
        print("penguiflow is not importable: its side is skipped\n")
    else:
        found.append(Impl("penguiflow", importlib.metadata.version("penguiflow"), module))
    return found


def estimators() -> dict[str, Callable[[str], int] | None]:
    found: dict[str, Callable[[str], int] | None] = {"default": None}
    try:
        from reference_impl.tiktoken_estimator import tiktoken_estimator

        found["tiktoken"] = tiktoken_estimator()
    except Exception as exc:  # any reason to skip is printed
        print(f"tiktoken rows skipped: {exc}\n")
    return found


def make_turn(impl: Impl, index: int) -> Any:
    """A turn of about 200 characters (roughly 50 tokens in the view)."""
    return impl.module.ConversationTurn(
        user_message=f"Question {index}: how should service {index % 17} retry failed calls?",
        assistant_response=(
            f"Answer {index}: use exponential backoff starting at 2 s, at most 3 retries, "
            "and alert when the circuit opens."
        ),
        ts=float(index),
    )


def make_memory(
    impl: Impl,
    total: int,
    estimator: Callable[[str], int] | None,
    summarizer: Callable[[Mapping[str, Any]], Awaitable[Mapping[str, Any]]],
    full_zone_turns: int = FULL_ZONE_TURNS,
) -> Any:
    config = impl.module.ShortTermMemoryConfig(
        strategy="rolling_summary",
        budget=impl.module.MemoryBudget(
            full_zone_turns=full_zone_turns,
            summary_max_tokens=1000,
            total_max_tokens=total,
        ),
        token_estimator=estimator,
    )
    return impl.module.DefaultShortTermMemory(config=config, summarizer=summarizer)


async def close(memory: Any) -> None:
    aclose = getattr(memory, "aclose", None)
    if aclose is not None:
        await aclose()
        return
    task = getattr(memory, "_summarize_task", None)  # PenguiFlow: no aclose
    if task is not None and not task.done():
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)


async def filled(impl: Impl, total: int, estimator: Any, size: int, never: asyncio.Event) -> Any:
    async def blocked(payload: Mapping[str, Any]) -> Mapping[str, Any]:
        await never.wait()
        return {"summary": ""}

    memory = make_memory(impl, total, estimator, blocked)
    for index in range(size):
        await memory.add_turn(make_turn(impl, index))
    for _ in range(3):  # let the summarizer call start (and block)
        await asyncio.sleep(0)
    return memory


async def time_cell(impl: Impl, total: int, estimator: Any, size: int) -> dict[str, float]:
    """Mean µs per call of each operation on a memory holding ``size`` turns."""
    never = asyncio.Event()
    calls = max(1, min(200, size // 4))
    out: dict[str, float] = {}
    for operation in OPERATIONS:
        memory = await filled(impl, total, estimator, size, never)
        turns = [make_turn(impl, size + i) for i in range(calls)]
        gc.collect()
        start = time.perf_counter_ns()
        if operation == "add_turn":
            took = []
            for turn in turns:
                begun = time.perf_counter_ns()
                await memory.add_turn(turn)
                took.append(time.perf_counter_ns() - begun)
            # The calls alone, not the clock readings around them.
            out[operation] = sum(took) / calls / 1000
            out[MEDIAN_ADD] = statistics.median(took) / 1000
        elif operation == "get_llm_context":
            for _ in range(calls):
                await memory.get_llm_context()
        elif operation == "estimate_tokens":
            memory.estimate_tokens()
            out[FIRST_ESTIMATE] = (time.perf_counter_ns() - start) / 1000
            for _ in range(calls - 1):
                memory.estimate_tokens()
        else:
            for turn in turns:
                await memory.add_turn(turn)
                await memory.get_llm_context()
        out.setdefault(operation, (time.perf_counter_ns() - start) / calls / 1000)
        await close(memory)
    return out


def cells(sizes: list[int], names: list[str]) -> list[tuple[str, int, int]]:
    return [
        (estimator, total, size)
        for estimator in names
        for total in (BUDGETS if estimator == "default" else (10_000,))
        for size in sizes
        if estimator == "default" or size <= TIKTOKEN_MAX_SIZE
    ]


def spread(values: list[float]) -> dict[str, float]:
    return {"median": statistics.median(values), "min": min(values), "max": max(values)}


def operations_table(impls: list[Impl], sizes: list[int], rounds: int) -> list[dict[str, Any]]:
    found = estimators()
    rows = []
    for estimator, total, size in cells(sizes, list(found)):
        samples: dict[str, dict[str, list[float]]] = {
            impl.name: {op: [] for op in (*OPERATIONS, FIRST_ESTIMATE, MEDIAN_ADD)}
            for impl in impls
        }
        for r in range(rounds):
            for impl in impls if r % 2 == 0 else impls[::-1]:
                measured = asyncio.run(time_cell(impl, total, found[estimator], size))
                for op, value in measured.items():
                    samples[impl.name][op].append(value)
        row: dict[str, Any] = {"estimator": estimator, "total_max_tokens": total, "turns": size}
        for impl in impls:
            row[impl.name] = {op: spread(values) for op, values in samples[impl.name].items()}
        rows.append(row)
        print_row(row, impls)
    return rows


def print_row(row: dict[str, Any], impls: list[Impl]) -> None:
    label = f"{row['estimator']:<8} total={row['total_max_tokens']:<6} N={row['turns']:<5}"
    parts = []
    for op in OPERATIONS:
        ours = row["reference"][op]["median"]
        text = f"{op} {ours:8.1f}µs"
        if len(impls) > 1:
            theirs = row["penguiflow"][op]["median"]
            text += f" (pf {theirs:8.1f}, x{theirs / ours:5.1f})"
        if op == "add_turn":
            text += f" median call {row['reference'][MEDIAN_ADD]['median']:.1f}"
            if len(impls) > 1:
                text += f" (pf {row['penguiflow'][MEDIAN_ADD]['median']:.1f})"
        parts.append(text)
    print(label, " | ".join(parts), flush=True)


async def latency(impl: Impl, delay: float | None, turns: int = 400) -> dict[str, float]:
    """p50/p99/max µs of ``add_turn`` while each summarizer call takes ``delay`` seconds
    (``None``: never answers)."""
    never = asyncio.Event()

    async def summarizer(payload: Mapping[str, Any]) -> Mapping[str, Any]:
        if delay is None:
            await never.wait()
        elif delay:
            await asyncio.sleep(delay)
        return {"summary": f"{len(payload['turns'])} turns"}

    memory = make_memory(impl, 10_000, None, summarizer, full_zone_turns=2)
    took = []
    for index in range(turns):
        turn = make_turn(impl, index)
        start = time.perf_counter_ns()
        await memory.add_turn(turn)
        took.append((time.perf_counter_ns() - start) / 1000)
        await asyncio.sleep(0)
    await close(memory)
    took.sort()
    return {
        "p50": took[len(took) // 2],
        "p99": took[int(len(took) * 0.99)],
        "max": took[-1],
    }


class LagProbe:
    """A task that sleeps 1 ms at a time and records how late it wakes: the longest time
    anything else held the event loop."""

    def __init__(self) -> None:
        self.worst = 0.0
        self._task: asyncio.Task[None] | None = None
        self._since = 0.0

    async def _run(self) -> None:
        while True:
            self._since = time.perf_counter()
            await asyncio.sleep(0.001)
            self.worst = max(self.worst, time.perf_counter() - self._since - 0.001)

    async def __aenter__(self) -> LagProbe:
        self._task = asyncio.create_task(self._run())
        await asyncio.sleep(0.002)
        self.worst = 0.0
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self._task is not None
        # The sleep in progress counts too: a hold just before the end never lets it wake.
        self.worst = max(self.worst, time.perf_counter() - self._since - 0.001)
        self._task.cancel()
        await asyncio.gather(self._task, return_exceptions=True)


async def loop_lag(
    estimator: Callable[[str], int] | None, pending: int = 10_000
) -> dict[str, float]:
    """Loop holds (ms) around a state of ``pending`` pending turns: ``from_dict`` (all of it
    synchronous), ``afrom_dict`` (the probe's worst lateness, and its longest step timed
    with the garbage collector off), and the ``flush()`` that installs their summary."""
    impl = Impl("reference", reference_impl.__version__, reference_impl)
    never = asyncio.Event()
    source = await filled(impl, 10_000, estimator, pending + FULL_ZONE_TURNS, never)
    state = source.to_dict()
    await close(source)

    gate = asyncio.Event()  # no summary until the flush is timed

    async def answer(payload: Mapping[str, Any]) -> Mapping[str, Any]:
        await gate.wait()
        return {"summary": f"{len(payload['turns'])} turns"}

    memory = make_memory(impl, 10_000, estimator, answer)
    start = time.perf_counter()
    memory.from_dict(state)  # synchronous: its duration is the time the loop is held
    from_dict_ms = (time.perf_counter() - start) * 1000
    async with LagProbe() as probe:
        await memory.afrom_dict(state)
    afrom_dict_probe_ms = probe.worst * 1000
    # The same load's steps one by one, without the collector's pauses: what the memory's
    # own code holds between two awaits.
    config = memory.config
    steps = load_steps(state, config, Budget.for_config(config), memory.key)
    longest = 0.0
    gc.disable()
    try:
        while True:
            start = time.perf_counter()
            try:
                next(steps)
            except StopIteration:
                break
            finally:
                longest = max(longest, time.perf_counter() - start)
    finally:
        gc.enable()
    async with LagProbe() as probe:
        gate.set()
        await memory.flush()
    await close(memory)
    return {
        "from_dict_ms": from_dict_ms,
        "afrom_dict_max_lag_ms": afrom_dict_probe_ms,
        "afrom_dict_longest_step_ms": longest * 1000,
        "flush_max_lag_ms": probe.worst * 1000,
    }


def machine() -> dict[str, Any]:
    name = "unknown"
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as cpuinfo:
            name = next(
                (
                    line.split(":", 1)[1].strip()
                    for line in cpuinfo
                    if line.startswith("model name")
                ),
                name,
            )
    except OSError:
        pass
    return {
        "python": platform.python_version(),
        "system": f"{platform.system()} {platform.machine()}",
        "processor": name,
    }


def pyplot() -> Any:
    """``matplotlib.pyplot`` drawing to files, or ``None`` (said) without matplotlib."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("matplotlib is not installed: no plot")
        return None
    return plt


def errorbar(ax: Any, xs: list[int], cells: list[dict[str, float]], **style: Any) -> None:
    """Plot the medians of ``cells`` (see :func:`spread`) with bars from min to max."""
    ys = [c["median"] for c in cells]
    low = [c["median"] - c["min"] for c in cells]
    high = [c["max"] - c["median"] for c in cells]
    ax.errorbar(xs, ys, yerr=[low, high], ms=3, **style)


def save(fig: Any, axes: Any, path: Path) -> None:
    axes[0].legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    print(f"plot: {path}")


def plot(result: dict[str, Any], path: Path) -> None:
    plt = pyplot()
    if plt is None:
        return
    rows = [r for r in result["operations"] if r["estimator"] == "default"]
    impls = [name for name in ("reference", "penguiflow") if name in rows[0]]
    fig, axes = plt.subplots(1, len(OPERATIONS), figsize=(4.2 * len(OPERATIONS), 3.8))
    for ax, op in zip(axes, OPERATIONS, strict=True):
        for impl in impls:
            for total, style in ((0, "-"), (10_000, "--")):
                points = [r for r in rows if r["total_max_tokens"] == total]
                label = f"{impl}, {'no limit' if total == 0 else '10k budget'}"
                cells = [r[impl][op] for r in points]
                errorbar(ax, [r["turns"] for r in points], cells, fmt=style + "o", label=label)
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_title(op)
        ax.set_xlabel("retained turns")
        ax.set_ylabel("µs per call")
    save(fig, axes, path)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--sizes", default="100,400,1600,6400")
    parser.add_argument("--out", default=str(ROOT / "docs" / "benchmarks"))
    args = parser.parse_args(argv)
    sizes = [int(s) for s in args.sizes.split(",")]
    impls = implementations()
    result: dict[str, Any] = {
        "benchmark": "memory",
        "date": time.strftime("%Y-%m-%d"),
        "machine": machine(),
        "implementations": {impl.name: impl.version for impl in impls},
        "settings": {
            "rounds": args.rounds,
            "full_zone_turns": FULL_ZONE_TURNS,
            "timed_calls": "min(200, N/4)",
            "figure": "median over rounds of the mean µs per call; min and max over rounds",
        },
    }
    print(json.dumps(result["machine"]), "\n")
    result["operations"] = operations_table(impls, sizes, args.rounds)

    print("\nadd_turn latency (µs) while the summarizer takes ...")
    result["latency"] = []
    for label, delay in (("0 ms", 0.0), ("200 ms", 0.2), ("2 s", 2.0), ("never answers", None)):
        row: dict[str, Any] = {"summarizer": label}
        for impl in impls:
            row[impl.name] = asyncio.run(latency(impl, delay))
        result["latency"].append(row)
        print(f"  {label:<14}", "  ".join(f"{k}: {v}" for k, v in row.items() if k != "summarizer"))

    print("\nloop lag with 10,000 pending turns (ms)")
    result["loop_lag"] = {}
    for name, estimator in estimators().items():
        result["loop_lag"][name] = asyncio.run(loop_lag(estimator))
        print(f"  {name:<9}", result["loop_lag"][name])

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "memory.json").write_text(json.dumps(result, indent=1) + "\n", encoding="utf-8")
    print(f"\nresults: {out / 'memory.json'}")
    plot(result, out / "memory.png")


if __name__ == "__main__":
    main()
