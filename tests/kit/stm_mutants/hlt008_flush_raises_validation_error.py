"""HLT-008 broken: ``flush()`` surfaces the summarizer's invalid output as a ``ValueError``.

The summarizer's reply is validated (a pydantic-style ``ValidationError``, a ``ValueError``
subclass); when the memory ends a flush DEGRADED or in RETRY because the reply was invalid,
``flush()`` raises that error "so the caller knows the summary is stale". Exceptions raised
by the summarizer itself are not surfaced.
"""

from __future__ import annotations

from typing import Any

from reference_impl import watermark
from reference_impl.memory import DefaultShortTermMemory

from . import mutant_provider

BREAKS = "HLT-008"
COLLATERAL: dict[str, str] = {}


class SummaryValidationError(ValueError):
    pass


class SurfacingFlushMemory(DefaultShortTermMemory):
    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._invalid: str | None = None

    async def _call(self, batch: watermark.Batch):
        summary, error = await super()._call(batch)
        self._invalid = (
            error
            if error is not None and "raised" not in error and "timed out" not in error
            else None
        )
        return summary, error

    async def flush(self) -> None:
        await super().flush()
        if self._invalid is not None and self.health.value != "healthy":
            # MUTATION: the validation error of the last reply reaches the caller
            raise SummaryValidationError(self._invalid)


provider = mutant_provider("hlt008-flush-raises-validation-error", SurfacingFlushMemory)
