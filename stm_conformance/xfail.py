"""Expected failures declared by a backend in a TOML file (``--stm-xfail=FILE``).

Each top-level table is one entry; its name selects checks and it holds ``reason`` and
``category``::

    ["WM-003"]                              # every check of a requirement
    reason = "summaries are installed wholesale"
    category = "known_bug"                  # or "unsupported"

    ["test_strategies.py::test_rolling_summary_view_shape"]   # a node ID (suffix)
    reason = "..."
    category = "unsupported"

    [test_none_strategy_is_a_no_op]         # a check name (with or without [params])
    reason = "..."
    category = "unsupported"

Expected failures are strict: a check that passes anyway fails the run.
"""

from __future__ import annotations

import re
import tomllib
from collections.abc import Collection, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

__all__ = ["CATEGORIES", "XfailEntry", "XfailFileError", "load_xfail_file", "matching_entries"]

Category = Literal["unsupported", "known_bug"]
CATEGORIES: frozenset[str] = frozenset({"unsupported", "known_bug"})

_REQUIREMENT_ID = re.compile(r"^[A-Z]+-\d{3}$")
#: What a requirement ID with a typo still looks like (``wm-003``, ``WM-3``, ``WMX-003``).
_REQUIREMENT_LIKE = re.compile(r"^[A-Za-z]+-\d+$")
_PARAMS = re.compile(r"\[.*\]$")


class XfailFileError(ValueError):
    """The expected-failures file is missing or malformed."""


@dataclass(frozen=True, slots=True)
class XfailEntry:
    """One expected failure: what it selects, why, and of which kind."""

    selector: str
    reason: str
    category: Category

    @property
    def is_requirement(self) -> bool:
        """Whether the selector is a requirement ID such as ``WM-003``."""
        return bool(_REQUIREMENT_ID.match(self.selector))

    @property
    def looks_like_requirement(self) -> bool:
        """Whether the selector is meant as a requirement ID (possibly a wrong one)."""
        return bool(_REQUIREMENT_LIKE.match(self.selector))

    def matches(self, nodeid: str, name: str, requirements: Iterable[str]) -> bool:
        """Whether this entry applies to a check."""
        if self.is_requirement:
            return self.selector in requirements
        if "::" in self.selector or "/" in self.selector:
            return _suffix_match(nodeid, self.selector) or _suffix_match(
                _PARAMS.sub("", nodeid), self.selector
            )
        return self.selector in (name, _PARAMS.sub("", name))

    def marker_reason(self) -> str:
        """The reason given to ``pytest.mark.xfail``."""
        return f"[{self.category}] {self.reason} (--stm-xfail {self.selector})"


def load_xfail_file(
    path: str | Path, requirement_ids: Collection[str] | None = None
) -> tuple[XfailEntry, ...]:
    """Read and validate an expected-failures file.

    Args:
        path: the TOML file.
        requirement_ids: the spec's requirement IDs; when given, an entry whose selector
            looks like a requirement ID must be one of them.

    Raises:
        XfailFileError: the file cannot be read, is not TOML, or an entry is malformed.
    """
    try:
        with open(path, "rb") as handle:
            data = tomllib.load(handle)
    except OSError as exc:
        raise XfailFileError(f"cannot read --stm-xfail file {str(path)!r}: {exc}") from exc
    except tomllib.TOMLDecodeError as exc:
        raise XfailFileError(f"--stm-xfail file {str(path)!r} is not valid TOML: {exc}") from exc
    entries = tuple(_entry(str(path), selector, body) for selector, body in data.items())
    if requirement_ids is not None:
        for entry in entries:
            if entry.looks_like_requirement and entry.selector not in requirement_ids:
                raise XfailFileError(_unknown_requirement(str(path), entry, requirement_ids))
    return entries


def matching_entries(
    entries: Iterable[XfailEntry], nodeid: str, name: str, requirements: Iterable[str]
) -> list[XfailEntry]:
    """The entries that apply to one check, in file order."""
    wanted = tuple(requirements)
    return [entry for entry in entries if entry.matches(nodeid, name, wanted)]


def _entry(path: str, selector: str, body: Any) -> XfailEntry:
    where = f"--stm-xfail file {path!r}, entry [{selector!r}]"
    if not isinstance(body, dict):
        raise XfailFileError(f"{where}: must be a table with 'reason' and 'category'")
    extra = sorted(set(body) - {"reason", "category"})
    if extra:
        raise XfailFileError(f"{where}: unknown keys {extra}; allowed: reason, category")
    reason, category = body.get("reason"), body.get("category")
    if not isinstance(reason, str) or not reason.strip():
        raise XfailFileError(f"{where}: 'reason' must be a non-empty string")
    if category not in CATEGORIES:
        raise XfailFileError(f"{where}: 'category' must be one of {sorted(CATEGORIES)}")
    return XfailEntry(selector=selector, reason=reason.strip(), category=category)


def _unknown_requirement(path: str, entry: XfailEntry, known: Collection[str]) -> str:
    selector = entry.selector
    hint = ""
    if selector.upper() in known:
        hint = f" (did you mean {selector.upper()!r}?)"
    return (
        f"--stm-xfail file {path!r}, entry [{selector!r}]: {selector} is not a requirement "
        f"ID of the spec{hint}"
    )


def _suffix_match(nodeid: str, selector: str) -> bool:
    if nodeid == selector:
        return True
    return nodeid.endswith(selector) and nodeid[-len(selector) - 1] in "/:"
