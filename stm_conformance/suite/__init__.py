"""The conformance checks: one pytest item per check, each tagged with requirement IDs.

Run with ``pytest --stm-backend=NAME`` from anywhere, or ``pytest --pyargs
stm_conformance.suite`` (reference backend unless one is configured).
"""
