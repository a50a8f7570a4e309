"""HLT-007 broken: a summarizer raising a ``BaseException`` that is no ``Exception`` is not
a failed call.

The call is wrapped in ``except Exception``, as most code is: an abort some client
libraries raise as a ``BaseException`` passes through it and ends the summarizer worker.
The failure is never counted (the memory stays HEALTHY, no retry is scheduled) and the
next turn starts another call at once.
"""

from __future__ import annotations

import asyncio
from typing import Any

from reference_impl import watermark
from reference_impl.memory import DefaultShortTermMemory, SummarizerFn

from . import mutant_provider

BREAKS = "HLT-007"
COLLATERAL: dict[str, str] = {}


class NarrowCatchMemory(DefaultShortTermMemory):
    _escaped: BaseException | None = None

    def _unless_replaced(self, summarizer: SummarizerFn) -> SummarizerFn:
        wrapped = super()._unless_replaced(summarizer)

        def watched(payload: Any) -> Any:
            call = wrapped(payload)  # invoked now: it notes the state the batch is of

            async def noted() -> Any:
                try:
                    return await call
                except (Exception, asyncio.CancelledError):
                    raise
                except BaseException as exc:
                    self._escaped = exc
                    raise

            return noted()

        return watched

    async def _call(self, batch: watermark.Batch) -> tuple[str | None, str | None]:
        result = await super()._call(batch)
        escaped, self._escaped = self._escaped, None
        if escaped is not None and not isinstance(escaped, KeyboardInterrupt | SystemExit):
            raise escaped  # MUTATION: only an Exception is a failed call
        return result


provider = mutant_provider("hlt007-base-exception-escapes", NarrowCatchMemory)
