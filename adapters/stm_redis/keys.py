"""Redis key names of one memory: a namespace, an injective session encoding, a hash tag.

Every key of one session shares the hash tag ``{<encoded key>}``, so all of them live in
one Redis Cluster hash slot and every script touching them is cluster-safe.
"""

from __future__ import annotations

from dataclasses import dataclass
from urllib.parse import quote

from reference_impl import MemoryKey

__all__ = ["DEFAULT_NAMESPACE", "SessionKeys", "check_namespace", "encode_memory_key"]

#: The namespace prefix used when none is given.
DEFAULT_NAMESPACE = "stm"


def check_namespace(namespace: str) -> str:
    """Return ``namespace`` if it can prefix keys; braces would move the hash tag."""
    if not isinstance(namespace, str):
        raise TypeError(f"namespace must be a str, not {type(namespace).__name__}")
    if not namespace or "{" in namespace or "}" in namespace:
        raise ValueError(f"namespace must be non-empty and contain no braces: {namespace!r}")
    return namespace


def encode_memory_key(key: MemoryKey) -> str:
    """``tenant:user:session``, each part percent-encoded as UTF-8 with no safe characters.

    Percent-encoding is injective and never produces ``:``, ``{`` or ``}``, so the joined
    form is injective for any strings and is a valid hash tag.
    """
    if not isinstance(key, MemoryKey):
        raise TypeError(f"key must be a MemoryKey, not {type(key).__name__}")
    return ":".join(quote(part, safe="") for part in (key.tenant_id, key.user_id, key.session_id))


@dataclass(frozen=True, slots=True)
class SessionKeys:
    """The three Redis keys of one memory."""

    #: Hash of scalars: ``doc`` (the state), ``rev``, ``fence``, ``epoch``, ``nb``.
    state: str
    #: Sorted set of recorded turn ids, scored by sequence number (idempotent retries).
    ids: str
    #: The summarizer lease: ``owner/fence``, with a expiry.
    lease: str

    @classmethod
    def for_key(cls, namespace: str, key: MemoryKey) -> SessionKeys:
        base = f"{check_namespace(namespace)}:{{{encode_memory_key(key)}}}"
        return cls(state=f"{base}:state", ids=f"{base}:ids", lease=f"{base}:lease")

    def all(self) -> list[str]:
        return [self.state, self.ids, self.lease]
