"""Results of a conformance run: per check, per requirement, per group and per level.

Built from test reports only (so it works the same under pytest-xdist, where results reach
the controller as reports), rendered as terminal tables and as the JSON document described
by ``docs/report.schema.json``.
"""

from __future__ import annotations

import datetime as dt
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import pytest
from _pytest._code.code import ExceptionChainRepr, ReprTraceback

from ._deadline import NOT_CONCLUDED
from .capabilities import CAPABILITY_DESCRIPTIONS, LEVELS
from .requirements import Spec

__all__ = [
    "REPORT_VERSION",
    "CheckResult",
    "LevelResult",
    "Results",
    "RunInfo",
    "blame",
    "blame_exception",
    "prefix_failure",
    "properties_for",
]

#: Version of the JSON report format (``report_version``).
REPORT_VERSION = 1

Outcome = Literal["passed", "failed", "skipped", "xfailed"]
Status = Literal["pass", "fail", "xfail", "inconclusive", "skip", "untested"]
_STATUSES: tuple[str, ...] = ("pass", "fail", "xfail", "inconclusive", "skip", "untested")

# Names of the user properties (also JUnit <property> names) that carry check metadata.
PROP_REQUIREMENT = "stm_requirement"
PROP_CAPABILITY = "stm_capability"
PROP_PROBE = "stm_probe"
PROP_XFAIL = "stm_xfail"
PROP_PROBLEM = "stm_problem"
PROP_BLAMED = "stm_blamed"
PROP_SCENARIO = "stm_scenario"
_STM_PROPS = frozenset(
    {
        PROP_REQUIREMENT,
        PROP_CAPABILITY,
        PROP_PROBE,
        PROP_XFAIL,
        PROP_PROBLEM,
        PROP_BLAMED,
        PROP_SCENARIO,
    }
)


def properties_for(
    requirements: Sequence[str],
    capabilities: Sequence[str],
    probe: str | None,
    xfail_category: str | None,
    problem: str | None,
) -> list[tuple[str, str]]:
    """The user properties that describe a check to the report and to JUnit XML."""
    props = [(PROP_REQUIREMENT, rid) for rid in requirements]
    props += [(PROP_CAPABILITY, name) for name in capabilities]
    if probe is not None:
        props.append((PROP_PROBE, probe))
    if xfail_category is not None:
        props.append((PROP_XFAIL, xfail_category))
    if problem is not None:
        props.append((PROP_PROBLEM, problem))
    return props


@dataclass(slots=True)
class CheckResult:
    """The merged setup/call/teardown outcome of one check."""

    nodeid: str
    requirements: tuple[str, ...]
    capabilities: tuple[str, ...]
    probe: str | None
    xfail_category: str | None
    outcome: Outcome | None = None
    message: str | None = None
    duration_s: float = 0.0
    #: The requirement a failure (or an expected failure) is blamed on: the ID its message
    #: opens with, else the check's first requirement. The check's other requirements were
    #: not concluded, not broken. ``None`` for a check its time limit stopped with nothing
    #: found stuck: none of its requirements was concluded.
    blamed: str | None = None
    #: The scenarios the check exercised (``dimension:value``, see ``scenarios``).
    scenarios: tuple[str, ...] = ()

    def status_for(self, requirement: str) -> Status:
        """What this check says about one requirement."""
        outcome = self.final_outcome
        if outcome in ("failed", "xfailed"):
            if self.blamed == requirement:
                return "fail" if outcome == "failed" else "xfail"
            return "inconclusive"
        return "pass" if outcome == "passed" else "skip"

    @property
    def final_outcome(self) -> Outcome:
        """The outcome; a check whose call never reported counts as skipped."""
        return self.outcome or "skipped"

    def as_json(self) -> dict[str, Any]:
        """This check in the JSON report."""
        return {
            "nodeid": self.nodeid,
            "outcome": self.final_outcome,
            "requirements": list(self.requirements),
            "capabilities": list(self.capabilities),
            "probe": self.probe,
            "xfail_category": self.xfail_category,
            "message": self.message,
            "duration_s": round(self.duration_s, 6),
            "blamed": self.blamed,
            "scenarios": list(self.scenarios),
        }


@dataclass(frozen=True, slots=True)
class LevelResult:
    """Whether a level was reached, and why not."""

    name: str
    capabilities: frozenset[str]
    reached: bool
    checks: int
    passed: int
    reason: str | None

    def as_json(self) -> dict[str, Any]:
        """This level in the JSON report."""
        return {
            "name": self.name,
            "capabilities": sorted(self.capabilities),
            "reached": self.reached,
            "checks": self.checks,
            "passed": self.passed,
            "reason": self.reason,
        }


@dataclass(frozen=True, slots=True)
class RunInfo:
    """What was run against what: the header facts repeated in the report."""

    kit_version: str
    spec_version: str
    backend_setting: str
    backend_name: str
    backend_target: str
    backend_source: str
    declared: frozenset[str]
    hypothesis_profile: str
    seed: int | None
    started: dt.datetime = field(default_factory=lambda: dt.datetime.now(dt.UTC))


class Results:
    """Collects check results from test reports and derives everything else from them."""

    def __init__(self, spec: Spec) -> None:
        self.spec = spec
        self.checks: dict[str, CheckResult] = {}

    # -- collecting -------------------------------------------------------------------

    def add(self, report: pytest.TestReport) -> None:
        """Merge one phase report of a check; reports of other tests are ignored."""
        props = [(k, str(v)) for k, v in report.user_properties if k in _STM_PROPS]
        if not any(k in (PROP_REQUIREMENT, PROP_PROBLEM) for k, _ in props):
            return
        check = self.checks.get(report.nodeid)
        if check is None:
            check = self.checks[report.nodeid] = CheckResult(
                nodeid=report.nodeid,
                requirements=tuple(v for k, v in props if k == PROP_REQUIREMENT),
                capabilities=tuple(v for k, v in props if k == PROP_CAPABILITY),
                probe=next((v for k, v in props if k == PROP_PROBE), None),
                xfail_category=next((v for k, v in props if k == PROP_XFAIL), None),
            )
        check.duration_s += report.duration
        if report.when == "call":
            check.scenarios = tuple(v for k, v in props if k == PROP_SCENARIO)
        if report.failed:
            if check.outcome != "failed":
                prefix = "\n".join(self.spec.headline(rid) for rid in check.requirements)
                message = _failure_message(report).replace(prefix + "\n", "", 1)
                check.outcome, check.message = "failed", message
                check.blamed = self._blamed(report, message, check.requirements)
        elif report.skipped and check.outcome != "failed":
            wasxfail = getattr(report, "wasxfail", None)
            if wasxfail is not None:
                check.outcome, check.message = "xfailed", str(wasxfail)
                check.blamed = self._blamed(report, "", check.requirements)
            else:
                check.outcome, check.message = "skipped", _skip_message(report)
        elif report.when == "call" and check.outcome is None:
            check.outcome = "passed"

    def _blamed(
        self, report: pytest.TestReport, message: str, requirements: Sequence[str]
    ) -> str | None:
        """The requirement the kit blamed when it reported the failure (``""``: none, the
        check was not concluded), else the one ``message`` is about."""
        blamed = dict(report.user_properties).get(PROP_BLAMED)
        if blamed is None:
            return self.blame(message, requirements)
        return str(blamed) or None

    def blame(self, message: str, requirements: Sequence[str]) -> str | None:
        """The requirement a failure message is about: the spec ID it opens with (even one
        the check is not marked with: a broken precondition), else the first marked ID."""
        return blame(message, requirements, self.spec)

    # -- deriving ---------------------------------------------------------------------

    def outcome_counts(self) -> dict[str, int]:
        """Number of checks per outcome."""
        counts = dict.fromkeys(("passed", "failed", "skipped", "xfailed"), 0)
        for check in self.checks.values():
            counts[check.final_outcome] += 1
        return counts

    def requirement_statuses(self) -> dict[str, tuple[Status, list[str], list[str]]]:
        """Requirement ID -> (status, node IDs of its checks, distinct messages)."""
        by_id: dict[str, list[CheckResult]] = {rid: [] for rid in self.spec.requirements}
        for check in self.checks.values():
            for rid in dict.fromkeys((*check.requirements, check.blamed)):
                if rid is not None:
                    by_id.setdefault(rid, []).append(check)
        statuses: dict[str, tuple[Status, list[str], list[str]]] = {}
        for rid, checks in by_id.items():
            found = {c.status_for(rid) for c in checks}
            # A failure anywhere decides; a pass needs no check to have failed on it.
            status: Status = next(
                (s for s in ("fail", "xfail", "pass", "inconclusive", "skip") if s in found),
                "untested",
            )
            messages = list(
                dict.fromkeys(
                    c.message for c in checks if c.message and c.status_for(rid) != "pass"
                )
            )
            statuses[rid] = (status, [c.nodeid for c in checks], messages)
        return statuses

    def group_counts(self) -> dict[str, dict[str, int]]:
        """Group -> number of requirements per status."""
        groups = {group: dict.fromkeys(_STATUSES, 0) for group in self.spec.groups()}
        for rid, (status, _, _) in self.requirement_statuses().items():
            groups.setdefault(rid.split("-", 1)[0], dict.fromkeys(_STATUSES, 0))[status] += 1
        return groups

    def capability_results(self, declared: frozenset[str]) -> dict[str, dict[str, Any]]:
        """Capability -> declared, verified (every probe ran and passed) and probe counts."""
        results: dict[str, dict[str, Any]] = {}
        for name in CAPABILITY_DESCRIPTIONS:
            probes = [c for c in self.checks.values() if c.probe == name]
            passed = sum(c.final_outcome == "passed" for c in probes)
            results[name] = {
                "declared": name in declared,
                "verified": bool(probes) and passed == len(probes),
                "probes": len(probes),
                "probes_passed": passed,
                "description": CAPABILITY_DESCRIPTIONS[name],
            }
        return results

    def levels(
        self, *, complete: bool, declared: frozenset[str] | None = None
    ) -> list[LevelResult]:
        """Each level, reached only if every check of its capabilities ran and passed.

        A check belongs to a level when all its capabilities are among the level's; the
        level also needs a passing check for each of its capabilities and for the
        always-on requirements, so an empty selection proves nothing. Levels are never
        reached by a partial run (``-k``, ``--lf``, ``-x`` stops, ...).
        """
        out: list[LevelResult] = []
        for name, capabilities in LEVELS.items():
            members = [c for c in self.checks.values() if set(c.capabilities) <= capabilities]
            passed = [c for c in members if c.final_outcome == "passed"]
            reason = _level_gap(
                members,
                passed,
                capabilities,
                complete,
                capabilities if declared is None else declared,
            )
            out.append(
                LevelResult(name, capabilities, reason is None, len(members), len(passed), reason)
            )
        return out

    # -- rendering --------------------------------------------------------------------

    def terminal_lines(self, run: RunInfo, *, complete: bool) -> list[str]:
        """The per-group and per-level tables of the terminal summary."""
        lines = [
            f"backend {run.backend_name} ({run.backend_target}), spec {run.spec_version}",
            "",
            f"{'group':<6}{'reqs':>6}{'pass':>6}{'fail':>6}{'xfail':>7}{'inconcl':>9}"
            f"{'skip':>6}{'untested':>10}",
        ]
        for group, counts in self.group_counts().items():
            total = sum(counts.values())
            lines.append(
                f"{group:<6}{total:>6}{counts['pass']:>6}{counts['fail']:>6}"
                f"{counts['xfail']:>7}{counts['inconclusive']:>9}{counts['skip']:>6}"
                f"{counts['untested']:>10}"
            )
        lines += ["", f"{'level':<12}{'result':<13}{'checks passed':<15}why not"]
        for level in self.levels(complete=complete, declared=run.declared):
            result = "reached" if level.reached else "not reached"
            ratio = f"{level.passed}/{level.checks}"
            lines.append(f"{level.name:<12}{result:<13}{ratio:<15}{level.reason or ''}".rstrip())
        capabilities = self.capability_results(run.declared)
        unverified = [n for n, c in capabilities.items() if c["declared"] and not c["verified"]]
        if unverified:
            lines += ["", f"declared but not verified by a passing probe: {', '.join(unverified)}"]
        return lines

    def as_json(
        self, run: RunInfo, *, complete: bool, exit_status: int, finished: dt.datetime
    ) -> dict[str, Any]:
        """The machine-readable report (``docs/report.schema.json``)."""
        levels = self.levels(complete=complete, declared=run.declared)
        requirements = {
            rid: {
                "group": rid.split("-", 1)[0],
                "text": req.text if (req := self.spec.requirements.get(rid)) else None,
                "status": status,
                "checks": nodeids,
                "messages": messages,
            }
            for rid, (status, nodeids, messages) in self.requirement_statuses().items()
        }
        return {
            "report_version": REPORT_VERSION,
            "kit_version": run.kit_version,
            "spec_version": run.spec_version,
            "backend": {
                "setting": run.backend_setting,
                "name": run.backend_name,
                "target": run.backend_target,
                "source": run.backend_source,
            },
            "hypothesis": {"profile": run.hypothesis_profile, "seed": run.seed},
            "run": {
                "started": run.started.isoformat(),
                "finished": finished.isoformat(),
                "complete": complete,
                "exit_status": exit_status,
            },
            "capabilities": self.capability_results(run.declared),
            "levels": [level.as_json() for level in levels],
            "levels_reached": [level.name for level in levels if level.reached],
            "summary": {
                "checks": self.outcome_counts(),
                "requirements": _status_totals(
                    status for status, _, _ in self.requirement_statuses().values()
                ),
            },
            "groups": self.group_counts(),
            "requirements": requirements,
            "checks": [check.as_json() for check in self.checks.values()],
        }


def _level_gap(
    members: list[CheckResult],
    passed: list[CheckResult],
    capabilities: frozenset[str],
    complete: bool,
    declared: frozenset[str],
) -> str | None:
    undeclared = sorted(capabilities - declared)
    if undeclared:
        return f"capability {', '.join(undeclared)} not declared"
    failing = [c for c in members if c.final_outcome != "passed"]
    if failing:
        # The real blocker first: a failure before an expected failure before a skip.
        order = {"failed": 0, "xfailed": 1, "skipped": 2}
        first = min(failing, key=lambda c: order.get(c.final_outcome, 3))
        kinds = _count_outcomes(failing)
        about = f" ({first.blamed})" if first.blamed else ""
        return f"{kinds}; first {first.final_outcome}: {first.nodeid}{about}"
    if not complete:
        return "partial run (checks were deselected or the run stopped early)"
    proven = {cap for c in passed for cap in c.capabilities}
    missing = sorted(capabilities - proven)
    if missing:
        return f"no passing check of capability {', '.join(missing)}"
    if not any(not c.capabilities for c in passed):
        return "no passing always-on check"
    return None


def _count_outcomes(checks: Iterable[CheckResult]) -> str:
    counts: dict[str, int] = {}
    for check in checks:
        counts[check.final_outcome] = counts.get(check.final_outcome, 0) + 1
    return ", ".join(f"{n} {outcome}" for outcome, n in sorted(counts.items()))


def _status_totals(statuses: Iterable[str]) -> dict[str, int]:
    totals = dict.fromkeys(_STATUSES, 0)
    for status in statuses:
        totals[status] += 1
    return totals


# "AssertionError: BUD-008: ..." -- a check asserting several requirements names the one
# an assertion is about at the start of its message.
# "Failed: not concluded: ..." -- pytest.fail's type, then the message of a CheckOutOfTime.
_NOT_CONCLUDED = re.compile(rf"^(?:[A-Za-z_.]+: )?{NOT_CONCLUDED}:")
_NAMED_ID = re.compile(r"^(?:[A-Za-z_.]*(?:Error|Exception|Divergence): )?(?P<id>[A-Z]+-\d{3})\b")


def blame_exception(error: BaseException, requirements: Sequence[str], spec: Spec) -> str | None:
    """:func:`blame` for an exception; a group whose members all blame one requirement
    (concurrent operations failing alike) blames that one.

    Members that were not concluded (the check's time limit stopped them with nothing
    found stuck) say nothing either way: a group of hypothesis' failures whose one example
    ran out of time and whose others found a task left running (CON-003) blames CON-003,
    and a group of members none of which concluded is not concluded.
    """
    if isinstance(error, BaseExceptionGroup):
        concluded = [inner for inner in error.exceptions if _concludes(inner)]
        if not concluded:
            return None
        found = {blame_exception(inner, (), spec) for inner in concluded}
        if len(found) == 1 and None not in found:
            return found.pop()
    return blame(f"{type(error).__name__}: {error}", requirements, spec)


def _concludes(error: BaseException) -> bool:
    """Whether ``error`` judged something: not a check's time limit reached with nothing
    found stuck, nor a group of only such."""
    if isinstance(error, BaseExceptionGroup):
        return any(_concludes(inner) for inner in error.exceptions)
    return not _NOT_CONCLUDED.match(f"{type(error).__name__}: {error}".strip())


def blame(message: str, requirements: Sequence[str], spec: Spec) -> str | None:
    """The requirement a failure is about: the spec ID its message opens with, else the
    first of ``requirements``; ``None`` when there are none, or when the message says the
    check was not concluded (its time limit stopped it with nothing found stuck)."""
    if _NOT_CONCLUDED.match(message.strip()):
        return None
    named = _NAMED_ID.match(message.strip())
    if named and named["id"] in spec:
        return named["id"]
    return requirements[0] if requirements else None


def _failure_message(report: pytest.TestReport) -> str:
    crash = getattr(report.longrepr, "reprcrash", None)
    message = getattr(crash, "message", None)
    text = message if isinstance(message, str) and message else str(report.longrepr).strip()
    if report.when != "call":
        text = f"error in {report.when}: {text}"
    return text


def _skip_message(report: pytest.TestReport) -> str:
    longrepr = report.longrepr
    text = str(longrepr[2]) if isinstance(longrepr, tuple) and len(longrepr) == 3 else str(longrepr)
    return text.removeprefix("Skipped: ")


#: The crash message (JUnit ``message``, short summary) keeps this many requirement lines,
#: each cut to ``_BRIEF_CHARS``, so that the reason after them survives JUnit's 500
#: character budget; the long output has them all in full.
_BRIEF_LINES, _BRIEF_CHARS = 3, 100


def _brief(headlines: Sequence[str]) -> str:
    lines = [h if len(h) <= _BRIEF_CHARS else h[: _BRIEF_CHARS - 1] + "…" for h in headlines]
    if len(lines) > _BRIEF_LINES:
        more = len(lines) - _BRIEF_LINES + 1
        lines = [*lines[: _BRIEF_LINES - 1], f"(and {more} more requirements)"]
    return "\n".join(lines)


def prefix_failure(report: pytest.TestReport, headlines: Sequence[str]) -> None:
    """Make a failure report start with the requirement IDs and their one-line text.

    The headlines lead the long output and, shortened (:func:`_brief`), the crash message
    (JUnit ``message``, short summary); the traceback stays structured, so pytest-xdist
    transports it unchanged.
    """
    text = "\n".join(headlines)
    longrepr = report.longrepr
    if isinstance(longrepr, ExceptionChainRepr):
        lead = (ReprTraceback([], None, "long"), None, text)
        prefixed = ExceptionChainRepr([lead, *longrepr.chain])
        prefixed.sections = longrepr.sections
        longrepr = prefixed
    crash = getattr(longrepr, "reprcrash", None)
    if crash is not None and isinstance(getattr(crash, "message", None), str):
        crash.message = f"{_brief(headlines)}\n{crash.message}"
    elif longrepr is None or isinstance(longrepr, str):
        longrepr = f"{text}\n{longrepr or ''}".rstrip()
    report.longrepr = longrepr
