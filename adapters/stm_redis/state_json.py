"""The state's JSON text, written directly for the Redis backend's writes.

Every write of a shared memory ships its whole state, so the text is built by hand from
cached parts rather than through ``json.dumps(schema.dump(...))``; it is the same text
(``tests/redis/test_state_json.py`` checks that for every kind of state).
"""

from __future__ import annotations

import functools
import json
import math
from collections.abc import Callable

from reference_impl.entries import Entry, MemoryState
from reference_impl.schema import (
    SPEC_VERSION,
    STATE_VERSION,
    config_snapshot,
    dump_turn,
    turn_lists,
)
from reference_impl.tokens import json_string
from reference_impl.types import MemoryKey, ShortTermMemoryConfig

__all__ = ["config_json", "dump_json", "turn_json"]

#: One encoder made once: ``json.dumps(**options)`` builds a new one on every call.
_COMPACT = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"))


def dump_json(
    state: MemoryState,
    config: ShortTermMemoryConfig,
    text_of: Callable[[Entry], str] | None = None,
    *,
    config_text: str | None = None,
) -> str:
    """``dump(state, config)`` as compact JSON text (non-ASCII kept), in the same order.

    A caller that writes the state often passes caches: ``text_of`` gives the text of one
    turn (default :func:`turn_json`; turns do not change once added) and ``config_text``
    is :func:`config_json` of ``config``.
    """
    text = text_of or turn_json
    key = state.key
    health = state.health
    # Built by hand: every field but the key, the summary and the configuration is a
    # number or a fixed identifier, and those three are encoded once and cached.
    head = (
        f'{{"version":{STATE_VERSION},"spec_version":"{SPEC_VERSION}",'
        f'"key":{"null" if key is None else _key_json(key)},'
        f'"storage_key":null,"strategy":"{config.strategy}",'
        f'"health":"{health.state.value}","failures":{int(health.failures)},'
        f'"summary":{state.summary_json or json_string(state.summary)},'
        f'"summarized_through":{int(state.summarized_through)},'
        f'"next_seq":{int(state.next_seq)},"dropped_turns":{int(state.dropped_turns)},'
        f'"revision":{int(state.revision)},'
        f'"config_snapshot":{config_text or config_json(config)}'
    )
    if state.departed:
        head += f',"departed_turn_ids":{_COMPACT.encode(list(state.departed))}'
    lists = ",".join(
        f'"{name}":[{",".join(map(text, entries))}]' for name, entries in turn_lists(state)
    )
    return f"{head},{lists}}}"


@functools.lru_cache(maxsize=4096)
def _key_json(key: MemoryKey) -> str:
    return _COMPACT.encode(key.as_dict())


def config_json(config: ShortTermMemoryConfig) -> str:
    """The compact JSON text of the ``config_snapshot`` field, as :func:`dump_json` writes it."""
    return _COMPACT.encode(config_snapshot(config))


def turn_json(entry: Entry) -> str:
    """The compact JSON text of one stored turn, as :func:`dump_json` writes it."""
    turn = entry.turn
    ts = turn.ts
    if (
        turn.trajectory_digest is None
        and not turn.artifacts_shown
        and not turn.artifacts_hidden_refs
        and turn.turn_id is None
        and (type(ts) is int or (type(ts) is float and math.isfinite(ts)))
    ):
        # The common turn, two strings: written directly (``repr`` of a finite float or of
        # an int is its JSON text, as ``json`` writes it).
        return (
            f'{{"seq":{int(entry.seq)},"user_message":{json_string(turn.user_message)},'
            f'"assistant_response":{json_string(turn.assistant_response)},'
            f'"trajectory_digest":null,"artifacts_shown":{{}},"artifacts_hidden_refs":[],'
            f'"ts":{ts!r}}}'
        )
    return _COMPACT.encode(dump_turn(entry))
