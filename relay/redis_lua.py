"""The pool's rules as Redis Lua scripts: each request changes several keys, so each is one script (atomic).

The same rules as ``relay.pool`` (read its docstring), on these keys, with ``S`` = ``PREFIX:s:SWARM``:

    S:g:DIGEST     hash   a (author) d (dataset) k (task key) t (arrival) sz (bytes charged) p (payload)
    S:au:AUTHOR    list   the author's digests, oldest first (quota, sampling)
    S:cnt          zset   author -> groups pooled (the largest author; the authors to sample from)
    S:arr          zset   digest -> arrival time (age expiry, oldest first)
    S:task         hash   author "\\n" task key -> digest (one group per task per author)
    S:sent:DIGEST  set    receivers it was sent to;  S:adp:DIGEST  set  receivers that reported training it
    S:tb:AUTHOR    hash   publish token bucket (expires once full again)
    S:node:ID      hash   stats: sh (shared) ad (adopted) rs/rc (reward sum/count) rn (rounds, JSON)
                          f/l (first/last seen)
    S:board        zset   node -> adopted * 1e6 + shared (the leaderboard order)
    S:gpm:SECOND   string groups accepted in that second (expires after 2 minutes)
    PREFIX:groups, PREFIX:bytes   totals over all swarms;  PREFIX:swarmbytes  zset swarm -> bytes (byte budget)
    PREFIX:seen    zset   SWARM "\\n" DIGEST -> when first pooled: content refused again after its group left
                          the pool (``relay.seen``: at most seen_max members, none older than seen_max_age)

Every loop is bounded (expiry and eviction by a per-call budget, sampling by a probe budget), so no
call scans the whole pool. Keys are built inside the scripts from the prefix, so this is for one
Redis server (with its own replicas for failover), not Redis Cluster.
Times: the caller's ``now`` (seconds); "" means Redis's own clock (one clock for all replicas).
Hand-written: no Redis module does per-author fair sampling with these bounds.
"""

from __future__ import annotations

# Shared helpers, prepended to each script. KEYS[1] = "PREFIX:s:SWARM", KEYS[2] = "PREFIX".
# The shebang makes Redis refuse a whole script when it is out of memory (maxmemory, noeviction)
# instead of failing at its first write half-way through: a script either runs entirely or not at all.
_COMMON = r"""#!lua
local S, G = KEYS[1], KEYS[2]
local ENTRY_OVERHEAD, RECEIVER_BYTES, EVICT_BUDGET = 256, 64, 256

local function clock(arg)
  local t = tonumber(arg)
  if t then return t end
  local now = redis.call('TIME')
  return tonumber(now[1]) + tonumber(now[2]) / 1e6
end

local function charge(sp, swarm, d, amount)
  redis.call('HINCRBY', sp .. ':g:' .. d, 'sz', amount)
  redis.call('INCRBY', G .. ':bytes', amount)
  redis.call('ZINCRBY', G .. ':swarmbytes', amount, swarm)
end

-- Remove one pooled group, whatever its place in its author's list.
local function evict(sp, swarm, d)
  local h = redis.call('HMGET', sp .. ':g:' .. d, 'a', 'k', 'sz')
  redis.call('ZREM', sp .. ':arr', d)
  if not h[1] then return end
  local a, sz = h[1], tonumber(h[3])
  redis.call('LREM', sp .. ':au:' .. a, 1, d)  -- O(1) for the author's oldest, the usual victim
  if tonumber(redis.call('ZINCRBY', sp .. ':cnt', -1, a)) <= 0 then redis.call('ZREM', sp .. ':cnt', a) end
  redis.call('HDEL', sp .. ':task', a .. '\n' .. h[2])
  redis.call('DEL', sp .. ':g:' .. d, sp .. ':sent:' .. d, sp .. ':adp:' .. d)
  redis.call('DECR', G .. ':groups')
  redis.call('DECRBY', G .. ':bytes', sz)
  if tonumber(redis.call('ZINCRBY', G .. ':swarmbytes', -sz, swarm)) <= 0 then
    redis.call('ZREM', G .. ':swarmbytes', swarm)
  end
end

local function evict_largest(sp, swarm)
  local top = redis.call('ZREVRANGE', sp .. ':cnt', 0, 0)
  if #top == 0 then return false end
  local d = redis.call('LINDEX', sp .. ':au:' .. top[1], 0)
  if not d then redis.call('ZREM', sp .. ':cnt', top[1]); return true end
  evict(sp, swarm, d)
  return true
end

local function expire(sp, swarm, now, max_age)
  local old = redis.call('ZRANGEBYSCORE', sp .. ':arr', '-inf', '(' .. (now - max_age), 'LIMIT', 0, EVICT_BUDGET)
  for _, d in ipairs(old) do evict(sp, swarm, d) end
end

local function enforce(sp, swarm, max_groups, max_bytes)
  local budget = EVICT_BUDGET
  while budget > 0 and redis.call('ZCARD', sp .. ':arr') > max_groups do
    if not evict_largest(sp, swarm) then break end
    budget = budget - 1
  end
  while budget > 0 and tonumber(redis.call('GET', G .. ':bytes') or '0') > max_bytes do
    -- Over the shared budget: the fullest swarm's largest author gives up its oldest group.
    local victim = redis.call('ZREVRANGE', G .. ':swarmbytes', 0, 0)
    if #victim == 0 then break end
    if not evict_largest(G .. ':s:' .. victim[1], victim[1]) then
      redis.call('ZREM', G .. ':swarmbytes', victim[1])
    end
    budget = budget - 1
  end
end

-- Distinct rounds as sorted [lo, hi] intervals, as relay.stats.RoundSet (same JSON).
local function add_round(node, r)
  local raw = redis.call('HGET', node, 'rn')
  local iv = {}
  if raw then
    for _, pair in ipairs(cjson.decode(raw)) do iv[#iv + 1] = {tonumber(pair[1]), tonumber(pair[2])} end
  end
  local n, i = #iv, 1
  while i <= n and iv[i][1] <= r do i = i + 1 end
  if i > 1 and iv[i - 1][2] >= r then return end
  local jl = i > 1 and iv[i - 1][2] == r - 1
  local jr = i <= n and iv[i][1] == r + 1
  if jl and jr then iv[i - 1][2] = iv[i][2]; table.remove(iv, i)
  elseif jl then iv[i - 1][2] = r
  elseif jr then iv[i][1] = r
  elseif n < 64 then table.insert(iv, i, {r, r})
  else return end
  local parts = {}
  for k, pair in ipairs(iv) do parts[k] = string.format('[%d,%d]', pair[1], pair[2]) end
  redis.call('HSET', node, 'rn', '[' .. table.concat(parts, ',') .. ']')
end

local function board(node_key, id)
  local v = redis.call('HMGET', node_key, 'ad', 'sh')
  redis.call('ZADD', S .. ':board', tonumber(v[1] or '0') * 1e6 + math.min(tonumber(v[2] or '0'), 999999), id)
end
"""

# KEYS: S, G, S:tb:AUTHOR.  ARGV: per_minute, now.  Returns 1 (a token taken) or 0.
TAKE_TOKEN = _COMMON + r"""
local per_min, now = tonumber(ARGV[1]), clock(ARGV[2])
local b = redis.call('HMGET', KEYS[3], 'tok', 't')
local tokens = tonumber(b[1]) or per_min
local stamp = tonumber(b[2]) or now
tokens = math.min(per_min, tokens + math.max(0, now - stamp) * per_min / 60)
local ok = 0
if tokens >= 1 then tokens = tokens - 1; ok = 1 end
redis.call('HSET', KEYS[3], 'tok', tostring(tokens), 't', tostring(now))
redis.call('EXPIRE', KEYS[3], 120)  -- refilled by then: the same as no bucket
return ok
"""

# KEYS: S, G.  ARGV: swarm, author, dataset, key, digest, payload, per_author, max_groups, max_bytes,
# max_age, now, mean_reward, round, seen_max, seen_max_age.  Returns "" (pooled) or the reason it was refused.
ADD = _COMMON + r"""
local swarm, author, dataset, key, d, payload = ARGV[1], ARGV[2], ARGV[3], ARGV[4], ARGV[5], ARGV[6]
local per_author, max_groups, max_bytes = tonumber(ARGV[7]), tonumber(ARGV[8]), tonumber(ARGV[9])
local max_age, now = tonumber(ARGV[10]), clock(ARGV[11])
expire(S, swarm, now, max_age)
-- Arrival times never step back within a swarm (age order), whatever the clocks do.
local last = redis.call('ZREVRANGE', S .. ':arr', 0, 0, 'WITHSCORES')
if #last > 0 then now = math.max(now, tonumber(last[2])) end
local size = #payload + #key + #d + ENTRY_OVERHEAD
if size > math.floor(max_bytes / 4) then return 'too_big' end
if redis.call('HEXISTS', S .. ':task', author .. '\n' .. key) == 1 then return 'duplicate' end
if redis.call('EXISTS', S .. ':g:' .. d) == 1 then return 'duplicate_content' end
-- Content pooled before and since gone from the pool is still remembered (relay.seen): refused all the same.
local seen, member = G .. ':seen', swarm .. '\n' .. d
local seen_max, seen_age = tonumber(ARGV[14]), tonumber(ARGV[15])
local first = redis.call('ZSCORE', seen, member)
if first and tonumber(first) >= now - seen_age then return 'duplicate_content' end
local mine = S .. ':au:' .. author
if redis.call('LLEN', mine) >= per_author then
  evict(S, swarm, redis.call('LINDEX', mine, 0))  -- the author's own oldest makes room: quota, not a refusal
end
redis.call('HSET', S .. ':g:' .. d, 'a', author, 'd', dataset, 'k', key, 't', tostring(now), 'sz', size, 'p', payload)
redis.call('RPUSH', mine, d)
redis.call('ZINCRBY', S .. ':cnt', 1, author)
redis.call('ZADD', S .. ':arr', now, d)
redis.call('HSET', S .. ':task', author .. '\n' .. key, d)
redis.call('INCR', G .. ':groups')
redis.call('INCRBY', G .. ':bytes', size)
redis.call('ZINCRBY', G .. ':swarmbytes', size, swarm)
redis.call('ZADD', seen, now, member)
local old = redis.call('ZRANGEBYSCORE', seen, '-inf', '(' .. (now - seen_age), 'LIMIT', 0, EVICT_BUDGET)
if #old > 0 then redis.call('ZREM', seen, unpack(old)) end
local over = redis.call('ZCARD', seen) - seen_max
if over > 0 then redis.call('ZREMRANGEBYRANK', seen, 0, over - 1) end
enforce(S, swarm, max_groups, max_bytes)
-- Stats. The row exists from the author's hello, unless Redis lost it since (a restart without
-- persistence): the author is signed in on its connection, so the row is made again.
local node = S .. ':node:' .. author
redis.call('HSETNX', node, 'f', tostring(now))
redis.call('HINCRBY', node, 'sh', 1)
redis.call('HINCRBYFLOAT', node, 'rs', ARGV[12])
redis.call('HINCRBY', node, 'rc', 1)
redis.call('HSET', node, 'l', tostring(now))
add_round(node, tonumber(ARGV[13]))
board(node, author)
local sec = S .. ':gpm:' .. math.floor(now)
redis.call('INCR', sec)
redis.call('EXPIRE', sec, 120)
return ''
"""

# KEYS: S, G.  ARGV: swarm, receiver, n, max_age, now, unseen_only (0/1), max_bytes, seed, pool max_age,
# probe budget, author draw, then the task filter (datasets; none = any).  Returns the payloads.
SAMPLE = _COMMON + r"""
local swarm, receiver, n = ARGV[1], ARGV[2], tonumber(ARGV[3])
local now = clock(ARGV[5])
local unseen_only, room = ARGV[6] == '1', tonumber(ARGV[7])
math.randomseed(tonumber(ARGV[8]))
expire(S, swarm, now, tonumber(ARGV[9]))
local cutoff = now - tonumber(ARGV[4])
local budget, draw = tonumber(ARGV[10]), tonumber(ARGV[11])
local tasks = nil
if #ARGV > 11 then
  tasks = {}
  for i = 12, #ARGV do tasks[ARGV[i]] = true end
end
local chosen = {}

local function eligible(d)
  if chosen[d] then return false end
  local h = redis.call('HMGET', S .. ':g:' .. d, 't', 'd')
  if not h[1] or tonumber(h[1]) < cutoff then return false end
  if tasks and not tasks[h[2]] then return false end
  if unseen_only and redis.call('SISMEMBER', S .. ':sent:' .. d, receiver) == 1 then return false end
  return true
end

-- One uniform eligible group of one author: random probes first, then a scan of its list (<= per_author).
local function pick(author)
  local list = S .. ':au:' .. author
  local size = redis.call('LLEN', list)
  for _ = 1, math.min(8, size) do
    local d = redis.call('LINDEX', list, math.random(size) - 1)
    budget = budget - 1
    if d and eligible(d) then return d end
  end
  if budget <= 0 then return nil end
  local cands = {}
  for _, d in ipairs(redis.call('LRANGE', list, 0, -1)) do
    if eligible(d) then cands[#cands + 1] = d end
  end
  budget = budget - size
  if #cands == 0 then return nil end
  return cands[math.random(#cands)]
end

-- A random set of authors (ZRANDMEMBER: distinct), shuffled; each once, then around again until n.
local authors = redis.call('ZRANDMEMBER', S .. ':cnt', draw)
for i = #authors, 2, -1 do
  local j = math.random(i)
  authors[i], authors[j] = authors[j], authors[i]
end
local picked, live = {}, {}
for _, a in ipairs(authors) do
  if a ~= receiver then live[#live + 1] = a end
end
while #picked < n and #live > 0 and budget > 0 do
  local still = {}
  for _, a in ipairs(live) do
    if #picked >= n or budget <= 0 then break end
    local d = pick(a)
    if d then
      chosen[d] = true
      picked[#picked + 1] = d
      still[#still + 1] = a
    end
  end
  live = still
end
local out = {}
for _, d in ipairs(picked) do
  local p = redis.call('HGET', S .. ':g:' .. d, 'p')
  if p and #p <= room then
    room = room - #p - 1
    out[#out + 1] = p
    if redis.call('SADD', S .. ':sent:' .. d, receiver) == 1 then charge(S, swarm, d, RECEIVER_BYTES) end
  end
end
return out
"""

# KEYS: S, G.  ARGV: swarm, receiver, round, now, max_groups, max_bytes, then the digests.
# Returns the number of groups credited to their authors.
REPORT = _COMMON + r"""
local swarm, receiver, now = ARGV[1], ARGV[2], clock(ARGV[4])
local me = S .. ':node:' .. receiver  -- signed in: its row is made again if Redis lost it
redis.call('HSETNX', me, 'f', tostring(now))
add_round(me, tonumber(ARGV[3]))
redis.call('HSET', me, 'l', tostring(now))
board(me, receiver)
local credited, seen = 0, {}
for i = 7, #ARGV do
  local d = ARGV[i]
  if not seen[d] then
    seen[d] = true
    local author = redis.call('HGET', S .. ':g:' .. d, 'a')
    -- Only groups still pooled, sent to this receiver, never one's own, once per (receiver, group).
    if author and author ~= receiver and redis.call('SISMEMBER', S .. ':sent:' .. d, receiver) == 1
        and redis.call('SADD', S .. ':adp:' .. d, receiver) == 1 then
      charge(S, swarm, d, RECEIVER_BYTES)
      credited = credited + 1
      local node = S .. ':node:' .. author
      if redis.call('EXISTS', node) == 1 then
        redis.call('HINCRBY', node, 'ad', 1)
        board(node, author)
      end
    end
  end
end
enforce(S, swarm, tonumber(ARGV[5]), tonumber(ARGV[6]))
return credited
"""

# KEYS: S, G.  ARGV: swarm, max_age, now.  Housekeeping: a quiet swarm's old groups go too.
EXPIRE = _COMMON + r"""
expire(S, ARGV[1], clock(ARGV[3]), tonumber(ARGV[2]))
return redis.call('ZCARD', S .. ':arr')
"""

# KEYS: S, G.  ARGV: node id, now.  A node was admitted (or left): create or refresh its row.
TOUCH = _COMMON + r"""
local node = S .. ':node:' .. ARGV[1]
redis.call('HSETNX', node, 'f', ARGV[2])
redis.call('HSET', node, 'l', ARGV[2])
redis.call('ZADD', S .. ':board', 'NX', 0, ARGV[1])
return 1
"""
