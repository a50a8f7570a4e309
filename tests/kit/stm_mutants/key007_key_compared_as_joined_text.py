"""KEY-007 broken: the key a state records is compared as ``tenant:user:session`` text.

On load, the recorded key and the memory's key are compared as their parts joined with
``:``, unescaped (the string PenguiFlow's own storage keys look like), so a state recorded
for ``("a:b", "c", "d")`` loads into the memory of ``("a", "b:c", "d")``, and is then
recorded as that memory's own. Keys that differ in any other way (a part, its case, its
whitespace) are still refused as in the reference.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from reference_impl.memory import DefaultShortTermMemory

from . import mutant_provider

BREAKS = "KEY-007"
COLLATERAL: dict[str, str] = {}

_PARTS = ("tenant_id", "user_id", "session_id")


def _joined(parts: Any) -> str | None:
    try:
        values = [parts[name] for name in _PARTS]
    except Exception:
        return None
    return ":".join(values) if all(isinstance(v, str) for v in values) else None


class JoinedKeyMemory(DefaultShortTermMemory):
    def _same_as_joined(self, state: Any) -> Any:
        own = self.key
        recorded = state.get("key") if isinstance(state, Mapping) else None
        if own is None or not isinstance(recorded, Mapping):
            return state
        # MUTATION: keys compared as unescaped "tenant:user:session" text.
        if _joined(recorded) == _joined(own.as_dict()):
            return {**state, "key": own.as_dict()}
        return state

    def from_dict(self, state: Mapping[str, Any]) -> None:
        super().from_dict(self._same_as_joined(state))

    async def afrom_dict(self, state: Mapping[str, Any]) -> None:
        await super().afrom_dict(self._same_as_joined(state))


provider = mutant_provider("key007-key-compared-as-joined-text", JoinedKeyMemory)
