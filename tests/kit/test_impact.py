"""The checks a mutant's run selects (``stm_impact``): the footprint read off a mutant, and
whatever the record cannot speak for running every check."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from kit_support import KIT_TESTS

#: Computes footprints in a process of its own: this one has imported every mutant, and
#: the footprint is what importing one mutant changed in ``reference_impl``.
_FOOTPRINTS = """
import importlib, json, os, sys
import stm_impact
out = {}
for name in sys.argv[1:]:
    read, write = os.pipe()
    if os.fork() == 0:  # a fresh import of each mutant
        module = importlib.import_module(name)
        try:
            found = sorted(stm_impact.footprint(module, stm_impact._BEFORE))
        except stm_impact.Unknown as exc:
            found = "unknown: " + str(exc)
        os.write(write, json.dumps(found).encode())
        os._exit(0)
    os.close(write)
    with os.fdopen(read) as f:
        out[name] = json.load(f)
print(json.dumps(out))
"""


def footprints(*modules: str, path: Path | None = None) -> dict[str, object]:
    env_path = [str(KIT_TESTS), *([str(path)] if path else [])]
    done = subprocess.run(
        [sys.executable, "-c", _FOOTPRINTS, *modules],
        capture_output=True,
        text=True,
        check=True,
        env={"PYTHONPATH": ":".join(env_path), "PATH": "/usr/bin:/bin"},
        timeout=120,
    )
    found: dict[str, object] = json.loads(done.stdout)
    return found


def _names(keys: object) -> list[str]:
    assert isinstance(keys, list), keys
    return [key.rsplit(":", 1)[1] for key in keys]


def test_a_footprint_is_the_reference_functions_the_mutant_replaces() -> None:
    found = footprints(
        "stm_mutants.bud003_blank_turns_not_counted_in_window",  # a module function, swapped
        "stm_mutants.hlt001_health_plain_enum",  # a property of its memory class
        "stm_mutants.ser005_hydrate_skips_turnless_record",  # a method; a helper class
        "stm_mutants.bud001_fits_measures_inner_view",  # a Budget subclass its memory makes
        "stm_mutants.cb004_degrade_alert_awaited_by_worker",  # the worker, through _util.work
    )
    assert _names(found["stm_mutants.bud003_blank_turns_not_counted_in_window"]) == ["admit"]
    assert _names(found["stm_mutants.hlt001_health_plain_enum"]) == [
        "DefaultShortTermMemory.health"
    ]
    assert _names(found["stm_mutants.ser005_hydrate_skips_turnless_record"]) == [
        "DefaultShortTermMemory.hydrate"
    ]
    assert sorted(_names(found["stm_mutants.bud001_fits_measures_inner_view"])) == [
        "Budget.fits",
        "DefaultShortTermMemory.__init__",
    ]
    assert "DefaultShortTermMemory._work" in _names(
        found["stm_mutants.cb004_degrade_alert_awaited_by_worker"]
    )
    keys = found["stm_mutants.bud003_blank_turns_not_counted_in_window"]
    assert isinstance(keys, list) and keys[0].startswith("watermark.py:")


@pytest.mark.parametrize(
    ("source", "why"),
    [
        (  # a constant of the reference, which no record of calls can follow
            "import reference_impl.schema as s\ns.STEP_TURNS = 1\n",
            "is not a function of reference_impl",
        ),
        (  # data under a name the reference reads (an instance attribute of its own)
            "class M(DefaultShortTermMemory):\n    _closed = True\n",
            "M._closed is data of its own, by a name read",
        ),
        (  # a special method the reference takes from Python
            "class M(DefaultShortTermMemory):\n    def __eq__(self, other):\n        return True\n",
            "replaces <class 'object'>'s",
        ),
    ],
    ids=["module-constant", "class-data", "special-method"],
)
def test_a_change_the_record_cannot_follow_runs_every_check(
    tmp_path: Path, source: str, why: str
) -> None:
    header = (
        "from reference_impl.memory import DefaultShortTermMemory\n"
        "from stm_mutants import mutant_provider\n"
    )
    footer = "provider = mutant_provider('odd', M)\n"
    if "class M" not in source:
        footer = "provider = mutant_provider('odd', DefaultShortTermMemory)\n"
    (tmp_path / "odd_mutant.py").write_text(header + textwrap.dedent(source) + footer)
    found = footprints("odd_mutant", path=tmp_path)["odd_mutant"]
    assert isinstance(found, str) and found.startswith("unknown: ") and why in found, found


def test_a_provider_field_counts_as_what_the_kit_calls_it_through() -> None:
    found = footprints(
        "stm_mutants.key002_user_id_lowercased",  # a storage key; the reference has none
        "stm_mutants.key004_two_level_paths_only",  # a key resolver of its own
        "stm_mutants.key003_no_context_checked_first",  # the same, in its module
    )
    assert _names(found["stm_mutants.key002_user_id_lowercased"]) == ["Provider.key_for_storage"]
    storage = found["stm_mutants.key002_user_id_lowercased"]
    assert isinstance(storage, list) and storage[0].startswith("<kit>/provider.py:")
    for resolver in ("key004_two_level_paths_only", "key003_no_context_checked_first"):
        keys = found[f"stm_mutants.{resolver}"]
        assert _names(keys) == ["_resolve_key"]
        assert isinstance(keys, list) and keys[0].startswith("provider.py:")


def test_a_provider_that_creates_memories_its_own_way_runs_every_check() -> None:
    found = footprints("stm_mutants.con002_blind_writes")["stm_mutants.con002_blind_writes"]
    assert isinstance(found, str) and "its provider creates memories its own way" in found, found


def test_data_under_a_name_nothing_else_reads_is_the_mutant_s_own(tmp_path: Path) -> None:
    (tmp_path / "own_data.py").write_text(
        textwrap.dedent(
            """
            from reference_impl.memory import DefaultShortTermMemory
            from stm_mutants import mutant_provider

            class M(DefaultShortTermMemory):
                _hydrated_times = 0  # read by its own hydrate alone

                async def hydrate(self, *args, **kwargs):
                    type(self)._hydrated_times += 1
                    return await super().hydrate(*args, **kwargs)

            provider = mutant_provider("own-data", M)
            """
        )
    )
    found = footprints("own_data", path=tmp_path)["own_data"]
    assert _names(found) == ["DefaultShortTermMemory.hydrate"]
