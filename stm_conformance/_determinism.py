"""Hypothesis profiles and the run seed, so a conformance run can be repeated exactly."""

from __future__ import annotations

import os
import random
from typing import Any

__all__ = ["PROFILES", "apply_profile", "choose_profile", "choose_seed", "seed_check"]

#: Hypothesis settings per ``--stm-hypothesis-profile``. No example database: a run is
#: reproduced by its seed, not by state left in the directory it ran from.
PROFILES: dict[str, dict[str, Any]] = {
    "dev": {"max_examples": 25},
    "ci": {"max_examples": 50, "derandomize": True},
    "thorough": {"max_examples": 500},
}


def choose_profile(option: str | None) -> str:
    """The profile to use: the option, else ``ci`` when ``$CI`` is set, else ``dev``."""
    if option:
        return option
    return "ci" if os.environ.get("CI") else "dev"


def choose_seed(option: int | None, profile: str, inherited: int | None) -> int | None:
    """The run seed: given, inherited from an xdist controller, ``None`` (derandomized
    ``ci``), or fresh."""
    if option is not None:
        return option
    if inherited is not None:
        return inherited
    if PROFILES[profile].get("derandomize"):
        return None
    return random.SystemRandom().randrange(2**32)


def apply_profile(profile: str, seed: int | None) -> None:
    """Register and load the kit's profile; force hypothesis' seed when there is one."""
    from hypothesis import HealthCheck, core, settings

    name = f"stm-conformance-{profile}"
    settings.register_profile(
        name,
        deadline=None,
        database=None,
        print_blob=True,
        # make_memory and friends are factories meant to be shared by all examples.
        suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
        **PROFILES[profile],
    )
    settings.load_profile(name)
    if seed is not None and core.global_force_seed is None:
        core.global_force_seed = seed  # type: ignore[assignment]  # as --hypothesis-seed does


def seed_check(seed: int | None, nodeid: str) -> None:
    """Seed :mod:`random` for one check, independently of order and worker."""
    random.seed(f"{seed or 0}:{nodeid}")
