"""SER-003: from_dict() coerces malformed input, raises other errors, and half-loads.

What happens: PenguiFlow 3.11.2's ``from_dict()`` converts wrong types with ``str()`` /
``dict()`` instead of refusing them, so a corrupt record loads as garbage; some inputs
raise ``TypeError`` or ``AttributeError`` rather than ``ValueError``; and it assigns
``health`` and ``summary`` before it parses the turns, so a record that fails midway
leaves the memory half-loaded. A field its format does not define is ignored, so the next
``to_dict()`` drops it without a word.

Spec (SER-003): ``from_dict`` of malformed input MUST raise ``ValueError`` (no other
exception type) and leave the previous state untouched.

Why it matters: callers that restore state catch ``ValueError`` to fall back to a fresh
memory; anything else crashes the request, and a half-load or a coerced record puts a
corrupt conversation into the prompt.
"""

import asyncio
import json

from penguiflow.planner.memory import (
    ConversationTurn,
    DefaultShortTermMemory,
    MemoryBudget,
    ShortTermMemoryConfig,
)


async def main() -> None:
    config = ShortTermMemoryConfig(strategy="truncation", budget=MemoryBudget(full_zone_turns=3))
    memory = DefaultShortTermMemory(config=config)
    await memory.add_turn(ConversationTurn("u0", "a0"))
    good = memory.to_dict()
    malformed = {
        "summary is a list": {**good, "summary": ["not", "text"]},
        "user_message is a number": {**good, "turns": [{"user_message": 42}]},
        "state is None": None,
        "an unknown field": {**good, "x_not_a_field": 1},
        "turn fails after health/summary": {
            **good,
            "health": "degraded",
            "summary": "stale",
            "turns": [{"artifacts_shown": 5}],
        },
    }

    problems = []
    for name, state in malformed.items():
        memory.from_dict(good)
        before = json.dumps(memory.to_dict(), sort_keys=True)
        outcome = []
        try:
            memory.from_dict(state)
            outcome.append("accepted")
        except ValueError:
            pass
        except Exception as exc:
            outcome.append(f"raised {type(exc).__name__}")
        after = memory.to_dict()
        if json.dumps(after, sort_keys=True) != before:
            turns = [t["user_message"] for t in after["turns"]]
            outcome.append(
                f"state now health={after['health']!r} summary={after['summary']!r} turns={turns}"
            )
        if outcome:
            problems.append(f"{name}: " + ", ".join(outcome))

    assert not problems, "SER-003: from_dict() mishandles malformed input: " + "; ".join(problems)


if __name__ == "__main__":
    asyncio.run(main())
