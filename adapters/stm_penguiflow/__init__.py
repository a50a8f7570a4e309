"""Runs the conformance suite against PenguiFlow's own short-term memory.

``pytest --stm-backend=penguiflow`` (with ``pip install 'stm-conformance[penguiflow]'``)
checks ``penguiflow.planner.memory.DefaultShortTermMemory``. The kit's types are converted to
PenguiFlow's here; nothing of PenguiFlow is patched. Without PenguiFlow installed,
``provider()`` (what the name ``penguiflow`` resolves to) raises a ``ProviderError``, which
the kit reports as a usage error at start-up.
"""

from .provider import PenguiFlowMemory, provider

__all__ = ["PenguiFlowMemory", "provider"]
