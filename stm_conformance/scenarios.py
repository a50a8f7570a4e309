"""Which scenarios a check exercised, observed while it runs.

Every memory a check makes through the kit (``make_memory``, ``make_peer``, the
differential) is watched: its configuration, the turns it is given, the state of its
summarizer calls when another operation happens, how each call ended, its health, its
round trips. What is seen becomes *scenario tags* (``dimension:value``) in the check's
report entry; :mod:`stm_conformance.coverage` renders them, requirement by requirement,
as ``docs/coverage.md``. Direction (accept/reject) and bounds (lower/upper) are about what
an assertion means, which no observation can tell: checks declare those with
``@pytest.mark.stm_scenario("direction:reject", ...)``.

Observing costs a few attribute reads per operation and never changes what the backend
sees, except one more frame around each summarizer call.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Awaitable, Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from .contract import default_token_estimator

__all__ = ["DIMENSIONS", "Tracker", "observing", "track"]

#: Each dimension and its values, in the order the coverage table shows them. A call is
#: ``normal`` when it starts in HEALTHY, ``retry`` in RETRY, ``recovery`` in DEGRADED or
#: RECOVERING; ``in_flight`` pairs the kind of a call with what happened while it ran.
DIMENSIONS: dict[str, tuple[str, ...]] = {
    "direction": ("accept", "reject"),
    "bound": ("lower", "upper"),
    "strategy": ("none", "truncation", "rolling_summary"),
    "overflow": ("unlimited", "truncate_oldest", "truncate_summary", "error"),
    "window": ("0", "1", "many"),
    "digest": ("on", "off"),
    "callbacks": ("on", "off"),
    "health": ("healthy", "retry", "degraded", "recovering"),
    "state": ("to_dict", "from_dict", "persist", "hydrate", "restored_then_used"),
    "in_flight": tuple(
        f"{kind}+{op}"
        for kind in ("normal", "retry", "recovery")
        for op in ("add_turn", "from_dict", "flush", "aclose", "fails")
    ),
    "text": ("non_ascii", "astral", "empty", "huge"),
    "tools": ("with", "without"),
    "summarizer": (
        "valid",
        "slow_valid",
        "exception",
        "bad_output",
        "oversize",
        "cancelled",
        "hang",
    ),
}
#: The dimensions whose values are combined pairwise (one tag per memory: ``combo:...``).
PAIRWISE = ("strategy", "overflow", "health", "callbacks", "round_trip")

HUGE_CHARS = 10_000
SLOW_S = 0.1
_OPERATIONS = frozenset(
    {"add_turn", "flush", "aclose", "to_dict", "from_dict", "persist", "hydrate", "get_llm_context"}
)

_observation: set[str] | None = None
_trackers: list[Tracker] = []


@contextlib.contextmanager
def observing() -> Iterator[set[str]]:
    """Collect the tags of everything made while the block runs (one check)."""
    global _observation
    tags: set[str] = set()
    _observation = tags
    _trackers.clear()
    try:
        yield tags
    finally:
        for tracker in _trackers:
            tracker.finish()
        _trackers.clear()
        _observation = None


def track(config: Any) -> Tracker | None:
    """A tracker for a memory about to be made with ``config``; ``None`` when no check is
    being observed."""
    if _observation is None:
        return None
    tracker = Tracker(_observation, config)
    _trackers.append(tracker)
    return tracker


def _health(memory: Any) -> str | None:
    try:
        value = memory.health
        return str(getattr(value, "value", value)).lower()
    except Exception:
        return None


@dataclass(eq=False)
class Tracker:
    """What one memory went through."""

    tags: set[str]
    config: Any
    memory: Any = None
    #: Kinds of the summarizer calls running now, by call number.
    running: dict[int, str] = field(default_factory=dict)
    #: Operations seen while a call ran, by the call's kind, noted when the call ends.
    during: dict[int, set[str]] = field(default_factory=dict)
    health_seen: set[str] = field(default_factory=set)
    round_trip: bool = False
    restored: bool = False
    calls: int = 0

    def __post_init__(self) -> None:
        cfg = self.config
        self.strategy = str(getattr(cfg, "strategy", ""))
        budget = getattr(cfg, "budget", None)
        limited = bool(getattr(budget, "total_max_tokens", 0))
        self.overflow = str(getattr(budget, "overflow_policy", "")) if limited else "unlimited"
        window = getattr(budget, "full_zone_turns", None)
        self.callbacks = any(
            getattr(cfg, name, None) is not None
            for name in ("on_turn_added", "on_summary_updated", "on_health_changed")
        )
        self._add(
            f"strategy:{self.strategy}",
            f"overflow:{self.overflow}",
            f"digest:{'on' if getattr(cfg, 'include_trajectory_digest', True) else 'off'}",
            f"callbacks:{'on' if self.callbacks else 'off'}",
        )
        if isinstance(window, int):
            self._add(f"window:{window if window < 2 else 'many'}")

    def _add(self, *tags: str) -> None:
        self.tags.update(tags)

    def attach(self, memory: Any) -> None:
        self.memory = memory
        self._note_health()

    def _note_health(self) -> str | None:
        state = None if self.memory is None else _health(self.memory)
        if state is not None:
            self.health_seen.add(state)
            self._add(f"health:{state}")
        return state

    # -- operations -----------------------------------------------------------------

    def wrap(self, name: str, method: Any) -> Any:
        """``method`` of the memory, noting each call; other attributes pass through."""
        if name not in _OPERATIONS or not callable(method):
            return method
        if asyncio.iscoroutinefunction(method):

            async def async_operation(*args: Any, **kwargs: Any) -> Any:
                self.before(name, args)
                try:
                    return await method(*args, **kwargs)
                except Exception:
                    self.rejected()
                    raise
                finally:
                    self._note_health()

            return async_operation

        def operation(*args: Any, **kwargs: Any) -> Any:
            self.before(name, args)
            try:
                return method(*args, **kwargs)
            except Exception:
                self.rejected()
                raise

        return operation

    def rejected(self) -> None:
        """An operation raised: the check passes only if it expected the refusal."""
        self._add("direction:reject")

    def before(self, name: str, args: tuple[Any, ...]) -> None:
        """Note an operation about to run (and what it was given)."""
        self._note_health()
        if name in ("add_turn", "from_dict", "flush", "aclose"):
            for slot in self.running:
                self.during.setdefault(slot, set()).add(name)
        if name in ("to_dict", "from_dict", "persist", "hydrate"):
            self.round_trip = True
            self._add(f"state:{name}")
        if name in ("from_dict", "hydrate"):
            self.restored = True
        elif name in ("add_turn", "flush") and self.restored:
            self._add("state:restored_then_used")
        if name == "add_turn" and args:
            self._note_turn(args[0])

    def _note_turn(self, turn: Any) -> None:
        digest = getattr(turn, "trajectory_digest", None)
        texts = [getattr(turn, "user_message", ""), getattr(turn, "assistant_response", "")]
        if digest is not None:
            tools = list(getattr(digest, "tools_invoked", None) or [])
            self._add(f"tools:{'with' if tools else 'without'}")
            texts += [*tools, getattr(digest, "observations_summary", "")]
        for text in texts:
            if not isinstance(text, str):
                continue
            if text == "":
                self._add("text:empty")
            if len(text) > HUGE_CHARS:
                self._add("text:huge")
            if not text.isascii():
                self._add("text:non_ascii")
                if any(ord(c) > 0xFFFF for c in text):
                    self._add("text:astral")

    # -- summarizer calls ---------------------------------------------------------------

    def summarizer(self, summarize: Callable[[Any], Awaitable[Any]]) -> Callable[[Any], Any]:
        """``summarize``, noting each call's kind, what ran meanwhile and how it ended."""

        async def observed(payload: Any) -> Any:
            state = self._note_health()
            kind = {"retry": "retry", "degraded": "recovery", "recovering": "recovery"}.get(
                state or "", "normal"
            )
            slot = self.calls
            self.calls += 1
            self.running[slot] = kind
            started = time.monotonic()
            outcome = "running"
            try:
                result = await summarize(payload)
                outcome = _outcome(result, time.monotonic() - started, self.config)
                return result
            except asyncio.CancelledError:
                # Abandoned at the timeout: the call hung; else it was cancelled early.
                timeout = getattr(self.config, "summarizer_timeout_s", None)
                took = time.monotonic() - started
                outcome = "hang" if timeout is not None and took >= timeout else "cancelled"
                raise
            except Exception:
                outcome = "exception"
                raise
            finally:
                if outcome != "running":  # ended by a BaseException the kit raised itself
                    self._add(f"summarizer:{outcome}")
                ops = self.during.pop(slot, set())
                if outcome not in ("valid", "slow_valid"):
                    ops.add("fails")
                self._add(*(f"in_flight:{kind}+{op}" for op in ops))
                del self.running[slot]

        return observed

    def finish(self) -> None:
        """At the end of the check: what happened during calls still running (their
        outcome is unknown); one combination tag."""
        for slot, kind in self.running.items():
            self._add(*(f"in_flight:{kind}+{op}" for op in self.during.get(slot, ())))
        self._note_health()
        health = "+".join(sorted(self.health_seen)) or "unknown"
        self._add(
            f"combo:{self.strategy}/{self.overflow}/{health}/"
            f"{'on' if self.callbacks else 'off'}/{'yes' if self.round_trip else 'no'}"
        )


def _outcome(result: Any, took_s: float, config: Any) -> str:
    if not isinstance(result, Mapping) or not isinstance(result.get("summary"), str):
        return "bad_output"
    limit = getattr(getattr(config, "budget", None), "summary_max_tokens", 0) or 0
    estimate = getattr(config, "token_estimator", None) or default_token_estimator
    if limit and estimate(result["summary"]) > limit:
        return "oversize"
    return "slow_valid" if took_s >= SLOW_S else "valid"
