//! The Lua scripts a fleet budget runs on the Redis server: acquire, renew, release (with the
//! fleet's wait queue), the shares report, and the GCRA of a fleet rate limit. Each reads the
//! server's clock (`TIME`), never a client's.
//!
//! Every key a script touches is passed in `KEYS` and carries the budget's hash tag
//! (`inflight:{name}:...`), so a budget lives on one slot of a Redis Cluster. Since Redis 5
//! scripts are replicated by their effects, so reading `TIME` inside one is safe.
//!
//! # Grants told
//!
//! A script that hands a permit to a waiter tells the waiter's process on a channel of its own.
//! On one server (or a primary found through Sentinel) that is `PUBLISH` on
//! `inflight:grants:<process>`; on a Cluster it is `SPUBLISH` on
//! `inflight:{name}:grants:<process>`, a sharded channel in the budget's own slot, so the word
//! stays on the budget's shard instead of crossing the whole cluster bus ([`Scripts::for_cluster`]).
//!
//! # Epochs: state that Redis lost
//!
//! Each budget keeps `inflight:{name}:epoch`, a hash of `epoch` (the server's clock in
//! microseconds when the budget's state began), `version` (bumped by every write that grants,
//! renews or registers) and `learn` (server milliseconds until which nothing new is granted).
//! Every script is told the epoch and the highest version its process has seen, and answers
//! with its own:
//!
//! - **State gone** (a restart without persistence, a flush): the hash is missing. Made again
//!   by a process that had seen an epoch, the budget starts *learning* for one lease.
//! - **Writes lost** (a failover with asynchronous replication): a process has seen a higher
//!   version (or a later epoch) than the server holds. The budget takes a new epoch and learns
//!   for one lease.
//! - **Learning**: nothing new is granted, and every process that runs calls re-registers them
//!   at its next round trip (its renewal, at most a third of a lease away, or at once when it
//!   sees the new epoch): leases missing from a server whose epoch the process had not seen are
//!   added back, and calls admitted on the local fallback are added as holders. A lease added
//!   back extends learning to one lease from then. After learning, grants resume below the
//!   limit, counting every call registered.
//!
//! A process's own lease, still valid on its own clock, is re-registered only when the server's
//! epoch moved: with the epoch unchanged, a missing lease was taken back on expiry, and is lost.

use std::sync::LazyLock;

use redis::Script;

/// The server's clock, and `fence`, which compares the budget's epoch with what the caller has
/// seen (see the module's docs). Starts every script that touches a budget's state.
///
/// `fence(key, seen_epoch, seen_version, lease)` returns `epoch, version, learn, behind`:
/// `behind` when the caller last saw an earlier state (its running calls must be told again).
const FENCE: &str = r#"
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local now_us = tonumber(t[1]) * 1000000 + tonumber(t[2])
local function fence(key, seen_epoch, seen_version, lease)
  local m = redis.call('HMGET', key, 'epoch', 'version', 'learn')
  local epoch, version, learn = tonumber(m[1]), tonumber(m[2]) or 0, tonumber(m[3]) or 0
  local behind = false
  if not epoch then
    epoch, version, learn = now_us, 0, 0
    if seen_epoch ~= 0 then
      learn = now + lease
      behind = true
    end
    redis.call('HSET', key, 'epoch', epoch, 'version', 0, 'learn', learn)
  elseif seen_epoch > epoch or (seen_epoch == epoch and seen_version > version) then
    epoch = math.max(now_us, seen_epoch + 1, epoch + 1)
    learn = now + lease
    behind = true
    redis.call('HSET', key, 'epoch', epoch, 'learn', learn)
  elseif seen_epoch ~= 0 and seen_epoch < epoch then
    behind = true
  end
  return epoch, version, learn, behind
end
"#;

/// What every lease script starts with: [`FENCE`] applied to the budget, and `promote`, which
/// hands free permits to the earliest waiters of the fleet.
///
/// `KEYS[1]`: the holders, a sorted set of lease id to expiry (server milliseconds).
/// `KEYS[2]`: the queue, a sorted set of waiting lease id to arrival number.
/// `KEYS[3]`: the queue's expiries, a sorted set of waiting lease id to the moment its waiter
/// counts as gone unless it asks again (a waiter killed while queued blocks nobody).
/// `KEYS[4]`: the arrival counter.
/// `KEYS[5]`: the epoch (see the module's docs).
///
/// `ARGV[1..4]`: the epoch and version the caller has seen (0 and 0 for none), the limit, the
/// lease in milliseconds.
///
/// `promote` first drops queue entries whose waiters stopped asking; then, if the holders are
/// at the limit, reclaims expired leases (a holder killed with SIGKILL frees its permits within
/// one lease); then, unless the budget is learning, while there is room and someone waits,
/// grants the head of the queue its lease and tells it on its process's channel. So no permit
/// is free while anyone waits: a newcomer never overtakes the queue.
const PRELUDE: &str = r#"
local seen_epoch = tonumber(ARGV[1])
local seen_version = tonumber(ARGV[2])
local limit = tonumber(ARGV[3])
local lease = tonumber(ARGV[4])
local epoch, version, learn, behind = fence(KEYS[5], seen_epoch, seen_version, lease)
local function bump()
  version = redis.call('HINCRBY', KEYS[5], 'version', 1)
end
local function learn_more()
  if learn < now + lease then
    learn = now + lease
    redis.call('HSET', KEYS[5], 'learn', learn)
  end
end
local function learn_left()
  return math.max(learn - now, 0)
end
local function promote()
  local queued = redis.call('ZCARD', KEYS[2])
  if queued > 0 then
    local gone = redis.call('ZRANGEBYSCORE', KEYS[3], '-inf', now)
    for _, id in ipairs(gone) do
      queued = queued - redis.call('ZREM', KEYS[2], id)
      redis.call('ZREM', KEYS[3], id)
    end
  end
  local reclaimed = 0
  local n = redis.call('ZCARD', KEYS[1])
  if n >= limit then
    reclaimed = redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
    n = n - reclaimed
  end
  if now < learn then
    return n, reclaimed
  end
  local granted = 0
  while n < limit and queued > 0 do
    local head = redis.call('ZRANGE', KEYS[2], 0, 0)[1]
    if not head then break end
    redis.call('ZREM', KEYS[2], head)
    redis.call('ZREM', KEYS[3], head)
    n = n + redis.call('ZADD', KEYS[1], now + lease, head)
    queued = queued - 1
    granted = granted + 1
    tell(head)
  end
  if granted > 0 then bump() end
  return n, reclaimed
end
"#;

/// `tell(id)` on one server: `PUBLISH` on the process's channel.
const TELL_PLAIN: &str = r#"
local function tell(id)
  redis.call('PUBLISH', 'inflight:grants:' .. string.sub(id, 1, TOKEN_LEN), id)
end
"#;

/// `tell(id)` on a Cluster: `SPUBLISH` on the process's channel in the budget's slot (the
/// first key's name without its last part, then `:grants:` and the process).
const TELL_SHARDED: &str = r#"
local budget_prefix = (string.gsub(KEYS[1], ':[^:]*$', ''))
local function tell(id)
  redis.call('SPUBLISH', budget_prefix .. ':grants:' .. string.sub(id, 1, TOKEN_LEN), id)
end
"#;

/// Takes a lease for `ARGV[5]` if a permit is free, nobody waits and the budget is not
/// learning; otherwise puts it in the queue (or keeps it there), where `promote` grants it in
/// its turn.
///
/// `KEYS` and `ARGV[1..4]`: see [`PRELUDE`]. `ARGV[5]`: the lease id; `ARGV[6]`: the queue
/// entry's lifetime in milliseconds; `ARGV[7..]`: leases of the caller's process to give back
/// first (as [`RELEASE`] does, before the hand-off to the queue): a call that follows another
/// costs one script.
///
/// Idempotent: an id already holding a lease (granted from the queue, or a retry after a lost
/// reply) is granted again with its expiry pushed back, so a retry never takes a second permit;
/// an id already queued keeps its place.
///
/// Returns `{epoch, version, ms of learning left, granted (0|1), holders after, reclaimed, ms
/// until the earliest lease expires (or learning ends), waiters ahead of this one}`.
const ACQUIRE: &str = r#"
local id = ARGV[5]
for i = 7, #ARGV do
  redis.call('ZREM', KEYS[1], ARGV[i])
  if redis.call('ZREM', KEYS[2], ARGV[i]) == 1 then
    redis.call('ZREM', KEYS[3], ARGV[i])
  end
end
local n, reclaimed = promote()
if redis.call('ZSCORE', KEYS[1], id) then
  redis.call('ZADD', KEYS[1], 'XX', now + lease, id)
  bump()
  return {epoch, version, learn_left(), 1, n, reclaimed, 0, 0}
end
if n < limit and now >= learn then
  redis.call('ZADD', KEYS[1], now + lease, id)
  bump()
  return {epoch, version, learn_left(), 1, n + 1, reclaimed, 0, 0}
end
if redis.call('ZSCORE', KEYS[2], id) == false then
  redis.call('ZADD', KEYS[2], redis.call('INCR', KEYS[4]), id)
end
redis.call('ZADD', KEYS[3], now + tonumber(ARGV[6]), id)
local wait = 0
if now < learn then
  wait = learn - now
else
  local first = redis.call('ZRANGE', KEYS[1], 0, 0, 'WITHSCORES')
  if first[2] then wait = tonumber(first[2]) - now end
end
return {epoch, version, learn_left(), 0, n, reclaimed, wait, redis.call('ZRANK', KEYS[2], id)}
"#;

/// Renews the caller's leases, and registers the calls it admitted on its local fallback.
///
/// `KEYS` and `ARGV[1..4]`: see [`PRELUDE`]. `ARGV[5]`: how many lease ids follow; then the
/// lease ids; then the ids of local calls to count as holders.
///
/// A lease still held has its expiry pushed back. One the server does not hold is lost, unless
/// the caller is behind (the state it was granted in is gone): then it is added back, and the
/// budget learns for one lease from now. Local calls are added (or renewed) as holders, whatever
/// the limit: they run.
///
/// Returns `{epoch, version, ms of learning left, leases added back, {lost lease ids}}`.
const RENEW: &str = r#"
local count = tonumber(ARGV[5])
local readded = 0
local lost = {}
for i = 6, 5 + count do
  local id = ARGV[i]
  local expiry = redis.call('ZSCORE', KEYS[1], id)
  if expiry and (tonumber(expiry) > now or behind) then
    redis.call('ZADD', KEYS[1], 'XX', now + lease, id)
  elseif behind then
    redis.call('ZADD', KEYS[1], now + lease, id)
    readded = readded + 1
  else
    if expiry then redis.call('ZREM', KEYS[1], id) end
    lost[#lost + 1] = id
  end
end
for i = 6 + count, #ARGV do
  redis.call('ZADD', KEYS[1], now + lease, ARGV[i])
end
if readded > 0 then learn_more() end
bump()
return {epoch, version, learn_left(), readded, lost}
"#;

/// Gives back leases `ARGV[5..]`, whether they hold a permit or wait in the queue (a waiter
/// that gave up), then hands the freed permits to the earliest waiters (see [`PRELUDE`]).
///
/// Only the ids' own entries are removed: a holder whose lease expired and was taken by someone
/// else removes nothing.
///
/// Returns `{epoch, version, ms of learning left, how many of the leases were held}`.
const RELEASE: &str = r#"
local removed = 0
for i = 5, #ARGV do
  removed = removed + redis.call('ZREM', KEYS[1], ARGV[i])
  if redis.call('ZREM', KEYS[2], ARGV[i]) == 1 then
    redis.call('ZREM', KEYS[3], ARGV[i])
  end
end
promote()
return {epoch, version, learn_left(), removed}
"#;

/// A report of one process of a share budget: what it may still be running, what it wants, and
/// what it gets.
///
/// `KEYS`: see [`share_keys`]: the processes (a hash of process id to
/// `has:wants:expiry:seq`, expiry in server milliseconds), the budget's epoch, the entries'
/// expiries, the processes waiting for a turn at a permit beyond their base share, the processes
/// holding such extra permits (by when they took them), the processes below their base, the
/// sums (`reserved`, `wants`, `n`), the wants and the permits reserved (sorted sets).
///
/// `ARGV`: process id, wants, holding (the most calls it may run until it hears back), report
/// number, limit, lease in milliseconds, leaving (`1`: it wants nothing more; its entry goes
/// when it holds nothing, and otherwise keeps `holding` until it expires), then the epoch and
/// version the process has seen.
///
/// - **Base shares, max-min fair.** The water level `L` of the wants (`sum of min(wants, L)` is
///   the limit) is found by walking the wants in ascending order only up to the first at or above
///   its fair part: never more entries than the limit, and one when every process wants more
///   than its part; the sums are kept as reports come, so a report costs a few commands whatever
///   the number of processes. A process's base is `min(wants, floor(L))`: the bases never sum
///   past the limit.
/// - **Turns at the rest.** What the bases leave over (`limit - sum of bases`, all of it when
///   every process's fair share is below one permit) goes in turns: a process that wants more
///   than its base queues for a turn, a free permit goes to the head of the queue, one per
///   report, and a process that holds permits beyond its base while others wait, a sixth of a
///   lease after it began to hold, is capped to its base (its extras go back as its calls end)
///   and queues again.
/// - **Never past the limit.** A share grows only from permits no entry holds; the reporter's
///   `holding` is kept (up to what the others leave free), and, while the budget learns after a
///   loss of state or when the reporter is behind, kept whole (its calls run) with no growth.
/// - **Told.** A process below its base tells those holding more than any base to report (they
///   are capped at once); one that gave permits back tells those below their base, then the heads of the turns
///   queue; one that queued for a turn tells the holder of extras whose term ran out.
///
/// Expired entries are dropped twenty at a time by each report. A report numbered no higher than
/// the last one applied (a late duplicate) is ignored.
///
/// Returns `{applied (0|1), cap, has, target (the base), processes, epoch, version, ms of
/// learning left, ms until the reporter should report again to give back what it holds beyond
/// its base (0: no need)}`: a holder of a turn reports when its term runs out, so that the
/// turns move at the pace of the term, not of the renewals.
const SHARES: &str = r#"
local me = ARGV[1]
local wants = tonumber(ARGV[2])
local holding = tonumber(ARGV[3])
local seq = tonumber(ARGV[4])
local limit = tonumber(ARGV[5])
local lease = tonumber(ARGV[6])
local epoch, version, learn, behind = fence(KEYS[2], tonumber(ARGV[8]), tonumber(ARGV[9]), lease)
local learning = now < learn
local term = math.max(math.floor(lease / 6), 1)
local sums = redis.call('HMGET', KEYS[7], 'reserved', 'wants', 'n')
local reserved, total, n = tonumber(sums[1]) or 0, tonumber(sums[2]) or 0, tonumber(sums[3]) or 0
local function parse(raw)
  local h, w, e, q = string.match(raw, '^(%d+):(%d+):(%d+):(%d+)$')
  return tonumber(h), tonumber(w), tonumber(e), tonumber(q)
end
local function forget(id)
  redis.call('HDEL', KEYS[1], id)
  redis.call('ZREM', KEYS[3], id)
  redis.call('ZREM', KEYS[4], id)
  redis.call('ZREM', KEYS[5], id)
  redis.call('ZREM', KEYS[6], id)
  redis.call('ZREM', KEYS[8], id)
  redis.call('ZREM', KEYS[9], id)
end
-- Expired entries go, a few per report.
for _, id in ipairs(redis.call('ZRANGEBYSCORE', KEYS[3], '-inf', now, 'LIMIT', 0, 20)) do
  if id ~= me then
    local raw = redis.call('HGET', KEYS[1], id)
    if raw then
      local h, w = parse(raw)
      reserved, total, n = reserved - h, total - w, n - 1
    end
    forget(id)
  end
end
local raw = redis.call('HGET', KEYS[1], me)
local before = 0
if raw then
  local h, w, e, q = parse(raw)
  if e > now and seq <= q and not behind then
    return {0, 0, 0, 0, math.max(n, 1), epoch, version, math.max(learn - now, 0), 0}
  end
  if e > now then before = h end
  reserved, total, n = reserved - h, total - w, n - 1
end
if ARGV[7] == '1' then wants = 0 end
-- The water level: the wants in ascending order (a sorted set), walked only as far as the
-- first want at or above its fair part of what is left; every want below the level is one
-- permit or more, so the walk is never longer than the limit.
if wants > 0 then
  redis.call('ZADD', KEYS[8], wants, me)
else
  redis.call('ZREM', KEYS[8], me)
end
local nw = redis.call('ZCARD', KEYS[8])
local level = limit
local left, k = limit, 0
while k < nw do
  local chunk = redis.call('ZRANGE', KEYS[8], k, k + 63, 'WITHSCORES')
  if #chunk == 0 then break end
  local found = false
  for i = 2, #chunk, 2 do
    local w = tonumber(chunk[i])
    local share = left / (nw - k)
    if w >= share then
      level, found = share, true
      break
    end
    left, k = left - w, k + 1
  end
  if found then break end
end
local base = math.min(wants, math.floor(level))
local mhas = math.min(holding, math.max(limit - reserved, 0))
if learning or behind then mhas = holding end
local free = math.max(limit - reserved - mhas, 0)
if not learning and mhas < base then
  local grow = math.min(base - mhas, free)
  mhas, free = mhas + grow, free - grow
end
-- When it began to hold what it holds: its term at any permit beyond its base runs from then.
if mhas > 0 then
  redis.call('ZADD', KEYS[5], 'NX', now, me)
else
  redis.call('ZREM', KEYS[5], me)
end
local others_below = redis.call('ZCARD', KEYS[6]) - (redis.call('ZSCORE', KEYS[6], me) and 1 or 0)
local others_waiting = redis.call('ZCARD', KEYS[4]) - (redis.call('ZSCORE', KEYS[4], me) and 1 or 0)
local cap = mhas
local told = {}
-- When to report again to give back what is beyond the base, others waiting (0: no need).
local recheck = 0
if mhas > base then
  local since = tonumber(redis.call('ZSCORE', KEYS[5], me) or now)
  if others_waiting > 0 and now < since + term then recheck = since + term - now end
  if others_below > 0 or (others_waiting > 0 and now >= since + term) then
    -- Others are short: the extras go back as their calls end; drained, this process queues
    -- again at the back (its next term runs from when it takes a permit again).
    cap = base
  end
elseif wants > mhas and not learning and mhas == base then
  -- A turn at a permit beyond the base: the head of the queue takes one when one is free.
  if not redis.call('ZSCORE', KEYS[4], me) then redis.call('ZADD', KEYS[4], now, me) end
  local rank = redis.call('ZRANK', KEYS[4], me)
  if free > rank and others_below == 0 then
    -- One permit beyond the base at most: what the bases leave over is fewer permits than
    -- the processes at the level.
    if mhas == 0 then redis.call('ZADD', KEYS[5], now, me) end
    mhas, free, cap = mhas + 1, free - 1, mhas + 1
    redis.call('ZREM', KEYS[4], me)
    if redis.call('ZCARD', KEYS[4]) > 0 then
      recheck = tonumber(redis.call('ZSCORE', KEYS[5], me)) + term - now
    end
  else
    -- Its turn is not yet: the holder of extras whose term ran out first gives them back.
    for _, id in ipairs(redis.call('ZRANGEBYSCORE', KEYS[5], '-inf', now - term, 'LIMIT', 0, 5)) do
      if id ~= me and tonumber(redis.call('ZSCORE', KEYS[9], id) or 0) > math.floor(level) then
        told[#told + 1] = id
        break
      end
    end
  end
else
  redis.call('ZREM', KEYS[4], me)
end
if mhas < base and not learning then
  -- Below its base: those holding more than any base are told to report (and capped).
  redis.call('ZADD', KEYS[6], now, me)
  local over = redis.call('ZRANGEBYSCORE', KEYS[9], '(' .. math.floor(level), '+inf', 'LIMIT', 0, base - mhas)
  for _, id in ipairs(over) do
    if id ~= me then told[#told + 1] = id end
  end
else
  redis.call('ZREM', KEYS[6], me)
end
if wants <= mhas or mhas > base then redis.call('ZREM', KEYS[4], me) end
if mhas < before and free > 0 then
  -- Permits went back: to those below their base first, then the turns queue.
  for _, id in ipairs(redis.call('ZRANGE', KEYS[6], 0, free - 1)) do
    if id ~= me then told[#told + 1] = id end
  end
  for _, id in ipairs(redis.call('ZRANGE', KEYS[4], 0, free - 1)) do
    if id ~= me then told[#told + 1] = id end
  end
end
if ARGV[7] == '1' and holding == 0 then
  forget(me)
else
  redis.call('HSET', KEYS[1], me, mhas .. ':' .. wants .. ':' .. (now + lease) .. ':' .. seq)
  redis.call('ZADD', KEYS[3], now + lease, me)
  redis.call('ZADD', KEYS[9], mhas, me)
  reserved, total, n = reserved + mhas, total + wants, n + 1
end
redis.call('HSET', KEYS[7], 'reserved', reserved, 'wants', total, 'n', n)
version = redis.call('HINCRBY', KEYS[2], 'version', 1)
for _, id in ipairs(told) do tell(id) end
return {1, cap, mhas, base, math.max(n, 1), epoch, version, math.max(learn - now, 0), math.max(recheck, 0)}
"#;

/// The lease and shares scripts, as one kind of deployment runs them.
pub(crate) struct Scripts {
    pub(crate) acquire: Script,
    pub(crate) renew: Script,
    pub(crate) release: Script,
    pub(crate) shares: Script,
    /// Their sources, to load them when a connection is made.
    sources: Vec<String>,
}

impl Scripts {
    fn new(tell: &str) -> Scripts {
        let tell = tell.replace("TOKEN_LEN", &PROCESS_TOKEN_LEN.to_string());
        let lease = |body: &str| format!("{FENCE}{tell}{PRELUDE}{body}");
        let sources = vec![
            lease(ACQUIRE),
            lease(RENEW),
            lease(RELEASE),
            format!("{FENCE}{tell}{SHARES}"),
        ];
        Scripts {
            acquire: Script::new(&sources[0]),
            renew: Script::new(&sources[1]),
            release: Script::new(&sources[2]),
            shares: Script::new(&sources[3]),
            sources,
        }
    }

    /// The scripts' sources, the GCRA's included: loaded with `SCRIPT LOAD` in one pipeline
    /// when a connection is made, so that the first calls need no `NOSCRIPT` round trip.
    pub(crate) fn sources(&self) -> impl Iterator<Item = &str> {
        self.sources
            .iter()
            .map(String::as_str)
            .chain(std::iter::once(GCRA_SOURCE))
    }

    /// The scripts for one server, or a primary found through Sentinel (`PUBLISH`).
    pub(crate) fn for_node() -> &'static Scripts {
        static PLAIN: LazyLock<Scripts> = LazyLock::new(|| Scripts::new(TELL_PLAIN));
        &PLAIN
    }

    /// The scripts for a Redis Cluster (`SPUBLISH` in the budget's slot).
    pub(crate) fn for_cluster() -> &'static Scripts {
        static SHARDED: LazyLock<Scripts> = LazyLock::new(|| Scripts::new(TELL_SHARDED));
        &SHARDED
    }
}

/// GCRA: lets one event through if the theoretical arrival time allows it, or, given a longest
/// wait, reserves the next slot if it comes within it (turns in the order callers reach Redis).
///
/// `KEYS[1]`: the budget's theoretical arrival time (server microseconds). `KEYS[2]`, when
/// given: the budget's epoch (see the module's docs): a theoretical arrival time lost with an
/// epoch that began with learning starts as if the whole burst was spent when it began.
/// `ARGV`: emission interval in microseconds, burst (events that may pass back to back), and
/// optionally the longest wait in microseconds for a slot to be reserved (default 0: now or not
/// at all).
///
/// Returns `{allowed (0|1), µs to wait}`: when allowed, until the reserved slot (0 without a
/// longest wait); when not, until the next event would be allowed (nothing is reserved).
pub(crate) static GCRA: LazyLock<Script> = LazyLock::new(|| Script::new(GCRA_SOURCE));

const GCRA_SOURCE: &str = r#"
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local interval = tonumber(ARGV[1])
local burst = tonumber(ARGV[2])
local max_wait = tonumber(ARGV[3] or '0')
local tat = tonumber(redis.call('GET', KEYS[1]))
if not tat then
  tat = now
  -- A budget whose state Redis lost: its epoch began with learning. The burst is taken as
  -- spent at the loss (callers may have used it just before), refilling from there.
  if KEYS[2] then
    local m = redis.call('HMGET', KEYS[2], 'epoch', 'learn')
    if m[1] and tonumber(m[2] or 0) > 0 then
      tat = tonumber(m[1]) + interval * burst
    end
  end
end
if tat < now then tat = now end
local new_tat = tat + interval
local allow_at = new_tat - interval * burst
local wait = allow_at - now
if wait < 0 then wait = 0 end
if wait > max_wait then
  return {0, wait}
end
redis.call('SET', KEYS[1], new_tat, 'PX', math.ceil((new_tat - now) / 1000) + 1)
return {1, wait}
"#;

/// The hash of a share budget's processes.
pub(crate) fn shares_key(budget: &str) -> String {
    format!("inflight:{{{budget}}}:shares")
}

/// The keys the shares script takes, in its order: the processes, the epoch, the entries'
/// expiries, the turns queue, the holders of extras, the processes below their base, the sums,
/// the wants, the permits reserved.
pub(crate) fn share_keys(budget: &str) -> [String; 9] {
    [
        shares_key(budget),
        epoch_key(budget),
        format!("inflight:{{{budget}}}:shares_expiry"),
        format!("inflight:{{{budget}}}:shares_turns"),
        format!("inflight:{{{budget}}}:shares_extra"),
        format!("inflight:{{{budget}}}:shares_below"),
        format!("inflight:{{{budget}}}:shares_sums"),
        format!("inflight:{{{budget}}}:shares_wants"),
        format!("inflight:{{{budget}}}:shares_has"),
    ]
}

/// The sorted set of a budget's lease holders.
pub(crate) fn holders_key(budget: &str) -> String {
    format!("inflight:{{{budget}}}:holders")
}

/// The sorted set of a budget's waiters, by arrival.
pub(crate) fn queue_key(budget: &str) -> String {
    format!("inflight:{{{budget}}}:queue")
}

/// The sorted set of the moments a budget's waiters count as gone unless they ask again.
pub(crate) fn queue_expiry_key(budget: &str) -> String {
    format!("inflight:{{{budget}}}:queue_expiry")
}

/// The counter that numbers a budget's waiters by arrival.
pub(crate) fn arrivals_key(budget: &str) -> String {
    format!("inflight:{{{budget}}}:arrivals")
}

/// The hash of a budget's epoch, version and learning deadline.
pub(crate) fn epoch_key(budget: &str) -> String {
    format!("inflight:{{{budget}}}:epoch")
}

/// The keys of a budget the lease scripts take, in their order.
pub(crate) fn lease_keys(budget: &str) -> [String; 5] {
    [
        holders_key(budget),
        queue_key(budget),
        queue_expiry_key(budget),
        arrivals_key(budget),
        epoch_key(budget),
    ]
}

/// How many characters of a lease id name the process that asked for it.
pub(crate) const PROCESS_TOKEN_LEN: usize = 16;

/// The channel on which a process is told that a lease it queued for was granted, on one
/// server; the message is the lease id, whose first [`PROCESS_TOKEN_LEN`] characters are
/// `token`.
pub(crate) fn grants_channel(token: &str) -> String {
    format!("inflight:grants:{token}")
}

/// The sharded channel of budget `budget` on which a process is told of its grants, on a
/// Cluster: in the budget's slot.
pub(crate) fn sharded_grants_channel(budget: &str, token: &str) -> String {
    format!("inflight:{{{budget}}}:grants:{token}")
}

/// Every key a fleet budget (or a fleet rate limit) of this name keeps in Redis.
pub fn budget_keys(budget: &str) -> Vec<String> {
    let mut keys = lease_keys(budget).to_vec();
    keys.push(rate_key(budget));
    for key in share_keys(budget) {
        if !keys.contains(&key) {
            keys.push(key);
        }
    }
    keys
}

/// The key of a fleet rate limit's theoretical arrival time.
pub(crate) fn rate_key(name: &str) -> String {
    format!("inflight:{{{name}}}:rate")
}

#[cfg(test)]
mod tests {
    use std::process::{Child, Command, Stdio};
    use std::time::{Duration, Instant};

    use super::*;

    /// A `redis-server` on a free loopback port, killed on drop; a connection, and its URL.
    struct Server(Child, redis::Connection, String);

    impl Drop for Server {
        fn drop(&mut self) {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }

    fn server() -> Option<Server> {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .ok()?
            .local_addr()
            .ok()?
            .port();
        let Ok(child) = Command::new("redis-server")
            .args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
            .args(["--save", "", "--appendonly", "no"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
        else {
            eprintln!("skipped: redis-server is not installed");
            return None;
        };
        let url = format!("redis://127.0.0.1:{port}");
        let client = redis::Client::open(url.as_str()).ok()?;
        let start = Instant::now();
        while start.elapsed() < Duration::from_secs(10) {
            if let Ok(conn) = client.get_connection() {
                return Some(Server(child, conn, url));
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        None
    }

    /// A lease script's call on budget "b", by a caller that has seen `seen`.
    fn call(
        script: &'static Script,
        seen: (u64, u64),
        limit: u64,
        lease_ms: u64,
    ) -> redis::ScriptInvocation<'static> {
        let mut call = script.prepare_invoke();
        for key in lease_keys("b") {
            call.key(key);
        }
        call.arg(seen.0).arg(seen.1).arg(limit).arg(lease_ms);
        call
    }

    fn scripts() -> &'static Scripts {
        Scripts::for_node()
    }

    /// `(epoch, version, learning ms, granted, holders, reclaimed, wait, ahead)`.
    type Acquire = (u64, u64, u64, u8, u64, u64, i64, u64);

    fn acquire_seen(
        conn: &mut redis::Connection,
        id: &str,
        seen: (u64, u64),
        limit: u64,
        lease_ms: u64,
    ) -> Acquire {
        call(&scripts().acquire, seen, limit, lease_ms)
            .arg(id)
            .arg(2000)
            .invoke(conn)
            .unwrap()
    }

    /// `(granted, holders, reclaimed, wait, ahead)` for a caller that has seen nothing.
    fn acquire(
        conn: &mut redis::Connection,
        id: &str,
        limit: u64,
        lease_ms: u64,
    ) -> (u8, u64, u64, i64, u64) {
        let r = acquire_seen(conn, id, (0, 0), limit, lease_ms);
        (r.3, r.4, r.5, r.6, r.7)
    }

    fn release(conn: &mut redis::Connection, ids: &[&str], limit: u64, lease_ms: u64) -> u64 {
        let mut call = call(&scripts().release, (0, 0), limit, lease_ms);
        for id in ids {
            call.arg(*id);
        }
        let (_, _, _, removed): (u64, u64, u64, u64) = call.invoke(conn).unwrap();
        removed
    }

    /// `(epoch, version, learning ms, added back, lost)`.
    type Renew = (u64, u64, u64, u64, Vec<String>);

    fn renew_seen(
        conn: &mut redis::Connection,
        ids: &[&str],
        locals: &[&str],
        seen: (u64, u64),
        lease_ms: u64,
    ) -> Renew {
        let mut call = call(&scripts().renew, seen, 2, lease_ms);
        call.arg(ids.len());
        for id in ids.iter().chain(locals) {
            call.arg(*id);
        }
        call.invoke(conn).unwrap()
    }

    fn renew(conn: &mut redis::Connection, ids: &[&str], lease_ms: u64) -> Vec<String> {
        renew_seen(conn, ids, &[], (0, 0), lease_ms).4
    }

    #[test]
    fn the_scripts_keep_the_limit_and_touch_only_their_own_lease() {
        let Some(mut server) = server() else {
            return;
        };
        let conn = &mut server.1;
        assert_eq!(acquire(conn, "a", 2, 200).0, 1);
        // A retry with the same id (a reply lost) is granted again, not twice.
        assert_eq!(acquire(conn, "a", 2, 200), (1, 1, 0, 0, 0));
        assert_eq!(acquire(conn, "b", 2, 200).0, 1);
        let (granted, holders, _, wait, ahead) = acquire(conn, "c", 2, 200);
        assert_eq!((granted, holders, ahead), (0, 2, 0));
        assert!(wait > 0 && wait <= 200, "{wait}");
        // Full, but a holder retrying is still granted.
        assert_eq!(acquire(conn, "b", 2, 200).0, 1);
        // A limit of 0 grants nothing, and says so.
        let mut zero = scripts().acquire.prepare_invoke();
        for key in lease_keys("none") {
            zero.key(key);
        }
        let zero: Acquire = zero
            .arg(0)
            .arg(0)
            .arg(0)
            .arg(200)
            .arg("a")
            .arg(2000)
            .invoke(conn)
            .unwrap();
        assert_eq!((zero.3, zero.4, zero.5, zero.6, zero.7), (0, 0, 0, 0, 0));
        // Releasing someone else's id, or one not held, removes nothing.
        assert_eq!(release(conn, &["zzz"], 2, 200), 0);
        // Renew keeps "a"; "gone" was never held and is reported lost.
        assert_eq!(renew(conn, &["a", "gone"], 200), ["gone"]);
        // "c" gave up waiting: its release takes it out of the queue.
        assert_eq!(release(conn, &["c"], 2, 200), 0);
        // After a lease with no renewal, both expire: the next acquirer reclaims them.
        std::thread::sleep(Duration::from_millis(250));
        let (granted, holders, reclaimed, _, _) = acquire(conn, "c", 2, 200);
        assert_eq!((granted, holders, reclaimed), (1, 1, 2));
        assert_eq!(
            renew(conn, &["a", "c"], 200),
            ["a"],
            "an expired lease is lost"
        );
        assert_eq!(release(conn, &["c"], 2, 200), 1);
    }

    #[test]
    fn a_release_hands_its_permit_to_the_earliest_waiter_and_tells_its_process() {
        let Some(mut server) = server() else {
            return;
        };
        let client = redis::Client::open(server.2.as_str()).unwrap();
        let mut listener = client.get_connection().unwrap();
        let mut pubsub = listener.as_pubsub();
        pubsub
            .subscribe(grants_channel("00000000000000p2"))
            .unwrap();
        pubsub
            .set_read_timeout(Some(Duration::from_secs(2)))
            .unwrap();
        let conn = &mut server.1;
        let p1 = |n: u8| format!("00000000000000p1{n:016x}");
        let p2 = |n: u8| format!("00000000000000p2{n:016x}");
        assert_eq!(acquire(conn, &p1(0), 1, 5000).0, 1);
        // Queued in arrival order, whichever process they come from.
        let queued = acquire(conn, &p2(1), 1, 5000);
        assert_eq!((queued.0, queued.4), (0, 0));
        assert_eq!(acquire(conn, &p1(2), 1, 5000).4, 1);
        assert_eq!(acquire(conn, &p1(3), 1, 5000).4, 2);
        // A newcomer never overtakes them, even the moment a permit frees.
        assert_eq!(release(conn, &[&p1(0)], 1, 5000), 1);
        let message = pubsub.get_message().unwrap();
        assert_eq!(
            message.get_channel_name(),
            grants_channel("00000000000000p2")
        );
        assert_eq!(message.get_payload::<String>().unwrap(), p2(1));
        assert_eq!(
            acquire(conn, &p1(9), 1, 5000).4,
            2,
            "behind the two still waiting"
        );
        // The head was granted by the release itself; asking again confirms it.
        assert_eq!(acquire(conn, &p2(1), 1, 5000).0, 1);
        // The next waiter gave up; the release of the holder skips it.
        assert_eq!(release(conn, &[&p1(2)], 1, 5000), 0);
        assert_eq!(release(conn, &[&p2(1)], 1, 5000), 1);
        assert_eq!(acquire(conn, &p1(3), 1, 5000).0, 1, "granted in its turn");
        assert_eq!(acquire(conn, &p1(9), 1, 5000).4, 0);
    }

    #[test]
    fn a_waiter_that_stops_asking_leaves_the_queue_when_its_entry_expires() {
        let Some(mut server) = server() else {
            return;
        };
        let conn = &mut server.1;
        assert_eq!(acquire(conn, "h", 1, 5000).0, 1);
        // "dead" queues with an entry of 100 ms and never asks again.
        let _: Acquire = call(&scripts().acquire, (0, 0), 1, 5000)
            .arg("dead")
            .arg(100)
            .invoke(conn)
            .unwrap();
        assert_eq!(acquire(conn, "alive", 1, 5000).4, 1);
        std::thread::sleep(Duration::from_millis(150));
        assert_eq!(release(conn, &["h"], 1, 5000), 1);
        assert_eq!(
            acquire(conn, "alive", 1, 5000).0,
            1,
            "the dead waiter was skipped"
        );
    }

    /// One report of `process` to the shares script: `(applied, cap, has, target, processes)`.
    fn shares(
        conn: &mut redis::Connection,
        process: &str,
        (wants, holding, seq): (u64, u64, u64),
        lease_ms: u64,
        leaving: bool,
    ) -> (u8, u64, u64, u64, u64) {
        let r = shares_seen(
            conn,
            process,
            (wants, holding, seq),
            lease_ms,
            leaving,
            (0, 0),
        );
        (r.0, r.1, r.2, r.3, r.4)
    }

    /// `(applied, cap, has, target, processes, epoch, version, learning ms, recheck ms)`.
    type Shares = (u8, u64, u64, u64, u64, u64, u64, u64, u64);

    fn shares_seen(
        conn: &mut redis::Connection,
        process: &str,
        (wants, holding, seq): (u64, u64, u64),
        lease_ms: u64,
        leaving: bool,
        seen: (u64, u64),
    ) -> Shares {
        scripts()
            .shares
            .key(&share_keys("s")[..])
            .arg(process)
            .arg(wants)
            .arg(holding)
            .arg(seq)
            .arg(512)
            .arg(lease_ms)
            .arg(u8::from(leaving))
            .arg(seen.0)
            .arg(seen.1)
            .invoke(conn)
            .unwrap()
    }

    #[test]
    fn the_shares_script_splits_max_min_and_grows_only_from_free_permits() {
        let Some(mut server) = server() else {
            return;
        };
        let client = redis::Client::open(server.2.as_str()).unwrap();
        let mut listener = client.get_connection().unwrap();
        let mut pubsub = listener.as_pubsub();
        pubsub
            .subscribe(grants_channel("00000000000000p1"))
            .unwrap();
        pubsub
            .set_read_timeout(Some(Duration::from_secs(2)))
            .unwrap();
        let conn = &mut server.1;
        let (p1, p2) = ("00000000000000p1-a", "00000000000000p2-b");
        // Alone, p1 gets all it wants.
        assert_eq!(
            shares(conn, p1, (900, 0, 1), 5000, false),
            (1, 512, 512, 512, 1)
        );
        // p2 wants 100: its fair share is 100, but nothing is free while p1 holds 512, and p1
        // is told to report.
        assert_eq!(
            shares(conn, p2, (100, 0, 1), 5000, false),
            (1, 0, 0, 100, 2)
        );
        let message = pubsub.get_message().unwrap();
        assert_eq!(message.get_payload::<String>().unwrap(), p1);
        // p1 still runs 450: it keeps 450 reserved, and may admit up to its share of 412.
        assert_eq!(
            shares(conn, p1, (900, 450, 2), 5000, false),
            (1, 412, 450, 412, 2)
        );
        assert_eq!(
            shares(conn, p2, (100, 0, 2), 5000, false),
            (1, 62, 62, 100, 2)
        );
        // Drained to 412, p1 gives the rest back; p2 takes it up.
        assert_eq!(
            shares(conn, p1, (900, 412, 3), 5000, false),
            (1, 412, 412, 412, 2)
        );
        assert_eq!(
            shares(conn, p2, (100, 62, 3), 5000, false),
            (1, 100, 100, 100, 2)
        );
        // A late duplicate of an older report changes nothing.
        assert_eq!(shares(conn, p1, (900, 0, 2), 5000, false).0, 0);
        // p1 leaves: its entry goes, and p2 may grow into the whole limit.
        assert_eq!(shares(conn, p1, (0, 0, 4), 5000, true).0, 1);
        assert_eq!(
            shares(conn, p2, (600, 100, 4), 5000, false),
            (1, 512, 512, 512, 1)
        );
    }

    #[test]
    fn permits_beyond_every_base_go_in_turns() {
        let Some(mut server) = server() else {
            return;
        };
        let conn = &mut server.1;
        let (p1, p2, p3) = (
            "00000000000000p1-a",
            "00000000000000p2-b",
            "00000000000000p3-c",
        );
        // A limit of 2 (the tests' helper says 512: use a budget of its own) among three
        // processes that want one each: every base is 0, the two permits go in turns.
        let report = |conn: &mut redis::Connection, p: &str, holding: u64, seq: u64| {
            let r: Shares = scripts()
                .shares
                .key(&share_keys("turns")[..])
                .arg(p)
                .arg(1)
                .arg(holding)
                .arg(seq)
                .arg(2)
                .arg(300)
                .arg(0)
                .arg(0)
                .arg(0)
                .invoke(conn)
                .unwrap();
            (r.1, r.2, r.3)
        };
        // Alone, then two of them: a base of 1 each.
        assert_eq!(report(conn, p1, 0, 1), (1, 1, 1), "cap 1, has 1, base 1");
        assert_eq!(report(conn, p2, 0, 1), (1, 1, 1));
        assert_eq!(
            report(conn, p3, 0, 1),
            (0, 0, 0),
            "none free: p3 waits its turn"
        );
        // At their next reports, p1 and p2 learn their base is 0: their permits are extras,
        // held for a term from now.
        assert_eq!(report(conn, p1, 1, 2), (1, 1, 0));
        assert_eq!(report(conn, p2, 1, 2), (1, 1, 0));
        // After a term (a third of the lease), p3 asks again: p1's term ran out...
        std::thread::sleep(Duration::from_millis(120));
        assert_eq!(report(conn, p3, 0, 2), (0, 0, 0));
        // ...so p1, still running its call, is capped at its base and queues again...
        assert_eq!(report(conn, p1, 1, 3), (0, 1, 0));
        // ...gives its permit back once its call ends, and p3 takes it.
        assert_eq!(report(conn, p1, 0, 4), (0, 0, 0));
        assert_eq!(report(conn, p3, 0, 3), (1, 1, 0));
        let held: Vec<String> = redis::cmd("HVALS")
            .arg(shares_key("turns"))
            .query(conn)
            .unwrap();
        let reserved: u64 = held
            .iter()
            .map(|v| v.split(':').next().unwrap().parse::<u64>().unwrap())
            .sum();
        assert_eq!(reserved, 2, "never past the limit: {held:?}");
    }

    #[test]
    fn a_process_that_stops_reporting_frees_its_share_one_lease_later() {
        let Some(mut server) = server() else {
            return;
        };
        let conn = &mut server.1;
        assert_eq!(shares(conn, "dead", (512, 0, 1), 100, false).2, 512);
        assert_eq!(shares(conn, "alive", (512, 0, 1), 5000, false).2, 0);
        std::thread::sleep(Duration::from_millis(150));
        assert_eq!(
            shares(conn, "alive", (512, 0, 2), 5000, false),
            (1, 512, 512, 512, 1),
            "the dead one's entry expired"
        );
    }

    #[test]
    fn gcra_lets_a_burst_through_then_spaces_calls() {
        let Some(mut server) = server() else {
            return;
        };
        let conn = &mut server.1;
        let mut check = || -> (u8, i64) {
            GCRA.key(rate_key("r"))
                .arg(100_000) // 100 ms
                .arg(2)
                .invoke(conn)
                .unwrap()
        };
        assert_eq!(check(), (1, 0));
        assert_eq!(check(), (1, 0));
        let (allowed, wait) = check();
        assert_eq!(allowed, 0);
        assert!(wait > 0 && wait <= 100_000, "{wait}");
    }

    #[test]
    fn keys_share_the_budget_hash_tag() {
        assert_eq!(holders_key("records"), "inflight:{records}:holders");
        assert_eq!(
            budget_keys("records"),
            [
                "inflight:{records}:holders",
                "inflight:{records}:queue",
                "inflight:{records}:queue_expiry",
                "inflight:{records}:arrivals",
                "inflight:{records}:epoch",
                "inflight:{records}:rate",
                "inflight:{records}:shares",
                "inflight:{records}:shares_expiry",
                "inflight:{records}:shares_turns",
                "inflight:{records}:shares_extra",
                "inflight:{records}:shares_below",
                "inflight:{records}:shares_sums",
                "inflight:{records}:shares_wants",
                "inflight:{records}:shares_has"
            ]
        );
        assert_eq!(rate_key("records"), "inflight:{records}:rate");
        assert_eq!(
            grants_channel("0123456789abcdef"),
            "inflight:grants:0123456789abcdef"
        );
        assert_eq!(
            sharded_grants_channel("records", "0123456789abcdef"),
            "inflight:{records}:grants:0123456789abcdef"
        );
    }

    #[test]
    fn a_lost_state_learns_for_one_lease_and_takes_back_the_calls_still_running() {
        let Some(mut server) = server() else {
            return;
        };
        let conn = &mut server.1;
        // A fresh budget, first met by a process that has seen nothing: no learning.
        let first = acquire_seen(conn, "a", (0, 0), 2, 400);
        assert_eq!((first.2, first.3), (0, 1), "granted at once");
        let seen = (first.0, first.1);
        assert!(seen.0 > 0 && seen.1 > 0);
        // The state is lost (a restart without persistence, a flush).
        redis::cmd("FLUSHALL").exec(conn).unwrap();
        // A newcomer is not granted while the old holder's lease is unknown...
        let b = acquire_seen(conn, "b", seen, 2, 400);
        assert_ne!(b.0, seen.0, "a new epoch");
        assert_eq!(b.3, 0, "nothing new is granted while learning");
        assert!(b.2 > 300 && b.2 <= 400, "learning for one lease: {}", b.2);
        assert!(b.6 > 0 && b.6 <= 400, "told when to ask again: {}", b.6);
        // ...the holder re-registers its lease and a local call at its next renewal...
        let renewed = renew_seen(conn, &["a"], &["a-local"], seen, 400);
        assert_eq!((renewed.3, renewed.4.len()), (1, 0), "added back, not lost");
        let mut holders: Vec<String> = redis::cmd("ZRANGE")
            .arg(holders_key("b"))
            .arg(0)
            .arg(-1)
            .query(conn)
            .unwrap();
        holders.sort();
        assert_eq!(holders, ["a", "a-local"]);
        // ...and once learning ends, the two running calls (renewed meanwhile) fill the limit.
        std::thread::sleep(Duration::from_millis(250));
        let seen = (renewed.0, renewed.1);
        assert_eq!(renew_seen(conn, &["a"], &["a-local"], seen, 400).3, 0);
        std::thread::sleep(Duration::from_millis(200));
        let c = acquire_seen(conn, "c", seen, 2, 400);
        assert_eq!((c.2, c.3), (0, 0), "learning over, but the limit is held");
        // A running call ends: its permit goes to the earliest waiter, "b", queued while the
        // budget learned.
        assert_eq!(release(conn, &["a-local"], 2, 400), 1);
        assert_eq!(acquire_seen(conn, "b", seen, 2, 400).3, 1);
        assert_eq!(acquire_seen(conn, "c", seen, 2, 400).3, 0);
    }

    #[test]
    fn writes_lost_by_a_failover_are_seen_by_the_process_that_saw_them() {
        let Some(mut server) = server() else {
            return;
        };
        let conn = &mut server.1;
        let a = acquire_seen(conn, "a", (0, 0), 3, 5000);
        // A process saw a later version than the server holds: the writes it saw are gone.
        let later = (a.0, a.1 + 5);
        let b = acquire_seen(conn, "b", later, 3, 5000);
        assert!(b.0 > a.0, "a new epoch");
        assert_eq!(b.3, 0, "learning: nothing new granted");
        // A process that saw only the old epoch is behind: its lease is renewed, and one the
        // server lost is added back.
        let r = renew_seen(conn, &["a", "gone"], &[], (a.0, a.1), 5000);
        assert_eq!((r.3, r.4.len()), (1, 0));
        // With the epoch unchanged, a lease the server does not hold was taken back: lost.
        let r = renew_seen(conn, &["never"], &[], (r.0, r.1), 5000);
        assert_eq!(r.4, ["never"]);
    }

    #[test]
    fn shares_keep_what_each_process_runs_while_the_budget_learns() {
        let Some(mut server) = server() else {
            return;
        };
        let conn = &mut server.1;
        let (p1, p2) = ("00000000000000p1-a", "00000000000000p2-b");
        let r1 = shares_seen(conn, p1, (300, 0, 1), 400, false, (0, 0));
        let r2 = shares_seen(conn, p2, (300, 0, 1), 400, false, (0, 0));
        assert_eq!(
            (r1.2, r2.2),
            (300, 212),
            "p2 grows only from what p1 left free"
        );
        redis::cmd("FLUSHALL").exec(conn).unwrap();
        // After the loss, p2 reports first with its 212 running: kept whole, and it does not
        // grow into the permits p1 still runs.
        let a2 = shares_seen(conn, p2, (300, 212, 3), 400, false, (r2.5, r2.6));
        assert_eq!((a2.0, a2.2), (1, 212));
        assert!(a2.7 > 300, "learning: {}", a2.7);
        let a1 = shares_seen(conn, p1, (300, 300, 3), 400, false, (r1.5, r1.6));
        assert_eq!(a1.2, 300, "p1's running calls count whole too");
        assert!(a1.2 + a2.2 <= 512);
        std::thread::sleep(Duration::from_millis(250));
        let b1 = shares_seen(conn, p1, (300, 300, 4), 400, false, (a1.5, a1.6));
        assert_eq!(b1.2, 300);
        std::thread::sleep(Duration::from_millis(200));
        let b2 = shares_seen(conn, p2, (300, 212, 4), 400, false, (a2.5, a2.6));
        assert_eq!((b2.2, b2.7), (212, 0), "nothing free to grow into");
    }
}
