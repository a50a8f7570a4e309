"""The Lua scripts of the Redis backend. Each runs atomically in one round trip.

Every script takes the same three keys (see :class:`stm_redis.keys.SessionKeys`):
``KEYS[1]`` the state hash, ``KEYS[2]`` the turn-id set, ``KEYS[3]`` the lease. Replies
that carry the state are ``{status, rev, fence, epoch, nb, doc, now}`` (``now``: the
server's clock in microseconds as it read them); a missing field reads as ``"0"`` (``""``
for ``doc``: no state yet). The replies of the hot path are one string
of space-separated fields: a client parses one string faster than an array.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

__all__ = [
    "ACQUIRE",
    "CLEAR",
    "COMMIT",
    "READ",
    "RELEASE",
    "RELEASE_OWNED",
    "RENEW",
    "REPLACEMENTS_KEPT",
    "WRITES_KEPT",
    "Lua",
]

#: How many of the newest writes of a session ``COMMIT`` knows by id: a write sent again
#: is recognised while fewer than this many writes followed it.
WRITES_KEPT = 32
#: How many of the newest replacements (``from_dict``, ``hydrate``) ``COMMIT`` knows by id,
#: apart from the writes: ordinary writes do not push them out, nor does ``CLEAR``.
REPLACEMENTS_KEPT = 8


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
  local t = redis.call('TIME')
  local now = t[1] .. string.format('%06d', tonumber(t[2]))
  return {status, v[1] or '0', v[2] or '0', v[3] or '0', v[4] or '0', v[5] or '', now}
end
"""

# A script that writes checks the counters first: Redis does not undo a script's writes
# when a later command of it fails (``HINCRBY`` on a field that is not an integer).
#
# A state hash that does not exist (never written, or expired) starts its counters at the
# server's clock in microseconds, above any value they had in an earlier life of the hash:
# an instance that read the old one takes the new one for newer (``_adopt``), and a lease
# or epoch of the old life never matches the new one. For the same reason a counter moves
# on to at least that clock (``advance``): a server that rolls back (restarted from an
# older snapshot, failed over to a lagging replica) goes on from older values, and must
# not give out again a revision, fence or epoch an instance holds from before.
_COUNTERS = """
-- What HINCRBY takes and can add to: a decimal without leading zeros, at most 18 digits
-- (far below 2^63). '007' or a 20-digit value would pass a looser check and then fail
-- HINCRBY midway through a script, after its first writes.
local function canonical(s)
  return #s <= 18 and (s == '0' or string.match(s, '^%-?[1-9]%d*$') ~= nil)
end
local function corrupt(v)
  for i = 1, 3 do
    if v[i] and not canonical(v[i]) then
      return redis.error_reply(
        'corrupt state hash: rev, fence and epoch must be integers of at most 18 digits')
    end
  end
  return nil
end
-- Counters as decimal text: Lua 5.1 writes a number above 10^14 in exponent form.
local function int(x)
  if type(x) == 'number' then return string.format('%d', x) end
  return x
end
-- ``cur``: the hash's rev, fence and epoch; a hash without ``rev`` (none, or expired) is
-- made afresh. Returns the counters to go on from.
local function born(cur)
  if cur[1] then return cur end
  local t = redis.call('TIME')
  local base = string.format('%d', tonumber(t[1]) * 1000000 + tonumber(t[2]))
  redis.call('HSET', KEYS[1], 'rev', base, 'fence', base, 'epoch', base)
  return {base, base, base}
end
-- The counter ``field`` one up, and at least the server's clock in microseconds (16
-- digits, exact in Lua's doubles); its new value.
local function advance(field)
  local v = redis.call('HINCRBY', KEYS[1], field, 1)
  local t = redis.call('TIME')
  local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
  if v >= now then return v end
  redis.call('HSET', KEYS[1], field, string.format('%d', now))
  return now
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
#: owner asking for the summarizer lease once written (``-``: none), lease ms, the write's
#: id. ``bump`` is ``bump:<id>`` with the id of the replacement (``from_dict``,
#: ``hydrate``); ARGV 4, 5, ... are then the turn ids the new state holds, each followed
#: by its score: the ids of the replaced history go.
#: Replies ``'ok rev fence epoch leased'`` (``leased`` is ``1`` when the lease was free
#: and is now the owner's, with token ``owner/fence``) or the state with status ``dup``
#: (the turn id is recorded already), ``fenced`` (another worker took the lease),
#: ``replayed`` (this write, or this replacement, was made already: the command was sent
#: again after its reply was lost, by the caller or by the client library's own retry)
#: or ``conflict``. The ids of the newest :data:`WRITES_KEPT` writes (``writes``) and of
#: the newest :data:`REPLACEMENTS_KEPT` replacements (``replaced``) are kept for that.
COMMIT = (
    _STATE
    + _COUNTERS
    + f"local WRITES_KEPT, REPLACEMENTS_KEPT = {WRITES_KEPT}, {REPLACEMENTS_KEPT}\n"
    + """
-- ``ids``: space-separated ids, newest first. Whether ``id`` is one of them, and the
-- list with ``id`` in front, at most ``n`` long.
local function known(ids, id)
  return string.find(' ' .. ids .. ' ', ' ' .. id .. ' ', 1, true) ~= nil
end
local function pushed(ids, id, n)
  local kept, k = {id}, 1
  for old in string.gmatch(ids, '%S+') do
    if k >= n then break end
    k = k + 1
    kept[k] = old
  end
  return table.concat(kept, ' ')
end
"""
    + """
local a = {}
for v in string.gmatch(ARGV[3], '%S+') do a[#a + 1] = v end
local expected, nb, ttl, seq, fenced, bump, kept, owner, lease_ms, wid =
  a[1], a[2], tonumber(a[3]), a[4], a[5], a[6], tonumber(a[7]), a[8], a[9], a[10]
local writes = redis.call('HGET', KEYS[1], 'writes') or ''
if known(writes, wid) then return state('replayed') end
local tid = ARGV[2]
if tid ~= '' and redis.call('ZSCORE', KEYS[2], tid) then return state('dup') end
local cur = redis.call('HMGET', KEYS[1], 'rev', 'fence', 'epoch')
local bad = corrupt(cur)
if bad then return bad end
local fence = cur[2] or '0'
if fenced ~= '-' and fence ~= fenced then return state('fenced') end
if expected ~= '*' and (cur[1] or '0') ~= expected then return state('conflict') end
local replaced = nil  -- when this write is a replacement: the replacement ids to keep
if string.sub(bump, 1, 5) == 'bump:' then
  local rid = string.sub(bump, 6)
  local ids = redis.call('HGET', KEYS[1], 'replaced') or ''
  if known(ids, rid) then return state('replayed') end
  replaced = pushed(ids, rid, REPLACEMENTS_KEPT)
end
cur = born(cur)
local rev = advance('rev')
fence = cur[2]
local epoch = cur[3]
if replaced then
  epoch = advance('epoch')
  redis.call('HSET', KEYS[1], 'replaced', replaced)
  redis.call('DEL', KEYS[2])
  for i = 4, #ARGV, 2 do redis.call('ZADD', KEYS[2], ARGV[i + 1], ARGV[i]) end
end
writes = pushed(writes, wid, WRITES_KEPT)
redis.call('HSET', KEYS[1], 'doc', ARGV[1], 'nb', nb, 'writes', writes)
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
  fence = advance('fence')
  redis.call('SET', KEYS[3], owner .. '/' .. int(fence), 'PX', lease_ms)
  leased = '1'
end
return 'ok ' .. int(rev) .. ' ' .. int(fence) .. ' ' .. int(epoch) .. ' ' .. leased
"""
)

#: Take the summarizer lease if nobody holds it; the fencing counter goes up by one.
#: ARGV: 1 owner, 2 lease ms, 3 session ttl ms. Replies ``{'held', pttl}`` or the state
#: with status ``ok`` (its ``fence`` is the new token).
ACQUIRE = (
    _STATE
    + _COUNTERS
    + """
if redis.call('EXISTS', KEYS[3]) == 1 then return {'held', redis.call('PTTL', KEYS[3])} end
local cur = redis.call('HMGET', KEYS[1], 'rev', 'fence', 'epoch')
local bad = corrupt(cur)
if bad then return bad end
born(cur)
local fence = advance('fence')
redis.call('SET', KEYS[3], ARGV[1] .. '/' .. int(fence), 'PX', ARGV[2])
local ttl = tonumber(ARGV[3])
if ttl > 0 then
  redis.call('PEXPIRE', KEYS[1], ttl)
  redis.call('PEXPIRE', KEYS[2], ttl)  -- the turn ids live as long as the state
end
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

#: Release the lease if this instance holds it, under whatever fence: for ``aclose()``
#: after a worker was cancelled with an ``ACQUIRE`` in flight, whose fence it never read.
#: ARGV: 1 owner (the lease value is ``owner/fence``).
RELEASE_OWNED = """
local held = redis.call('GET', KEYS[3])
if held and string.sub(held, 1, #ARGV[1] + 1) == ARGV[1] .. '/' then
  return redis.call('DEL', KEYS[3])
end
return 0
"""

#: Forget the conversation: the state and turn ids go; ``rev``, ``epoch`` and ``fence``
#: stay and move on, so a summarizer call still running cannot install into the new state
#: (its lease no longer fences, and its epoch is gone).
#: ARGV: 1 session ttl ms (0: none).
CLEAR = (
    _COUNTERS
    + """
local cur = redis.call('HMGET', KEYS[1], 'rev', 'fence', 'epoch')
local bad = corrupt(cur)
if bad then return bad end
born(cur)
-- ``replaced`` stays: a replacement sent again after its reply was lost must not
-- overwrite what came after it, the clear included.
redis.call('HDEL', KEYS[1], 'doc', 'nb')
advance('rev')
advance('epoch')
advance('fence')
redis.call('DEL', KEYS[2])
local ttl = tonumber(ARGV[1])
if ttl > 0 then redis.call('PEXPIRE', KEYS[1], ttl) end
return 1
"""
)
