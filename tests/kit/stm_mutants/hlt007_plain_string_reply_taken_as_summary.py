"""HLT-007 broken: a summarizer reply that is a plain string, not a mapping, is taken as
the summary itself ("some LLM wrappers return the text directly"). Other replies are
validated as by the reference.
"""

from __future__ import annotations

from reference_impl.memory import DefaultShortTermMemory

from . import mutant_provider

BREAKS = "HLT-007"
COLLATERAL: dict[str, str] = {}


class Memory(DefaultShortTermMemory):
    async def _call(self, batch):
        inner = self._summarizer

        def lenient(payload):
            started = inner(payload)  # at once, as the reference invokes it

            async def run():
                reply = await started
                if isinstance(reply, str):
                    return {"summary": reply}  # MUTATION
                return reply

            return run()

        self._summarizer = lenient  # the reference's _call, with this summarizer
        try:
            return await super()._call(batch)
        finally:
            self._summarizer = inner


provider = mutant_provider("hlt007-plain-string-reply-taken-as-summary", Memory)
