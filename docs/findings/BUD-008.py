"""BUD-008: estimate_tokens() measures a different JSON than get_llm_context() returns.

What happens: PenguiFlow 3.11.2's ``estimate_tokens()`` serialises its own snapshot of the
memory: without the ``conversation_memory`` wrapper that ``get_llm_context()`` returns and
with ``json.dumps``'s default ``", "``/``": "`` separators. The number is therefore not the
size of the view a caller puts into the prompt; here it is smaller.

Spec (BUD-008): ``estimate_tokens()`` MUST equal the estimator applied to the canonical
JSON of ``get_llm_context()``, i.e.
``json.dumps(view, ensure_ascii=False, sort_keys=True, separators=(",", ":"))``.

Why it matters: callers budget prompts with ``estimate_tokens()``; when it undercounts what
is actually sent, a prompt computed to fit can overflow the model's context window.
"""

import asyncio
import json

from penguiflow.planner.memory import (
    ConversationTurn,
    DefaultShortTermMemory,
    MemoryBudget,
    ShortTermMemoryConfig,
    default_token_estimator,
)


async def main() -> None:
    measured: list[str] = []

    def estimator(text: str) -> int:  # the default heuristic, recording what it is given
        measured.append(text)
        return default_token_estimator(text)

    config = ShortTermMemoryConfig(
        strategy="truncation", budget=MemoryBudget(full_zone_turns=3), token_estimator=estimator
    )
    memory = DefaultShortTermMemory(config=config)
    await memory.add_turn(ConversationTurn("What is the capital of France?", "Paris."))

    view = await memory.get_llm_context()
    canonical = json.dumps(view, ensure_ascii=False, sort_keys=True, separators=(",", ":"))
    measured.clear()
    estimate = memory.estimate_tokens()
    expected = default_token_estimator(canonical)
    assert estimate == expected, (
        f"BUD-008: estimate_tokens()={estimate} but the view's canonical JSON is {expected} "
        f"tokens; it measured {measured[-1]!r} instead of {canonical!r}"
    )


if __name__ == "__main__":
    asyncio.run(main())
