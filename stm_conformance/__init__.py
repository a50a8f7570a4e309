"""pytest conformance kit for short-term memory backends.

``pytest --stm-backend=NAME`` runs the suite against a backend; see
``docs/backend-authors.md``. Public names are imported on first use, so that installing the
kit (a pytest plugin) costs other test runs nothing.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .capabilities import CAPABILITIES, LEVELS
    from .provider import Provider, ProviderError, load_provider
    from .scripted import RecordingCallbacks, ScriptedSummarizer

__version__ = "0.1.0"

__all__ = [
    "CAPABILITIES",
    "LEVELS",
    "Provider",
    "ProviderError",
    "RecordingCallbacks",
    "ScriptedSummarizer",
    "__version__",
    "load_provider",
]

_LAZY = {
    "CAPABILITIES": "capabilities",
    "LEVELS": "capabilities",
    "Provider": "provider",
    "ProviderError": "provider",
    "load_provider": "provider",
    "RecordingCallbacks": "scripted",
    "ScriptedSummarizer": "scripted",
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f".{module}", __name__), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
