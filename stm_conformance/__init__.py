"""pytest conformance kit for short-term memory backends."""

__version__ = "0.1.0"
