"""The header, the terminal tables and the JSON report of real runs of the suite."""

from __future__ import annotations

import pytest
from kit_support import SCHEMA_PATH, RunPytest, load_json, validate_report

PROBES = ("-k", "probe")


def test_schema_is_a_valid_draft_2020_12_schema() -> None:
    import jsonschema

    schema = load_json(SCHEMA_PATH)
    assert schema["$schema"] == "https://json-schema.org/draft/2020-12/schema"
    jsonschema.Draft202012Validator.check_schema(schema)


def test_the_report_s_directory_is_made_and_a_report_that_cannot_be_written_is_an_error(
    run_pytest: RunPytest, pytester: pytest.Pytester
) -> None:
    """As with ``--junitxml``, missing directories are made. A report that cannot be
    written (its directory is a file) is a usage error at the end of the run, one line
    after the run's results, not a traceback."""
    result = run_pytest("--stm-backend=reference", *PROBES, "--stm-report=out/new/r.json")
    assert result.ret == 0
    validate_report(load_json(pytester.path / "out" / "new" / "r.json"))
    (pytester.path / "blocker").write_text("a file, not a directory")
    result = run_pytest("--stm-backend=reference", *PROBES, "--stm-report=blocker/r.json")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stdout.fnmatch_lines(
        ["*= stm conformance =*", "ERROR: --stm-report: cannot write *blocker/r.json: *"]
    )
    assert "Traceback" not in result.stdout.str() + result.stderr.str()


def test_report_of_a_real_run_validates_and_says_what_ran(
    run_pytest: RunPytest, pytester: pytest.Pytester
) -> None:
    result = run_pytest(
        "--stm-backend=reference",
        *PROBES,
        "--stm-report=report.json",
        "--stm-seed=7",
        "--stm-hypothesis-profile=thorough",
    )
    result.stdout.fnmatch_lines(
        [
            "stm_conformance 0.1.0, spec 1.5.0",
            "stm backend: reference = reference_impl.provider:provider (from cli: reference)",
            "stm capabilities declared: callbacks, key_resolution, persistence, "
            "rolling_summary, serialization, truncation",
            "stm hypothesis profile: thorough, seed: 7 (--stm-seed=7)",
        ]
    )
    result.stdout.fnmatch_lines(
        [
            "*= stm conformance =*",
            "group *reqs*pass*fail*xfail*skip*untested",
            "KEY *",
            "level *result*checks passed*why not",
            "Core *not reached*partial run*",
        ]
    )
    report = load_json(pytester.path / "report.json")
    validate_report(report)
    assert report["backend"] == {
        "setting": "reference",
        "name": "reference",
        "target": "reference_impl.provider:provider",
        "source": "cli",
    }
    assert report["hypothesis"] == {"profile": "thorough", "seed": 7}
    assert report["spec_version"] == "1.5.0"
    assert report["run"]["complete"] is False
    assert report["levels_reached"] == []
    probes = {c["probe"]: c["outcome"] for c in report["checks"] if c["probe"]}
    assert probes["shared_state"] == "skipped"
    assert report["capabilities"]["shared_state"] == {
        "declared": False,
        "verified": False,
        "probes": 1,
        "probes_passed": 0,
        "description": report["capabilities"]["shared_state"]["description"],
    }
    # The checks came from the installed suite although no path was given.
    assert all(c["nodeid"].startswith("test_probes.py::") for c in report["checks"])
    assert set(report["requirements"]) >= {"KEY-001", "CON-003"}
    assert report["requirements"]["STR-002"]["status"] == probes_status(probes["truncation"])


def probes_status(outcome: str) -> str:
    return {"passed": "pass", "failed": "fail", "skipped": "skip"}[outcome]


def test_xdist_run_reports_every_check(run_pytest: RunPytest, pytester: pytest.Pytester) -> None:
    result = run_pytest("--stm-backend=reference", "-n", "2", *PROBES, "--stm-report=x.json")
    result.stdout.fnmatch_lines(["*= stm conformance =*"])
    report = load_json(pytester.path / "x.json")
    validate_report(report)
    assert sorted(c["probe"] for c in report["checks"]) == sorted(
        report["capabilities"]  # one probe per capability
    )
    assert all(c["requirements"] for c in report["checks"])


def test_ci_environment_selects_the_derandomized_profile(
    run_pytest: RunPytest, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("CI", "true")
    monkeypatch.setenv("STM_BACKEND", "reference")
    result = run_pytest("--stm-suite", "--collect-only")
    result.stdout.fnmatch_lines(
        [
            "stm backend: reference = reference_impl.provider:provider (from env: reference)",
            "stm hypothesis profile: ci, seed: derandomized",
        ]
    )
    result.stdout.fnmatch_lines(["*<Function test_probe_truncation>*"])


def test_pyargs_runs_the_suite_with_the_reference_backend(run_pytest: RunPytest) -> None:
    result = run_pytest("--pyargs", "stm_conformance.suite", "--collect-only")
    result.stdout.fnmatch_lines(
        [
            "stm backend: reference = reference_impl.provider:provider (from default: reference)",
            "*<Function test_probe_truncation>*",
        ]
    )
    assert result.ret == pytest.ExitCode.OK
