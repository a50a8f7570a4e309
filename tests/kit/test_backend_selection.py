"""Selecting a backend: names, ``module:attr``, precedence, clear errors."""

from __future__ import annotations

import pytest
from kit_support import RunPytest

from stm_conformance import Provider, ProviderError, load_provider

PROVIDERS = """
from reference_impl import DefaultShortTermMemory
from stm_conformance import Provider


async def create(config, key, summarizer):
    return DefaultShortTermMemory(config=config, summarizer=summarizer, key=key)


from_cli = Provider(name="from-cli", create=create)
from_env = Provider(name="from-env", create=create)
from_ini = Provider(name="from-ini", create=create)
"""
CHECK = """
import pytest


@pytest.mark.stm_requirement("STR-001")
def test_check():
    pass
"""


@pytest.fixture
def selectable(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(provs=PROVIDERS, test_check=CHECK)
    pytester.makeini("[pytest]\nstm_backend = provs:from_ini\n")


@pytest.mark.parametrize(
    ("cli", "env", "expected"),
    [
        (True, True, "from-cli = provs:from_cli (from cli: provs:from_cli)"),
        (False, True, "from-env = provs:from_env (from env: provs:from_env)"),
        (False, False, "from-ini = provs:from_ini (from ini: provs:from_ini)"),
    ],
    ids=["cli-beats-env-and-ini", "env-beats-ini", "ini"],
)
def test_command_line_beats_environment_beats_ini(
    selectable: None,
    run_pytest: RunPytest,
    monkeypatch: pytest.MonkeyPatch,
    cli: bool,
    env: bool,
    expected: str,
) -> None:
    if env:
        monkeypatch.setenv("STM_BACKEND", "provs:from_env")
    args = ["--stm-backend=provs:from_cli"] if cli else []
    result = run_pytest(*args, "test_check.py")
    result.stdout.fnmatch_lines([f"stm backend: {expected}"])
    result.assert_outcomes(passed=1)


def test_unknown_backend_is_a_usage_error_listing_registered_names(run_pytest: RunPytest) -> None:
    result = run_pytest("--stm-backend=no-such-backend")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(
        ["*unknown backend 'no-such-backend'; registered backends: *reference*"]
    )


def test_registered_name_resolves_to_the_reference_provider() -> None:
    provider, target = load_provider("reference")
    assert isinstance(provider, Provider)
    assert provider.name == "reference"
    assert target == "reference_impl.provider:provider"
    assert "shared_state" not in provider.capabilities
    assert {"truncation", "rolling_summary", "persistence"} <= provider.capabilities


def test_module_attribute_may_be_a_zero_argument_factory(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    pytester.makepyfile(factory_prov=PROVIDERS + "\n\ndef build():\n    return from_cli\n")
    monkeypatch.syspath_prepend(pytester.path)
    provider, target = load_provider("factory_prov:build")
    assert (provider.name, target) == ("from-cli", "factory_prov:build")


@pytest.mark.parametrize(
    ("name", "message"),
    [
        ("nope", "unknown backend 'nope'; registered backends: *reference*"),
        ("", "empty backend name*"),
        ("no_such_module_xyz:provider", "cannot import backend module 'no_such_module_xyz'*"),
        ("json:no_such_attr", "module 'json' has no attribute 'no_such_attr'"),
        ("json:JSONDecodeError", "json:JSONDecodeError raised *"),
        ("json:__name__", "json:__name__ is str, not a stm_conformance.Provider*"),
    ],
)
def test_bad_names_raise_provider_error(name: str, message: str) -> None:
    with pytest.raises(ProviderError) as excinfo:
        load_provider(name)
    assert excinfo.match(_glob(message))


@pytest.mark.parametrize("name", ["fakeredis", "redis"])
def test_a_bundled_backend_missing_its_client_names_the_extra_to_install(
    name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Without the ``redis`` package, the Redis backends cannot import: the error says
    which extra of the package that registers them brings it."""
    import sys

    for module in [m for m in sys.modules if m.split(".")[0] in ("redis", "stm_redis")]:
        monkeypatch.delitem(sys.modules, module)
    monkeypatch.setitem(sys.modules, "redis", None)  # importing it raises ModuleNotFoundError
    with pytest.raises(ProviderError, match=rf"pip install 'stm-conformance\[{name}\]'"):
        load_provider(name)


@pytest.mark.parametrize(
    ("capability", "field"), [("key_resolution", "resolve_key"), ("shared_state", "create_peer")]
)
def test_a_capability_without_what_its_checks_call_is_refused(capability: str, field: str) -> None:
    async def create(*args: object) -> None:
        return None

    with pytest.raises(ProviderError, match=f"declares {capability} but gives no {field}"):
        Provider(name="p", create=create, capabilities=frozenset({"truncation", capability}))


def test_provider_rejects_unknown_capabilities() -> None:
    async def create(*args: object) -> None:
        return None

    with pytest.raises(ProviderError, match="unknown capabilities \\['teleport'\\]"):
        Provider(name="x", create=create, capabilities=frozenset({"teleport"}))


def _glob(pattern: str) -> str:
    import fnmatch

    return fnmatch.translate(pattern)
