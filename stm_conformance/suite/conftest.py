"""Activates the kit when the suite is collected without ``--stm-backend``.

``pytest --pyargs stm_conformance.suite`` (or a path into the suite) runs the backend from
``$STM_BACKEND`` or the ``stm_backend`` ini option, else the reference implementation.
"""

from __future__ import annotations

import pytest


def pytest_configure(config: pytest.Config) -> None:
    from stm_conformance._session import ensure_active

    ensure_active(config)
