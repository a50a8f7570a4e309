"""An executable model of the spec: the oracle of the differential check.

Deliberately simple and slow. It holds plain lists, recomputes everything from scratch
and never awaits. Summarizer calls are fed to it as they happened to the backend: which
turns a call covers is the backend's choice within the rules (:meth:`SpecModel.check_call`),
and its summary is then installed by the spec's rules (:meth:`SpecModel.install`); a round
of failures is one step (:meth:`SpecModel.fail`), and one failure with its retry held is
another (:meth:`SpecModel.fail_once`). Each rule is tagged with the requirement it
implements, and the model records for every turn where it is and which rule put it there,
so a divergence can be blamed on one requirement.

It covers the strategies ``truncation`` and ``rolling_summary`` under the truncate
policies, and under ``error`` while nothing is refused (the model does not refuse);
refusals, callbacks and timing are checked elsewhere. Health is observed at rest:
``healthy``, ``retry`` while a retry is held, or ``degraded`` (RECOVERING is DEGRADED's
view).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from .contract import (
    ConversationTurn,
    ShortTermMemoryConfig,
    canonical_json,
    default_token_estimator,
)

__all__ = ["ModelTurn", "SpecModel", "render_turn"]


def render_turn(turn: ConversationTurn, *, include_digest: bool) -> dict[str, Any]:
    """STR-004: ``{"user", "assistant"}`` plus the digest when there is one and it is wanted."""
    out: dict[str, Any] = {"user": turn.user_message, "assistant": turn.assistant_response}
    digest = turn.trajectory_digest
    if include_digest and digest is not None:
        out["trajectory_digest"] = {
            "tools_invoked": list(digest.tools_invoked),
            "observations_summary": digest.observations_summary,
            "reasoning_summary": digest.reasoning_summary,
            "artifacts_refs": list(digest.artifacts_refs),
        }
    return out


@dataclass(slots=True)
class ModelTurn:
    """A turn as the model holds it: its position, its rendering and its history."""

    seq: int
    rendered: dict[str, Any]
    #: Where the turn is: ``recent``, ``pending``, ``backlog``, ``summarized``, ``dropped``.
    place: str = "recent"
    #: The requirement of the rule that put it there.
    why: str = "STR-002"
    #: Whether the budget ever hid it while pending (trimming may hide, never delete).
    was_hidden: bool = False
    #: Why it left recent: ``BUD-003`` (the window) or ``BUD-004`` (the token budget).
    evicted_by: str | None = None
    #: The health it left recent in (``healthy``, ``retry``...).
    evicted_in: str | None = None


@dataclass
class SpecModel:
    """The state of one memory as the spec defines it, one rule at a time."""

    config: ShortTermMemoryConfig
    recent: list[ModelTurn] = field(default_factory=list)
    pending: list[ModelTurn] = field(default_factory=list)
    #: How many of the oldest pending turns the budget hides (BUD-010).
    hidden: int = 0
    backlog: list[ModelTurn] = field(default_factory=list)
    summary: str = ""
    #: Every turn ever covered by an installed summary, in the order they were covered.
    summarized: list[ModelTurn] = field(default_factory=list)
    health: str = "healthy"
    dropped_turns: int = 0
    turns: list[ModelTurn] = field(default_factory=list)
    #: Every summary installed, in order (as returned, before any budget shortening).
    installed: list[str] = field(default_factory=list)
    #: The turns the last installed summary covered.
    last_covered: list[ModelTurn] = field(default_factory=list)

    # -- reading ---------------------------------------------------------------------

    @property
    def rolling(self) -> bool:
        return self.config.strategy == "rolling_summary"

    @property
    def degraded(self) -> bool:
        return self.health == "degraded"

    @property
    def visible_pending(self) -> list[ModelTurn]:
        return self.pending[self.hidden :]

    def view(self) -> dict[str, Any]:
        """The view of section 0 of the spec (STR-001..003, WM-005, HLT-004)."""
        if self.config.strategy == "none":
            return {}
        inner: dict[str, Any] = {"recent_turns": [t.rendered for t in self.recent]}
        if self.rolling and not self.degraded:
            if self.visible_pending:
                inner["pending_turns"] = [t.rendered for t in self.visible_pending]
            if self.summary:
                inner["summary"] = self.summary
        return {"conversation_memory": inner}

    def tokens(self) -> int:
        """BUD-008: the estimator applied to the canonical JSON of the view."""
        return self.estimate(canonical_json(self.view()))

    def estimate(self, text: str) -> int:
        return (self.config.token_estimator or default_token_estimator)(text)

    def summary_size(self, text: str) -> int:
        return self.estimate(text) if text else 0

    # -- operations --------------------------------------------------------------------

    def add(self, turn: ConversationTurn) -> None:
        """``add_turn``: recent gets the turn, the window evicts, the budget trims."""
        if self.config.strategy == "none":
            return  # STR-001
        entry = ModelTurn(
            len(self.turns) + 1,
            render_turn(turn, include_digest=self.config.include_trajectory_digest),
        )
        self.turns.append(entry)
        self.recent.append(entry)
        while len(self.recent) > self.config.budget.full_zone_turns:
            self._evict_oldest_recent("BUD-003")
        self._fit()

    def batch(self) -> list[ModelTurn]:
        """The turns the next summarizer call covers (WM-004): pending, or the backlog."""
        return list(self.backlog if self.degraded else self.pending)

    def check_call(
        self, payload: Mapping[str, Any], summary_at_start: str | None = None
    ) -> tuple[str, str] | None:
        """Whether a summarizer call a backend made was a legal one (WM-004, STR-004).

        A call is sent the summary installed when it started (``summary_at_start``, default
        the current one) and the oldest turns of the batch, in order; how many is the
        backend's choice (turns evicted after a call started wait for the next one).
        Returns the broken requirement and why, or ``None``.
        """
        source = self.batch()
        turns = list(payload.get("turns") or [])
        installed = self.summary if summary_at_start is None else summary_at_start
        if payload.get("previous_summary") != installed:
            if self.health == "retry":  # the last good summary is gone: HLT-003 keeps it
                return "HLT-003", (
                    f"a retry was sent previous_summary={payload.get('previous_summary')!r}; "
                    f"RETRY keeps the last good summary, {installed!r}"
                )
            return "WM-004", (
                f"a call was sent previous_summary={payload.get('previous_summary')!r}; "
                f"the summary installed when it started is {installed!r}"
            )
        sent = [t.get("user") if isinstance(t, Mapping) else t for t in turns]
        expected = [t.rendered["user"] for t in source[: len(turns)]]
        if not turns or sent != expected:
            # Sent again, the newest turns the last summary covered, not all of them: its
            # install kept them (WM-003, or HLT-006 for a recovery's). The whole batch
            # again is another fault (a second worker, say): WM-004's, below.
            covered = [t.rendered["user"] for t in self.last_covered]
            again = [u for u in sent if u in covered]
            if again and len(again) < len(covered) and covered[-len(again) :] == again:
                return self.last_covered[-1].why, (
                    f"a call was sent turns {sent}, of which {again} an installed summary "
                    "covers already: its install must remove exactly the turns sent to it"
                )
            skipped = _left_out(source, sent)
            if skipped and all(t.was_hidden for t in skipped):
                return "WM-006", (
                    f"a call was sent turns {sent}, leaving out "
                    f"{[t.rendered['user'] for t in skipped]}: pending turns the budget hid "
                    "from the view were deleted, not kept until a summary covers them"
                )
            return "WM-004", (
                f"a call was sent turns {sent}; the oldest turns waiting, in order, are "
                f"{[t.rendered['user'] for t in source]}"
            )
        if turns != [t.rendered for t in source[: len(turns)]]:
            return "STR-004", "a call was sent turns rendered differently from the spec"
        return None

    def install(self, payload: Mapping[str, Any], summary: str) -> None:
        """A successful call: its summary covers exactly the turns it was sent (WM-003);
        a recovery returns to HEALTHY and turns evicted meanwhile become pending (HLT-006).
        Call :meth:`check_call` first."""
        count = len(payload.get("turns") or [])
        recovering = self.degraded
        source = self.backlog if recovering else self.pending
        covered, rest = source[:count], source[count:]
        if self.summary_size(summary) > self.config.budget.summary_max_tokens:
            raise ValueError("summaries over summary_max_tokens are failures (BUD-007)")
        self.summary = summary
        self.installed.append(summary)
        self.last_covered = covered
        for entry in covered:
            entry.place, entry.why = "summarized", "HLT-006" if recovering else "WM-003"
            self.summarized.append(entry)
        if recovering:
            self.backlog, self.health = [], "healthy"
            for entry in rest:
                entry.place, entry.why = "pending", "HLT-006"
            self.pending = rest + self.pending
        else:
            self.pending, self.health = rest, "healthy"  # a success in RETRY ends it
        self._fit()

    def fail_once(self) -> None:
        """The first attempt failed and a retry is due: RETRY, nothing else changes
        (HLT-002, HLT-003); the retry is sent the same batch (WM-004). With no retries
        allowed, that failure was the last: DEGRADED (HLT-004)."""
        if self.rolling and self.health == "healthy" and self.pending:
            if self.config.retry_attempts == 0:
                self.fail()
            else:
                self.health = "retry"

    def fail(self) -> None:
        """Every call fails until DEGRADED: pending turns move to the backlog (HLT-004)."""
        if not (self.rolling and not self.degraded and self.pending):
            return  # nothing to summarize: no call, no failure
        self.health = "degraded"
        for entry in self.pending:
            self._to_backlog(entry, "HLT-004")
        self.pending, self.hidden = [], 0
        self._fit()

    # -- rules -------------------------------------------------------------------------

    def _evict_oldest_recent(self, why: str) -> None:
        entry = self.recent.pop(0)
        entry.evicted_by, entry.evicted_in = why, self.health
        if not self.rolling:
            entry.place, entry.why = "dropped", "STR-002"  # truncation keeps no older turns
        elif self.degraded:
            self._to_backlog(entry, "HLT-005")
        else:
            entry.place, entry.why = "pending", "WM-002"
            self.pending.append(entry)

    def _to_backlog(self, entry: ModelTurn, why: str) -> None:
        entry.place, entry.why = "backlog", why
        self.backlog.append(entry)
        while len(self.backlog) > self.config.recovery_backlog_limit:
            lost = self.backlog.pop(0)
            lost.place, lost.why = "dropped", "HLT-005"
            self.dropped_turns += 1

    def _fits(self) -> bool:
        limit = self.config.budget.total_max_tokens
        return not limit or self.tokens() <= limit

    def _fit(self) -> None:
        """Trim until the view fits (BUD-001), from scratch: the view is a function of the
        state (BUD-010), so the visible pending run is recomputed every time."""
        self.hidden = 0
        policy = self.config.budget.overflow_policy
        if policy == "error":
            return  # refusals happen in add_turn, not by trimming (BUD-006)
        shows_summary = self.rolling and not self.degraded
        while not self._fits():
            if policy == "truncate_summary" and shows_summary and self.summary:
                self._shorten_summary()  # BUD-005: the summary goes first
            elif shows_summary and self.hidden < len(self.pending):
                self.pending[self.hidden].was_hidden = True  # BUD-004, hidden not deleted
                self.hidden += 1
            elif self.recent:
                self._evict_oldest_recent("BUD-004")
            elif shows_summary and self.summary:
                self._shorten_summary()  # BUD-004: the summary only when nothing else is left
            else:
                raise AssertionError("BUD-009: the empty view exceeds the budget")

    def _shorten_summary(self) -> None:
        """Keep the longest tail of the summary that fits, possibly none (BUD-004/005). The
        kit's estimators never count a longer text as fewer tokens, so this is also the
        tail that fits where one character more does not, which the spec allows for
        estimators that can."""
        text = self.summary
        for keep in range(len(text) - 1, -1, -1):
            self.summary = text[len(text) - keep :] if keep else ""
            if self._fits():
                return


def _left_out(source: list[ModelTurn], sent: list[Any]) -> list[ModelTurn]:
    """The turns of ``source`` a call skipped, when what it was sent is ``source`` in order
    with some turns left out (else ``[]``: it was sent something else)."""
    skipped: list[ModelTurn] = []
    pending = iter(source)
    for user in sent:
        for entry in pending:
            if entry.rendered["user"] == user:
                break
            skipped.append(entry)
        else:
            return []
    return skipped
