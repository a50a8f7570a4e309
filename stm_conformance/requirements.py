"""The requirements of ``docs/spec.md``: IDs and one-line texts.

The spec is the single source: requirement IDs are the ``**GROUP-NNN**`` at the start of a
bullet, and a requirement's text runs up to its ``*Rationale``. An installed wheel carries the
spec as ``stm_conformance/spec.md``; a source checkout reads ``docs/spec.md``.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType

__all__ = [
    "GROUPS",
    "Requirement",
    "Spec",
    "SpecError",
    "load_spec",
    "parse_spec",
    "spec_path",
]

#: Requirement groups in spec order.
GROUPS: tuple[str, ...] = ("KEY", "STR", "WM", "BUD", "HLT", "SER", "CB", "CON")

_VERSION = re.compile(r"^spec_version:\s*(\S+)\s*$", re.MULTILINE)
_BULLET = re.compile(r"^- \*\*(?P<id>[A-Z]+-\d{3})\*\*\s*(?P<text>.*)$")


class SpecError(RuntimeError):
    """The spec cannot be found or does not parse."""


@dataclass(frozen=True, slots=True)
class Requirement:
    """One requirement of the spec."""

    id: str
    text: str
    withdrawn: bool = False

    @property
    def group(self) -> str:
        """``"WM"`` for ``"WM-003"``."""
        return self.id.split("-", 1)[0]

    @property
    def headline(self) -> str:
        """``"WM-003 <text>"``: how failure messages and reports introduce it."""
        return f"{self.id} {self.text}"


@dataclass(frozen=True, slots=True)
class Spec:
    """A parsed spec: its version, its requirements and the capability of each."""

    version: str
    requirements: Mapping[str, Requirement]

    def __contains__(self, requirement_id: object) -> bool:
        return requirement_id in self.requirements

    def groups(self) -> tuple[str, ...]:
        """The groups of the spec: :data:`GROUPS` first, then any others in spec order."""
        seen = list(GROUPS)
        for requirement in self.requirements.values():
            if requirement.group not in seen:
                seen.append(requirement.group)
        return tuple(seen)

    def headline(self, requirement_id: str) -> str:
        """The ID and one-line text, or the bare ID when the spec lacks it."""
        requirement = self.requirements.get(requirement_id)
        return requirement.headline if requirement else f"{requirement_id} (not in the spec)"


def spec_path(here: Path | None = None) -> Path:
    """Where the spec is: next to this module when installed, else ``docs/spec.md``.

    Args:
        here: the package directory to look from (default: this module's).
    """
    here = here or Path(__file__).resolve().parent
    for candidate in (here / "spec.md", here.parent / "docs" / "spec.md"):
        if candidate.is_file():
            return candidate
    raise SpecError(f"spec.md not found in {here} or {here.parent / 'docs'}")


@functools.cache
def load_spec() -> Spec:
    """The spec the kit checks against (parsed once)."""
    return parse_spec(spec_path().read_text(encoding="utf-8"))


def parse_spec(text: str) -> Spec:
    """Parse spec markdown: ``spec_version``, requirement bullets and the capability table."""
    match = _VERSION.search(text)
    if match is None:
        raise SpecError("spec has no 'spec_version:' line")
    requirements = _parse_requirements(text.splitlines())
    if not requirements:
        raise SpecError("spec defines no requirement IDs")
    return Spec(
        version=match.group(1),
        requirements=MappingProxyType(requirements),
    )


def _parse_requirements(lines: list[str]) -> dict[str, Requirement]:
    found: dict[str, Requirement] = {}
    current: tuple[str, list[str]] | None = None

    def finish() -> None:
        if current is None:
            return
        rid, parts = current
        body = " ".join(parts)
        text = body.split("*Rationale", 1)[0].strip()
        if rid in found:
            raise SpecError(f"requirement {rid} is defined twice")
        found[rid] = Requirement(rid, text, withdrawn="*withdrawn*" in body)

    for line in lines:
        bullet = _BULLET.match(line)
        if bullet:
            finish()
            current = (bullet["id"], [bullet["text"].strip()])
        elif current is not None and line.startswith("  ") and line.strip():
            current[1].append(line.strip())
        else:
            finish()
            current = None
    finish()
    return found
