"""``stm_report``, ``stm_xfail``, ``stm_timeout`` and ``stm_patience`` in the ini file; the
command line wins."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from kit_support import RunPytest, load_json

FakeSuite = Callable[[str], Path]
BACKEND = "--stm-backend=fakeprov:provider"

CHECKS = """
import anyio


@req("STR-001")
def test_passes():
    pass


@req("WM-003")
def test_known_bug():
    assert False


@req("WM-001")
async def test_hangs():
    await anyio.sleep(30)
"""
XFAILS = '["WM-003"]\nreason = "tracked upstream"\ncategory = "known_bug"\n'


def test_ini_options_apply(
    fake_suite: FakeSuite, run_pytest: RunPytest, pytester: pytest.Pytester
) -> None:
    fake_suite(CHECKS)
    pytester.mkdir("conf")
    (pytester.path / "conf" / "xfails.toml").write_text(XFAILS)
    ini = ["stm_report = out/report.json", "stm_xfail = conf/xfails.toml", "stm_timeout = 0.2"]
    pytester.makeini("\n".join(["[pytest]", *ini, ""]))
    pytester.mkdir("out")
    result = run_pytest(BACKEND, "test_fake.py")
    result.assert_outcomes(passed=1, xfailed=1, failed=1)
    result.stdout.fnmatch_lines(["*check did not finish within 0.2s (--stm-timeout)*"])
    report = load_json(pytester.path / "out" / "report.json")
    assert report["requirements"]["WM-003"]["status"] == "xfail"


def test_command_line_beats_ini(
    fake_suite: FakeSuite, run_pytest: RunPytest, pytester: pytest.Pytester
) -> None:
    fake_suite(CHECKS)
    (pytester.path / "ini-xfails.toml").write_text(XFAILS.replace("WM-003", "STR-001"))
    (pytester.path / "cli-xfails.toml").write_text(XFAILS)
    pytester.makeini(
        "[pytest]\nstm_report = ini.json\nstm_xfail = ini-xfails.toml\nstm_timeout = 100\n"
    )
    result = run_pytest(
        BACKEND,
        "--stm-report=cli.json",
        "--stm-xfail=cli-xfails.toml",
        "--stm-timeout=0.2",
        "test_fake.py",
    )
    result.assert_outcomes(passed=1, xfailed=1, failed=1)
    result.stdout.fnmatch_lines(["*check did not finish within 0.2s (--stm-timeout)*"])
    assert (pytester.path / "cli.json").exists()
    assert not (pytester.path / "ini.json").exists()


@pytest.mark.parametrize(
    ("args", "ini", "message"),
    [
        (
            ["--stm-timeout=-1"],
            None,
            "*argument --stm-timeout: must be a number of seconds >= 0 (0: no limit), got '-1'",
        ),
        (
            ["--stm-timeout=soon"],
            None,
            "*argument --stm-timeout: 'soon' is not a number of seconds",
        ),
        (
            [BACKEND],
            "-0.5",
            "ERROR: stm_conformance: ini option stm_timeout: must be a number of seconds >= 0 "
            "(0: no limit), got '-0.5'",
        ),
        (
            [BACKEND],
            "nan",
            "ERROR: stm_conformance: ini option stm_timeout: must be a number of seconds >= 0*",
        ),
    ],
    ids=["cli-negative", "cli-not-a-number", "ini-negative", "ini-nan"],
)
def test_bad_timeouts_are_usage_errors(
    fake_suite: FakeSuite,
    run_pytest: RunPytest,
    pytester: pytest.Pytester,
    args: list[str],
    ini: str | None,
    message: str,
) -> None:
    fake_suite(CHECKS)
    _assert_usage_error(run_pytest, pytester, args, "stm_timeout", ini, message)


def _assert_usage_error(
    run_pytest: RunPytest,
    pytester: pytest.Pytester,
    args: list[str],
    ini_name: str,
    ini: str | None,
    message: str,
) -> None:
    if ini is not None:
        pytester.makeini(f"[pytest]\n{ini_name} = {ini}\n")
    result = run_pytest(*args, "test_fake.py")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines([message])


def test_zero_timeout_in_the_ini_file_is_accepted(
    fake_suite: FakeSuite, run_pytest: RunPytest, pytester: pytest.Pytester
) -> None:
    fake_suite(CHECKS)
    pytester.makeini("[pytest]\nstm_timeout = 0\n")
    result = run_pytest(BACKEND, "test_fake.py", "-k", "not hangs")
    result.assert_outcomes(passed=1, failed=1)


PATIENT_CHECK = """
from stm_conformance.checks import eventually


@req("HLT-004")
async def test_never_true():
    await eventually(lambda: False, timeout=2.0, what="HLT-004: never")
"""


@pytest.mark.parametrize(
    ("args", "ini", "scaled"),
    [([], None, "2"), (["--stm-patience=0.1"], None, "0.2"), ([], "0.05", "0.1")],
    ids=["default", "cli", "ini"],
)
def test_patience_scales_how_long_a_check_waits(
    fake_suite: FakeSuite,
    run_pytest: RunPytest,
    pytester: pytest.Pytester,
    args: list[str],
    ini: str | None,
    scaled: str,
) -> None:
    fake_suite(PATIENT_CHECK)
    if ini is not None:
        pytester.makeini(f"[pytest]\nstm_patience = {ini}\n")
    result = run_pytest(BACKEND, *args, "test_fake.py")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines([f"*HLT-004: never (still not true after {scaled}s)*"])
    if scaled != "2":
        result.stdout.fnmatch_lines(["stm patience: *(waits for the backend scaled)"])


@pytest.mark.parametrize(
    ("args", "ini", "message"),
    [
        (["--stm-patience=0"], None, "*--stm-patience: must be a number > 0, got '0'"),
        (["--stm-patience=soon"], None, "*--stm-patience: 'soon' is not a number"),
        ([], "-1", "ERROR: stm_conformance: ini option stm_patience: must be a number > 0*"),
        ([], "inf", "ERROR: stm_conformance: ini option stm_patience: must be a number > 0*"),
    ],
    ids=["cli-zero", "cli-not-a-number", "ini-negative", "ini-inf"],
)
def test_bad_patience_is_a_usage_error(
    fake_suite: FakeSuite,
    run_pytest: RunPytest,
    pytester: pytest.Pytester,
    args: list[str],
    ini: str | None,
    message: str,
) -> None:
    fake_suite(PATIENT_CHECK)
    _assert_usage_error(run_pytest, pytester, [BACKEND, *args], "stm_patience", ini, message)
