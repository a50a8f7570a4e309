"""Token budgets (spec group BUD): measuring the view and trimming it to fit.

All trimming happens here. Trimming never deletes a turn that no summary covers: pending
turns are hidden from the view (BUD-010), evicted recent turns move to pending (or, when
degraded, to the bounded backlog), and only the summary text is ever shortened.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from . import watermark
from .entries import Entry, MemoryState
from .tokens import Part, TokenMeter, json_string
from .types import ShortTermMemoryConfig

__all__ = ["Budget"]


def _part(entries: Sequence[Entry], size: int | None = None) -> Part:
    if size is None:
        size = sum(e.size for e in entries)
    return Part(len(entries), size, lambda: (e.fragment for e in entries), lambda: entries[-1])


@dataclass(frozen=True, slots=True)
class Budget:
    config: ShortTermMemoryConfig
    meter: TokenMeter
    #: ``total_max_tokens`` (0: no limit); a field, as every ``add_turn`` reads it.
    limit: int = field(init=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "limit", self.config.budget.total_max_tokens)

    @classmethod
    def for_config(cls, config: ShortTermMemoryConfig) -> Budget:
        budget = cls(config, TokenMeter.for_estimator(config.token_estimator))
        budget.check_satisfiable()
        return budget

    @property
    def defers_measuring(self) -> bool:
        """Whether a new memory leaves its turns unmeasured until something measures it
        (``MemoryState.metered``): only with no limit, where nothing but
        ``estimate_tokens`` measures, and an estimator that counts from lengths. Catching
        up then costs about 0.5 µs per held turn (5 ms at 10,000); an estimator that
        encodes text would hold the event loop far longer, so it measures every turn as
        it is added. A memory's state under a limit is therefore metered from the start;
        the measuring methods still meter any state they are given."""
        return not self.limit and self.meter.from_length is not None

    def start_metering(self, state: MemoryState) -> None:
        """Measure every turn ``state`` holds and compute its running sums, once; after
        this the memory measures each turn it adds."""
        if state.metered:
            return
        size_of = self.meter.size_of
        for held in (state.recent, state.pending, state.backlog):
            for entry in held:
                entry.measure(size_of)
        state.recount_sizes()
        state.metered = True

    def check_satisfiable(self) -> None:
        """BUD-009: reject a budget that not even the empty view fits."""
        if self.config.strategy == "none" or not self.limit:
            return
        empty = self.meter.view_tokens(None, None, _part(()))
        if empty > self.limit:
            raise ValueError(
                f"total_max_tokens={self.limit} is below the {empty} tokens of an empty "
                "memory view; raise it or set it to 0 (no limit)"
            )

    # -- measuring -------------------------------------------------------------------

    def _shows_summary(self, state: MemoryState) -> bool:
        return self.config.strategy == "rolling_summary" and not state.health.degraded

    def tokens(self, state: MemoryState) -> int:
        """``estimator(canonical_json(view))`` without building the view (BUD-008)."""
        if self.config.strategy == "none":
            return self.meter.estimator("{}")
        if not state.metered:
            self.start_metering(state)
        meter = self.meter
        if meter.from_length is not None:  # the common case, from running sums alone
            if not self._shows_summary(state):
                return meter.length_tokens(None, 0, 0, len(state.recent), state.recent_size)
            return meter.length_tokens(
                state.summary_json,
                len(state.pending) - state.visible_from,
                state.visible_size,
                len(state.recent),
                state.recent_size,
            )
        recent = _part(state.recent, state.recent_size)
        if not self._shows_summary(state):
            return meter.view_tokens(None, None, recent)
        pending_ = state.pending
        pending = Part(
            len(pending_) - state.visible_from,
            state.visible_size,
            lambda: (e.fragment for e in pending_[state.visible_from :]),
            lambda: pending_[-1],
        )
        return meter.view_tokens(state.summary_json, pending, recent)

    def fits(self, state: MemoryState) -> bool:
        return not self.limit or self.tokens(state) <= self.limit

    def summary_fits(self, summary: str) -> bool:
        return self.meter.text_size(summary) <= self.config.budget.summary_max_tokens

    def fits_after_add(self, state: MemoryState, entry: Entry) -> bool:
        """Would the view fit if ``entry`` were added? For the ``error`` policy (BUD-006)."""
        if not self.limit:
            return True
        self.start_metering(state)
        entry.measure(self.meter.size_of)
        window = [*state.recent, entry]
        cut = max(0, len(window) - self.config.budget.full_zone_turns)
        evicted, kept = window[:cut], window[cut:]
        if not self._shows_summary(state):
            return self.meter.view_tokens(None, None, _part(kept)) <= self.limit
        pending = state.pending[state.visible_from :] + evicted
        tokens = self.meter.view_tokens(state.summary_json, _part(pending), _part(kept))
        return tokens <= self.limit

    def fits_after_install(self, state: MemoryState, batch: watermark.Batch, summary: str) -> bool:
        """Would the view fit with ``summary`` installed? For the ``error`` policy (BUD-007)."""
        if not self.limit:
            return True
        self.start_metering(state)
        if batch.recovering:
            pending = [e for e in state.backlog if e.seq > batch.through]
        else:
            pending = [e for e in state.pending if e.seq > batch.through]
        summary_json = json_string(summary) if summary else None
        tokens = self.meter.view_tokens(summary_json, _part(pending), _part(state.recent))
        return tokens <= self.limit

    def refuse_summary(
        self, state: MemoryState, batch: watermark.Batch, summary: str
    ) -> str | None:
        """Why installing ``summary`` would break the budget (BUD-007), or ``None``. A
        summary the token estimator fails to measure (it raises, or returns no number) is
        refused too: it cannot be known to fit."""
        try:
            return self._refuse_summary(state, batch, summary)
        except Exception as exc:
            return f"token estimator raised {type(exc).__name__} on the summary: {exc}"

    def _refuse_summary(
        self, state: MemoryState, batch: watermark.Batch, summary: str
    ) -> str | None:
        if not self.summary_fits(summary):
            return (
                f"summary of {self.meter.text_size(summary)} tokens exceeds "
                f"summary_max_tokens={self.config.budget.summary_max_tokens}"
            )
        if self.config.budget.overflow_policy == "error" and not self.fits_after_install(
            state, batch, summary
        ):
            return "summary would take the memory over total_max_tokens"
        return None

    # -- trimming --------------------------------------------------------------------

    def enforce(self, state: MemoryState) -> None:
        """Trim until the view fits (BUD-001, BUD-004, BUD-005). Each step shrinks the view,
        so the loop terminates; ``check_satisfiable`` guarantees the empty view fits."""
        if not self.limit or self.config.budget.overflow_policy == "error":
            return
        first_summary = self.config.budget.overflow_policy == "truncate_summary"
        while not self.fits(state):
            if first_summary and state.summary and self._shows_summary(state):
                self._shorten_summary(state)
            elif state.visible_from < len(state.pending) and self._shows_summary(state):
                if self._hide_pending(state):
                    return  # measured to fit: no need to measure again
            elif state.recent:
                watermark.evict_oldest_recent(state, self.config)
            elif state.summary and self._shows_summary(state):
                self._shorten_summary(state)
            else:  # pragma: no cover - excluded by check_satisfiable
                raise AssertionError("empty view exceeds the budget")

    def _hide_pending(self, state: MemoryState) -> bool:
        """Hide the fewest oldest visible pending turns that make the view fit, or all of
        them (BUD-004: oldest first, hidden not deleted).

        After ``add_turn`` one more hidden turn is usually enough: that is tried first.
        Otherwise the count is found by galloping from the newest turn (views of 1, 2, 4,
        ... visible pending turns), then bisecting: O(log n) measurements of views no
        longer than twice the answer, instead of one measurement per turn of views that
        hold every turn not yet hidden. That matters for estimators that measure the text
        (each measurement encodes the view): settling 10,000 pending turns with tiktoken
        took minutes one by one. Hiding more turns never makes the view longer, so the
        search finds what hiding them one at a time would. Returns whether the view was
        measured to fit (``False``: every pending turn is hidden, not yet measured).
        """
        start, end = state.visible_from, len(state.pending)
        state.show_pending_from(start + 1)
        if start + 1 == end:
            return False
        if self.fits(state):
            return True
        known_over = start + 1  # the view does not fit with ``known_over`` hidden
        fits_at = end  # it fits with ``fits_at`` hidden, or that hides every pending turn
        shown = 1
        while end - shown > known_over:
            state.show_pending_from(end - shown)
            if not self.fits(state):
                known_over = end - shown
                break
            fits_at, shown = end - shown, shown * 2
        while fits_at - known_over > 1:
            middle = (known_over + fits_at) // 2
            state.show_pending_from(middle)
            if self.fits(state):
                fits_at = middle
            else:
                known_over = middle
        state.show_pending_from(fits_at)
        return fits_at < end

    def settle(self, state: MemoryState) -> None:
        """Recompute the visible pending run from scratch, then trim (after bulk changes)."""
        state.show_all_pending()
        self.enforce(state)

    def _shorten_summary(self, state: MemoryState) -> None:
        """Keep the longest tail of the summary that fits; drop it if none does. By
        bisection: with an estimator that can count a longer text as fewer tokens, the
        tail kept fits where one character more does not, as BUD-004 allows."""
        text = state.summary
        low, high = 0, len(text) - 1  # candidate kept lengths; the full text does not fit
        best = 0
        while low <= high:
            mid = (low + high) // 2
            state.set_summary(text[len(text) - mid :] if mid else "")
            if self.fits(state):
                best, low = mid, mid + 1
            else:
                high = mid - 1
        state.set_summary(text[len(text) - best :] if best else "")

    def clip_summary(self, text: str) -> str:
        """The longest tail of ``text`` within ``summary_max_tokens`` (for loaded states,
        BUD-002), by bisection as :meth:`_shorten_summary`."""
        low, high, best = 0, len(text), 0
        while low <= high:
            mid = (low + high) // 2
            if self.summary_fits(text[len(text) - mid :] if mid else ""):
                best, low = mid, mid + 1
            else:
                high = mid - 1
        return text[len(text) - best :] if best else ""
