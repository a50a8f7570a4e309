"""Demo of the session layer: two tenants, a rolling summary and a process restart.

Run ``python -m reference_impl.demo [--db PATH]``. A scripted, LLM-free agent talks with
two tenants that share a user id and a session id. Each turn prints the
``conversation_memory`` injected into the agent's context. Phase 1 holds the conversations
and closes the router; phase 2 runs in a new process (``--phase 2 --db PATH``) on the same
SQLite file and shows that the memory survived.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import subprocess
import sys
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from stm_stores import SQLiteStateStore

from .session import MemoryRouter
from .summarizers import RuleBasedSummarizer
from .types import MemoryBudget, ShortTermMemoryConfig

__all__ = ["main"]

_USER = "u-1"
_SESSION = "s-1"

# Phase 1 script per tenant; the markers (ACME-4471, Lisbon, GLOBEX, Initech) let the
# isolation check look for one tenant's content in the other's memory.
_PHASE1: dict[str, list[str]] = {
    "acme": [
        "My order number is ACME-4471.",
        "Ship it to Lisbon, please.",
        "Use express delivery.",
        "What was my order number?",
    ],
    "globex": [
        "Our budget is 9000 GLOBEX credits.",
        "We prefer the vendor Initech.",
        "Add a 10 percent contingency.",
        "What is our budget?",
    ],
}
_PHASE2: dict[str, list[str]] = {
    "acme": ["Which city am I shipping to?"],
    "globex": ["What was my order number?"],
}
_MARKERS = {"acme": ("ACME-4471", "Lisbon"), "globex": ("GLOBEX", "Initech")}

# What the scripted agent can recall, and where in its memory it looks for it.
_RECALL: list[tuple[str, re.Pattern[str]]] = [
    ("order number", re.compile(r"ACME-\d+")),
    ("city", re.compile(r"Ship it to (\w+)")),
    ("budget", re.compile(r"\d+ GLOBEX credits")),
]


def _config() -> ShortTermMemoryConfig:
    return ShortTermMemoryConfig(
        strategy="rolling_summary",
        budget=MemoryBudget(full_zone_turns=2, summary_max_tokens=150, total_max_tokens=800),
    )


@dataclass(slots=True)
class _Reply:
    text: str
    tools: list[str]
    observations: list[Any]


def _agent(message: str, llm_context: Mapping[str, Any]) -> _Reply:
    """The scripted agent: acknowledges statements, answers questions from memory only."""
    if not message.endswith("?"):
        if "Ship" in message:
            quote = {"carrier": "PostalCo", "eta_days": 3}
            return _Reply("Noted; PostalCo can ship it in 3 days.", ["shipping_quote"], [quote])
        return _Reply("Noted.", [], [])
    memory = json.dumps(llm_context.get("conversation_memory", {}), ensure_ascii=False)
    for topic, pattern in _RECALL:
        if topic in message:
            found = pattern.search(memory)
            if found:
                return _Reply(f"From memory: {found.group(1 if pattern.groups else 0)}.", [], [])
    return _Reply("I don't know; it is not in this conversation's memory.", [], [])


def _clip(text: str, limit: int = 64) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _show_memory(memory: Mapping[str, Any]) -> None:
    parts = []
    for part in ("pending_turns", "recent_turns"):
        turns: Sequence[Mapping[str, Any]] = memory.get(part, [])
        users = ", ".join(repr(_clip(t["user"], 24)) for t in turns) or "-"
        parts.append(f"{part.split('_')[0]} {users}")
    summary = memory.get("summary", "")
    lines = [line.removeprefix("- ") for line in summary.splitlines() if line.strip()]
    print(f"    memory : {' | '.join(parts)} | summary {len(lines)} line(s)")
    for line in lines:
        print(f"             · {_clip(line)}")


async def _converse(router: MemoryRouter, script: Mapping[str, list[str]]) -> dict[str, str]:
    """Run the scripts, tenants taking turns; returns the memory text each tenant saw."""
    seen = {tenant: "" for tenant in script}
    for index in range(max(len(messages) for messages in script.values())):
        for tenant, messages in script.items():
            if index >= len(messages):
                continue
            message = messages[index]
            tool_context = {"tenant_id": tenant, "user_id": _USER, "session_id": _SESSION}
            async with router.turn(llm_context={"app": "demo"}, tool_context=tool_context) as t:
                memory = t.llm_context.get("conversation_memory", {})
                seen[tenant] += json.dumps(memory, ensure_ascii=False)
                print(f"[{tenant}] user: {message}")
                _show_memory(memory)
                reply = _agent(message, t.llm_context)
                print(f"    agent  : {reply.text}")
                await t.finish(
                    message, reply.text, tools=reply.tools, observations=reply.observations
                )
    return seen


def _check_isolation(seen: Mapping[str, str]) -> bool:
    ok = True
    for tenant, text in seen.items():
        for other, markers in _MARKERS.items():
            leaked = [marker for marker in markers if other != tenant and marker in text]
            if leaked:
                ok = False
                print(f"isolation: FAILED, {tenant} saw {other}'s {leaked}")
    if ok:
        print("isolation: OK, neither tenant's memory ever held the other's content")
    return ok


async def _converse_through(db: str, script: dict[str, list[str]]) -> tuple[dict[str, str], int]:
    """Run ``script`` through a fresh router on the SQLite file ``db``, then close both."""
    store = SQLiteStateStore(db)
    router = MemoryRouter(_config(), store=store, summarizer=RuleBasedSummarizer(max_tokens=150))
    try:
        seen = await _converse(router, script)
    finally:
        await router.aclose()  # flushes the summarizer and saves every memory
        await store.aclose()
    return seen, router.stats.turns_recorded


async def _phase1(db: str) -> bool:
    print(f"== phase 1 (pid {os.getpid()}): two tenants, same user and session id; store {db}")
    seen, recorded = await _converse_through(db, _PHASE1)
    ok = _check_isolation(seen)
    print(f"phase 1 done: {recorded} turns recorded, router closed")
    return ok


async def _phase2(db: str) -> bool:
    print(f"== phase 2 (pid {os.getpid()}): a new process on the same SQLite file")
    seen, _ = await _converse_through(db, _PHASE2)
    ok = _check_isolation(seen)
    survived = all(
        markers[0] in seen[t] or markers[1] in seen[t] for t, markers in _MARKERS.items()
    )
    print(
        "restart: state survived, each tenant's summary was hydrated from the file"
        if survived
        else "restart: FAILED, memory was not restored"
    )
    return ok and survived


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of ``python -m reference_impl.demo``; returns the exit status."""
    parser = argparse.ArgumentParser(prog="python -m reference_impl.demo", description=__doc__)
    parser.add_argument("--db", help="SQLite file (default: a new temporary file)")
    parser.add_argument("--phase", choices=["all", "1", "2"], default="all")
    args = parser.parse_args(argv)
    if args.phase == "2":
        if not args.db:
            parser.error("--phase 2 needs --db")
        return 0 if asyncio.run(_phase2(args.db)) else 1
    with tempfile.TemporaryDirectory() as tmp:
        db = args.db or os.path.join(tmp, "demo.db")
        if os.path.exists(db):
            parser.error(f"{db} exists; phase 1 starts a new conversation, choose a new path")
        ok = asyncio.run(_phase1(db))
        if args.phase == "1":
            return 0 if ok else 1
        sys.stdout.flush()
        restart = [sys.executable, "-m", "reference_impl.demo", "--phase", "2", "--db", db]
        ok = subprocess.run(restart, check=False).returncode == 0 and ok
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
