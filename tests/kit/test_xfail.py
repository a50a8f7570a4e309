"""Expected failures: strict, selected by requirement, node ID or name; unused ones warn."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest
from kit_support import RunPytest

from stm_conformance.xfail import XfailFileError, load_xfail_file, matching_entries

FakeSuite = Callable[[str], Path]
BACKEND = "--stm-backend=fakeprov:provider"

CHECKS = """
@req("WM-003")
def test_known_bug():
    assert False, "installs the summary wholesale"


@req("STR-002")
@pytest.mark.parametrize("n", [1, 2])
def test_by_nodeid(n):
    assert n == 3


@req("STR-001")
def test_passes_anyway():
    pass
"""

XFAILS = """
["WM-003"]
reason = "tracked upstream"
category = "known_bug"

["test_fake.py::test_by_nodeid"]
reason = "no windows of that size"
category = "unsupported"

[test_passes_anyway]
reason = "stale entry"
category = "known_bug"

["HLT-008"]
reason = "matches nothing"
category = "unsupported"
"""


def test_expected_failures_are_strict_and_unused_entries_warn(
    fake_suite: FakeSuite, run_pytest: RunPytest, pytester: pytest.Pytester
) -> None:
    fake_suite(CHECKS)
    xfails = pytester.makefile(".toml", xfails=XFAILS)
    result = run_pytest(BACKEND, f"--stm-xfail={xfails}", "-rxX", "test_fake.py")
    result.assert_outcomes(xfailed=3, failed=1, warnings=1)
    result.stdout.fnmatch_lines_random(
        [
            "XFAIL test_fake.py::test_known_bug - ?known_bug? tracked upstream*",
            "XFAIL test_fake.py::test_by_nodeid?1? - ?unsupported? no windows of that size*",
            "*XPASS(strict)*stale entry*",
            "*StmConformanceWarning: --stm-xfail entry [[]'HLT-008'[]] matches no collected check",
        ]
    )


def test_malformed_file_is_a_usage_error(
    fake_suite: FakeSuite, run_pytest: RunPytest, pytester: pytest.Pytester
) -> None:
    fake_suite(CHECKS)
    bad = pytester.makefile(".toml", bad='["WM-003"]\nreason = "x"\ncategory = "maybe"\n')
    result = run_pytest(BACKEND, f"--stm-xfail={bad}", "test_fake.py")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert "'category' must be one of ['known_bug', 'unsupported']" in result.stderr.str()


@pytest.mark.parametrize(
    ("body", "problem"),
    [
        ("[a]\nreason = 'r'\n", "'category' must be one of"),
        ("[a]\ncategory = 'known_bug'\n", "'reason' must be a non-empty string"),
        ("[a]\nreason = 'r'\ncategory = 'known_bug'\nextra = 1\n", "unknown keys ['extra']"),
        ("a = 1\n", "must be a table"),
        ("[a\n", "is not valid TOML"),
    ],
)
def test_entries_are_validated(tmp_path: Path, body: str, problem: str) -> None:
    path = tmp_path / "xfails.toml"
    path.write_text(body)
    with pytest.raises(XfailFileError) as excinfo:
        load_xfail_file(path)
    assert problem in str(excinfo.value)


def test_selectors(tmp_path: Path) -> None:
    path = tmp_path / "xfails.toml"
    path.write_text(
        "\n".join(
            f'["{selector}"]\nreason = "r"\ncategory = "unsupported"\n'
            for selector in ("WM-003", "test_w.py::test_a", "test_b", "sub/test_c.py::test_c[1]")
        )
    )
    entries = load_xfail_file(path)

    def selected(nodeid: str, name: str, requirements: tuple[str, ...] = ()) -> list[str]:
        return [e.selector for e in matching_entries(entries, nodeid, name, requirements)]

    assert selected("x/test_q.py::test_q", "test_q", ("WM-003",)) == ["WM-003"]
    assert selected("suite/test_w.py::test_a[2]", "test_a[2]") == ["test_w.py::test_a"]
    assert selected("suite/not_test_w.py::test_a", "test_a") == []
    assert selected("test_z.py::test_b[x]", "test_b[x]") == ["test_b"]
    assert selected("a/sub/test_c.py::test_c[1]", "test_c[1]") == ["sub/test_c.py::test_c[1]"]
    assert selected("a/sub/test_c.py::test_c[2]", "test_c[2]") == []


UNUSED = '[test_no_such_check]\nreason = "stale"\ncategory = "known_bug"\n'
UNUSED_ERROR = (
    "ERROR: --stm-xfail entry ['test_no_such_check'] matches no collected check "
    "(file '*unused.toml'; an error under the warning filters: remove the entry or fix its "
    "selector)"
)


def test_unused_entry_under_w_error_is_a_clear_usage_error(
    fake_suite: FakeSuite, run_pytest: RunPytest, pytester: pytest.Pytester
) -> None:
    fake_suite(CHECKS)
    unused = pytester.makefile(".toml", unused=UNUSED)
    result = run_pytest(BACKEND, f"--stm-xfail={unused}", "-W", "error", "test_fake.py")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert "INTERNALERROR" not in result.stdout.str() + result.stderr.str()
    result.stderr.fnmatch_lines([UNUSED_ERROR.replace("[", "[[]")])


def test_unused_entry_under_w_error_with_xdist_is_a_usage_error_too(
    fake_suite: FakeSuite, run_pytest: RunPytest, pytester: pytest.Pytester
) -> None:
    fake_suite(CHECKS)
    unused = pytester.makefile(".toml", unused=UNUSED)
    result = run_pytest(BACKEND, f"--stm-xfail={unused}", "-W", "error", "-n", "2", "test_fake.py")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert "INTERNALERROR" not in result.stdout.str() + result.stderr.str()
    result.stdout.fnmatch_lines([UNUSED_ERROR.replace("[", "[[]")])


@pytest.mark.parametrize(
    ("selector", "hint"),
    [("WM-099", ""), ("wm-003", " (did you mean 'WM-003'?)"), ("WM-3", "")],
)
def test_requirement_id_not_in_the_spec_is_a_usage_error(
    fake_suite: FakeSuite,
    run_pytest: RunPytest,
    pytester: pytest.Pytester,
    selector: str,
    hint: str,
) -> None:
    fake_suite(CHECKS)
    bad = pytester.makefile(".toml", ids=f'["{selector}"]\nreason = "r"\ncategory = "known_bug"\n')
    result = run_pytest(BACKEND, f"--stm-xfail={bad}", "test_fake.py")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    expected = (
        f"ERROR: --stm-xfail file '{bad}', entry ['{selector}']: {selector} is not a "
        f"requirement ID of the spec{hint}"
    )
    assert expected in result.stderr.lines


BLAMED_CHECKS = """
@req("BUD-004", "BUD-010")
def test_fails_on_its_first_requirement():
    assert False, "BUD-004: hid the wrong turn"


@req("BUD-004", "BUD-010")
def test_fails_on_another_requirement():
    assert False, "BUD-008: the estimate is off"
"""


def test_an_xfail_by_requirement_expects_a_failure_blamed_on_it(
    fake_suite: FakeSuite, run_pytest: RunPytest, pytester: pytest.Pytester
) -> None:
    fake_suite(BLAMED_CHECKS)
    xfails = pytester.makefile(
        ".toml", xfails='["BUD-004"]\nreason = "known"\ncategory = "known_bug"\n'
    )
    report = pytester.path / "r.json"
    result = run_pytest(BACKEND, f"--stm-xfail={xfails}", f"--stm-report={report}", "test_fake.py")
    # Blamed on BUD-004: expected. Blamed on BUD-008: not what the entry expects, a failure.
    result.assert_outcomes(xfailed=1, failed=1)
    statuses = {
        rid: r["status"] for rid, r in json.loads(report.read_text())["requirements"].items()
    }
    assert statuses["BUD-004"] == "xfail"
    assert statuses["BUD-008"] == "fail"
    assert statuses["BUD-010"] == "inconclusive"
