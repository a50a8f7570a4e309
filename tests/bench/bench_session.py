"""The session layer's agent turns per second next to the OpenAI Agents SDK's ``SQLiteSession``.

One agent turn, as each library serves it from one SQLite file on disk:

* **router** (``reference_impl.session.MemoryRouter`` over ``SQLiteStateStore``): enter
  ``router.turn(...)`` (the key's memory, its context merged into ``llm_context``), then
  ``finish(user, assistant)``, which records the turn and saves it before returning.
  ``truncation``, and ``rolling_summary`` with ``RuleBasedSummarizer`` (every turn past the
  window is summarized in the background and the summary saved too), with the store's
  default ``durability="full"`` (a sync per commit, as ``SQLiteSession``); and
  ``truncation`` at ``durability="normal"`` (*router truncation normal*: no sync per commit).
* **sdk** (``agents.SQLiteSession``): ``get_items(limit=2 * full_zone_turns)`` (the same
  window of recent turns), then ``add_items`` with the user and assistant messages.

For 1 session (400 turns in a row) and 64 sessions (64 tasks of 8 turns at once), and
``full_zone_turns`` 5, 50 and 200, each session is first filled with ``full_zone_turns``
turns (not timed). Rounds alternate which library goes first; a figure is the median
over the rounds, with the range. Each run gets a fresh database file. The objects alive
before the first run (both libraries imported) are frozen out of the garbage collector's
passes, and each run starts after a collection (``quiet_collector``).

First, the ceiling: commits per second of one small row each in SQLite's WAL mode, with
and without a sync per commit, nothing else around them.

Writes ``docs/benchmarks/session.json`` (``--out``) and, with matplotlib, a plot.

Usage::

    python tests/bench/bench_session.py [--rounds 3] [--windows 5,50,200] [--out DIR]
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import importlib.metadata
import json
import sqlite3
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, Literal

try:
    import reference_impl  # noqa: F401
except ImportError:  # run from a checkout without installing it
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from bench_memory import errorbar, machine, pyplot, save, spread
from stm_stores import SQLiteStateStore

from reference_impl import MemoryBudget, ShortTermMemoryConfig
from reference_impl.session import MemoryRouter
from reference_impl.summarizers import RuleBasedSummarizer
from reference_impl.types import MemoryKey

ROOT = Path(__file__).resolve().parents[2]
USER = "What is the weather like in Lisbon tomorrow, and should I take an umbrella? " * 2
ASSISTANT = "Tomorrow in Lisbon: sunny, 21 °C, a light north-westerly wind; no umbrella. " * 2
#: (sessions, turns per session) timed.
LOADS = ((1, 400), (64, 8))
LIBRARIES = ("router truncation", "router rolling_summary", "router truncation normal", "sdk")

Run = Callable[[Path, int, int, int], Awaitable[float]]


async def _timed(sessions: int, turns: int, one_turn: Callable[[int], Awaitable[None]]) -> float:
    async def session(index: int) -> None:
        for _ in range(turns):
            await one_turn(index)

    started = time.perf_counter()
    await asyncio.gather(*(session(i) for i in range(sessions)))
    return sessions * turns / (time.perf_counter() - started)


def router_run(strategy: str, durability: Literal["full", "normal"] = "full") -> Run:
    async def run(db: Path, window: int, sessions: int, turns: int) -> float:
        config = ShortTermMemoryConfig(
            strategy=strategy,  # type: ignore[arg-type]
            budget=MemoryBudget(full_zone_turns=window, total_max_tokens=1_000_000),
        )
        summarizer = RuleBasedSummarizer() if strategy == "rolling_summary" else None
        store = SQLiteStateStore(db, durability=durability)
        router = MemoryRouter(config, store=store, summarizer=summarizer)
        keys = [MemoryKey("bench", f"user-{i}", f"session-{i}") for i in range(sessions)]

        async def one_turn(index: int) -> None:
            async with router.turn(llm_context={"query": USER}, memory_key=keys[index]) as t:
                await t.finish(USER, ASSISTANT)

        for index in range(sessions):
            for _ in range(window):
                await one_turn(index)
        rate = await _timed(sessions, turns, one_turn)
        await router.aclose()
        await store.aclose()
        return rate

    return run


async def sdk_run(db: Path, window: int, sessions: int, turns: int) -> float:
    from agents import SQLiteSession

    stores = [SQLiteSession(f"session-{i}", db) for i in range(sessions)]
    items: list[Any] = [
        {"role": "user", "content": USER},
        {"role": "assistant", "content": ASSISTANT},
    ]

    async def one_turn(index: int) -> None:
        await stores[index].get_items(limit=2 * window)
        await stores[index].add_items(items)

    for index in range(sessions):
        for _ in range(window):
            await one_turn(index)
    rate = await _timed(sessions, turns, one_turn)
    for session in stores:
        session.close()
    return rate


def commit_floor(where: Path, commits: int = 1000) -> dict[str, float]:
    """Commits per second of one small row each, with nothing else around them: the most
    any library that syncs (or not) at every turn could reach on this disk."""
    rates: dict[str, float] = {}
    for synchronous in ("FULL", "NORMAL"):
        with tempfile.TemporaryDirectory(dir=where) as scratch:
            conn = sqlite3.connect(Path(scratch) / "floor.db", isolation_level=None)
            conn.execute("PRAGMA journal_mode=WAL")
            conn.execute(f"PRAGMA synchronous={synchronous}")
            conn.execute("CREATE TABLE t (id INTEGER PRIMARY KEY, body TEXT)")
            started = time.perf_counter()
            for _ in range(commits):
                conn.execute("BEGIN")
                conn.execute("INSERT INTO t (body) VALUES (?)", (USER + ASSISTANT,))
                conn.execute("COMMIT")
            rates[synchronous.lower()] = commits / (time.perf_counter() - started)
            conn.close()
    return rates


def libraries() -> dict[str, Run]:
    found: dict[str, Run] = {
        "router truncation": router_run("truncation"),
        "router rolling_summary": router_run("rolling_summary"),
        "router truncation normal": router_run("truncation", "normal"),
    }
    try:
        import agents  # noqa: F401
    except ImportError:
        print("openai-agents is not installed (the [bench] extra): the router alone")
    else:
        found["sdk"] = sdk_run
    return found


def quiet_collector() -> None:
    """Take every object alive now out of the garbage collector's full passes.

    A full pass walks every tracked object of the process; with the SDK imported that is
    some 150,000 objects, about 0.1 s, which a 64-session run (about 50 ms) could catch or
    miss. Frozen, a pass walks only what the runs make, as in a service that froze its
    start-up objects (``gc.freeze``). Both libraries run under it.
    """
    gc.collect()
    gc.freeze()


def measure(windows: list[int], rounds: int, where: Path) -> list[dict[str, Any]]:
    runs = libraries()
    quiet_collector()
    rows = []
    for sessions, turns in LOADS:
        for window in windows:
            samples: dict[str, list[float]] = {name: [] for name in runs}
            for r in range(rounds):
                order = list(runs) if r % 2 == 0 else list(runs)[::-1]
                for name in order:
                    with tempfile.TemporaryDirectory(dir=where) as scratch:
                        db = Path(scratch) / "bench.db"
                        gc.collect()  # no run pays for the garbage of the one before
                        samples[name].append(asyncio.run(runs[name](db, window, sessions, turns)))
            row: dict[str, Any] = {"sessions": sessions, "full_zone_turns": window}
            row.update({name: spread(values) for name, values in samples.items()})
            rows.append(row)
            cells = "  ".join(f"{name}: {row[name]['median']:,.0f}" for name in runs)
            print(f"sessions={sessions:<3} full_zone_turns={window:<4} turns/s  {cells}")
    return rows


def plot(rows: list[dict[str, Any]], path: Path) -> None:
    plt = pyplot()
    if plt is None:
        return
    names = [name for name in LIBRARIES if name in rows[0]]
    fig, axes = plt.subplots(1, len(LOADS), figsize=(6 * len(LOADS), 3.8))
    for ax, (sessions, _) in zip(axes, LOADS, strict=True):
        points = [r for r in rows if r["sessions"] == sessions]
        for name in names:
            xs = [r["full_zone_turns"] for r in points]
            errorbar(ax, xs, [r[name] for r in points], fmt="-o", label=name)
        ax.set_xscale("log")
        ax.set_ylim(bottom=0)
        ax.set_title(f"{sessions} session{'s' if sessions > 1 else ''}")
        ax.set_xlabel("full_zone_turns")
        ax.set_ylabel("agent turns per second")
    save(fig, axes, path)


def _version(distribution: str) -> str | None:
    try:
        return importlib.metadata.version(distribution)
    except importlib.metadata.PackageNotFoundError:
        return None


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--windows", default="5,50,200")
    parser.add_argument("--out", default=str(ROOT / "docs" / "benchmarks"))
    parser.add_argument(
        "--dir", default=tempfile.gettempdir(), help="where the database files are made"
    )
    args = parser.parse_args(argv)
    windows = [int(w) for w in args.windows.split(",")]
    result: dict[str, Any] = {
        "benchmark": "session",
        "date": time.strftime("%Y-%m-%d"),
        "machine": machine(),
        "versions": {"openai-agents": _version("openai-agents")},
        "settings": {
            "rounds": args.rounds,
            "loads": [{"sessions": s, "turns_per_session": t} for s, t in LOADS],
            "figure": "median over rounds of agent turns per second; min and max over rounds",
            "garbage_collector": "objects alive before the runs frozen (gc.freeze); "
            "a collection before each run",
        },
    }
    print(json.dumps(result["machine"]), "\n")
    floor = commit_floor(Path(args.dir))
    result["bare_commits_per_second"] = floor
    print(
        f"a bare commit of one row: {floor['full']:,.0f}/s with a sync, "
        f"{floor['normal']:,.0f}/s without\n"
    )
    result["turns_per_second"] = measure(windows, args.rounds, Path(args.dir))
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "session.json").write_text(json.dumps(result, indent=1) + "\n", encoding="utf-8")
    print(f"\nresults: {out / 'session.json'}")
    plot(result["turns_per_second"], out / "session.png")


if __name__ == "__main__":
    main()
