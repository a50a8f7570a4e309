"""The PenguiFlow bridge converts the kit's types and passes every call through.

PenguiFlow is not a test dependency; the reference, whose API is PenguiFlow's, stands in
for ``penguiflow.planner.memory`` so the conversion itself is what is checked here. The
bridge against the real package is exercised by ``pytest --stm-backend=penguiflow``.
"""

from __future__ import annotations

import sys
import types

import pytest
from stm_penguiflow import PenguiFlowMemory, provider

import reference_impl
import reference_impl.types as kit_types
from stm_conformance.checks import config, turn
from stm_conformance.provider import ProviderError, load_provider


class _Recorder:
    """A stand-in module: the reference's classes, recording what the bridge builds."""

    def __init__(self) -> None:
        self.turns: list[object] = []
        self.configs: list[object] = []

    def module(self) -> types.ModuleType:
        fake = types.ModuleType("penguiflow.planner.memory")
        for name in reference_impl.__all__:
            setattr(fake, name, getattr(reference_impl, name))
        recorder = self

        class Memory(reference_impl.DefaultShortTermMemory):
            def __init__(self, *, config: object, summarizer: object) -> None:
                recorder.configs.append(config)
                super().__init__(config=config, summarizer=summarizer)  # type: ignore[arg-type]

            async def add_turn(self, t: object) -> None:
                recorder.turns.append(t)
                await super().add_turn(t)  # type: ignore[arg-type]

        fake.DefaultShortTermMemory = Memory  # type: ignore[attr-defined]
        return fake


@pytest.fixture
def recorder(monkeypatch: pytest.MonkeyPatch) -> _Recorder:
    rec = _Recorder()
    monkeypatch.setitem(sys.modules, "penguiflow.planner.memory", rec.module())
    return rec


@pytest.mark.anyio
async def test_bridge_converts_config_and_turns(recorder: _Recorder) -> None:
    cfg = config("truncation", full_zone_turns=2, include_trajectory_digest=True)
    bridge = provider()
    memory = await bridge.create(cfg, kit_types.MemoryKey("t", "u", "s"), None)  # type: ignore[arg-type]
    assert isinstance(memory, PenguiFlowMemory)
    built = recorder.configs[0]
    assert built is not cfg and built.budget.full_zone_turns == 2  # type: ignore[attr-defined]
    await memory.add_turn(turn(1, digest=True))
    assert recorder.turns and recorder.turns[0] is not None
    view = await memory.get_llm_context()
    assert view["conversation_memory"]["recent_turns"][0]["trajectory_digest"]["tools_invoked"] == [
        "tool1"
    ]
    assert memory.estimate_tokens() > 0
    assert memory.health.value == "healthy"
    clone = await bridge.create(cfg, kit_types.MemoryKey("t", "u", "s"), None)  # type: ignore[arg-type]
    clone.from_dict(memory.to_dict())
    assert await clone.get_llm_context() == view


def test_missing_penguiflow_is_a_clear_provider_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "penguiflow.planner.memory", None)
    with pytest.raises(ProviderError, match=r"stm-conformance\[penguiflow\]"):
        load_provider("penguiflow")


def test_missing_penguiflow_fails_at_start_up_in_one_line(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("STM_BACKEND", raising=False)
    # Loaded before the kit's pytest_configure: PenguiFlow is "not installed".
    pytester.makeconftest(
        "import sys\n\nsys.modules['penguiflow'] = None\n"
        "sys.modules['penguiflow.planner.memory'] = None\n"
    )
    result = pytester.runpytest_subprocess("--stm-backend=penguiflow")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert result.stderr.lines == [
        "ERROR: stm_conformance: the penguiflow backend needs PenguiFlow: "
        "pip install 'stm-conformance[penguiflow]'",
        "",
    ]
    assert "passed" not in result.stdout.str() and "failed" not in result.stdout.str()
