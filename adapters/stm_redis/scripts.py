"""The Lua scripts of the Redis backend. Each runs atomically in one round trip.

Every script takes the same three keys (see :class:`stm_redis.keys.SessionKeys`):
``KEYS[1]`` the state hash, ``KEYS[2]`` the turn-id set, ``KEYS[3]`` the lease. Replies
that carry the state are ``{status, rev, fence, epoch, nb, doc}``; a missing field reads
as ``"0"`` (``""`` for ``doc``: no state yet).
"""

from __future__ import annotations

__all__ = ["ACQUIRE", "CLEAR", "COMMIT", "READ", "RELEASE", "RENEW"]

_STATE = """
local function state(status)
  local v = redis.call('HMGET', KEYS[1], 'rev', 'fence', 'epoch', 'nb', 'doc')
  return {status, v[1] or '0', v[2] or '0', v[3] or '0', v[4] or '0', v[5] or ''}
end
"""

#: ARGV: the revision the caller holds. Replies ``{'same'}`` when unchanged, else the state.
READ = (
    _STATE
    + """
local rev = redis.call('HGET', KEYS[1], 'rev') or '0'
if rev == ARGV[1] then return {'same'} end
return state('state')
"""
)

#: Compare-and-set of the whole state.
#: ARGV: 1 expected rev (``*``: any), 2 doc, 3 nb, 4 session ttl ms (0: none),
#: 5 turn id (``''``: none), 6 its seq, 7 fence (``''``: not fenced), 8 ``bump`` to start a
#: new epoch, 9 how many turn ids to keep, 10 owner asking for the summarizer lease once
#: written (``''``: none), 11 lease ms.
#: Replies ``{'ok', rev, fence, epoch, leased}`` (``leased`` is ``'1'`` when the lease was
#: free and is now the owner's, with token ``owner/fence``) or the state with status
#: ``dup`` (the turn id is recorded already), ``fenced`` (another worker took the lease)
#: or ``conflict``.
COMMIT = (
    _STATE
    + """
if ARGV[5] ~= '' and redis.call('ZSCORE', KEYS[2], ARGV[5]) then return state('dup') end
if ARGV[7] ~= '' and (redis.call('HGET', KEYS[1], 'fence') or '0') ~= ARGV[7] then
  return state('fenced')
end
if ARGV[1] ~= '*' and (redis.call('HGET', KEYS[1], 'rev') or '0') ~= ARGV[1] then
  return state('conflict')
end
local rev = redis.call('HINCRBY', KEYS[1], 'rev', 1)
local epoch
if ARGV[8] == 'bump' then
  epoch = redis.call('HINCRBY', KEYS[1], 'epoch', 1)
else
  epoch = redis.call('HGET', KEYS[1], 'epoch') or '0'
end
redis.call('HSET', KEYS[1], 'doc', ARGV[2], 'nb', ARGV[3])
if ARGV[5] ~= '' then
  redis.call('ZADD', KEYS[2], ARGV[6], ARGV[5])
  redis.call('ZREMRANGEBYRANK', KEYS[2], 0, -(tonumber(ARGV[9]) + 1))
end
local ttl = tonumber(ARGV[4])
if ttl > 0 then
  redis.call('PEXPIRE', KEYS[1], ttl)
  redis.call('PEXPIRE', KEYS[2], ttl)
end
local leased = '0'
if ARGV[10] ~= '' and redis.call('EXISTS', KEYS[3]) == 0 then
  local fence = redis.call('HINCRBY', KEYS[1], 'fence', 1)
  redis.call('SET', KEYS[3], ARGV[10] .. '/' .. fence, 'PX', ARGV[11])
  leased = '1'
end
local fence = redis.call('HGET', KEYS[1], 'fence') or '0'
return {'ok', tostring(rev), fence, tostring(epoch), leased}
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
