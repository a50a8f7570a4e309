"""A stored turn with its rendering, and the mutable state of one memory.

Each turn is rendered once, when it is added, and serialised at most once, when the token
meter first needs it; the view, the token meter and the summarizer payload reuse that work.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from json.encoder import encode_basestring
from typing import Any

from .health import HealthMachine
from .tokens import canonical_json, json_string
from .types import ConversationTurn, MemoryKey

__all__ = ["DEPARTED_IDS", "Entry", "MemoryState", "render_turn", "render_view"]

#: How many ids of turns that left a memory it remembers (``MemoryState.departed``).
DEPARTED_IDS = 64


def render_turn(turn: ConversationTurn, *, include_digest: bool) -> dict[str, Any]:
    """The JSON form of a turn in a view and in a summarizer payload (STR-004)."""
    rendered: dict[str, Any] = {"user": turn.user_message, "assistant": turn.assistant_response}
    digest = turn.trajectory_digest
    if include_digest and digest is not None:
        rendered["trajectory_digest"] = {
            "tools_invoked": list(digest.tools_invoked),
            "observations_summary": digest.observations_summary,
            "reasoning_summary": digest.reasoning_summary,
            "artifacts_refs": list(digest.artifacts_refs),
        }
    return rendered


@dataclass(slots=True)
class Entry:
    """A turn, its position in the conversation (``seq``) and its cached rendering.

    ``fresh()`` returns a new copy of ``rendered`` for a caller that may change it (views,
    summarizer payloads): a plain ``dict.copy`` for the common two-string turn, so that a
    view of n turns costs n C-level copies and no Python call per turn.

    ``fragment`` (the canonical JSON of ``rendered``) and ``size`` are the token meter's:
    ``""`` and ``0`` until :meth:`measure` fills them, once (see ``MemoryState.metered``).
    """

    seq: int
    turn: ConversationTurn
    rendered: dict[str, Any]
    fresh: Callable[[], dict[str, Any]]
    fragment: str = ""
    #: What the turn adds to the token meter's running sums (``TokenMeter.entry_size``).
    size: int = 0

    @classmethod
    def make(
        cls,
        seq: int,
        turn: ConversationTurn,
        *,
        include_digest: bool,
        size_of: Callable[[str], int] | None = None,
    ) -> Entry:
        """The entry for ``turn``, measured with ``size_of`` if one is given."""
        if turn.trajectory_digest is None or not include_digest:
            user, assistant = turn.user_message, turn.assistant_response
            rendered = {"user": user, "assistant": assistant}
            if size_of is None:
                return cls(seq, turn, rendered, rendered.copy)
            # What measure() does, without its calls: this is every measured add_turn.
            fragment = _plain_fragment(user, assistant)
            return cls(seq, turn, rendered, rendered.copy, fragment, size_of(fragment))
        rendered = render_turn(turn, include_digest=True)
        entry = cls(seq, turn, rendered, partial(_fresh, rendered))
        if size_of is not None:
            entry.measure(size_of)
        return entry

    def measure(self, size_of: Callable[[str], int]) -> None:
        """Fill ``fragment`` and ``size``; once, as nothing changes an entry's turn."""
        if self.fragment:
            return
        rendered = self.rendered
        if len(rendered) == 2:
            self.fragment = _plain_fragment(rendered["user"], rendered["assistant"])
        else:
            self.fragment = canonical_json(rendered)
        self.size = size_of(self.fragment)


def _plain_fragment(user: str, assistant: str) -> str:
    """``canonical_json`` of the common turn, two strings, written directly (keys sorted;
    ``encode_basestring`` is ``tokens.json_string``, called directly here)."""
    return f'{{"assistant":{encode_basestring(assistant)},"user":{encode_basestring(user)}}}'


@dataclass(slots=True)
class MemoryState:
    """Everything a memory knows; replaced as a whole by ``from_dict``.

    ``pending[visible_from:]`` are the pending turns shown in the view (BUD-010);
    ``*_size`` are running sums of entry sizes for the token meter. They hold only while
    ``metered``: until something measures a memory (a budget, ``estimate_tokens``), its
    entries are not measured and the sums stay 0; ``Budget.start_metering`` then measures
    every held entry once and adds turns measured from then on.
    """

    health: HealthMachine
    key: MemoryKey | None = None
    summary: str = ""
    summary_json: str | None = None
    recent: deque[Entry] = field(default_factory=deque)
    recent_size: int = 0
    pending: list[Entry] = field(default_factory=list)
    visible_from: int = 0
    visible_size: int = 0
    backlog: deque[Entry] = field(default_factory=deque)
    next_seq: int = 1
    summarized_through: int = 0
    dropped_turns: int = 0
    #: The ids of the newest turns that left the lists above -- covered by a summary,
    #: dropped by the window or from a full backlog -- oldest first: a writer that does
    #: not know whether its save of a turn landed (the store wrote, then raised) finds it
    #: here when another writer has moved it on since (``session._is_held``).
    departed: deque[str] = field(default_factory=lambda: deque(maxlen=DEPARTED_IDS))
    revision: int = 0
    metered: bool = True
    #: Whether a stored record is known to hold ``revision`` (hydrated or persisted): a
    #: conditional save then expects that revision, otherwise it expects no record.
    stored: bool = False

    def set_summary(self, text: str) -> None:
        self.summary = text
        self.summary_json = json_string(text) if text else None

    def push_recent(self, entry: Entry) -> None:
        self.recent.append(entry)
        self.recent_size += entry.size

    def pop_recent(self) -> Entry:
        entry = self.recent.popleft()
        self.recent_size -= entry.size
        return entry

    def recent_to_pending(self) -> None:
        """Move the oldest recent turn to the end of pending (``pop_recent`` then
        ``push_pending``, in one call: every ``add_turn`` past the window does this)."""
        entry = self.recent.popleft()
        self.recent_size -= entry.size
        self.pending.append(entry)
        self.visible_size += entry.size

    def push_pending(self, entry: Entry) -> None:
        # The newest pending turn joins the visible run; the budget hides it if needed.
        self.pending.append(entry)
        self.visible_size += entry.size

    def hide_oldest_visible(self) -> None:
        self.show_pending_from(self.visible_from + 1)

    def show_pending_from(self, index: int) -> None:
        """Make ``pending[index:]`` the visible run (in O(distance moved))."""
        pending = self.pending
        if index > self.visible_from:
            self.visible_size -= sum(e.size for e in pending[self.visible_from : index])
        else:
            self.visible_size += sum(e.size for e in pending[index : self.visible_from])
        self.visible_from = index

    def recount_sizes(self) -> None:
        """Recompute the running sums from the entries' sizes."""
        self.recent_size = sum(e.size for e in self.recent)
        self.visible_size = sum(e.size for e in self.pending[self.visible_from :])

    def show_all_pending(self) -> None:
        self.visible_from = 0
        self.visible_size = sum(e.size for e in self.pending)

    @property
    def visible_pending(self) -> list[Entry]:
        return self.pending[self.visible_from :]

    def copy(self) -> MemoryState:
        """A copy that can change without changing this state.

        Entries are shared: nothing changes an entry once it is made.
        """
        health = self.health
        return MemoryState(
            health=HealthMachine(
                health.retry_attempts,
                health.backoff_base_s,
                health.degraded_interval_s,
                health.state,
                health.failures,
                health.not_before,
            ),
            key=self.key,
            summary=self.summary,
            summary_json=self.summary_json,
            recent=deque(self.recent),
            recent_size=self.recent_size,
            pending=list(self.pending),
            visible_from=self.visible_from,
            visible_size=self.visible_size,
            backlog=deque(self.backlog),
            next_seq=self.next_seq,
            summarized_through=self.summarized_through,
            dropped_turns=self.dropped_turns,
            departed=deque(self.departed, maxlen=DEPARTED_IDS),
            revision=self.revision,
            metered=self.metered,
            stored=self.stored,
        )


def _fresh(rendered: dict[str, Any]) -> dict[str, Any]:
    """A new copy of a rendered turn: callers may mutate the views they get.

    Copied from the known shape of :func:`render_turn`, which costs a fraction of parsing
    the cached fragment again.
    """
    fresh = rendered.copy()  # the strings are immutable; only the digest's lists are not
    digest = fresh.get("trajectory_digest")
    if digest is not None:
        fresh["trajectory_digest"] = {
            "tools_invoked": list(digest["tools_invoked"]),
            "observations_summary": digest["observations_summary"],
            "reasoning_summary": digest["reasoning_summary"],
            "artifacts_refs": list(digest["artifacts_refs"]),
        }
    return fresh


def render_view(strategy: str, state: MemoryState) -> dict[str, Any]:
    """The patch ``get_llm_context`` returns for ``state`` (section 0 of the spec)."""
    if strategy == "none":
        return {}
    view: dict[str, Any] = {"recent_turns": [e.fresh() for e in state.recent]}
    if strategy == "rolling_summary" and not state.health.degraded:
        visible = state.visible_pending
        if visible:
            view["pending_turns"] = [e.fresh() for e in visible]
        if state.summary:
            view["summary"] = state.summary
    return {"conversation_memory": view}
