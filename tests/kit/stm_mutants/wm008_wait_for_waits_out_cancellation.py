"""WM-008 broken: the summarizer timeout is ``asyncio.wait_for``, which waits for the
cancelled call to end.

``wait_for`` cancels the call at the timeout and then waits for it to finish. A summarizer
whose client swallows the cancellation (retries internally, shields its request) keeps the
call, and the worker, and ``flush()``, waiting forever: the call never "fails".
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping

from reference_impl import watermark
from reference_impl.inputs import text_problem
from reference_impl.memory import DefaultShortTermMemory

from . import mutant_provider

BREAKS = "WM-008"
COLLATERAL: dict[str, str] = {}


class WaitForMemory(DefaultShortTermMemory):
    async def _call(self, batch: watermark.Batch):
        payload = {
            "previous_summary": batch.previous_summary,
            "turns": [e.fresh() for e in batch.entries],
        }
        try:
            # MUTATION: wait_for waits for the cancelled call to actually end
            response = await asyncio.wait_for(
                self._summarizer(payload), self._config.summarizer_timeout_s
            )
        except TimeoutError:
            return None, "timed out"
        except asyncio.CancelledError:
            task = asyncio.current_task()
            if task is not None and task.cancelling():
                raise
            return None, "summarizer raised CancelledError"
        except (KeyboardInterrupt, SystemExit):
            raise
        except BaseException as exc:
            return None, f"summarizer raised {exc!r}"
        if not isinstance(response, Mapping):
            return None, "not a mapping"
        summary = response.get("summary")
        if not isinstance(summary, str):
            return None, "no string summary"
        if text_problem(summary) is not None:
            return None, "bad text"
        return summary, None


provider = mutant_provider("wm008-wait-for-waits-out-cancellation", WaitForMemory)
