"""The Lua scripts of the Redis backend. Each runs atomically in one round trip.

Every script takes the same three keys (see :class:`stm_redis.keys.SessionKeys`):
``KEYS[1]`` the state hash, ``KEYS[2]`` the turn-id set, ``KEYS[3]`` the lease. Replies
that carry the state are ``{status, rev, fence, epoch, nb, doc}``; a missing field reads
as ``"0"`` (``""`` for ``doc``: no state yet). The replies of the hot path are one string
of space-separated fields: a client parses one string faster than an array.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

__all__ = ["ACQUIRE", "CLEAR", "COMMIT", "READ", "RELEASE", "RENEW", "Lua"]


@dataclass(frozen=True, slots=True)
class Lua:
    """A script and its SHA-1, ready to send (bytes are sent as they are)."""

    source: str
    sha: bytes

    @classmethod
    def of(cls, source: str) -> Lua:
        return cls(source, hashlib.sha1(source.encode()).hexdigest().encode())


_STATE = """
local function state(status)
  local v = redis.call('HMGET', KEYS[1], 'rev', 'fence', 'epoch', 'nb', 'doc')
  return {status, v[1] or '0', v[2] or '0', v[3] or '0', v[4] or '0', v[5] or ''}
end
"""

#: KEYS: the state hash only. ARGV: the revision the caller holds. Replies ``'same'`` when
#: unchanged, else the state.
READ = (
    _STATE
    + """
local rev = redis.call('HGET', KEYS[1], 'rev') or '0'
if rev == ARGV[1] then return 'same' end
return state('state')
"""
)

#: Compare-and-set of the whole state.
#: ARGV: 1 doc, 2 turn id (``''``: none), 3 the other arguments in one space-separated
#: string (fewer arguments: less work per call for the client), ``-`` standing for none:
#: expected rev (``*``: any), nb, session ttl ms (0: none), the turn's seq, fence (``-``:
#: not fenced), ``bump`` to start a new epoch (``-``: not), how many turn ids to keep,
#: owner asking for the summarizer lease once written (``-``: none), lease ms.
#: Replies ``'ok rev fence epoch leased'`` (``leased`` is ``1`` when the lease was free
#: and is now the owner's, with token ``owner/fence``) or the state with status ``dup``
#: (the turn id is recorded already), ``fenced`` (another worker took the lease) or
#: ``conflict``.
COMMIT = (
    _STATE
    + """
local a = {}
for v in string.gmatch(ARGV[3], '%S+') do a[#a + 1] = v end
local expected, nb, ttl, seq, fenced, bump, kept, owner, lease_ms =
  a[1], a[2], tonumber(a[3]), a[4], a[5], a[6], tonumber(a[7]), a[8], a[9]
local tid = ARGV[2]
if tid ~= '' and redis.call('ZSCORE', KEYS[2], tid) then return state('dup') end
local cur = redis.call('HMGET', KEYS[1], 'rev', 'fence', 'epoch')
local fence, epoch = cur[2] or '0', cur[3] or '0'
if fenced ~= '-' and fence ~= fenced then return state('fenced') end
if expected ~= '*' and (cur[1] or '0') ~= expected then return state('conflict') end
local rev = redis.call('HINCRBY', KEYS[1], 'rev', 1)
if bump == 'bump' then epoch = redis.call('HINCRBY', KEYS[1], 'epoch', 1) end
redis.call('HSET', KEYS[1], 'doc', ARGV[1], 'nb', nb)
if tid ~= '' then
  redis.call('ZADD', KEYS[2], seq, tid)
  redis.call('ZREMRANGEBYRANK', KEYS[2], 0, -(kept + 1))
end
if ttl > 0 then
  redis.call('PEXPIRE', KEYS[1], ttl)
  redis.call('PEXPIRE', KEYS[2], ttl)
end
local leased = '0'
if owner ~= '-' and redis.call('EXISTS', KEYS[3]) == 0 then
  fence = redis.call('HINCRBY', KEYS[1], 'fence', 1)
  redis.call('SET', KEYS[3], owner .. '/' .. fence, 'PX', lease_ms)
  leased = '1'
end
return 'ok ' .. rev .. ' ' .. fence .. ' ' .. epoch .. ' ' .. leased
"""
)

#: Take the summarizer lease if nobody holds it; the fencing counter goes up by one.
#: ARGV: 1 owner, 2 lease ms, 3 session ttl ms. Replies ``{'held', pttl}`` or the state
#: with status ``ok`` (its ``fence`` is the new token).
ACQUIRE = (
    _STATE
    + """
if redis.call('EXISTS', KEYS[3]) == 1 then return {'held', redis.call('PTTL', KEYS[3])} end
local fence = redis.call('HINCRBY', KEYS[1], 'fence', 1)
redis.call('SET', KEYS[3], ARGV[1] .. '/' .. fence, 'PX', ARGV[2])
local ttl = tonumber(ARGV[3])
if ttl > 0 then redis.call('PEXPIRE', KEYS[1], ttl) end
return state('ok')
"""
)

#: ARGV: 1 token (``owner/fence``), 2 lease ms. Replies 1 when still held and extended.
RENEW = """
if redis.call('GET', KEYS[3]) == ARGV[1] then return redis.call('PEXPIRE', KEYS[3], ARGV[2]) end
return 0
"""

#: ARGV: 1 token. Replies 1 when the lease was held by the token and is now free.
RELEASE = """
if redis.call('GET', KEYS[3]) == ARGV[1] then return redis.call('DEL', KEYS[3]) end
return 0
"""

#: Forget the conversation: the state and turn ids go; ``rev``, ``epoch`` and ``fence``
#: stay and move on, so a summarizer call still running cannot install into the new state.
#: ARGV: 1 session ttl ms (0: none).
CLEAR = """
redis.call('HDEL', KEYS[1], 'doc', 'nb')
redis.call('HINCRBY', KEYS[1], 'rev', 1)
redis.call('HINCRBY', KEYS[1], 'epoch', 1)
redis.call('DEL', KEYS[2])
local ttl = tonumber(ARGV[1])
if ttl > 0 then redis.call('PEXPIRE', KEYS[1], ttl) end
return 1
"""
