"""SER-002 broken: ``to_dict()`` writes turn texts with universal newlines ("\\r\\n" and a
lone "\\r" become "\\n"), as a text-mode writer would. ``persist`` writes them verbatim;
``from_dict(to_dict())`` of a turn with a carriage return shows different text.
"""

from __future__ import annotations

from typing import Any

from reference_impl.memory import DefaultShortTermMemory

from . import mutant_provider

BREAKS = "SER-002"
COLLATERAL: dict[str, str] = {}


def _nl(text: str) -> str:
    return text.replace("\r\n", "\n").replace("\r", "\n")


class Memory(DefaultShortTermMemory):
    def to_dict(self) -> dict[str, Any]:
        data = super().to_dict()
        for name in ("turns", "pending", "backlog"):
            for record in data[name]:  # MUTATION
                record["user_message"] = _nl(record["user_message"])
                record["assistant_response"] = _nl(record["assistant_response"])
        return data


provider = mutant_provider("ser002-newlines-normalised-on-dump", Memory)
