"""Shared constants and helpers of the kit's tests."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[2]
DOCS = REPO / "docs"
SCHEMA_PATH = DOCS / "report.schema.json"

#: ``run_pytest(*args)``: pytest in a subprocess, in the scratch directory.
RunPytest = Callable[..., pytest.RunResult]


def load_json(path: Path) -> Any:
    """Parse a JSON file."""
    return json.loads(path.read_text(encoding="utf-8"))


def validate_report(report: Any) -> None:
    """Fail unless ``report`` is valid against ``docs/report.schema.json``."""
    import jsonschema

    schema = load_json(SCHEMA_PATH)
    validator = jsonschema.Draft202012Validator(
        schema, format_checker=jsonschema.Draft202012Validator.FORMAT_CHECKER
    )
    errors = sorted(validator.iter_errors(report), key=lambda e: list(e.path))
    assert not errors, "\n".join(f"{list(e.path)}: {e.message}" for e in errors)
