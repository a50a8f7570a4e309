"""WM-004 broken: a summarizer call the replaced state began reaches the summarizer after
``from_dict`` returned.

The worker takes a batch and starts the call as a task of its own, which runs on a later
turn of the event loop. The backend does not check, when the task starts, that the state
the batch came from is still its own: a ``from_dict`` in between lets the old state's call
reach the summarizer, its outcome is dropped, and the loaded state sends the same turns
again. Each such turn goes to two successful calls.
"""

from __future__ import annotations

from reference_impl.memory import DefaultShortTermMemory, SummarizerFn

from . import mutant_provider

BREAKS = "WM-004"
COLLATERAL: dict[str, str] = {}


class LateCallMemory(DefaultShortTermMemory):
    def _unless_replaced(self, summarizer: SummarizerFn) -> SummarizerFn:
        return summarizer  # MUTATION: no check when the call starts


provider = mutant_provider("wm004-call-starts-after-from-dict", LateCallMemory)
