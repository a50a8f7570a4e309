#!/bin/sh
# Conformance gate of a backend: runs the stm-conformance suite and exits with pytest's
# status, so CI fails unless every check passes (or fails as expected) and the backend
# reaches the required level. See docs/ci-gate.md.
#
#   STM_GATE_BACKEND     the backend: a registered name or package.module:provider
#                        (default: reference)
#   STM_GATE_LEVEL       the level to reach: Core, Summary, Durable or Distributed
#                        (default: Durable)
#   STM_GATE_XFAIL       an expected-failures TOML file (default: none)
#   STM_GATE_REPORT      the JSON report to write (default: stm-report.json)
#   STM_GATE_KIT         what pip installs the kit from: no package is published, so the
#                        path of a checkout of stm-conformance, or
#                        "stm-conformance @ git+URL@TAG"; required unless installing nothing
#   STM_GATE_PROJECT     the backend project, installed with the kit (default: .; empty: none)
#   STM_GATE_NO_INSTALL  1: install nothing, use the environment as it is
#   STM_GATE_PYTHON      the interpreter (default: python3)
#
# Arguments are passed on to pytest, e.g. --stm-timeout=60 or -W error.
set -eu

python=${STM_GATE_PYTHON:-python3}

if [ "${STM_GATE_NO_INSTALL:-}" != 1 ]; then
    if [ -z "${STM_GATE_KIT:-}" ]; then
        echo "ci-gate.sh: set STM_GATE_KIT to the kit's checkout or git URL" \
            "(or STM_GATE_NO_INSTALL=1 to install nothing)" >&2
        exit 4
    fi
    project=${STM_GATE_PROJECT-.}
    "$python" -m pip install --quiet "$STM_GATE_KIT" ${project:+"$project"}
fi

set -- \
    --stm-backend="${STM_GATE_BACKEND:-reference}" \
    --stm-require-level="${STM_GATE_LEVEL:-Durable}" \
    --stm-report="${STM_GATE_REPORT:-stm-report.json}" \
    --stm-hypothesis-profile=ci \
    ${STM_GATE_XFAIL:+"--stm-xfail=$STM_GATE_XFAIL"} \
    "$@"
exec "$python" -m pytest "$@"
